//! The wire codec of message bodies. A body is encoded into an [`Encoder`], which keeps large
//! payloads as separate shared chunks so the runtime can hand them to one vectored write
//! without copying them. Decoding reads from a shared buffer and slices payloads out of it.
//! The frame around a body (magic, version, kind, length, checksum) belongs to the runtime.

use crate::error::DecodeError;
use crate::types::GroupId;
use bytes::{Buf, Bytes, BytesMut};

/// Payloads at least this large travel as their own chunk instead of being copied into the
/// header buffer.
pub const ZERO_COPY_MIN_BYTES: usize = 2048;

/// A message body under construction: a list of chunks, written in order.
#[derive(Debug, Default)]
pub struct Encoder {
    chunks: Vec<Bytes>,
    current: BytesMut,
}

impl Encoder {
    pub fn new() -> Encoder {
        Encoder {
            chunks: Vec::new(),
            current: BytesMut::with_capacity(128),
        }
    }
    pub fn put_u8(&mut self, v: u8) {
        self.current.extend_from_slice(&[v]);
    }
    pub fn put_u16(&mut self, v: u16) {
        self.current.extend_from_slice(&v.to_le_bytes());
    }
    pub fn put_u32(&mut self, v: u32) {
        self.current.extend_from_slice(&v.to_le_bytes());
    }
    pub fn put_u64(&mut self, v: u64) {
        self.current.extend_from_slice(&v.to_le_bytes());
    }
    pub fn put_slice(&mut self, s: &[u8]) {
        self.current.extend_from_slice(s);
    }
    /// Appends shared bytes: large ones become their own chunk (no copy), small ones are copied.
    pub fn put_bytes(&mut self, b: &Bytes) {
        self.put_bytes_from(b, ZERO_COPY_MIN_BYTES);
    }
    /// [`Encoder::put_bytes`] with its own bound: bytes of at least `min_len` become their
    /// own chunk. For bodies that go to one vectored write at once, where a chunk costs an
    /// iovec and a copy costs a pass over the bytes.
    pub fn put_bytes_from(&mut self, b: &Bytes, min_len: usize) {
        if b.len() >= min_len {
            if !self.current.is_empty() {
                let head = self.current.split().freeze();
                self.chunks.push(head);
            }
            self.chunks.push(b.clone());
        } else {
            self.current.extend_from_slice(b);
        }
    }
    /// Total encoded length so far.
    pub fn len(&self) -> usize {
        self.chunks.iter().map(|c| c.len()).sum::<usize>() + self.current.len()
    }
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
    /// The finished body as chunks in order.
    pub fn finish(mut self) -> Vec<Bytes> {
        if !self.current.is_empty() {
            self.chunks.push(self.current.freeze());
        }
        self.chunks
    }
    /// The finished body as one buffer (copies; for tests and small messages).
    pub fn to_bytes(self) -> Bytes {
        let chunks = self.finish();
        if chunks.len() == 1 {
            return chunks.into_iter().next().unwrap_or_default();
        }
        let mut all = BytesMut::new();
        for c in chunks {
            all.extend_from_slice(&c);
        }
        all.freeze()
    }
}

/// Reads a body. Every read is bounds-checked and names the field it was reading.
#[derive(Debug)]
pub struct Decoder {
    buf: Bytes,
}

impl Decoder {
    pub fn new(buf: Bytes) -> Decoder {
        Decoder { buf }
    }
    fn need(&self, n: usize, what: &'static str) -> Result<(), DecodeError> {
        if self.buf.remaining() < n {
            Err(DecodeError::Truncated { what })
        } else {
            Ok(())
        }
    }
    pub fn u8(&mut self, what: &'static str) -> Result<u8, DecodeError> {
        self.need(1, what)?;
        Ok(self.buf.get_u8())
    }
    pub fn u16(&mut self, what: &'static str) -> Result<u16, DecodeError> {
        self.need(2, what)?;
        Ok(self.buf.get_u16_le())
    }
    pub fn u32(&mut self, what: &'static str) -> Result<u32, DecodeError> {
        self.need(4, what)?;
        Ok(self.buf.get_u32_le())
    }
    pub fn u64(&mut self, what: &'static str) -> Result<u64, DecodeError> {
        self.need(8, what)?;
        Ok(self.buf.get_u64_le())
    }
    /// Takes `n` bytes as a shared slice (no copy).
    pub fn bytes(&mut self, n: usize, what: &'static str) -> Result<Bytes, DecodeError> {
        self.need(n, what)?;
        Ok(self.buf.split_to(n))
    }
    /// A length-checked count: at most `max`, and at least `min_each * count` bytes must remain.
    pub fn count(
        &mut self,
        what: &'static str,
        max: usize,
        min_each: usize,
    ) -> Result<usize, DecodeError> {
        let n = self.u32(what)? as usize;
        if n > max {
            return Err(DecodeError::Invalid {
                what,
                detail: format!("{n} exceeds the limit {max}"),
            });
        }
        if n.saturating_mul(min_each) > self.buf.remaining() {
            return Err(DecodeError::Truncated { what });
        }
        Ok(n)
    }
    pub fn remaining(&self) -> usize {
        self.buf.remaining()
    }
    /// Checks that the whole body was consumed.
    pub fn finish(self) -> Result<(), DecodeError> {
        if self.buf.has_remaining() {
            Err(DecodeError::Trailing {
                left: self.buf.remaining(),
            })
        } else {
            Ok(())
        }
    }
}

/// Which of a node's two datagram sockets a message travels on, where the runtime keeps
/// two (seed 002 §III-D, §III-E: "we accomplish this by sending the two message types on
/// different ports and using different sockets for receiving them").
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub enum Lane {
    /// The data plane: every message unless the protocol says otherwise.
    #[default]
    Data,
    /// The control plane: the token ring's token and commit token, on a socket of their
    /// own, so that the receiver chooses which of the two to serve first.
    Control,
}

/// A protocol message that can cross the wire.
pub trait WireMessage: Sized {
    /// The message type byte carried in the frame header.
    fn kind(&self) -> u8;
    /// Encodes the body (without the frame header).
    fn encode(&self, enc: &mut Encoder);
    /// Decodes a body of the given kind. Must reject, never panic on, any byte string.
    fn decode(kind: u8, body: Bytes) -> Result<Self, DecodeError>;
    /// A control-plane message (an election heartbeat) that may overtake the data messages
    /// queued to the same peer: the runtime sends it at the next frame boundary, ahead of
    /// them. Only for messages whose meaning does not depend on their order relative to
    /// the protocol's other messages (GUIDE: keep the control plane out of the data
    /// plane's way).
    fn urgent(&self) -> bool {
        false
    }
    /// The socket lane the message travels on ([`Lane`]). Unlike [`WireMessage::urgent`]
    /// it does not let the message overtake data queued before it: a runtime that sends
    /// lanes on different sockets writes what was queued before a `Control` message first,
    /// so a protocol's order of effects (`Outbox::multicasts_first`) holds across sockets.
    fn lane(&self) -> Lane {
        Lane::Data
    }
    /// The position in the ring's total order a message carries, for a runtime that
    /// weighs the two lanes against each other (seed 002 §III-D): a data message's
    /// sequence number, the `seq` of a token (the last number assigned). `None` for a
    /// message without one (the default).
    fn order_seq(&self) -> Option<u64> {
        None
    }
    /// The protocol instance (group) the message belongs to, carried in the frame header.
    /// A protocol that runs one instance leaves it at 0; a composite that runs several
    /// (Multi-Ring Paxos: one group per ring) tags each message with its ring.
    fn group(&self) -> GroupId {
        GroupId(0)
    }
    /// Decodes a body that arrived in a frame of `group`. The default accepts group 0 only.
    fn decode_in(group: GroupId, kind: u8, body: Bytes) -> Result<Self, DecodeError> {
        if group != GroupId(0) {
            return Err(DecodeError::Invalid {
                what: "group",
                detail: format!("group {} for a protocol that runs group 0 only", group.0),
            });
        }
        Self::decode(kind, body)
    }
}
