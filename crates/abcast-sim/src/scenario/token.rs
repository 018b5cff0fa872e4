//! The scenario adapter of the token ring (seed 002 §III, Totem membership, EVS):
//! `cluster protocol=token nodes=3 [accelerated=A] [personal=P] [service=agreed|safe]
//! [mutation=NAME]`. Every node is a member (ids 0..n, ring order ascending); rings are in
//! memory (a `restart` is a new process that rejoins). Configuration changes show at
//! their place among the deliveries (`n0 installs transitional ...`). The scenario
//! `check` is the single-sequence checker's and does not apply across partitions; the EVS
//! properties are the EVS world's (`evs/checker.rs`). The only place the scenario runner
//! looks inside `token::Message`.

use super::adapter::{Adapter, Args, MsgInfo};
use abcast_core::config::StartInfo;
use abcast_core::token::{Message, Service, TokenConfig, TokenRing};
use abcast_core::{Instance, NodeId};

/// A ring sequence number as `count.life` (its creator's incarnation in the low 24 bits).
fn ring_seq(seq: u64) -> String {
    format!("{}.{}", seq >> 24, seq & 0xFF_FFFF)
}

pub struct TokenAdapter {
    pub cfg: TokenConfig,
}

impl Adapter for TokenAdapter {
    type P = TokenRing;
    const NAME: &'static str = "token";
    // A token ring with a retransmission asked for passes its token on at once: every
    // message takes one 100-us round (a LAN hop), or a round would never end.
    const ONE_HOP_PER_ROUND: bool = true;

    fn configure(args: &mut Args) -> Result<Self, String> {
        let n: u32 = args.req("nodes")?;
        let mut cfg = TokenConfig::new((0..n).map(NodeId).collect());
        if let Some(p) = args.opt("personal")? {
            cfg.personal_window = p;
        }
        if let Some(a) = args.opt("accelerated")? {
            cfg.accelerated_window = a;
        }
        cfg.accelerated_window = cfg.accelerated_window.min(cfg.personal_window);
        match args.opt::<String>("service")?.as_deref() {
            None | Some("agreed") => {}
            Some("safe") => cfg.service = Service::Safe,
            Some(s) => return Err(format!("service={s}: agreed or safe")),
        }
        if let Some(m) = args.opt::<abcast_core::mutation::Mutation>("mutation")? {
            cfg.mutation.set(Some(m))?;
        }
        Ok(TokenAdapter { cfg })
    }

    fn node_ids(&self) -> Vec<NodeId> {
        self.cfg.members.clone()
    }

    fn build(&self, id: NodeId, start: StartInfo) -> Result<TokenRing, String> {
        TokenRing::new(self.cfg.clone(), id, start).map_err(|e| e.to_string())
    }

    fn describe(m: &Message) -> MsgInfo {
        match m {
            Message::Token(t) => {
                let info = MsgInfo::new("token").detail(format!(
                    "ring={}/{} seq={} aru={}{} fcc={} rtr={:?}{}",
                    t.ring.rep,
                    ring_seq(t.ring.seq),
                    t.seq,
                    t.aru,
                    t.aru_id.map(|n| format!("({n})")).unwrap_or_default(),
                    t.fcc,
                    t.rtr,
                    if t.retrans_flg { " retrans_flg" } else { "" }
                ));
                // An idle ring passes its token round and round.
                if t.rtr.is_empty() && t.aru == t.seq && t.fcc == 0 {
                    info.background()
                } else {
                    info
                }
            }
            Message::Data(d) => MsgInfo::new(if d.inner.is_some() {
                "recovered"
            } else {
                "data"
            })
            .instance(d.seq as Instance)
            .values(d.batch.values().map(|v| v.payload))
            .detail(format!(
                "ring={}/{} from={}",
                d.ring.rep,
                ring_seq(d.ring.seq),
                d.pid
            )),
            Message::Join(j) => MsgInfo::new("join").detail(format!(
                "proc={:?} fail={:?}",
                j.proc_set.iter().map(|n| n.0).collect::<Vec<_>>(),
                j.fail_set.iter().map(|n| n.0).collect::<Vec<_>>()
            )),
            Message::Commit(c) => MsgInfo::new("commit-token").detail(format!(
                "ring={}/{} members={:?} entries={}",
                c.ring.rep,
                ring_seq(c.ring.seq),
                c.addr.iter().map(|n| n.0).collect::<Vec<_>>(),
                c.entries.len()
            )),
            Message::MergeDetect(m) => MsgInfo::new("merge-detect")
                .detail(format!("ring={}/{}", m.ring.rep, ring_seq(m.ring.seq)))
                .background(),
        }
    }

    fn config_label(id: u64) -> String {
        ring_seq(id)
    }

    fn details(node: &TokenRing) -> Vec<String> {
        vec![format!(
            "ring={}/{} members={:?} operational={} aru={}",
            node.ring().rep,
            ring_seq(node.ring().seq),
            node.members().iter().map(|n| n.0).collect::<Vec<_>>(),
            node.operational(),
            node.my_aru()
        )]
    }
}
