//! The configuration vocabulary every protocol shares: members and their roles, what a node
//! knows about itself when it starts ([`StartInfo`]), and the error a configuration check
//! gives ([`ConfigError`]). Each protocol family has its own configuration struct (ring,
//! multicast ring, Multi-Ring, ...) built from these.

use crate::batcher::LIFE_SEQ_BITS;
use crate::types::NodeId;
use std::fmt;

/// The roles of a member (seed 000 §2.3: "any node can be proposer, acceptor and learner",
/// PAL).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Roles {
    pub proposer: bool,
    pub acceptor: bool,
    pub learner: bool,
}

impl Roles {
    pub const PAL: Roles = Roles {
        proposer: true,
        acceptor: true,
        learner: true,
    };
}

/// One member of a configuration (in ring order for the ring protocols).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Member {
    pub id: NodeId,
    pub roles: Roles,
}

/// A configuration field that is out of its space.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ConfigError {
    pub field: &'static str,
    pub reason: String,
}

impl fmt::Display for ConfigError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "invalid config: {}: {}", self.field, self.reason)
    }
}

impl std::error::Error for ConfigError {}

/// What a node knows about itself when it starts, given by the driver.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct StartInfo {
    /// Grows by one every time the node restarts (both drivers bump it at every start after
    /// the first: the simulator's restarts, the runtime's incarnation marker); 0 on the first
    /// start. A restart without the acceptor state (an in-memory store) must have a new one,
    /// which changes the epoch (`ring.rs`). Every restart of a node that may coordinate must
    /// have a new one too: coordinators put it in their ballots, and that is what keeps a
    /// restarted node from reusing a ballot of its earlier life (see `Ballot`). It must fit
    /// in a `u32` (checked at construction), and it names the range of value ids of this
    /// life (`start_seq`, see [`StartInfo::restart`], below 2^24).
    pub incarnation: u64,
    /// The acceptor lost its promises and votes: it must be repaired before it counts in a
    /// phase 1 quorum (see `acceptor.rs`).
    pub amnesic: bool,
    /// First sequence number for this node's proposals; above any it used before. Drivers
    /// take it from the incarnation ([`StartInfo::start_seq_for`]), never from a clock.
    pub start_seq: u64,
}

impl StartInfo {
    /// Incarnations a node can have: `start_seq_for` puts the incarnation in the 24 bits
    /// above the 40 that number one life's values, so 2^24 ≈ 16.7 million starts.
    pub const MAX_INCARNATIONS: u64 = 1 << (u64::BITS - LIFE_SEQ_BITS);

    pub const FRESH: StartInfo = StartInfo {
        incarnation: 0,
        amnesic: false,
        start_seq: 1,
    };

    /// The first value seq of the process life `incarnation`. Life `k` owns the seqs `[k <<
    /// 40, (k + 1) << 40)` (life 0 starts at 1, as `FRESH` does; seq 0 is never used), so
    /// the ids (`ValueId = (node, seq)`) of two lives of a node never meet, whatever the
    /// clock did between them: learners tell batches apart by `(origin, first_seq)`, and a
    /// reused id would be acknowledged and never delivered. The proposer refuses to step
    /// into the next life's range (`ProposeError::IdsExhausted`, `batcher::life_seq_end`).
    ///
    /// Limits: 2^40 ≈ 1.1e12 values per life (about 12.7 days at a sustained million values
    /// per second; then the node must restart), and 2^24 ≈ 16.7 million lives
    /// ([`StartInfo::MAX_INCARNATIONS`]): `None` from there on, the ids would overflow the
    /// `u64`. Multi-Ring Paxos puts the ring's group in the top 8 bits of each ring's seqs
    /// (`multiring/mod.rs`), which keeps 16 bits of the life there: 65 536 lives have
    /// distinct ids on a ring.
    pub const fn start_seq_for(incarnation: u64) -> Option<u64> {
        if incarnation >= StartInfo::MAX_INCARNATIONS {
            None
        } else if incarnation == 0 {
            Some(1)
        } else {
            Some(incarnation << LIFE_SEQ_BITS)
        }
    }

    /// What a node knows when it starts its life `incarnation` (0 on the first start):
    /// `start_seq` from [`StartInfo::start_seq_for`]. `amnesic`: the acceptor lost its
    /// promises and votes. An incarnation of [`StartInfo::MAX_INCARNATIONS`] or more is
    /// refused: its ids would overlap those of an earlier life.
    pub fn restart(incarnation: u64, amnesic: bool) -> Result<StartInfo, ConfigError> {
        match StartInfo::start_seq_for(incarnation) {
            Some(start_seq) => Ok(StartInfo {
                incarnation,
                amnesic,
                start_seq,
            }),
            None => Err(ConfigError {
                field: "start.incarnation",
                reason: format!(
                    "{incarnation} is too large: a node has at most {} lives of \
                     2^{LIFE_SEQ_BITS} value ids each in a 64-bit seq",
                    StartInfo::MAX_INCARNATIONS
                ),
            }),
        }
    }

    /// The incarnation as ballots carry it (`Ballot::incarnation`, 32 bits on the wire).
    /// Refused, not truncated, when it does not fit: two lives of a node would then make
    /// the same ballots.
    pub fn ballot_incarnation(&self) -> Result<u32, ConfigError> {
        u32::try_from(self.incarnation).map_err(|_| ConfigError {
            field: "start.incarnation",
            reason: format!(
                "{} does not fit the 32 bits a ballot carries (at most {})",
                self.incarnation,
                u32::MAX
            ),
        })
    }
}

/// A configuration of one protocol instance: who is in it, with which roles. `id` grows
/// with every change and names it everywhere (a Sequence Paxos configuration number after
/// a stop-sign, a Raft configuration's log index, an EVS ring id). The input of
/// `Protocol::reconfigure` and the content of a `ConfigChange` output.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Configuration {
    pub id: u64,
    pub members: Vec<Member>,
}

impl Configuration {
    /// Checks what every protocol needs of a configuration: at least one member, no node
    /// twice, at least one acceptor (voter).
    pub fn validate(&self) -> Result<(), ConfigError> {
        if self.members.is_empty() {
            return Err(ConfigError {
                field: "members",
                reason: "a configuration needs at least one member".into(),
            });
        }
        let mut ids: Vec<u32> = self.members.iter().map(|m| m.id.0).collect();
        ids.sort_unstable();
        if let Some(w) = ids.windows(2).find(|w| w[0] == w[1]) {
            return Err(ConfigError {
                field: "members",
                reason: format!("node {} appears twice", w[0]),
            });
        }
        if !self.members.iter().any(|m| m.roles.acceptor) {
            return Err(ConfigError {
                field: "members",
                reason: "a configuration needs at least one acceptor".into(),
            });
        }
        Ok(())
    }

    /// Whether `node` is a member.
    pub fn contains(&self, node: NodeId) -> bool {
        self.members.iter().any(|m| m.id == node)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn member(id: u32) -> Member {
        Member {
            id: NodeId(id),
            roles: Roles::PAL,
        }
    }

    #[test]
    fn a_configuration_with_a_node_twice_or_no_acceptor_is_refused() {
        let ok = Configuration {
            id: 1,
            members: vec![member(0), member(1)],
        };
        assert_eq!(ok.validate(), Ok(()));
        assert!(ok.contains(NodeId(1)) && !ok.contains(NodeId(2)));
        let twice = Configuration {
            id: 1,
            members: vec![member(0), member(0)],
        };
        assert!(twice.validate().is_err_and(|e| e.reason.contains("twice")));
        let learners = Configuration {
            id: 1,
            members: vec![Member {
                id: NodeId(3),
                roles: Roles {
                    proposer: true,
                    acceptor: false,
                    learner: true,
                },
            }],
        };
        assert!(
            learners
                .validate()
                .is_err_and(|e| e.reason.contains("acceptor"))
        );
        let empty = Configuration {
            id: 1,
            members: vec![],
        };
        assert!(empty.validate().is_err());
    }
}
