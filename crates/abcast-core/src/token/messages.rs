//! The token ring's messages and their wire codec (seed 002 §III-B, §III-C).
//!
//! | message | from → to | transport | seed 002 |
//! | --- | --- | --- | --- |
//! | `Token` | member → its successor on the ring | unicast (its own socket, §III-E) | §III-B: `seq`, `aru`, `fcc`, `rtr` |
//! | `Data` | member → every member | multicast | §III-C: `seq`, `pid`, `round`, payload; in recovery, an old ring's message carried on the new ring (`inner`) |
//! | `Join` | member → every member | multicast | Totem's gather: proc and fail sets |
//! | `Commit` | member → its successor on the new ring | unicast | Totem's commit token, twice round |
//! | `MergeDetect` | representative → every member | multicast | an idle ring announces itself |
//!
//! Tokens and data messages name the ring (configuration) they belong to: a message of
//! another ring is a sign of a foreign ring, and the membership protocol merges with it.

use crate::codec::{Decoder, Encoder, Lane, WireMessage};
use crate::error::DecodeError;
use crate::types::{Batch, NodeId};
use crate::wire::{get_batch, get_bool, put_batch};

/// Retransmission requests a token carries at most (Totem bounds its `rtr` list the same
/// way; Corosync: `RETRANSMIT_ENTRIES_MAX` 30). A member with more holes asks for the
/// lowest first, the rest on a later round.
pub const RTR_MAX: usize = 256;

/// The identity of a ring (a regular configuration): its representative and a sequence
/// number that grows with every configuration the representative forms (Totem's ring id).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct RingId {
    pub rep: NodeId,
    pub seq: u64,
}

impl std::fmt::Display for RingId {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}.{}", self.seq, self.rep)
    }
}

/// The delivery service a message asks for (seed 002 §II).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub enum Service {
    /// In the ring's total order as soon as every message before it is delivered.
    #[default]
    Agreed,
    /// Only once every member of the configuration has it (the token's `aru`, two rounds).
    Safe,
}

/// The token (seed 002 §III-B).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Token {
    pub ring: RingId,
    /// Grows by one at every pass: a member takes a token only if its `hop` is above every
    /// one it saw, so a retransmitted token that arrives twice is taken once (Totem's token
    /// sequence number).
    pub hop: u64,
    /// The token round: the ring's first member adds one as it takes the token. Data
    /// messages carry the round they were sent in (`Data::round`).
    pub rotation: u64,
    /// The last sequence number assigned to a message.
    pub seq: u64,
    /// All-received-up-to: every member has every message up to it, once a whole round
    /// left it standing (§III-B2).
    pub aru: u64,
    /// The member that lowered `aru` and has not raised it since (Totem's `aru_id`); `None`
    /// while `aru == seq`.
    pub aru_id: Option<NodeId>,
    /// Flow control count: messages (new and retransmitted) sent in the last rotation.
    pub fcc: u32,
    /// Retransmission requests: sequence numbers some member lacks, lowest first.
    pub rtr: Vec<Rtr>,
    /// Recovery: some member still has old-ring messages to carry on this ring.
    pub retrans_flg: bool,
}

/// One retransmission request. `skip`: how many members that hold the message pass the
/// request on before one answers it. A member asking again for a message it asked for
/// before raises it, so the answer comes from another member each time: with a link that
/// works one way, the member right after the one that lacks the message may be the one it
/// cannot hear, and Totem's rule (the first holder answers and takes the request off the
/// token) would leave it without the message for ever.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub struct Rtr {
    pub seq: u64,
    pub skip: u8,
}

/// A data message (seed 002 §III-C): its place in the total order, who sent it, the round
/// it was sent in and the values it carries (small values packed into one message).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Data {
    pub ring: RingId,
    pub seq: u64,
    pub pid: NodeId,
    pub round: u64,
    pub service: Service,
    pub batch: Batch,
    /// Recovery: the old ring's message this one carries.
    pub inner: Option<Inner>,
}

/// An old ring's message, carried again on the new ring during recovery (Totem's
/// encapsulated messages): its place on the old ring. The payload and service are the
/// carrying message's.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Inner {
    pub ring: RingId,
    pub seq: u64,
    pub pid: NodeId,
    pub round: u64,
}

/// A join message (Totem's gather step): the processors the sender tries to form a ring
/// with and those it considers failed.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Join {
    pub sender: NodeId,
    pub proc_set: Vec<NodeId>,
    pub fail_set: Vec<NodeId>,
    /// The highest ring sequence number the sender knows (a new ring's is above it).
    pub ring_seq: u64,
}

/// What one member of a forming ring reports of its old ring in the commit token.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct MembEntry {
    pub old_ring: RingId,
    /// Its all-received-up-to on the old ring.
    pub aru: u64,
    /// The highest old-ring message it delivered.
    pub high_delivered: u64,
    /// It has every old-ring message it knows of (no holes).
    pub received_flg: bool,
}

/// The commit token: created by the representative once the members agree, it goes
/// round the new ring twice (each member fills its entry on the first, and enters
/// recovery on the second).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct CommitToken {
    pub ring: RingId,
    /// Grows at every pass, as the token's `hop`.
    pub hop: u64,
    /// The new ring's members, in ring order (ascending ids).
    pub addr: Vec<NodeId>,
    /// One entry per member that passed it, in `addr` order.
    pub entries: Vec<MembEntry>,
}

/// The representative of an idle ring announces it, so that a ring it cannot see yet
/// (after a partition heals) notices and merges.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct MergeDetect {
    pub sender: NodeId,
    pub ring: RingId,
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Message {
    Token(Token),
    Data(Data),
    Join(Join),
    Commit(CommitToken),
    MergeDetect(MergeDetect),
}

/// The message kinds of the token and the commit token (the simulator loses them apart).
pub const K_TOKEN: u8 = 1;
const K_DATA: u8 = 2;
const K_JOIN: u8 = 3;
pub const K_COMMIT: u8 = 4;
const K_MERGE: u8 = 5;

/// Members a ring (and a join's sets) hold at most.
pub const MEMBERS_MAX: usize = 1024;

/// Sequence numbers, hops, rotations and ring numbers above this are refused as malformed:
/// the arithmetic on them (a new ring's `+ 4`, a round's new messages) never overflows.
pub const COUNTER_MAX: u64 = 1 << 62;

fn counter(d: &mut Decoder, what: &'static str) -> Result<u64, DecodeError> {
    let v = d.u64(what)?;
    if v > COUNTER_MAX {
        return Err(DecodeError::Invalid {
            what,
            detail: format!("{v} exceeds {COUNTER_MAX}"),
        });
    }
    Ok(v)
}

fn put_ids(e: &mut Encoder, ids: &[NodeId]) {
    e.put_u32(ids.len() as u32);
    for n in ids {
        e.put_u32(n.0);
    }
}

fn get_ids(d: &mut Decoder, what: &'static str) -> Result<Vec<NodeId>, DecodeError> {
    let n = d.count(what, MEMBERS_MAX, 4)?;
    let mut v = Vec::with_capacity(n);
    for _ in 0..n {
        let id = NodeId(d.u32(what)?);
        if v.contains(&id) {
            return Err(DecodeError::Invalid {
                what,
                detail: format!("{id} appears twice"),
            });
        }
        v.push(id);
    }
    Ok(v)
}

fn put_ring(e: &mut Encoder, r: RingId) {
    e.put_u32(r.rep.0);
    e.put_u64(r.seq);
}

fn get_ring(d: &mut Decoder) -> Result<RingId, DecodeError> {
    Ok(RingId {
        rep: NodeId(d.u32("ring.rep")?),
        seq: counter(d, "ring.seq")?,
    })
}

impl WireMessage for Message {
    fn kind(&self) -> u8 {
        match self {
            Message::Token(_) => K_TOKEN,
            Message::Data(_) => K_DATA,
            Message::Join(_) => K_JOIN,
            Message::Commit(_) => K_COMMIT,
            Message::MergeDetect(_) => K_MERGE,
        }
    }

    /// The token and the commit token travel on a socket of their own (seed 002 §III-E),
    /// so that the receiver can serve them before or after the data waiting (§III-D).
    fn lane(&self) -> Lane {
        match self {
            Message::Token(_) | Message::Commit(_) => Lane::Control,
            Message::Data(_) | Message::Join(_) | Message::MergeDetect(_) => Lane::Data,
        }
    }

    /// A data message's place in the total order and the token's `seq`: a data message
    /// numbered above the `seq` of the token a member passed was sent in the next round
    /// (§III-D's test for raising the token's priority again).
    fn order_seq(&self) -> Option<u64> {
        match self {
            Message::Token(t) => Some(t.seq),
            Message::Data(m) => Some(m.seq),
            Message::Join(_) | Message::Commit(_) | Message::MergeDetect(_) => None,
        }
    }

    fn encode(&self, e: &mut Encoder) {
        match self {
            Message::Token(t) => {
                put_ring(e, t.ring);
                e.put_u64(t.hop);
                e.put_u64(t.rotation);
                e.put_u64(t.seq);
                e.put_u64(t.aru);
                match t.aru_id {
                    Some(n) => {
                        e.put_u8(1);
                        e.put_u32(n.0);
                    }
                    None => e.put_u8(0),
                }
                e.put_u32(t.fcc);
                e.put_u32(t.rtr.len() as u32);
                for r in &t.rtr {
                    e.put_u64(r.seq);
                    e.put_u8(r.skip);
                }
                e.put_u8(u8::from(t.retrans_flg));
            }
            Message::Data(m) => {
                put_ring(e, m.ring);
                e.put_u64(m.seq);
                e.put_u32(m.pid.0);
                e.put_u64(m.round);
                e.put_u8(match m.service {
                    Service::Agreed => 0,
                    Service::Safe => 1,
                });
                match m.inner {
                    Some(i) => {
                        e.put_u8(1);
                        put_ring(e, i.ring);
                        e.put_u64(i.seq);
                        e.put_u32(i.pid.0);
                        e.put_u64(i.round);
                    }
                    None => e.put_u8(0),
                }
                put_batch(e, &m.batch);
            }
            Message::Join(j) => {
                e.put_u32(j.sender.0);
                put_ids(e, &j.proc_set);
                put_ids(e, &j.fail_set);
                e.put_u64(j.ring_seq);
            }
            Message::Commit(c) => {
                put_ring(e, c.ring);
                e.put_u64(c.hop);
                put_ids(e, &c.addr);
                e.put_u32(c.entries.len() as u32);
                for en in &c.entries {
                    put_ring(e, en.old_ring);
                    e.put_u64(en.aru);
                    e.put_u64(en.high_delivered);
                    e.put_u8(u8::from(en.received_flg));
                }
            }
            Message::MergeDetect(m) => {
                e.put_u32(m.sender.0);
                put_ring(e, m.ring);
            }
        }
    }

    fn decode(kind: u8, body: bytes::Bytes) -> Result<Self, DecodeError> {
        let mut d = Decoder::new(body);
        let m = match kind {
            K_TOKEN => {
                let ring = get_ring(&mut d)?;
                let hop = counter(&mut d, "token.hop")?;
                let rotation = counter(&mut d, "token.rotation")?;
                let seq = counter(&mut d, "token.seq")?;
                let aru = counter(&mut d, "token.aru")?;
                if aru > seq {
                    return Err(DecodeError::Invalid {
                        what: "token.aru",
                        detail: format!("aru {aru} above seq {seq}"),
                    });
                }
                let aru_id = if get_bool(&mut d, "token.aru_id flag")? {
                    Some(NodeId(d.u32("token.aru_id")?))
                } else {
                    None
                };
                let fcc = d.u32("token.fcc")?;
                let n = d.count("token.rtr", RTR_MAX, 9)?;
                let mut rtr = Vec::with_capacity(n);
                for _ in 0..n {
                    let s = d.u64("token.rtr")?;
                    let skip = d.u8("token.rtr.skip")?;
                    if s == 0 || s > seq {
                        return Err(DecodeError::Invalid {
                            what: "token.rtr",
                            detail: format!("request for {s} outside 1..={seq}"),
                        });
                    }
                    rtr.push(Rtr { seq: s, skip });
                }
                let retrans_flg = get_bool(&mut d, "token.retrans_flg")?;
                Message::Token(Token {
                    ring,
                    hop,
                    rotation,
                    seq,
                    aru,
                    aru_id,
                    fcc,
                    rtr,
                    retrans_flg,
                })
            }
            K_DATA => {
                let ring = get_ring(&mut d)?;
                let seq = counter(&mut d, "data.seq")?;
                if seq == 0 {
                    return Err(DecodeError::Invalid {
                        what: "data.seq",
                        detail: "messages are numbered from 1".into(),
                    });
                }
                let pid = NodeId(d.u32("data.pid")?);
                let round = counter(&mut d, "data.round")?;
                let service = match d.u8("data.service")? {
                    0 => Service::Agreed,
                    1 => Service::Safe,
                    s => {
                        return Err(DecodeError::Invalid {
                            what: "data.service",
                            detail: format!("{s} is no service (0 agreed, 1 safe)"),
                        });
                    }
                };
                let inner = if get_bool(&mut d, "data.inner flag")? {
                    let ring = get_ring(&mut d)?;
                    let seq = counter(&mut d, "data.inner.seq")?;
                    if seq == 0 {
                        return Err(DecodeError::Invalid {
                            what: "data.inner.seq",
                            detail: "messages are numbered from 1".into(),
                        });
                    }
                    Some(Inner {
                        ring,
                        seq,
                        pid: NodeId(d.u32("data.inner.pid")?),
                        round: counter(&mut d, "data.inner.round")?,
                    })
                } else {
                    None
                };
                let batch = get_batch(&mut d)?;
                Message::Data(Data {
                    ring,
                    seq,
                    pid,
                    round,
                    service,
                    batch,
                    inner,
                })
            }
            K_JOIN => {
                let sender = NodeId(d.u32("join.sender")?);
                let proc_set = get_ids(&mut d, "join.proc_set")?;
                let fail_set = get_ids(&mut d, "join.fail_set")?;
                let ring_seq = counter(&mut d, "join.ring_seq")?;
                Message::Join(Join {
                    sender,
                    proc_set,
                    fail_set,
                    ring_seq,
                })
            }
            K_COMMIT => {
                let ring = get_ring(&mut d)?;
                let hop = counter(&mut d, "commit.hop")?;
                let addr = get_ids(&mut d, "commit.addr")?;
                if addr.is_empty() || !addr.windows(2).all(|w| w[0] < w[1]) {
                    return Err(DecodeError::Invalid {
                        what: "commit.addr",
                        detail: "members must be at least one, in ascending order".into(),
                    });
                }
                let n = d.count("commit.entries", addr.len(), 29)?;
                let mut entries = Vec::with_capacity(n);
                for _ in 0..n {
                    let old_ring = get_ring(&mut d)?;
                    let aru = counter(&mut d, "commit.entry.aru")?;
                    let high_delivered = counter(&mut d, "commit.entry.high_delivered")?;
                    let received_flg = get_bool(&mut d, "commit.entry.received_flg")?;
                    entries.push(MembEntry {
                        old_ring,
                        aru,
                        high_delivered,
                        received_flg,
                    });
                }
                Message::Commit(CommitToken {
                    ring,
                    hop,
                    addr,
                    entries,
                })
            }
            K_MERGE => Message::MergeDetect(MergeDetect {
                sender: NodeId(d.u32("merge.sender")?),
                ring: get_ring(&mut d)?,
            }),
            k => return Err(DecodeError::UnknownKind(k)),
        };
        d.finish()?;
        Ok(m)
    }
}
