//! The scenario adapter of Raft (seed 001 §2.5): `cluster protocol=raft nodes=3
//! [spares=K] [max-append-bytes=N] [preferred=I] [mutation=NAME]`. The `nodes` are the
//! voters of C_0, the `spares` after them new members a `reconfigure` can add; all on an
//! in-memory log (a `restart` is amnesic). `stop` / `resume` keep a node's log and terms,
//! so deposed leaders can come back (Raft's figure 8). The only place the scenario runner
//! looks inside `raft::Message`.

use super::adapter::{Adapter, Args, MsgInfo};
use abcast_core::config::StartInfo;
use abcast_core::raft::{Message, Raft, RaftConfig};
use abcast_core::replog::EntryBody;
use abcast_core::storage::MemoryLogStore;
use abcast_core::{Ballot, NodeId};

pub struct RaftAdapter {
    pub cfg: RaftConfig,
    /// Every node of the cluster: the voters of C_0 and, with `spares=K`, K more that C_0
    /// does not name (new members waiting to be added by a `reconfigure`).
    pub nodes: Vec<NodeId>,
}

impl Adapter for RaftAdapter {
    type P = Raft;
    const NAME: &'static str = "raft";

    fn configure(args: &mut Args) -> Result<Self, String> {
        let n: u32 = args.req("nodes")?;
        let spares: u32 = args.opt("spares")?.unwrap_or(0);
        let ids: Vec<u32> = (0..n).collect();
        let mut cfg = RaftConfig::new(&ids, &[]);
        let nodes = (0..n + spares).map(NodeId).collect();
        if let Some(b) = args.opt("max-append-bytes")? {
            cfg.max_append_bytes = b;
        }
        if let Some(p) = args.opt::<u32>("preferred")? {
            cfg.preferred_leader = Some(NodeId(p));
        }
        if let Some(m) = args.opt::<abcast_core::mutation::Mutation>("mutation")? {
            cfg.set_mutation(Some(m))?;
        }
        Ok(RaftAdapter { cfg, nodes })
    }

    fn node_ids(&self) -> Vec<NodeId> {
        self.nodes.clone()
    }

    fn build(&self, id: NodeId, start: StartInfo) -> Result<Raft, String> {
        Raft::new(self.cfg.clone(), id, start, Box::new(MemoryLogStore::new()))
            .map_err(|e| e.to_string())
    }

    fn describe(m: &Message) -> MsgInfo {
        match m {
            Message::RequestVote(v) => MsgInfo::new(if v.pre_vote {
                "pre-vote"
            } else {
                "request-vote"
            })
            .ballot(Ballot::new(v.term, v.candidate, 0))
            .instance(v.last_index)
            .detail(format!("last_term={}", v.last_term)),
            Message::RequestVoteReply(r) => MsgInfo::new(if r.pre_vote {
                "pre-vote-reply"
            } else {
                "vote-reply"
            })
            .detail(format!("term={} granted={}", r.term, r.granted)),
            Message::AppendEntries(a) => {
                let mut values = Vec::new();
                let mut terms = Vec::new();
                for e in &a.entries {
                    terms.push(e.ballot.round.to_string());
                    if let Ok(EntryBody::Values(b)) = EntryBody::decode(&e.payload) {
                        values.extend(b.values().map(|v| v.payload));
                    }
                }
                MsgInfo::new("append")
                    .ballot(Ballot::new(a.term, a.leader, 0))
                    .instance(a.prev_index + 1)
                    .values(values)
                    .detail(format!(
                        "prev={}@{} terms=[{}] commit={}",
                        a.prev_index,
                        a.prev_term,
                        terms.join(","),
                        a.leader_commit
                    ))
            }
            Message::AppendEntriesReply(r) => MsgInfo::new("append-reply").detail(format!(
                "term={} success={} match={}",
                r.term, r.success, r.match_index
            )),
            Message::Heartbeat(h) => MsgInfo::new("heartbeat")
                .ballot(Ballot::new(h.term, h.leader, 0))
                .detail(format!("commit={}", h.commit))
                .background(),
            Message::HeartbeatReply(r) => MsgInfo::new("heartbeat-reply")
                .detail(format!("term={}", r.term))
                .background(),
            Message::TimeoutNow(t) => {
                MsgInfo::new("timeout-now").ballot(Ballot::new(t.term, t.leader, 0))
            }
            Message::Forward(f) => {
                MsgInfo::new("forward").values(f.batch.values().map(|v| v.payload))
            }
            Message::InstallSnapshot(s) => MsgInfo::new("install-snapshot")
                .ballot(Ballot::new(s.term, s.leader, 0))
                .instance(s.last_index)
                .detail(format!(
                    "last_term={} bytes={}..{} of {}",
                    s.last_ballot.round,
                    s.offset,
                    s.offset + s.data.len() as u64,
                    s.total_bytes
                )),
            Message::InstallSnapshotReply(r) => MsgInfo::new("install-snapshot-reply")
                .instance(r.last_index)
                .detail(format!(
                    "term={} next={} done={}",
                    r.term, r.next_offset, r.done
                )),
            Message::TermQuery(q) => {
                MsgInfo::new("term-query").detail(format!("incarnation={}", q.incarnation))
            }
            Message::TermReply(r) => MsgInfo::new("term-reply")
                .detail(format!("term={} incarnation={}", r.term, r.incarnation)),
        }
    }

    fn details(node: &Raft) -> Vec<String> {
        vec![format!("role={:?} term={}", node.role(), node.term())]
    }
}
