//! What the leader-based families of seed 001 share (Sequence Paxos, appendix B; Raft, §2.5):
//! the content of one log entry and its encoding into [`Entry::payload`], which both keep in
//! a [`crate::storage::LogStore`] and ship to followers as it is.
//!
//! An entry is a batch of application values, a no-op (a Raft leader's first entry of its
//! term), a stop-sign (Sequence Paxos §2.4.3: the last entry of a configuration, naming the
//! next), or a membership (Raft §2.5.1: a joint or a simple configuration, in effect from
//! the moment it is in the log).
//!
//! Encoding: a tag byte, then the body. A batch is `origin u32 | first_seq u64 | count u32 |
//! lens | data`, one buffer: the leader copies the payloads once into it (the one copy of the
//! hop), every later step (the log, the wire, a follower's log, the delivery) shares slices
//! of it. Decoding never panics and names the field it refused.

use crate::codec::{Decoder, Encoder};
use crate::config::{Configuration, Member, Roles};
use crate::error::DecodeError;
use crate::storage::Entry;
use crate::types::{Ballot, Batch, NodeId};
use bytes::{BufMut, Bytes, BytesMut};

/// Members a configuration carried in an entry may have, at most.
pub const ENTRY_MEMBERS_MAX: usize = 1024;

/// The content of one log entry.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum EntryBody {
    Values(Batch),
    /// Nothing (a new Raft leader commits one to learn its commit index, §5.4.2 of Raft).
    Noop,
    /// Sequence Paxos: the configuration after this one. No entry follows it in the same
    /// configuration (§2.4.3: "`SS_i` is the last command in `σ_i`").
    StopSign(Configuration),
    /// Raft: the voters (`voters`), the old voters while joint (`outgoing`, empty
    /// otherwise: C_old,new is `voters ∪ outgoing` with a majority of each), and the
    /// non-voting learners that catch up before promotion.
    Membership(Membership),
}

/// A Raft membership, as its log entry carries it (§2.5.1).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Membership {
    /// The configuration's id (the index of the entry that carries it, once appended).
    pub id: u64,
    pub voters: Vec<NodeId>,
    /// Joint consensus: the previous voters, whose majority is needed too; empty when not
    /// joint.
    pub outgoing: Vec<NodeId>,
    pub learners: Vec<NodeId>,
}

impl Membership {
    pub fn is_joint(&self) -> bool {
        !self.outgoing.is_empty()
    }
    /// Every node the membership names (voters, outgoing voters, learners), each once,
    /// sorted.
    pub fn all_nodes(&self) -> Vec<NodeId> {
        let mut v: Vec<NodeId> = self
            .voters
            .iter()
            .chain(&self.outgoing)
            .chain(&self.learners)
            .copied()
            .collect();
        v.sort_unstable();
        v.dedup();
        v
    }
}

const TAG_VALUES: u8 = 1;
const TAG_NOOP: u8 = 2;
const TAG_STOP_SIGN: u8 = 3;
const TAG_MEMBERSHIP: u8 = 4;

impl EntryBody {
    /// The entry's payload bytes (see the module comment; copies a batch's payloads once).
    pub fn encode(&self) -> Bytes {
        match self {
            EntryBody::Values(b) => {
                let lens = b.lens_raw();
                let data = b.data_raw();
                let mut buf = BytesMut::with_capacity(1 + 16 + lens.len() + data.len());
                buf.put_u8(TAG_VALUES);
                buf.put_u32_le(b.origin().0);
                buf.put_u64_le(b.first_seq());
                buf.put_u32_le(b.len() as u32);
                buf.extend_from_slice(lens);
                buf.extend_from_slice(data);
                buf.freeze()
            }
            EntryBody::Noop => Bytes::from_static(&[TAG_NOOP]),
            EntryBody::StopSign(c) => {
                let mut e = Encoder::new();
                e.put_u8(TAG_STOP_SIGN);
                put_configuration(&mut e, c);
                e.to_bytes()
            }
            EntryBody::Membership(m) => {
                let mut e = Encoder::new();
                e.put_u8(TAG_MEMBERSHIP);
                e.put_u64(m.id);
                for list in [&m.voters, &m.outgoing, &m.learners] {
                    put_nodes(&mut e, list);
                }
                e.to_bytes()
            }
        }
    }

    /// Decodes [`EntryBody::encode`]'s bytes; slices, never copies, a batch's payloads.
    pub fn decode(payload: &Bytes) -> Result<EntryBody, DecodeError> {
        let mut d = Decoder::new(payload.clone());
        let body = match d.u8("entry.tag")? {
            TAG_VALUES => {
                let origin = NodeId(d.u32("entry.origin")?);
                let first_seq = d.u64("entry.first_seq")?;
                let count = d.u32("entry.count")? as usize;
                if count == 0 {
                    return Err(DecodeError::Invalid {
                        what: "entry.count",
                        detail: "a batch of zero values".into(),
                    });
                }
                let lens = d.bytes(count.saturating_mul(4), "entry.lens")?;
                let data = d.bytes(d.remaining(), "entry.data")?;
                EntryBody::Values(Batch::from_parts(origin, first_seq, lens, data)?)
            }
            TAG_NOOP => EntryBody::Noop,
            TAG_STOP_SIGN => EntryBody::StopSign(get_configuration(&mut d)?),
            TAG_MEMBERSHIP => {
                let id = d.u64("membership.id")?;
                let voters = get_nodes(&mut d, "membership.voters")?;
                let outgoing = get_nodes(&mut d, "membership.outgoing")?;
                let learners = get_nodes(&mut d, "membership.learners")?;
                if voters.is_empty() {
                    return Err(DecodeError::Invalid {
                        what: "membership.voters",
                        detail: "a membership without voters".into(),
                    });
                }
                EntryBody::Membership(Membership {
                    id,
                    voters,
                    outgoing,
                    learners,
                })
            }
            t => {
                return Err(DecodeError::Invalid {
                    what: "entry.tag",
                    detail: format!("{t} is not an entry kind"),
                });
            }
        };
        d.finish()?;
        Ok(body)
    }

    /// Whether an entry's payload is a stop-sign, from its tag alone (no decoding).
    pub fn is_stop_sign(payload: &[u8]) -> bool {
        payload.first() == Some(&TAG_STOP_SIGN)
    }

    /// The log entry at `index`, accepted in `ballot`, holding this body.
    pub fn entry(&self, index: u64, ballot: Ballot) -> Entry {
        Entry {
            index,
            ballot,
            payload: self.encode(),
        }
    }
}

fn roles_bits(r: Roles) -> u8 {
    u8::from(r.proposer) | (u8::from(r.acceptor) << 1) | (u8::from(r.learner) << 2)
}

/// A configuration on the wire: `id u64 | count u32 | (node u32, roles u8)*`.
pub fn put_configuration(e: &mut Encoder, c: &Configuration) {
    e.put_u64(c.id);
    e.put_u32(c.members.len() as u32);
    for m in &c.members {
        e.put_u32(m.id.0);
        e.put_u8(roles_bits(m.roles));
    }
}

/// Reads [`put_configuration`]'s bytes and checks the configuration (`Configuration::validate`).
pub fn get_configuration(d: &mut Decoder) -> Result<Configuration, DecodeError> {
    let id = d.u64("configuration.id")?;
    let n = d.count("configuration.members", ENTRY_MEMBERS_MAX, 5)?;
    let mut members = Vec::with_capacity(n);
    for _ in 0..n {
        let node = NodeId(d.u32("configuration.member")?);
        let bits = d.u8("configuration.roles")?;
        if bits > 7 {
            return Err(DecodeError::Invalid {
                what: "configuration.roles",
                detail: format!("{bits:#x} has bits beyond proposer, acceptor, learner"),
            });
        }
        members.push(Member {
            id: node,
            roles: Roles {
                proposer: bits & 1 != 0,
                acceptor: bits & 2 != 0,
                learner: bits & 4 != 0,
            },
        });
    }
    let c = Configuration { id, members };
    c.validate().map_err(|e| DecodeError::Invalid {
        what: "configuration",
        detail: e.reason,
    })?;
    Ok(c)
}

/// A list of node ids: `count u32 | id u32*`.
pub fn put_nodes(e: &mut Encoder, v: &[NodeId]) {
    e.put_u32(v.len() as u32);
    for n in v {
        e.put_u32(n.0);
    }
}

pub fn get_nodes(d: &mut Decoder, what: &'static str) -> Result<Vec<NodeId>, DecodeError> {
    let n = d.count(what, ENTRY_MEMBERS_MAX, 4)?;
    (0..n).map(|_| d.u32(what).map(NodeId)).collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::types::ValueId;

    #[test]
    fn every_entry_kind_round_trips_and_a_batch_is_sliced_not_copied() {
        let batch = Batch::single(
            ValueId {
                node: NodeId(2),
                seq: 9,
            },
            Bytes::from_static(b"payload"),
        );
        let cfg = Configuration {
            id: 3,
            members: vec![Member {
                id: NodeId(4),
                roles: Roles::PAL,
            }],
        };
        let bodies = [
            EntryBody::Values(batch),
            EntryBody::Noop,
            EntryBody::StopSign(cfg),
            EntryBody::Membership(Membership {
                id: 7,
                voters: vec![NodeId(1), NodeId(2)],
                outgoing: vec![NodeId(0)],
                learners: vec![NodeId(5)],
            }),
        ];
        for b in bodies {
            let bytes = b.encode();
            assert_eq!(EntryBody::decode(&bytes), Ok(b.clone()));
            if let EntryBody::Values(v) = EntryBody::decode(&bytes).expect("decodes") {
                let at = v.data_raw().as_ptr() as usize - bytes.as_ptr() as usize;
                assert!(at < bytes.len(), "the payload is a slice of the entry");
            }
        }
    }

    #[test]
    fn every_cut_or_bad_tag_is_refused_without_a_panic() {
        let bytes = EntryBody::Membership(Membership {
            id: 1,
            voters: vec![NodeId(1)],
            ..Membership::default()
        })
        .encode();
        for cut in 0..bytes.len() {
            assert!(EntryBody::decode(&bytes.slice(..cut)).is_err(), "cut {cut}");
        }
        assert!(EntryBody::decode(&Bytes::from_static(&[9])).is_err());
        assert!(EntryBody::decode(&Bytes::from_static(&[TAG_NOOP, 0])).is_err());
        let no_voters = EntryBody::Membership(Membership::default()).encode();
        assert!(EntryBody::decode(&no_voters).is_err());
    }
}
