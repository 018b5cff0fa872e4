//! The scenario adapter of U-Ring Paxos (seed 000 §2.3, §3.1): `cluster protocol=uring
//! nodes=3 [snapshots] [no-snapshots] [store-instances=N] [max-open=N] [mutation=NAME]`.
//! Every node is PAL, in ring order 0, 1, ..., n-1. The only place the scenario runner
//! looks inside `uring::Message`.

use super::adapter::{Adapter, Args, MsgInfo};
use super::ring::{self, decree_detail};
use abcast_core::NodeId;
use abcast_core::config::StartInfo;
use abcast_core::storage::MemoryStore;
use abcast_core::uring::messages::WireDecree;
use abcast_core::uring::{Message, RingConfig, URing};

pub struct URingAdapter {
    pub cfg: RingConfig,
}

fn wire_decree(w: &WireDecree) -> (Vec<bytes::Bytes>, String) {
    match w {
        WireDecree::Key(_) => (Vec::new(), "by key".into()),
        WireDecree::Full(b) => (b.values().map(|v| v.payload).collect(), String::new()),
        WireDecree::Meta(d) => decree_detail(d),
    }
}

/// The U-Ring message description, shared with Multi-Ring Paxos (whose rings run it).
pub(super) fn describe_uring(m: &Message) -> MsgInfo {
    match m {
        Message::Forward(f) => MsgInfo::new("forward").values(f.batch.values().map(|v| v.payload)),
        Message::Phase1a(p) => ring::phase1a(p, true),
        Message::Phase1b(p) => ring::phase1b(p),
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
        Message::Nack(n) => ring::nack(n),
        Message::Retrieve(r) => ring::retrieve(r),
        Message::Decided(d) => ring::decided(d, true),
        Message::Heartbeat(h) => MsgInfo::new("heartbeat").ballot(h.ballot).background(),
        Message::Repair(r) => ring::repair(r),
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
