//! The process groups' values on the ring: a group operation travels as one value of the
//! total order, wrapped in an envelope the [`super::GroupLayer`] recognises.
//!
//! ```text
//! "ABGR" | kind u8 | body
//!   1 messages: group (len u8, UTF-8) | sender (len u8, UTF-8; empty: not a member) |
//!               count u32 | count x (len u32 | payload)
//!   2 join:    group | member
//!   3 leave:   group | member
//!   4 state:   configuration id u64 | count u32 | count x (group | member)
//! ```
//!
//! One value carries one or more consecutive messages of one sender to one group, as
//! Spread packs small messages into one packet: the ring then orders, acknowledges and
//! delivers them as one value, and each message keeps its place in the total order.
//!
//! The node a member lives on is the value's origin (its `ValueId::node`), never a field:
//! no node can join, leave or speak for another node's members. A value without the magic
//! is an ordinary value, not a group's; one with the magic and a bad body is malformed
//! (counted and passed over by every member alike, so the members stay in step).

use crate::codec::{Decoder, Encoder};
use crate::error::DecodeError;
use bytes::Bytes;

/// The first four bytes of every group value.
pub const MAGIC: [u8; 4] = *b"ABGR";
const K_MESSAGE: u8 = 1;
const K_JOIN: u8 = 2;
const K_LEAVE: u8 = 3;
const K_STATE: u8 = 4;

/// Longest group or member name, in bytes.
pub const NAME_BYTES_MAX: usize = 64;
/// Most (group, member) pairs one node holds (and one state message lists).
pub const MEMBERS_PER_NODE_MAX: usize = 1024;

/// Messages one value carries at most.
pub const MESSAGES_PER_VALUE_MAX: usize = 1 << 16;

/// Bytes the envelope of a value of messages adds, besides 4 per message: magic, kind, the
/// two names' lengths and the names, the count.
pub fn message_overhead_bytes(group: &str, sender: &str) -> usize {
    MAGIC.len() + 1 + 2 + group.len() + sender.len() + 4
}

/// A decoded group value.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Envelope {
    /// Messages for `group`, in order; `sender` is the sending member's name on the
    /// origin node, or empty for a sender that is not a member (groups are open, as
    /// Spread's are).
    Messages {
        group: String,
        sender: String,
        payloads: Vec<Bytes>,
    },
    Join {
        group: String,
        member: String,
    },
    Leave {
        group: String,
        member: String,
    },
    /// The origin's members, each (group, member), at the start of configuration `config`
    /// (the state exchange after a configuration change).
    State {
        config: u64,
        members: Vec<(String, String)>,
    },
}

/// Why a name is refused (for a user's request; the decoder reports the same as a
/// `DecodeError`).
pub fn check_name(what: &str, name: &str, empty_ok: bool) -> Result<(), String> {
    if name.is_empty() && !empty_ok {
        return Err(format!("the {what} name is empty"));
    }
    if name.len() > NAME_BYTES_MAX {
        return Err(format!(
            "the {what} name {:?} is {} bytes, at most {NAME_BYTES_MAX}",
            name,
            name.len()
        ));
    }
    if let Some(c) = name.chars().find(|c| c.is_control() || c.is_whitespace()) {
        return Err(format!(
            "the {what} name {name:?} holds {c:?}: names are printable and without spaces"
        ));
    }
    Ok(())
}

fn put_name(e: &mut Encoder, s: &str) {
    // Names are checked (at most NAME_BYTES_MAX bytes) before they are encoded.
    e.put_u8(s.len().min(NAME_BYTES_MAX) as u8);
    e.put_slice(&s.as_bytes()[..s.len().min(NAME_BYTES_MAX)]);
}

fn get_name(d: &mut Decoder, what: &'static str, empty_ok: bool) -> Result<String, DecodeError> {
    let n = d.u8(what)? as usize;
    let raw = d.bytes(n, what)?;
    let s = std::str::from_utf8(&raw).map_err(|_| DecodeError::Invalid {
        what,
        detail: "not UTF-8".into(),
    })?;
    check_name(what, s, empty_ok).map_err(|detail| DecodeError::Invalid { what, detail })?;
    Ok(s.to_string())
}

fn header(kind: u8) -> Encoder {
    let mut e = Encoder::new();
    e.put_slice(&MAGIC);
    e.put_u8(kind);
    e
}

/// One value of messages for `group` from member `sender` (empty: a non-member): one copy
/// of each payload, behind the envelope. At most [`MESSAGES_PER_VALUE_MAX`] messages (the
/// caller splits).
pub fn encode_messages<P: AsRef<[u8]>>(group: &str, sender: &str, payloads: &[P]) -> Bytes {
    let payloads = &payloads[..payloads.len().min(MESSAGES_PER_VALUE_MAX)];
    let bytes: usize = payloads.iter().map(|p| 4 + p.as_ref().len()).sum();
    let mut v = Vec::with_capacity(message_overhead_bytes(group, sender) + bytes);
    v.extend_from_slice(&MAGIC);
    v.push(K_MESSAGE);
    v.push(group.len().min(NAME_BYTES_MAX) as u8);
    v.extend_from_slice(&group.as_bytes()[..group.len().min(NAME_BYTES_MAX)]);
    v.push(sender.len().min(NAME_BYTES_MAX) as u8);
    v.extend_from_slice(&sender.as_bytes()[..sender.len().min(NAME_BYTES_MAX)]);
    v.extend_from_slice(&(payloads.len() as u32).to_le_bytes());
    for p in payloads {
        let p = p.as_ref();
        v.extend_from_slice(&(p.len() as u32).to_le_bytes());
        v.extend_from_slice(p);
    }
    Bytes::from(v)
}

/// One message as a value (see [`encode_messages`]).
pub fn encode_message(group: &str, sender: &str, payload: &[u8]) -> Bytes {
    encode_messages(group, sender, &[payload])
}

pub fn encode_join(group: &str, member: &str) -> Bytes {
    let mut e = header(K_JOIN);
    put_name(&mut e, group);
    put_name(&mut e, member);
    e.to_bytes()
}

pub fn encode_leave(group: &str, member: &str) -> Bytes {
    let mut e = header(K_LEAVE);
    put_name(&mut e, group);
    put_name(&mut e, member);
    e.to_bytes()
}

pub fn encode_state<'a>(
    config: u64,
    members: impl ExactSizeIterator<Item = (&'a str, &'a str)>,
) -> Bytes {
    let mut e = header(K_STATE);
    e.put_u64(config);
    e.put_u32(members.len() as u32);
    for (g, m) in members {
        put_name(&mut e, g);
        put_name(&mut e, m);
    }
    e.to_bytes()
}

/// Whether `value` is a group value (starts with the magic).
pub fn is_group_value(value: &[u8]) -> bool {
    value.starts_with(&MAGIC)
}

/// Decodes a group value: `Ok(None)` for a value that is not one (no magic), an error for
/// one that has the magic and a malformed body. Never panics; the payload of a message is
/// a slice of `value`, not a copy.
pub fn decode(value: &Bytes) -> Result<Option<Envelope>, DecodeError> {
    if !is_group_value(value) {
        return Ok(None);
    }
    let mut d = Decoder::new(value.slice(MAGIC.len()..));
    let env = match d.u8("group value kind")? {
        K_MESSAGE => {
            let group = get_name(&mut d, "group", false)?;
            let sender = get_name(&mut d, "sender", true)?;
            let n = d.count("messages", MESSAGES_PER_VALUE_MAX, 4)?;
            if n == 0 {
                return Err(DecodeError::Invalid {
                    what: "messages",
                    detail: "a value of no messages".into(),
                });
            }
            let mut payloads = Vec::with_capacity(n);
            for _ in 0..n {
                let len = d.u32("message length")? as usize;
                payloads.push(d.bytes(len, "message")?);
            }
            Envelope::Messages {
                group,
                sender,
                payloads,
            }
        }
        K_JOIN => Envelope::Join {
            group: get_name(&mut d, "group", false)?,
            member: get_name(&mut d, "member", false)?,
        },
        K_LEAVE => Envelope::Leave {
            group: get_name(&mut d, "group", false)?,
            member: get_name(&mut d, "member", false)?,
        },
        K_STATE => {
            let config = d.u64("state.config")?;
            let n = d.count("state.members", MEMBERS_PER_NODE_MAX, 4)?;
            let mut members = Vec::with_capacity(n);
            for _ in 0..n {
                let g = get_name(&mut d, "group", false)?;
                let m = get_name(&mut d, "member", false)?;
                members.push((g, m));
            }
            Envelope::State { config, members }
        }
        k => return Err(DecodeError::UnknownKind(k)),
    };
    d.finish()?;
    Ok(Some(env))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_envelope_round_trips() {
        let m = encode_message("orders", "alice", b"hello");
        assert_eq!(
            decode(&m).unwrap(),
            Some(Envelope::Messages {
                group: "orders".into(),
                sender: "alice".into(),
                payloads: vec![Bytes::from_static(b"hello")],
            })
        );
        assert_eq!(m.len(), message_overhead_bytes("orders", "alice") + 4 + 5);
        let anon = encode_messages("g", "", &[&b""[..], b"two", b"three"]);
        assert!(matches!(
            decode(&anon).unwrap(),
            Some(Envelope::Messages { sender, payloads, .. })
                if sender.is_empty() && payloads.len() == 3 && payloads[2] == "three"
        ));
        assert_eq!(
            decode(&encode_join("g", "m")).unwrap(),
            Some(Envelope::Join {
                group: "g".into(),
                member: "m".into()
            })
        );
        assert_eq!(
            decode(&encode_leave("g", "m")).unwrap(),
            Some(Envelope::Leave {
                group: "g".into(),
                member: "m".into()
            })
        );
        let pairs = [("a", "x"), ("b", "y")];
        assert_eq!(
            decode(&encode_state(7, pairs.iter().copied())).unwrap(),
            Some(Envelope::State {
                config: 7,
                members: vec![("a".into(), "x".into()), ("b".into(), "y".into())],
            })
        );
    }

    #[test]
    fn an_ordinary_value_is_not_a_group_value() {
        assert_eq!(decode(&Bytes::from_static(b"plain value")).unwrap(), None);
        assert_eq!(decode(&Bytes::new()).unwrap(), None);
    }

    #[test]
    fn malformed_group_values_are_errors_not_panics() {
        let mut bad: Vec<Vec<u8>> = vec![
            b"ABGR".to_vec(),
            b"ABGR\x09".to_vec(),
            b"ABGR\x02\x05ab".to_vec(),
            b"ABGR\x02\x00\x01m".to_vec(),
            b"ABGR\x02\x01g\x01m!".to_vec(),
            b"ABGR\x02\x02\xff\xfe\x01m".to_vec(),
            b"ABGR\x02\x03a b\x01m".to_vec(),
            b"ABGR\x04\x00\x00\x00\x00\x00\x00\x00\x00\xff\xff\xff\xff".to_vec(),
            b"ABGR\x01\x01g\x00\x00\x00\x00\x00".to_vec(),
            b"ABGR\x01\x01g\x00\x01\x00\x00\x00\x09\x00\x00\x00ab".to_vec(),
        ];
        let mut long = b"ABGR\x02\x41".to_vec();
        long.extend(std::iter::repeat_n(b'a', 65));
        long.extend_from_slice(b"\x01m");
        bad.push(long);
        for b in bad {
            assert!(decode(&Bytes::from(b.clone())).is_err(), "{b:?}");
        }
        // Every truncation of a good state message is refused.
        let good = encode_state(1, [("group", "member")].iter().copied());
        for n in MAGIC.len()..good.len() {
            assert!(decode(&good.slice(..n)).is_err(), "cut at {n}");
        }
    }

    #[test]
    fn names_are_checked() {
        assert!(check_name("group", "", false).is_err());
        assert!(check_name("sender", "", true).is_ok());
        assert!(check_name("group", &"x".repeat(65), false).is_err());
        assert!(check_name("group", "a\nb", false).is_err());
        assert!(check_name("group", "a b", false).is_err());
        assert!(check_name("group", "orders-eu.1", false).is_ok());
    }
}
