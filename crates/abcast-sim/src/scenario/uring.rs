//! The scenario adapter of U-Ring Paxos (seed 000 §2.3, §3.1): `cluster protocol=uring
//! nodes=3 [snapshots] [no-snapshots] [store-instances=N] [max-open=N] [mutation=NAME]`.
//! Every node is PAL, in ring order 0, 1, ..., n-1. The only place the scenario runner
//! looks inside `uring::Message`.

use super::adapter::{Adapter, Args, MsgInfo};
use abcast_core::config::StartInfo;
use abcast_core::ring::Epoch;
use abcast_core::storage::MemoryStore;
use abcast_core::uring::messages::WireDecree;
use abcast_core::uring::{Message, RingConfig, URing};
use abcast_core::{Decree, NodeId};

pub struct URingAdapter {
    pub cfg: RingConfig,
}

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

fn wire_decree(w: &WireDecree) -> (Vec<bytes::Bytes>, String) {
    match w {
        WireDecree::Key(_) => (Vec::new(), "by key".into()),
        WireDecree::Full(b) => (b.values().map(|v| v.payload).collect(), String::new()),
        WireDecree::Meta(d) => decree_detail(d),
    }
}

/// An epoch as the incarnations of its members in id order: `[0,2,0]`.
pub(super) fn epoch(e: &Epoch) -> String {
    let v: Vec<String> = e.entries().iter().map(|(_, x)| x.to_string()).collect();
    format!("[{}]", v.join(","))
}

/// The U-Ring message description, shared with Multi-Ring Paxos (whose rings run it).
pub(super) fn describe_uring(m: &Message) -> MsgInfo {
    match m {
        Message::Forward(f) => MsgInfo::new("forward").values(f.batch.values().map(|v| v.payload)),
        Message::Phase1a(p) => MsgInfo::new("phase1a")
            .ballot(p.ballot)
            .instance(p.from)
            .detail(format!("to={} epoch={}", p.to, epoch(&p.epoch))),
        Message::Phase1b(p) => MsgInfo::new("phase1b")
            .ballot(p.ballot)
            .instance(p.from)
            .detail(format!(
                "ok={} amnesic={} decided_upto={} promised={}",
                p.ok, p.amnesic, p.decided_upto, p.promised
            )),
        Message::Phase2(p) => {
            let (values, d) = wire_decree(&p.decree);
            MsgInfo::new("phase2")
                .ballot(p.ballot)
                .instance(p.instance)
                .values(values)
                .detail(d)
        }
        Message::Decision(p) => {
            let (values, d) = wire_decree(&p.decree);
            MsgInfo::new("decision")
                .ballot(p.ballot)
                .instance(p.instance)
                .values(values)
                .detail(d)
        }
        Message::Nack(n) => MsgInfo::new("nack")
            .ballot(n.promised)
            .instance(n.instance)
            .detail(format!("epoch={}", epoch(&n.epoch))),
        Message::Retrieve(r) => MsgInfo::new("retrieve")
            .instance(r.from)
            .detail(format!("to={}", r.to)),
        Message::Decided(d) => {
            let inst: Vec<String> = d.entries.iter().map(|(i, _)| i.to_string()).collect();
            let mut values = Vec::new();
            for (_, dec) in &d.entries {
                values.extend(decree_detail(dec).0);
            }
            MsgInfo::new("decided").values(values).detail(format!(
                "entries=[{}] log_start={}",
                inst.join(","),
                d.log_start
            ))
        }
        Message::Heartbeat(h) => MsgInfo::new("heartbeat").ballot(h.ballot).background(),
        Message::Repair(r) => MsgInfo::new("repair")
            .ballot(r.ballot)
            .instance(r.upto)
            .detail(format!("upto={} epoch={}", r.upto, epoch(&r.epoch))),
        Message::SnapshotFetch(f) => MsgInfo::new("snapshot-fetch").instance(f.upto),
        Message::SnapshotChunk(c) => MsgInfo::new("snapshot-chunk").instance(c.upto),
    }
}

impl Adapter for URingAdapter {
    type P = URing;
    const NAME: &'static str = "uring";

    fn configure(args: &mut Args) -> Result<Self, String> {
        let n: u32 = args.req("nodes")?;
        let ids: Vec<u32> = (0..n).collect();
        let mut cfg = RingConfig::pal(&ids);
        if args.flag("snapshots")? {
            cfg.learner_snapshots = true;
        }
        if args.flag("no-snapshots")? {
            cfg.learner_snapshots = false;
        }
        if let Some(k) = args.opt("store-instances")? {
            cfg.store_capacity_instances = k;
        }
        if let Some(k) = args.opt("max-open")? {
            cfg.max_open_instances = k;
        }
        if let Some(m) = args.opt::<abcast_core::mutation::Mutation>("mutation")? {
            cfg.set_mutation(Some(m))?;
        }
        Ok(URingAdapter { cfg })
    }

    fn node_ids(&self) -> Vec<NodeId> {
        self.cfg.members.iter().map(|m| m.id).collect()
    }

    fn build(&self, id: NodeId, start: StartInfo) -> Result<URing, String> {
        let store = MemoryStore::new(
            self.cfg.store_capacity_instances,
            self.cfg.store_capacity_bytes,
        );
        URing::new(self.cfg.clone(), id, start, Box::new(store)).map_err(|e| e.to_string())
    }

    fn describe(m: &Message) -> MsgInfo {
        describe_uring(m)
    }

    fn details(node: &URing) -> Vec<String> {
        node.acceptor_log_start()
            .map(|s| format!("log_start={s}"))
            .into_iter()
            .collect()
    }
}
