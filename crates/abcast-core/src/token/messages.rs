//! The token ring's messages and their wire codec (seed 002 §III-B, §III-C).
//!
//! | message | from → to | transport | seed 002 |
//! | --- | --- | --- | --- |
//! | `Token` | member → its successor on the ring | unicast (its own socket, §III-E) | §III-B: `seq`, `aru`, `fcc`, `rtr` |
//! | `Data` | member → every member | multicast | §III-C: `seq`, `pid`, `round`, payload |
//!
//! Every message names the ring (configuration) it belongs to, so a message of another
//! ring is told apart (dropped and counted today; the membership protocol reads it as a
//! sign of a foreign ring).

use crate::codec::{Decoder, Encoder, WireMessage};
use crate::error::DecodeError;
use crate::types::{Batch, NodeId};
use crate::wire::{get_batch, put_batch};

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
    pub rtr: Vec<u64>,
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
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Message {
    Token(Token),
    Data(Data),
}

const K_TOKEN: u8 = 1;
const K_DATA: u8 = 2;

fn put_ring(e: &mut Encoder, r: RingId) {
    e.put_u32(r.rep.0);
    e.put_u64(r.seq);
}

fn get_ring(d: &mut Decoder) -> Result<RingId, DecodeError> {
    Ok(RingId {
        rep: NodeId(d.u32("ring.rep")?),
        seq: d.u64("ring.seq")?,
    })
}

impl WireMessage for Message {
    fn kind(&self) -> u8 {
        match self {
            Message::Token(_) => K_TOKEN,
            Message::Data(_) => K_DATA,
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
                for s in &t.rtr {
                    e.put_u64(*s);
                }
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
                put_batch(e, &m.batch);
            }
        }
    }

    fn decode(kind: u8, body: bytes::Bytes) -> Result<Self, DecodeError> {
        let mut d = Decoder::new(body);
        let m = match kind {
            K_TOKEN => {
                let ring = get_ring(&mut d)?;
                let hop = d.u64("token.hop")?;
                let rotation = d.u64("token.rotation")?;
                let seq = d.u64("token.seq")?;
                let aru = d.u64("token.aru")?;
                if aru > seq {
                    return Err(DecodeError::Invalid {
                        what: "token.aru",
                        detail: format!("aru {aru} above seq {seq}"),
                    });
                }
                let aru_id = match d.u8("token.aru_id flag")? {
                    0 => None,
                    1 => Some(NodeId(d.u32("token.aru_id")?)),
                    f => {
                        return Err(DecodeError::Invalid {
                            what: "token.aru_id flag",
                            detail: format!("{f} is no flag"),
                        });
                    }
                };
                let fcc = d.u32("token.fcc")?;
                let n = d.count("token.rtr", RTR_MAX, 8)?;
                let mut rtr = Vec::with_capacity(n);
                for _ in 0..n {
                    let s = d.u64("token.rtr")?;
                    if s == 0 || s > seq {
                        return Err(DecodeError::Invalid {
                            what: "token.rtr",
                            detail: format!("request for {s} outside 1..={seq}"),
                        });
                    }
                    rtr.push(s);
                }
                Message::Token(Token {
                    ring,
                    hop,
                    rotation,
                    seq,
                    aru,
                    aru_id,
                    fcc,
                    rtr,
                })
            }
            K_DATA => {
                let ring = get_ring(&mut d)?;
                let seq = d.u64("data.seq")?;
                if seq == 0 {
                    return Err(DecodeError::Invalid {
                        what: "data.seq",
                        detail: "messages are numbered from 1".into(),
                    });
                }
                let pid = NodeId(d.u32("data.pid")?);
                let round = d.u64("data.round")?;
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
                let batch = get_batch(&mut d)?;
                Message::Data(Data {
                    ring,
                    seq,
                    pid,
                    round,
                    service,
                    batch,
                })
            }
            k => return Err(DecodeError::UnknownKind(k)),
        };
        d.finish()?;
        Ok(m)
    }
}
