//! The scenario adapter of Multi-Ring Paxos (seed 000 §2.4): `cluster protocol=multiring
//! nodes=3 [learners=2] [rings=2] [m=1] [follow=4:2,...] [snapshots]`. Ring `g` (groups
//! `1..=rings`) has the PAL nodes `0..nodes` rotated by `g - 1` (so ring 1's coordinator
//! is node 0, ring 2's node 1), then the learners; `follow=4:2` makes node 4 follow ring 2
//! only (by default a learner follows every ring); `snapshots`: the learners take merge
//! snapshots and each ring trims below them (`multiring/snapshot.rs`). The only place the
//! runner looks inside `multiring::Message`.

use super::adapter::{Adapter, Args, MsgInfo};
use super::uring::describe_uring;
use abcast_core::config::{Member, Roles, StartInfo};
use abcast_core::multiring::{Body, Message, MultiRing, MultiRingConfig, RingSpec};
use abcast_core::storage::{AcceptorStore, MemoryStore};
use abcast_core::uring::RingConfig;
use abcast_core::{GroupId, Micros, NodeId, Outbox, ProposeError, ValueId};
use bytes::Bytes;

pub struct MultiRingAdapter {
    pub cfg: MultiRingConfig,
    pub n: u32,
}

impl Adapter for MultiRingAdapter {
    type P = MultiRing;
    const NAME: &'static str = "multiring";

    fn configure(args: &mut Args) -> Result<Self, String> {
        let n: u32 = args.req("nodes")?;
        let learners: u32 = args.opt("learners")?.unwrap_or(0);
        let rings: u16 = args.opt("rings")?.unwrap_or(2);
        let snapshots = args.flag("snapshots")?;
        let mut cfg = MultiRingConfig::default();
        if let Some(m) = args.opt("m")? {
            cfg.merge_m = m;
        }
        let learner = Roles {
            proposer: false,
            acceptor: false,
            learner: true,
        };
        for g in 1..=rings {
            let mut members: Vec<Member> = (0..n)
                .map(|i| Member {
                    id: NodeId((i + u32::from(g) - 1) % n),
                    roles: Roles::PAL,
                })
                .collect();
            members.extend((n..n + learners).map(|i| Member {
                id: NodeId(i),
                roles: learner,
            }));
            cfg.rings.push(RingSpec {
                group: GroupId(g),
                ring: RingConfig {
                    members,
                    learner_snapshots: snapshots,
                    ..RingConfig::default()
                },
            });
        }
        for f in args.list("follow") {
            let (node, group) = f
                .split_once(':')
                .and_then(|(a, b)| Some((a.parse::<u32>().ok()?, b.parse::<u16>().ok()?)))
                .ok_or_else(|| format!("follow={f}: expected node:group"))?;
            match cfg
                .subscriptions
                .iter_mut()
                .find(|(id, _)| *id == NodeId(node))
            {
                Some((_, gs)) => gs.push(GroupId(group)),
                None => cfg.subscriptions.push((NodeId(node), vec![GroupId(group)])),
            }
        }
        cfg.validate().map_err(|e| e.to_string())?;
        Ok(MultiRingAdapter {
            cfg,
            n: n + learners,
        })
    }

    fn node_ids(&self) -> Vec<NodeId> {
        (0..self.n).map(NodeId).collect()
    }

    fn build(&self, id: NodeId, start: StartInfo) -> Result<MultiRing, String> {
        let store = |_g: GroupId| -> Box<dyn AcceptorStore + Send> {
            let r = RingConfig::default();
            Box::new(MemoryStore::new(
                r.store_capacity_instances,
                r.store_capacity_bytes,
            ))
        };
        MultiRing::new(self.cfg.clone(), id, start, store).map_err(|e| e.to_string())
    }

    fn describe(m: &Message) -> MsgInfo {
        let mut info = match &m.body {
            Body::Ring(r) => describe_uring(r),
            Body::Report(r) => MsgInfo::new("report")
                .background()
                .detail(format!("need_slot={}", r.need_slot)),
            Body::SnapshotFetch(f) => MsgInfo::new("snapshot-fetch")
                .instance(f.upto)
                .detail(format!("from position {} offset {}", f.min_upto, f.offset)),
            Body::RetainedFetch(f) => MsgInfo::new("retained-fetch")
                .instance(f.upto)
                .detail(format!("from position {} offset {}", f.min_upto, f.offset)),
            Body::SnapshotChunk(c) => MsgInfo::new("snapshot-chunk")
                .instance(c.upto)
                .detail(format!("{} of {} bytes", c.data.len(), c.total)),
            Body::ControlReq(c) => MsgInfo::new("control-req").detail(format!(
                "{} node {}",
                if c.subscribe {
                    "subscribe"
                } else {
                    "unsubscribe"
                },
                c.learner.0
            )),
        };
        info.group = Some(m.group.0);
        info
    }

    fn details(node: &MultiRing) -> Vec<String> {
        use abcast_core::Protocol as _;
        if !node.snapshots_supported() {
            return Vec::new();
        }
        let mut v = vec![format!("position={}", node.position())];
        for g in node.groups() {
            if let Some(s) = node.ring(g).and_then(|r| r.acceptor_log_start()) {
                v.push(format!("r{}.log_start={s}", g.0));
            }
        }
        v
    }

    fn propose_to(
        node: &mut MultiRing,
        now: Micros,
        group: u16,
        payload: Bytes,
        out: &mut Outbox<Message>,
    ) -> Result<Result<ValueId, ProposeError>, String> {
        Ok(node.propose_to(now, GroupId(group), payload, out))
    }
}
