//! Messages of Multi-Ring Paxos: the messages of each ring (of its ring protocol, tagged with
//! the ring's group in the frame header), plus the merge's own: a learner's rate report to
//! a ring's coordinator (the input of the adaptive λ, see `skip.rs`), a learner's request
//! for a subscribe or unsubscribe control value, and the chunked transfer of a merge
//! snapshot to a learner behind a ring's trim point (`snapshot.rs`; the shared
//! `crate::snapshot_transfer`, tagged with the ring the learner is behind in).

use crate::codec::{Decoder, Encoder, WireMessage};
use crate::error::DecodeError;
use crate::snapshot_transfer::{SnapshotChunk, SnapshotFetch};
use crate::types::{GroupId, NodeId};
use bytes::Bytes;

/// Kinds of the merge's own messages; the ring protocols use 1..=13.
const K_REPORT: u8 = 64;
const K_CONTROL_REQ: u8 = 65;
const K_SNAPSHOT_FETCH: u8 = 66;
const K_SNAPSHOT_CHUNK: u8 = 67;
const K_RETAINED_FETCH: u8 = 68;

/// A learner tells a ring's coordinator what the merge needs from that ring: every Δt, and
/// at once when the merge waits for that ring (a lag report; see `skip.rs`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Report {
    /// The highest value rate, in slots per second, among the rings this learner follows
    /// (skips excluded): the rate every ring must match with skips (λ / Δt).
    pub value_slots_per_s: u64,
    /// The slot every followed ring must reach for this learner to deliver all it holds
    /// (1 + the highest slot waiting in its merge queues; 0 if nothing waits): a quiet ring
    /// below it holds the merge back until it skips there.
    pub need_slot: u64,
}

/// Subscribe or unsubscribe, as a learner asks for it and as the ring decides it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Control {
    pub learner: NodeId,
    /// The learner's incarnation: a control of an earlier incarnation is ignored.
    pub incarnation: u64,
    /// Distinguishes the learner's requests; a re-sent one decided twice applies once.
    pub nonce: u64,
    pub subscribe: bool,
    /// The learner's barrier: the turn it was at when it asked (see `merge.rs`).
    pub barrier_turn: u64,
}

const CONTROL_BYTES: usize = 4 + 8 + 8 + 1 + 8;

impl Control {
    pub fn encode(&self) -> Bytes {
        let mut e = Encoder::new();
        e.put_u32(self.learner.0);
        e.put_u64(self.incarnation);
        e.put_u64(self.nonce);
        e.put_u8(u8::from(self.subscribe));
        e.put_u64(self.barrier_turn);
        e.to_bytes()
    }

    pub fn decode(b: Bytes) -> Result<Control, DecodeError> {
        let mut d = Decoder::new(b);
        let c = Control {
            learner: NodeId(d.u32("control.learner")?),
            incarnation: d.u64("control.incarnation")?,
            nonce: d.u64("control.nonce")?,
            subscribe: match d.u8("control.subscribe")? {
                0 => false,
                1 => true,
                x => {
                    return Err(DecodeError::Invalid {
                        what: "control.subscribe",
                        detail: format!("{x}"),
                    });
                }
            },
            barrier_turn: d.u64("control.barrier_turn")?,
        };
        if d.remaining() != 0 {
            return Err(DecodeError::Trailing {
                left: d.remaining(),
            });
        }
        Ok(c)
    }
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Body<M> {
    /// A message of the ring protocol.
    Ring(M),
    Report(Report),
    ControlReq(Control),
    /// A learner behind a ring's trim point asks a peer for its merge snapshot.
    SnapshotFetch(SnapshotFetch),
    /// Part of a merge snapshot, the answer to a fetch.
    SnapshotChunk(SnapshotChunk),
    /// A fetch of the peer's retained snapshot: the last it took or installed before its
    /// class last changed (`snapshot.rs`, "Retained"), answered by `SnapshotChunk`s.
    RetainedFetch(SnapshotFetch),
}

/// A message of one ring.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct MessageOf<M> {
    pub group: GroupId,
    pub body: Body<M>,
}

impl<M: WireMessage> WireMessage for MessageOf<M> {
    fn kind(&self) -> u8 {
        match &self.body {
            Body::Ring(m) => m.kind(),
            Body::Report(_) => K_REPORT,
            Body::ControlReq(_) => K_CONTROL_REQ,
            Body::SnapshotFetch(_) => K_SNAPSHOT_FETCH,
            Body::SnapshotChunk(_) => K_SNAPSHOT_CHUNK,
            Body::RetainedFetch(_) => K_RETAINED_FETCH,
        }
    }

    fn encode(&self, e: &mut Encoder) {
        match &self.body {
            Body::Ring(m) => m.encode(e),
            Body::Report(r) => {
                e.put_u64(r.value_slots_per_s);
                e.put_u64(r.need_slot);
            }
            Body::ControlReq(c) => e.put_slice(&c.encode()),
            Body::SnapshotFetch(f) | Body::RetainedFetch(f) => f.encode(e),
            Body::SnapshotChunk(c) => c.encode(e),
        }
    }

    fn decode(kind: u8, body: Bytes) -> Result<MessageOf<M>, DecodeError> {
        MessageOf::decode_in(GroupId(0), kind, body)
    }

    fn group(&self) -> GroupId {
        self.group
    }

    fn decode_in(group: GroupId, kind: u8, body: Bytes) -> Result<MessageOf<M>, DecodeError> {
        let body = match kind {
            K_REPORT => {
                let mut d = Decoder::new(body);
                let r = Report {
                    value_slots_per_s: d.u64("report.value_slots_per_s")?,
                    need_slot: d.u64("report.need_slot")?,
                };
                if d.remaining() != 0 {
                    return Err(DecodeError::Trailing {
                        left: d.remaining(),
                    });
                }
                Body::Report(r)
            }
            K_CONTROL_REQ => {
                if body.len() != CONTROL_BYTES {
                    return Err(DecodeError::Invalid {
                        what: "control request",
                        detail: format!("{} bytes, expected {CONTROL_BYTES}", body.len()),
                    });
                }
                Body::ControlReq(Control::decode(body)?)
            }
            K_SNAPSHOT_FETCH | K_RETAINED_FETCH => {
                let mut d = Decoder::new(body);
                let f = SnapshotFetch::decode(&mut d)?;
                d.finish()?;
                if kind == K_SNAPSHOT_FETCH {
                    Body::SnapshotFetch(f)
                } else {
                    Body::RetainedFetch(f)
                }
            }
            K_SNAPSHOT_CHUNK => {
                let mut d = Decoder::new(body);
                let c = SnapshotChunk::decode(&mut d)?;
                d.finish()?;
                Body::SnapshotChunk(c)
            }
            k => Body::Ring(M::decode(k, body)?),
        };
        Ok(MessageOf { group, body })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    type Message = crate::MultiRingMessage;

    fn roundtrip(m: &Message) -> Bytes {
        let mut e = Encoder::new();
        m.encode(&mut e);
        let b = e.to_bytes();
        let back = Message::decode_in(m.group, m.kind(), b.clone()).expect("decodes");
        assert_eq!(&back, m);
        b
    }

    #[test]
    fn own_messages_round_trip_and_reject_every_truncation() {
        let msgs = [
            Message {
                group: GroupId(3),
                body: Body::Report(Report {
                    value_slots_per_s: 12345,
                    need_slot: u64::MAX,
                }),
            },
            Message {
                group: GroupId(7),
                body: Body::ControlReq(Control {
                    learner: NodeId(4),
                    incarnation: 2,
                    nonce: 9,
                    subscribe: true,
                    barrier_turn: 77,
                }),
            },
            Message {
                group: GroupId(1),
                body: Body::SnapshotFetch(SnapshotFetch {
                    upto: 12,
                    min_upto: 10,
                    offset: 1 << 20,
                }),
            },
            Message {
                group: GroupId(1),
                body: Body::RetainedFetch(SnapshotFetch {
                    upto: 0,
                    min_upto: 44,
                    offset: 0,
                }),
            },
            Message {
                group: GroupId(2),
                body: Body::SnapshotChunk(SnapshotChunk {
                    upto: 12,
                    total: 9,
                    offset: 4,
                    data: Bytes::from_static(b"chunk"),
                }),
            },
        ];
        for m in &msgs {
            let b = roundtrip(m);
            for cut in 0..b.len() {
                assert!(
                    Message::decode_in(m.group, m.kind(), b.slice(..cut)).is_err(),
                    "prefix of {cut} bytes of {m:?}"
                );
            }
        }
    }

    #[test]
    fn a_bad_subscribe_flag_is_an_error_not_a_panic() {
        let c = Control {
            learner: NodeId(1),
            incarnation: 0,
            nonce: 1,
            subscribe: false,
            barrier_turn: 0,
        };
        let mut raw = c.encode().to_vec();
        raw[20] = 9;
        assert!(Control::decode(Bytes::from(raw)).is_err());
    }
}
