//! The scenario adapter of Ring Paxos with IP multicast (seed 003): `cluster
//! protocol=ringpaxos nodes=3 [learners=1] [snapshots] [mutation=NAME]`: nodes `0..nodes`
//! are PAL, the next `learners` learn only. Multicasts reach every node, the sender
//! included. The only place the scenario runner looks inside `ringpaxos::Message`.

use super::adapter::{Adapter, Args, MsgInfo};
use super::ring::{self, decree_detail};
use abcast_core::NodeId;
use abcast_core::config::StartInfo;
use abcast_core::ringpaxos::{Message, RingPaxos, RingPaxosConfig};
use abcast_core::storage::MemoryStore;

pub struct RingPaxosAdapter {
    pub cfg: RingPaxosConfig,
}

fn ids(v: &[(u64, abcast_core::ringpaxos::messages::Vid)]) -> String {
    let s: Vec<String> = v.iter().map(|(i, _)| i.to_string()).collect();
    format!("[{}]", s.join(","))
}

impl Adapter for RingPaxosAdapter {
    type P = RingPaxos;
    const NAME: &'static str = "ringpaxos";

    fn configure(args: &mut Args) -> Result<Self, String> {
        let n: u32 = args.req("nodes")?;
        let learners: u32 = args.opt("learners")?.unwrap_or(0);
        let pal: Vec<u32> = (0..n).collect();
        let only: Vec<u32> = (n..n + learners).collect();
        let mut cfg = RingPaxosConfig::with_roles(&pal, &only);
        if args.flag("snapshots")? {
            cfg.learner_snapshots = true;
        }
        if let Some(m) = args.opt::<abcast_core::mutation::Mutation>("mutation")? {
            cfg.set_mutation(Some(m))?;
        }
        Ok(RingPaxosAdapter { cfg })
    }

    fn node_ids(&self) -> Vec<NodeId> {
        self.cfg.members.iter().map(|m| m.id).collect()
    }

    fn build(&self, id: NodeId, start: StartInfo) -> Result<RingPaxos, String> {
        let store = MemoryStore::new(
            self.cfg.store_capacity_instances,
            self.cfg.store_capacity_bytes,
        );
        RingPaxos::new(self.cfg.clone(), id, start, Box::new(store)).map_err(|e| e.to_string())
    }

    fn describe(m: &Message) -> MsgInfo {
        match m {
            Message::Submit(s) => {
                MsgInfo::new("submit").values(s.batch.values().map(|v| v.payload))
            }
            Message::Phase1a(p) => ring::phase1a(p, false),
            Message::Phase1b(p) => ring::phase1b(p),
            Message::Phase2a(p) => {
                let (values, d) = decree_detail(&p.decree);
                let ring: Vec<String> = p.ring.iter().map(|n| n.0.to_string()).collect();
                MsgInfo::new("phase2a")
                    .ballot(p.ballot)
                    .instance(p.instance)
                    .values(values)
                    .detail(
                        [
                            d,
                            format!("ring=[{}] decisions={}", ring.join(","), ids(&p.decisions)),
                        ]
                        .join(" ")
                        .trim()
                        .to_string(),
                    )
            }
            Message::Phase2b(p) => MsgInfo::new("phase2b")
                .ballot(p.ballot)
                .instance(p.instance),
            Message::Decision(d) => MsgInfo::new("decision")
                .ballot(d.ballot)
                .instance(d.decisions.first().map_or(0, |(i, _)| *i))
                .detail(format!("decisions={}", ids(&d.decisions))),
            Message::Nack(n) => ring::nack(n),
            Message::Retrieve(r) => ring::retrieve(r),
            Message::Decided(d) => ring::decided(d, false),
            Message::Heartbeat(h) => MsgInfo::new("heartbeat").ballot(h.ballot).background(),
            Message::Repair(r) => ring::repair(r),
            Message::SnapshotFetch(f) => MsgInfo::new("snapshot-fetch").instance(f.upto),
            Message::SnapshotChunk(c) => MsgInfo::new("snapshot-chunk").instance(c.upto),
        }
    }
}
