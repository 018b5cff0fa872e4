//! The scenario adapter of Sequence Paxos with Ballot Leader Election (seed 001 §2.4,
//! appendices A and B): `cluster protocol=seqpaxos nodes=N [priorities=I:P,..]
//! [heartbeat-us=U] [mutation=NAME]`. Every node is a replica of the first configuration,
//! on an in-memory log (a `restart` is amnesic). `priorities=0:1` gives node 0 leader
//! priority 1 (OmniPaxos' `leader_priority`; 0 by default); `heartbeat-us` sets the BLE
//! round Δ (`heartbeat_interval_us`, 50 ms by default), the election timeout.
//!
//! A ballot is shown as `n.node` (the BLE ballot number and the node; the priority byte,
//! fixed per node and stated in the `cluster` line, is left out, so `b=2.0` reads as "node
//! 0's second ballot"). The only place the scenario runner looks inside
//! `seqpaxos::Message`.

use super::adapter::{Adapter, Args, MsgInfo};
use abcast_core::config::StartInfo;
use abcast_core::replog::EntryBody;
use abcast_core::seqpaxos::ble::ballot_n;
use abcast_core::seqpaxos::{Message, SeqPaxos, SeqPaxosConfig};
use abcast_core::storage::{Entry, MemoryLogStore};
use abcast_core::{Ballot, NodeId};

pub struct SeqPaxosAdapter {
    pub cfg: SeqPaxosConfig,
}

/// `b` as the stories show it: BLE ballot number, node, incarnation.
pub fn shown(b: Ballot) -> Ballot {
    Ballot::new(ballot_n(b), b.node, b.incarnation)
}

/// The payloads of the value entries among `entries`, and their indexes as `[i..j]`.
fn entries_info(entries: &[Entry]) -> (Vec<bytes::Bytes>, String) {
    let mut values = Vec::new();
    for e in entries {
        if let Ok(EntryBody::Values(b)) = EntryBody::decode(&e.payload) {
            values.extend(b.values().map(|v| v.payload));
        }
    }
    let span = match (entries.first(), entries.last()) {
        (Some(a), Some(z)) if a.index == z.index => format!("{}", a.index),
        (Some(a), Some(z)) => format!("{}..{}", a.index, z.index),
        _ => "none".into(),
    };
    (values, span)
}

impl Adapter for SeqPaxosAdapter {
    type P = SeqPaxos;
    const NAME: &'static str = "seqpaxos";

    fn configure(args: &mut Args) -> Result<Self, String> {
        let n: u32 = args.req("nodes")?;
        if n == 0 {
            return Err("nodes=0: a cluster needs a node".into());
        }
        let ids: Vec<u32> = (0..n).collect();
        let mut cfg = SeqPaxosConfig::replicas(&ids);
        // Every tick of the scenario runner (100 us rounds) is a flush: no batching delay.
        cfg.batch_linger_us = 100;
        for p in args.list("priorities") {
            let (node, prio) = p
                .split_once(':')
                .ok_or_else(|| format!("priorities={p}: write NODE:PRIORITY"))?;
            let node: u32 = node.parse().map_err(|e| format!("priorities={p}: {e}"))?;
            let prio: u8 = prio.parse().map_err(|e| format!("priorities={p}: {e}"))?;
            cfg.priorities.push((NodeId(node), prio));
        }
        if let Some(us) = args.opt("heartbeat-us")? {
            cfg.heartbeat_interval_us = us;
        }
        if let Some(m) = args.opt::<abcast_core::mutation::Mutation>("mutation")? {
            cfg.set_mutation(Some(m))?;
        }
        cfg.validate().map_err(|e| e.to_string())?;
        Ok(SeqPaxosAdapter { cfg })
    }

    fn node_ids(&self) -> Vec<NodeId> {
        self.cfg.members.iter().map(|m| m.id).collect()
    }

    fn build(&self, id: NodeId, start: StartInfo) -> Result<SeqPaxos, String> {
        SeqPaxos::new(self.cfg.clone(), id, start, Box::new(MemoryLogStore::new()))
            .map_err(|e| e.to_string())
    }

    fn describe(m: &Message) -> MsgInfo {
        match m {
            Message::HeartbeatRequest(h) => MsgInfo::new("heartbeat-request")
                .detail(format!("round={}", h.round))
                .background(),
            Message::HeartbeatReply(h) => MsgInfo::new("heartbeat-reply")
                .ballot(shown(h.ballot))
                .detail(format!("round={} qc={}", h.round, h.quorum_connected))
                .background(),
            Message::Prepare(p) => MsgInfo::new("prepare").ballot(shown(p.n)).detail(format!(
                "ld={} n_a={}",
                p.ld,
                shown(p.n_a)
            )),
            Message::Promise(p) => {
                let (values, span) = entries_info(&p.suffix);
                MsgInfo::new("promise")
                    .ballot(shown(p.n))
                    .values(values)
                    .detail(format!(
                        "n_a={} ld={} log_len={} suffix={span}{}",
                        shown(p.n_a),
                        p.ld,
                        p.log_len,
                        if p.amnesic { " amnesic" } else { "" }
                    ))
            }
            Message::AcceptSync(a) | Message::Accept(a) => {
                let (values, span) = entries_info(&a.entries);
                let kind = if matches!(m, Message::AcceptSync(_)) {
                    "accept-sync"
                } else {
                    "accept"
                };
                MsgInfo::new(kind)
                    .ballot(shown(a.n))
                    .instance(a.from)
                    .values(values)
                    .detail(format!("entries={span} decided={}", a.decided))
            }
            Message::Accepted(a) => MsgInfo::new("accepted")
                .ballot(shown(a.n))
                .detail(format!("la={}", a.la)),
            Message::Decide(d) => MsgInfo::new("decide")
                .ballot(shown(d.n))
                .detail(format!("ld={}", d.ld)),
            Message::Forward(b) => MsgInfo::new("forward").values(b.values().map(|v| v.payload)),
            Message::PrepareReq { .. } => MsgInfo::new("prepare-req"),
            Message::Nack(n) => {
                MsgInfo::new("nack").detail(format!("promised={}", shown(n.promised)))
            }
            Message::ReadProbe { n, round, .. } => MsgInfo::new("read-probe")
                .ballot(shown(*n))
                .detail(format!("round={round}")),
            Message::ReadAck { n, round, .. } => MsgInfo::new("read-ack")
                .ballot(shown(*n))
                .detail(format!("round={round}")),
            Message::PromiseQuery { .. } => MsgInfo::new("promise-query"),
            Message::PromiseReply { promised, .. } => {
                MsgInfo::new("promise-reply").detail(format!("promised={}", shown(*promised)))
            }
            Message::StopSigned(s) => MsgInfo::new("stop-signed")
                .instance(s.index)
                .detail(format!("next={}", s.next.id)),
            Message::StopSignQuery { config } => {
                MsgInfo::new("stop-sign-query").detail(format!("config={config}"))
            }
            Message::FetchReq(f) => MsgInfo::new("fetch-req")
                .instance(f.from)
                .detail(format!("to={}", f.to)),
            Message::FetchResp(f) => {
                let (values, span) = entries_info(&f.entries);
                MsgInfo::new("fetch-resp")
                    .instance(f.from)
                    .values(values)
                    .detail(format!("entries={span} decided={}", f.decided))
            }
            Message::FetchAck { upto, .. } => {
                MsgInfo::new("fetch-ack").detail(format!("upto={upto}"))
            }
            Message::SnapshotOffer { upto, .. } => MsgInfo::new("snapshot-offer").instance(*upto),
            Message::SnapshotFetch(f) => MsgInfo::new("snapshot-fetch")
                .instance(f.upto)
                .detail(format!("min_upto={} offset={}", f.min_upto, f.offset)),
            Message::SnapshotChunk(c) => {
                MsgInfo::new("snapshot-chunk")
                    .instance(c.upto)
                    .detail(format!(
                        "bytes={}..{} of {}",
                        c.offset,
                        c.offset + c.data.len() as u64,
                        c.total
                    ))
            }
        }
    }

    /// The Sequence Paxos role and phase, and what Ballot Leader Election thinks: its own
    /// ballot, the leader it elected, and whether it heard a majority in its last round
    /// (quorum-connected, the OmniPaxos rule: only such a node may be elected).
    fn details(node: &SeqPaxos) -> Vec<String> {
        let ble = node.ble();
        vec![format!(
            "role={:?}/{:?} ble: ballot={} leader={} qc={}",
            node.role(),
            node.phase(),
            shown(ble.ballot()),
            ble.leader()
                .map_or("none".to_string(), |b| shown(b).to_string()),
            ble.quorum_connected()
        )]
    }
}
