//! The client protocol spoken on a node's client port (frame kinds 128..=255, group 0).
//!
//! A client proposes values and waits for them to be decided (`abcast propose`), or
//! subscribes to the stream of deliveries (`abcast learn`). Frames use the same header as
//! peer frames, so the same decoder guards both ports.
//!
//! | kind | frame | direction | body |
//! | --- | --- | --- | --- |
//! | 128 | `Propose` | client -> node | count u32, then per value: len u32, bytes |
//! | 129 | `Proposed` | node -> client | ids of a prefix of the proposed values (the rest were refused as busy) |
//! | 130 | `Busy` | node -> client | empty: no value was taken, retry later |
//! | 131 | `Error` | node -> client | len u32, UTF-8 text: the first value was refused for this reason |
//! | 132 | `Decided` | node -> client | ids of this client's values that are now decided |
//! | 133 | `Subscribe` | client -> node | from_instance u64 |
//! | 134 | `Delivered` | node -> client | instance u64, origin u32, first_seq u64, count u32, lens, data |
//! | 135 | `Follow` | client -> node | group u16, on u8 (1 = start, 0 = stop following a ring) |
//! | 136 | `FollowAsked` | node -> client | empty: the change is asked for; it takes effect once decided in the ring |
//! | 137 | `Gap` | node -> client | from u64, to u64 (exclusive), snapshot_upto u64, reason u8, len u32, UTF-8 how_to_fetch: a subscription's instances `[from, to)` whose values this stream does not carry (`history::GapReason`: 1 not held here, 2 a peer's snapshot installed, 3 skipped, 4 decided without values: no-ops, duplicates) |
//!
//! A subscription never passes an instance silently: every instance from `from_instance`
//! on comes as a `Delivered` or inside a `Gap`. The client wire has no version of its own
//! (the frame header's version is shared with the peer protocol and unchanged); a client
//! older than kind 137 stops on it with an unknown-kind error instead of missing values
//! silently.
//! Ids are encoded as node u32, seq u64.

use abcast_core::DecodeError;
use abcast_core::codec::{Decoder, Encoder};
use abcast_core::types::{Batch, Instance, NodeId, ValueId};
use bytes::Bytes;

use crate::history::{Gap, GapReason};

pub const KIND_PROPOSE: u8 = 128;
pub const KIND_PROPOSED: u8 = 129;
pub const KIND_BUSY: u8 = 130;
pub const KIND_ERROR: u8 = 131;
pub const KIND_DECIDED: u8 = 132;
pub const KIND_SUBSCRIBE: u8 = 133;
pub const KIND_DELIVERED: u8 = 134;
pub const KIND_FOLLOW: u8 = 135;
pub const KIND_FOLLOW_ASKED: u8 = 136;
pub const KIND_GAP: u8 = 137;

/// Most values in one `Propose` frame (and ids in one reply).
pub const MAX_VALUES_PER_FRAME: usize = 1 << 16;
/// Most values in one delivered batch accepted from a node.
const MAX_BATCH_VALUES: usize = 1 << 24;
/// Longest error text.
const MAX_ERROR_BYTES: usize = 64 << 10;

/// One client-port frame.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum ClientFrame {
    Propose {
        payloads: Vec<Bytes>,
    },
    Proposed {
        ids: Vec<ValueId>,
    },
    Busy,
    Error {
        text: String,
    },
    Decided {
        ids: Vec<ValueId>,
    },
    Subscribe {
        from_instance: Instance,
    },
    Delivered {
        instance: Instance,
        batch: Batch,
    },
    /// Multi-Ring: start (`on`) or stop following ring `group` at this node's learner.
    Follow {
        group: u16,
        on: bool,
    },
    FollowAsked,
    /// Instances `[gap.from, gap.to)` this subscription does not carry, and why.
    Gap {
        gap: Gap,
    },
}

impl ClientFrame {
    pub fn kind(&self) -> u8 {
        match self {
            ClientFrame::Propose { .. } => KIND_PROPOSE,
            ClientFrame::Proposed { .. } => KIND_PROPOSED,
            ClientFrame::Busy => KIND_BUSY,
            ClientFrame::Error { .. } => KIND_ERROR,
            ClientFrame::Decided { .. } => KIND_DECIDED,
            ClientFrame::Subscribe { .. } => KIND_SUBSCRIBE,
            ClientFrame::Delivered { .. } => KIND_DELIVERED,
            ClientFrame::Follow { .. } => KIND_FOLLOW,
            ClientFrame::FollowAsked => KIND_FOLLOW_ASKED,
            ClientFrame::Gap { .. } => KIND_GAP,
        }
    }

    /// The body as chunks; payloads are shared, not copied, when large.
    pub fn encode(&self) -> Vec<Bytes> {
        let mut e = Encoder::new();
        match self {
            ClientFrame::Propose { payloads } => {
                e.put_u32(payloads.len() as u32);
                for p in payloads {
                    e.put_u32(p.len() as u32);
                    e.put_bytes(p);
                }
            }
            ClientFrame::Proposed { ids } | ClientFrame::Decided { ids } => {
                e.put_u32(ids.len() as u32);
                for id in ids {
                    e.put_u32(id.node.0);
                    e.put_u64(id.seq);
                }
            }
            ClientFrame::Busy => {}
            ClientFrame::Error { text } => {
                let t = text.as_bytes();
                let t = &t[..t.len().min(MAX_ERROR_BYTES)];
                e.put_u32(t.len() as u32);
                e.put_slice(t);
            }
            ClientFrame::Subscribe { from_instance } => e.put_u64(*from_instance),
            ClientFrame::Delivered { instance, batch } => {
                e.put_u64(*instance);
                e.put_u32(batch.origin().0);
                e.put_u64(batch.first_seq());
                e.put_u32(batch.len() as u32);
                e.put_bytes(batch.lens_raw());
                e.put_bytes(batch.data_raw());
            }
            ClientFrame::Follow { group, on } => {
                e.put_u16(*group);
                e.put_u8(u8::from(*on));
            }
            ClientFrame::FollowAsked => {}
            ClientFrame::Gap { gap } => {
                e.put_u64(gap.from);
                e.put_u64(gap.to);
                e.put_u64(gap.snapshot_upto);
                e.put_u8(gap.reason as u8);
                let t = gap.how_to_fetch.as_bytes();
                let t = &t[..t.len().min(MAX_ERROR_BYTES)];
                e.put_u32(t.len() as u32);
                e.put_slice(t);
            }
        }
        e.finish()
    }

    /// Decodes a body; rejects, never panics on, any byte string.
    pub fn decode(kind: u8, body: Bytes) -> Result<ClientFrame, DecodeError> {
        let mut d = Decoder::new(body);
        let f = match kind {
            KIND_PROPOSE => {
                let n = d.count("propose count", MAX_VALUES_PER_FRAME, 4)?;
                let mut payloads = Vec::with_capacity(n);
                for _ in 0..n {
                    let len = d.u32("value length")? as usize;
                    payloads.push(d.bytes(len, "value")?);
                }
                ClientFrame::Propose { payloads }
            }
            KIND_PROPOSED | KIND_DECIDED => {
                let n = d.count("id count", MAX_VALUES_PER_FRAME, 12)?;
                let mut ids = Vec::with_capacity(n);
                for _ in 0..n {
                    let node = NodeId(d.u32("id node")?);
                    let seq = d.u64("id seq")?;
                    ids.push(ValueId { node, seq });
                }
                if kind == KIND_PROPOSED {
                    ClientFrame::Proposed { ids }
                } else {
                    ClientFrame::Decided { ids }
                }
            }
            KIND_BUSY => ClientFrame::Busy,
            KIND_ERROR => {
                let n = d.count("error length", MAX_ERROR_BYTES, 1)?;
                let text = String::from_utf8_lossy(&d.bytes(n, "error text")?).into_owned();
                ClientFrame::Error { text }
            }
            KIND_SUBSCRIBE => ClientFrame::Subscribe {
                from_instance: d.u64("from_instance")?,
            },
            KIND_DELIVERED => {
                let instance = d.u64("instance")?;
                let origin = NodeId(d.u32("origin")?);
                let first_seq = d.u64("first_seq")?;
                let n = d.count("value count", MAX_BATCH_VALUES, 4)?;
                let lens = d.bytes(n * 4, "value lengths")?;
                let rest = d.remaining();
                let data = d.bytes(rest, "values")?;
                let batch = Batch::from_parts(origin, first_seq, lens, data)?;
                ClientFrame::Delivered { instance, batch }
            }
            KIND_FOLLOW => {
                let group = d.u16("group")?;
                let on = match d.u8("on")? {
                    0 => false,
                    1 => true,
                    v => {
                        return Err(DecodeError::Invalid {
                            what: "on",
                            detail: format!("{v}, expected 0 or 1"),
                        });
                    }
                };
                ClientFrame::Follow { group, on }
            }
            KIND_FOLLOW_ASKED => ClientFrame::FollowAsked,
            KIND_GAP => {
                let from = d.u64("gap from")?;
                let to = d.u64("gap to")?;
                let snapshot_upto = d.u64("gap snapshot_upto")?;
                let r = d.u8("gap reason")?;
                let reason = GapReason::from_u8(r).ok_or_else(|| DecodeError::Invalid {
                    what: "gap reason",
                    detail: format!("{r}, expected 1 to 4"),
                })?;
                if to <= from {
                    return Err(DecodeError::Invalid {
                        what: "gap",
                        detail: format!("[{from}, {to}) is empty"),
                    });
                }
                let n = d.count("how_to_fetch length", MAX_ERROR_BYTES, 1)?;
                let how_to_fetch =
                    String::from_utf8_lossy(&d.bytes(n, "how_to_fetch")?).into_owned();
                ClientFrame::Gap {
                    gap: Gap {
                        from,
                        to,
                        snapshot_upto,
                        reason,
                        how_to_fetch,
                    },
                }
            }
            other => return Err(DecodeError::UnknownKind(other)),
        };
        d.finish()?;
        Ok(f)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn roundtrip(f: ClientFrame) {
        let chunks = f.encode();
        let mut all = Vec::new();
        for c in &chunks {
            all.extend_from_slice(c);
        }
        assert_eq!(ClientFrame::decode(f.kind(), Bytes::from(all)).unwrap(), f);
    }

    #[test]
    fn every_frame_roundtrips() {
        let id = ValueId {
            node: NodeId(3),
            seq: 99,
        };
        roundtrip(ClientFrame::Propose {
            payloads: vec![Bytes::from_static(b"a"), Bytes::from(vec![1u8; 9000])],
        });
        roundtrip(ClientFrame::Proposed { ids: vec![id, id] });
        roundtrip(ClientFrame::Busy);
        roundtrip(ClientFrame::Error {
            text: "nope".into(),
        });
        roundtrip(ClientFrame::Decided { ids: vec![id] });
        roundtrip(ClientFrame::Subscribe { from_instance: 7 });
        roundtrip(ClientFrame::Follow { group: 2, on: true });
        roundtrip(ClientFrame::Follow {
            group: 9,
            on: false,
        });
        roundtrip(ClientFrame::FollowAsked);
        roundtrip(ClientFrame::Gap {
            gap: Gap {
                from: 3,
                to: 9,
                snapshot_upto: 8,
                reason: GapReason::SnapshotInstalled,
                how_to_fetch: "snapshot file".into(),
            },
        });
        assert!(ClientFrame::decode(KIND_FOLLOW, Bytes::from_static(&[0, 2, 7])).is_err());
        let batch = Batch::single(id, Bytes::from_static(b"payload"));
        roundtrip(ClientFrame::Delivered {
            instance: 12,
            batch,
        });
    }

    #[test]
    fn garbage_bodies_are_errors_not_panics() {
        for kind in 128..=140u8 {
            for len in 0..64usize {
                let body = Bytes::from(
                    (0..len)
                        .map(|i| (i * 37 + kind as usize) as u8)
                        .collect::<Vec<_>>(),
                );
                let _ = ClientFrame::decode(kind, body);
            }
        }
        assert!(
            ClientFrame::decode(KIND_PROPOSE, Bytes::from_static(&[255, 255, 255, 255])).is_err()
        );
    }
}
