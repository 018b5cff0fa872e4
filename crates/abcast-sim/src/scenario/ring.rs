//! How the scenario trace shows what both ring protocols share: their decrees, epochs and
//! the messages defined once in `abcast_core::ring::messages` (phase 1, refusals, retrieval,
//! heartbeats, repair, snapshot transfer). Each protocol's adapter describes its own phase 2
//! and passes the rest here.

use super::adapter::MsgInfo;
use abcast_core::Decree;
use abcast_core::ring::Epoch;
use abcast_core::ring::messages::{Decided, Nack, Phase1a, Phase1b, Repair, Retrieve};

/// The payloads of a decree, and its short name when it holds no batch.
pub(super) fn decree_detail(d: &Decree) -> (Vec<bytes::Bytes>, String) {
    match d {
        Decree::Values(b) => (b.values().map(|v| v.payload).collect(), String::new()),
        Decree::Noop => (Vec::new(), "noop".into()),
        // Multi-Ring's meanings of a meta decree (`multiring::{skip_decree, control_decree}`):
        // a skip of k slots carries no data, a control value carries its encoding.
        Decree::Meta { weight, data } if data.is_empty() => (Vec::new(), format!("skip({weight})")),
        Decree::Meta { .. } => (Vec::new(), "control".into()),
    }
}

/// An epoch as the incarnations of its members in id order: `[0,2,0]`.
pub(super) fn epoch(e: &Epoch) -> String {
    let v: Vec<String> = e.entries().iter().map(|(_, x)| x.to_string()).collect();
    format!("[{}]", v.join(","))
}

/// `with_to`: U-Ring asks for a bounded range and shows its end; Ring Paxos asks from
/// `from` on.
pub(super) fn phase1a(p: &Phase1a, with_to: bool) -> MsgInfo {
    let to = if with_to {
        format!("to={} ", p.to)
    } else {
        String::new()
    };
    MsgInfo::new("phase1a")
        .ballot(p.ballot)
        .instance(p.from)
        .detail(format!("{to}epoch={}", epoch(&p.epoch)))
}

pub(super) fn phase1b(p: &Phase1b) -> MsgInfo {
    MsgInfo::new("phase1b")
        .ballot(p.ballot)
        .instance(p.from)
        .detail(format!(
            "ok={} amnesic={} decided_upto={} promised={}",
            p.ok, p.amnesic, p.decided_upto, p.promised
        ))
}

pub(super) fn nack(n: &Nack) -> MsgInfo {
    MsgInfo::new("nack")
        .ballot(n.promised)
        .instance(n.instance)
        .detail(format!("epoch={}", epoch(&n.epoch)))
}

pub(super) fn retrieve(r: &Retrieve) -> MsgInfo {
    MsgInfo::new("retrieve")
        .instance(r.from)
        .detail(format!("to={}", r.to))
}

/// `with_log_start`: whether the trace shows the responder's log start (U-Ring's stories
/// turn on it).
pub(super) fn decided(d: &Decided, with_log_start: bool) -> MsgInfo {
    let inst: Vec<String> = d.entries.iter().map(|(i, _)| i.to_string()).collect();
    let mut values = Vec::new();
    for (_, dec) in &d.entries {
        values.extend(decree_detail(dec).0);
    }
    let mut detail = format!("entries=[{}]", inst.join(","));
    if with_log_start {
        detail += &format!(" log_start={}", d.log_start);
    }
    MsgInfo::new("decided").values(values).detail(detail)
}

pub(super) fn repair(r: &Repair) -> MsgInfo {
    MsgInfo::new("repair")
        .ballot(r.ballot)
        .instance(r.upto)
        .detail(format!("upto={} epoch={}", r.upto, epoch(&r.epoch)))
}
