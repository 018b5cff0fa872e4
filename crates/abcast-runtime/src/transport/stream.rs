//! The socket-level pieces of the TCP transport: a bounded outbound queue written with
//! vectored writes, the read path into a large shared buffer, socket options, and reconnect
//! backoff. The peer links that use them are in `tcp.rs`, the client port in the driver.
//!
//! Cost sketch of the data path per frame: the header (16 bytes) and small bodies are
//! copied once into a staging buffer so that many small frames leave in one iovec; body
//! chunks of [`COPY_MAX_BYTES`] or more (payloads) are queued as shared `Bytes` and handed to
//! the kernel without a copy. One `writev` carries up to [`MAX_IOV`] slices, so a burst of
//! small messages costs one syscall, not one per message.

use super::TransportConfig;
use crate::frame::{self, FrameError, HEADER_BYTES};
use bytes::{Buf, Bytes, BytesMut};
use mio::net::TcpStream;
use socket2::{Domain, Protocol as SockProtocol, SockRef, Socket, Type};
use std::collections::VecDeque;
use std::io::{self, IoSlice, Write};
use std::net::SocketAddr;
use std::os::fd::AsFd;
use std::time::Duration;

/// Slices per `writev`. Linux's IOV_MAX is 1024.
pub const MAX_IOV: usize = 1024;
/// Body chunks smaller than this are copied next to their header; larger ones are queued
/// as their own slice. Equal to the codec's zero-copy threshold, so the encoder's small head
/// chunk is the only thing copied.
pub const COPY_MAX_BYTES: usize = abcast_core::codec::ZERO_COPY_MIN_BYTES;
/// Initial size of the staging buffer that collects headers and small bodies.
const STAGING_BYTES: usize = 64 << 10;

/// The frame did not fit in a bounded queue.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct QueueFull;

/// A bounded queue of outbound frames for one connection, flushed with vectored writes.
///
/// `segments` are ready for the kernel; `staging` collects headers and small bodies and is
/// sealed into a segment before every flush. Frames are only ever enqueued whole, so the
/// stream stays framed as long as the queue is written front to back; after a broken
/// connection the caller clears the queue, because a half-written frame cannot be resumed
/// on a new connection. The queue knows whether a write took any of what it holds
/// (`written_into`): until then every frame in it is whole and unwritten, and
/// [`OutQueue::clear_unwritten`] may drop them all; after, the front frame may be half
/// written, and only the whole queue's loss with its connection (`clear`) is allowed.
///
/// Control frames (`push_urgent_frame`: election heartbeats) have a lane of their own: they
/// leave at the next frame boundary of the data stream, ahead of the data frames queued
/// behind it, so a heartbeat never waits behind megabytes of Accept data (seed 001's
/// Ballot Leader Election counts a late heartbeat as a lost peer; a 5-node leader under a
/// million 16-byte values in flight lost its leadership every few hundred milliseconds).
/// The queue keeps the length of every data frame to know where the boundaries are.
#[derive(Debug)]
pub struct OutQueue {
    segments: VecDeque<Bytes>,
    /// Lengths of the data frames in `segments` and `staging`, in order.
    frame_lens: VecDeque<usize>,
    /// Bytes of the front data frame already written.
    front_written: usize,
    /// Whole control frames, each in one piece; the front one may be half written.
    urgent: VecDeque<Bytes>,
    /// A write took part of `urgent`'s front frame: it finishes before anything else.
    urgent_started: bool,
    staging: BytesMut,
    queued_bytes: usize,
    limit_bytes: usize,
    /// Frames enqueued since the queue was last empty: exactly the frames it holds while
    /// `written_into` is false.
    frames_since_empty: usize,
    /// A write took some bytes of what the queue holds now (reset when it empties).
    written_into: bool,
    /// Client frames leave without a body checksum (`frame::CLIENT_UNCHECKED`): a client
    /// connection inside one host.
    client_unchecked: bool,
}

impl OutQueue {
    pub fn new(limit_bytes: usize) -> OutQueue {
        OutQueue {
            segments: VecDeque::new(),
            frame_lens: VecDeque::new(),
            front_written: 0,
            urgent: VecDeque::new(),
            urgent_started: false,
            staging: BytesMut::new(),
            queued_bytes: 0,
            limit_bytes,
            frames_since_empty: 0,
            written_into: false,
            client_unchecked: false,
        }
    }

    /// Client frames (kinds 128 and up) pushed from now on carry no body checksum
    /// (`frame::CLIENT_UNCHECKED`); for a client connection whose ends are on one host
    /// (`frame::same_host`).
    pub fn set_client_unchecked(&mut self, on: bool) {
        self.client_unchecked = on;
    }

    /// Bytes waiting to be written.
    pub fn queued_bytes(&self) -> usize {
        self.queued_bytes
    }

    pub fn is_empty(&self) -> bool {
        self.queued_bytes == 0
    }

    /// Appends one frame. Fails, enqueuing nothing, when the frame would exceed the bound.
    pub fn push_frame(&mut self, kind: u8, group: u16, chunks: &[Bytes]) -> Result<(), PushError> {
        let header = if self.client_unchecked && kind >= frame::KIND_CLIENT_MIN {
            frame::encode_client_header_unchecked(kind, chunks)
        } else {
            frame::encode_header(kind, group, chunks)
        }
        .map_err(PushError::Frame)?;
        let len = HEADER_BYTES + chunks.iter().map(|c| c.len()).sum::<usize>();
        if self.queued_bytes + len > self.limit_bytes && !self.is_empty() {
            // An empty queue takes any frame, so a frame larger than the bound is not
            // silently undeliverable forever.
            return Err(PushError::Full(QueueFull));
        }
        self.append(&header, chunks);
        self.frame_lens.push_back(len);
        self.queued_bytes += len;
        self.frames_since_empty += 1;
        Ok(())
    }

    /// Queues a control frame in the urgent lane: it leaves at the next frame boundary,
    /// ahead of the data frames queued (in order among control frames). The same bound as
    /// `push_frame`.
    pub fn push_urgent_frame(
        &mut self,
        kind: u8,
        group: u16,
        chunks: &[Bytes],
    ) -> Result<(), PushError> {
        let whole = frame::encode_to_bytes(kind, group, chunks).map_err(PushError::Frame)?;
        if self.queued_bytes + whole.len() > self.limit_bytes && !self.is_empty() {
            return Err(PushError::Full(QueueFull));
        }
        self.queued_bytes += whole.len();
        self.frames_since_empty += 1;
        self.urgent.push_back(whole);
        Ok(())
    }

    /// Puts a frame in front of everything queued, ignoring the bound. Used for `Hello`,
    /// which must be the first frame on a new connection. Precondition: nothing of the
    /// queue was written on this connection yet.
    pub fn push_front_frame(
        &mut self,
        kind: u8,
        group: u16,
        body: Bytes,
    ) -> Result<(), FrameError> {
        debug_assert!(!self.written_into, "a frame in front of a half-written one");
        let whole = frame::encode_to_bytes(kind, group, &[body])?;
        self.queued_bytes += whole.len();
        self.frames_since_empty += 1;
        // At the front of the urgent lane, which goes first on an unwritten queue.
        self.urgent.push_front(whole);
        Ok(())
    }

    fn append(&mut self, header: &[u8; HEADER_BYTES], chunks: &[Bytes]) {
        if self.staging.capacity() - self.staging.len() < HEADER_BYTES {
            self.staging.reserve(STAGING_BYTES);
        }
        self.staging.extend_from_slice(header);
        for c in chunks {
            if c.len() < COPY_MAX_BYTES {
                self.staging.extend_from_slice(c);
            } else {
                self.seal();
                self.segments.push_back(c.clone());
            }
        }
    }

    /// Moves the staging bytes into a segment (no copy: the staging buffer is split).
    fn seal(&mut self) {
        if !self.staging.is_empty() {
            self.segments.push_back(self.staging.split().freeze());
        }
    }

    /// Drops everything queued.
    pub fn clear(&mut self) {
        self.segments.clear();
        self.frame_lens.clear();
        self.front_written = 0;
        self.urgent.clear();
        self.urgent_started = false;
        self.staging.clear();
        self.queued_bytes = 0;
        self.frames_since_empty = 0;
        self.written_into = false;
    }

    /// Drops every queued frame if no write took any of their bytes yet, and returns how
    /// many it dropped. `None`, dropping nothing, once a write began: the front frame may
    /// be half written on a live connection, and cutting it would leave the peer a stream
    /// it cannot frame.
    pub fn clear_unwritten(&mut self) -> Option<usize> {
        if self.written_into {
            return None;
        }
        let frames = self.frames_since_empty;
        self.clear();
        Some(frames)
    }

    /// Writes as much as the socket takes. Returns `Ok(true)` when the queue is empty,
    /// `Ok(false)` when the socket would block (wait for a writable event), or the error
    /// that broke the connection. Bounded: stops at the first short write.
    pub fn flush<W: Write>(&mut self, w: &mut W) -> io::Result<bool> {
        self.seal();
        while !self.is_empty() {
            // A half-written control frame finishes first; at a boundary of the data stream
            // the control frames go; otherwise data, only up to the end of its front frame
            // while control frames wait.
            let urgent_lane =
                self.urgent_started || (!self.urgent.is_empty() && self.front_written == 0);
            let lane = if urgent_lane {
                &self.urgent
            } else {
                &self.segments
            };
            let mut cap = match self.frame_lens.front() {
                Some(&len) if !urgent_lane && !self.urgent.is_empty() => len - self.front_written,
                _ => usize::MAX,
            };
            let mut slices: Vec<IoSlice<'_>> = Vec::with_capacity(lane.len().min(MAX_IOV));
            for seg in lane.iter().take(MAX_IOV) {
                if cap == 0 {
                    break;
                }
                let take = seg.len().min(cap);
                slices.push(IoSlice::new(&seg[..take]));
                cap -= take;
            }
            let offered: usize = slices.iter().map(|s| s.len()).sum();
            if offered == 0 {
                // Nothing to write in either lane: the bytes counted are not there.
                debug_assert!(false, "{} bytes counted, none queued", self.queued_bytes);
                return Ok(true);
            }
            match w.write_vectored(&slices) {
                Ok(0) => {
                    return Err(io::Error::new(
                        io::ErrorKind::WriteZero,
                        "connection wrote zero bytes",
                    ));
                }
                Ok(n) => {
                    if urgent_lane {
                        self.consume_urgent(n);
                    } else {
                        self.consume(n);
                    }
                    if n < offered {
                        // The socket buffer is full: a retry now would almost surely block.
                        return Ok(self.is_empty());
                    }
                }
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => return Ok(false),
                Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
                Err(e) => return Err(e),
            }
        }
        Ok(true)
    }

    /// `n` bytes of the queued byte count were written.
    fn account_written(&mut self, n: usize) {
        self.queued_bytes = self.queued_bytes.saturating_sub(n);
        if self.queued_bytes == 0 {
            self.frames_since_empty = 0;
            self.written_into = false;
        } else if n > 0 {
            self.written_into = true;
        }
    }

    fn consume_urgent(&mut self, mut n: usize) {
        self.account_written(n);
        while n > 0 {
            let Some(front) = self.urgent.front_mut() else {
                break;
            };
            if front.len() <= n {
                n -= front.len();
                self.urgent.pop_front();
                self.urgent_started = false;
            } else {
                front.advance(n);
                self.urgent_started = true;
                n = 0;
            }
        }
    }

    fn consume(&mut self, n: usize) {
        self.account_written(n);
        let mut frames = n;
        while frames > 0 {
            let Some(&len) = self.frame_lens.front() else {
                break;
            };
            let left = len - self.front_written;
            if frames >= left {
                frames -= left;
                self.frame_lens.pop_front();
                self.front_written = 0;
            } else {
                self.front_written += frames;
                frames = 0;
            }
        }
        let mut n = n;
        while n > 0 {
            let Some(front) = self.segments.front_mut() else {
                break;
            };
            if front.len() <= n {
                n -= front.len();
                self.segments.pop_front();
            } else {
                front.advance(n);
                n = 0;
            }
        }
    }
}

/// Why a frame was not queued.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum PushError {
    Full(QueueFull),
    Frame(FrameError),
}

/// What a read from a socket produced.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ReadOutcome {
    /// This many bytes were appended to the buffer.
    Data(usize),
    /// Nothing to read now.
    WouldBlock,
    /// The peer closed its side.
    Eof,
}

/// Reads once from `stream` into the free space of `buf`, at most `max_bytes`, growing the
/// buffer to that much free space first if it has less than half of it (so a buffer whose
/// frames still share its memory is not replaced at every read), without zero-filling the
/// new space. The caller sizes `max_bytes` to what the connection may hold
/// (`transport::intake`): the buffer grows as bytes arrive, never ahead of them.
pub fn read_into<S: AsFd>(
    stream: &S,
    buf: &mut BytesMut,
    max_bytes: usize,
) -> io::Result<ReadOutcome> {
    let max_bytes = max_bytes.max(1);
    if buf.capacity() - buf.len() < max_bytes.div_ceil(2) {
        buf.reserve(max_bytes);
    }
    let sock = SockRef::from(stream);
    loop {
        let spare = buf.spare_capacity_mut();
        let spare_len = spare.len().min(max_bytes);
        let spare = &mut spare[..spare_len];
        let free = spare.len();
        match sock.recv(spare) {
            Ok(0) => return Ok(ReadOutcome::Eof),
            Ok(n) => {
                let n = n.min(free);
                let new_len = buf.len() + n;
                // SAFETY: `recv` initialised the first `n` bytes of the spare capacity (it
                // returns how many bytes it wrote, never more than the slice it was given),
                // so the buffer's first `new_len` bytes are initialised.
                unsafe { buf.set_len(new_len) };
                return Ok(ReadOutcome::Data(n));
            }
            Err(e) if e.kind() == io::ErrorKind::WouldBlock => return Ok(ReadOutcome::WouldBlock),
            Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
            Err(e) => return Err(e),
        }
    }
}

fn set_options(sock: &SockRef<'_>, cfg: &TransportConfig) -> io::Result<()> {
    if cfg.buffer_size > 0 {
        sock.set_send_buffer_size(cfg.buffer_size)?;
        sock.set_recv_buffer_size(cfg.buffer_size)?;
    }
    sock.set_tcp_nodelay(cfg.tcp_nodelay)?;
    Ok(())
}

/// Applies the transport's socket options to an accepted or connected stream.
pub fn configure_stream(stream: &TcpStream, cfg: &TransportConfig) -> io::Result<()> {
    set_options(&SockRef::from(stream), cfg)
}

/// Binds a listening socket with SO_REUSEADDR (a restarted node must get its port back while
/// old connections sit in TIME_WAIT) and the receive buffer set before `listen`, so accepted
/// connections inherit it and negotiate a matching TCP window scale.
pub fn bind_listener(addr: SocketAddr, cfg: &TransportConfig) -> io::Result<std::net::TcpListener> {
    let sock = Socket::new(
        Domain::for_address(addr),
        Type::STREAM,
        Some(SockProtocol::TCP),
    )?;
    sock.set_reuse_address(true)?;
    if cfg.buffer_size > 0 {
        sock.set_recv_buffer_size(cfg.buffer_size)?;
        sock.set_send_buffer_size(cfg.buffer_size)?;
    }
    sock.bind(&addr.into())?;
    sock.listen(1024)?;
    sock.set_nonblocking(true)?;
    Ok(sock.into())
}

/// Starts a non-blocking connect with the socket options set before the SYN (the receive
/// buffer decides the window scale). Completion is reported by a writable event.
pub fn start_connect(addr: SocketAddr, cfg: &TransportConfig) -> io::Result<TcpStream> {
    let sock = Socket::new(
        Domain::for_address(addr),
        Type::STREAM,
        Some(SockProtocol::TCP),
    )?;
    sock.set_nonblocking(true)?;
    set_options(&SockRef::from(&sock), cfg)?;
    match sock.connect(&addr.into()) {
        Ok(()) => {}
        Err(e)
            if e.raw_os_error() == Some(libc::EINPROGRESS)
                || e.kind() == io::ErrorKind::WouldBlock => {}
        Err(e) => return Err(e),
    }
    let std_stream: std::net::TcpStream = sock.into();
    Ok(TcpStream::from_std(std_stream))
}

/// Exponential reconnect backoff: `min`, doubling to `max`.
#[derive(Debug, Clone, Copy)]
pub struct Backoff {
    min_ms: u64,
    max_ms: u64,
    next_ms: u64,
}

impl Backoff {
    pub fn new(min_ms: u64, max_ms: u64) -> Backoff {
        let min_ms = min_ms.max(1);
        Backoff {
            min_ms,
            max_ms: max_ms.max(min_ms),
            next_ms: min_ms,
        }
    }
    /// The delay before the next attempt; doubles the one after.
    pub fn next_delay(&mut self) -> Duration {
        let d = self.next_ms;
        self.next_ms = (self.next_ms.saturating_mul(2)).min(self.max_ms);
        Duration::from_millis(d)
    }
    pub fn reset(&mut self) {
        self.next_ms = self.min_ms;
    }
    pub fn max(&self) -> Duration {
        Duration::from_millis(self.max_ms)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A writer that takes at most `per_call` bytes per call and records what it got.
    struct Trickle {
        got: Vec<u8>,
        per_call: usize,
        calls: usize,
        block_every: usize,
    }

    impl Write for Trickle {
        fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
            self.write_vectored(&[IoSlice::new(buf)])
        }
        fn write_vectored(&mut self, bufs: &[IoSlice<'_>]) -> io::Result<usize> {
            self.calls += 1;
            if self.block_every > 0 && self.calls.is_multiple_of(self.block_every) {
                return Err(io::ErrorKind::WouldBlock.into());
            }
            assert!(bufs.len() <= MAX_IOV);
            let mut left = self.per_call;
            for b in bufs {
                let n = b.len().min(left);
                self.got.extend_from_slice(&b[..n]);
                left -= n;
                if left == 0 {
                    break;
                }
            }
            Ok(self.per_call - left)
        }
        fn flush(&mut self) -> io::Result<()> {
            Ok(())
        }
    }

    #[test]
    fn partial_writes_preserve_the_byte_stream() {
        let mut q = OutQueue::new(1 << 30);
        let mut expected = BytesMut::new();
        for i in 0..3000u32 {
            let body = if i % 7 == 0 {
                vec![i as u8; 5000]
            } else {
                vec![i as u8; (i % 50) as usize]
            };
            let chunks = [Bytes::from_static(b"hd"), Bytes::from(body)];
            q.push_frame(1, 0, &chunks).unwrap();
            expected.extend_from_slice(&frame::encode_to_bytes(1, 0, &chunks).unwrap());
        }
        let mut w = Trickle {
            got: Vec::new(),
            per_call: 7777,
            calls: 0,
            block_every: 5,
        };
        for _ in 0..100_000 {
            if q.flush(&mut w).unwrap() {
                break;
            }
        }
        assert!(q.is_empty());
        assert_eq!(w.got, &expected[..]);
        let mut buf = BytesMut::from(&w.got[..]);
        let mut n = 0;
        while let Some(f) = frame::decode(&mut buf).unwrap() {
            assert_eq!(f.kind, 1);
            n += 1;
        }
        assert_eq!(n, 3000);
    }

    #[test]
    fn a_full_queue_refuses_whole_frames() {
        let mut q = OutQueue::new(100);
        q.push_frame(1, 0, &[Bytes::from(vec![0u8; 60])]).unwrap();
        assert_eq!(
            q.push_frame(1, 0, &[Bytes::from(vec![0u8; 60])]),
            Err(PushError::Full(QueueFull))
        );
        assert_eq!(q.queued_bytes(), 76);
    }

    #[test]
    fn control_frames_overtake_queued_data_at_the_next_frame_boundary() {
        // Data frames of every size (some split across segments: bodies past
        // COPY_MAX_BYTES are their own segment), control frames pushed between flushes of
        // a writer that takes a few bytes at a time: the stream stays framed, the control
        // frames keep their order, and each leaves at most one data frame after it was
        // pushed.
        let mut q = OutQueue::new(1 << 30);
        let mut w = Trickle {
            got: Vec::new(),
            per_call: 3001,
            calls: 0,
            block_every: 3,
        };
        let mut data_sent = 0u32;
        let mut control_sent = 0u32;
        // For each control frame: how many data frames were queued before it, and how far
        // the written stream reached when it was pushed.
        let mut queued_before = Vec::new();
        let mut pushed_at = Vec::new();
        for round in 0..400u32 {
            for _ in 0..3 {
                let size = if data_sent.is_multiple_of(5) {
                    20_000
                } else {
                    (data_sent % 90) as usize
                };
                let body = Bytes::from(vec![data_sent as u8; size]);
                q.push_frame(1, 0, &[data_sent.to_le_bytes().to_vec().into(), body])
                    .unwrap();
                data_sent += 1;
            }
            if round % 4 == 0 {
                q.push_urgent_frame(9, 0, &[Bytes::from(control_sent.to_le_bytes().to_vec())])
                    .unwrap();
                queued_before.push(data_sent);
                pushed_at.push(w.got.len());
                control_sent += 1;
            }
            let _ = q.flush(&mut w).unwrap();
        }
        for _ in 0..1_000_000 {
            if q.flush(&mut w).unwrap() {
                break;
            }
        }
        assert!(q.is_empty());
        let mut buf = BytesMut::from(&w.got[..]);
        let (mut data_seen, mut control_seen, mut overtook) = (0u32, 0u32, 0u32);
        let mut data_starts = Vec::new();
        loop {
            let at = w.got.len() - buf.len();
            let Some(f) = frame::decode(&mut buf).unwrap() else {
                break;
            };
            let n = u32::from_le_bytes(f.body[..4].try_into().unwrap());
            match f.kind {
                1 => {
                    assert_eq!(n, data_seen, "data in order");
                    data_starts.push(at);
                    data_seen += 1;
                }
                9 => {
                    assert_eq!(n, control_seen, "control frames in order");
                    // No data frame started between its push and it: it left at the first
                    // boundary (after the frame then half written, if any).
                    let from = pushed_at[n as usize];
                    let between = data_starts.iter().filter(|&&d| d >= from).count();
                    assert_eq!(
                        between, 0,
                        "control frame {n}: data frames started after its push"
                    );
                    if data_seen < queued_before[n as usize] {
                        overtook += 1;
                    }
                    control_seen += 1;
                }
                k => panic!("kind {k}"),
            }
        }
        assert!(buf.is_empty(), "no half frame left");
        assert_eq!((data_seen, control_seen), (data_sent, control_sent));
        // Data queued up behind the slow writer, and the control frames went past it.
        assert!(
            overtook > control_sent / 2,
            "{overtook} of {control_sent} overtook data"
        );
    }

    #[test]
    fn a_control_frame_waits_for_the_half_written_data_frame() {
        let mut q = OutQueue::new(1 << 20);
        q.push_frame(1, 0, &[Bytes::from(vec![7u8; 10_000])])
            .unwrap();
        q.push_frame(1, 0, &[Bytes::from(vec![8u8; 10_000])])
            .unwrap();
        let mut w = Trickle {
            got: Vec::new(),
            per_call: 100,
            calls: 0,
            block_every: 0,
        };
        assert!(!q.flush(&mut w).unwrap());
        q.push_urgent_frame(9, 0, &[Bytes::from_static(b"beat")])
            .unwrap();
        w.per_call = 1 << 20;
        assert!(q.flush(&mut w).unwrap());
        let mut buf = BytesMut::from(&w.got[..]);
        let kinds: Vec<(u8, u8)> = std::iter::from_fn(|| frame::decode(&mut buf).unwrap())
            .map(|f| (f.kind, f.body[0]))
            .collect();
        assert_eq!(kinds, [(1, 7), (9, b'b'), (1, 8)]);
    }

    #[test]
    fn hello_goes_in_front() {
        let mut q = OutQueue::new(1 << 20);
        q.push_frame(1, 0, &[Bytes::from_static(b"later")]).unwrap();
        q.push_front_frame(0, 0, Bytes::from_static(b"hello"))
            .unwrap();
        let mut w = Trickle {
            got: Vec::new(),
            per_call: 1 << 20,
            calls: 0,
            block_every: 0,
        };
        assert!(q.flush(&mut w).unwrap());
        let mut buf = BytesMut::from(&w.got[..]);
        assert_eq!(
            &frame::decode(&mut buf).unwrap().unwrap().body[..],
            b"hello"
        );
        assert_eq!(
            &frame::decode(&mut buf).unwrap().unwrap().body[..],
            b"later"
        );
    }

    #[test]
    fn only_a_queue_no_write_began_can_be_dropped_and_never_half_a_frame() {
        let mut q = OutQueue::new(1 << 20);
        assert_eq!(q.clear_unwritten(), Some(0), "an empty queue");
        for i in 0..5u8 {
            q.push_frame(1, 0, &[Bytes::from(vec![i; 100])]).unwrap();
        }
        assert_eq!(q.clear_unwritten(), Some(5));
        assert!(q.is_empty());
        // A write takes part of the front frame: the queue can no longer be cut.
        for i in 0..3u8 {
            q.push_frame(1, 0, &[Bytes::from(vec![i; 100])]).unwrap();
        }
        let mut w = Trickle {
            got: Vec::new(),
            per_call: 50,
            calls: 0,
            block_every: 0,
        };
        assert!(!q.flush(&mut w).unwrap(), "a short write stops the flush");
        assert_eq!(q.clear_unwritten(), None);
        assert_eq!(
            q.queued_bytes(),
            3 * (HEADER_BYTES + 100) - 50,
            "nothing dropped"
        );
        // Once everything went out, the next frames are whole and unwritten again.
        w.per_call = 1 << 20;
        assert!(q.flush(&mut w).unwrap());
        q.push_frame(1, 0, &[Bytes::from_static(b"next")]).unwrap();
        q.push_front_frame(0, 0, Bytes::from_static(b"hello"))
            .unwrap();
        assert_eq!(q.clear_unwritten(), Some(2));
        // `clear` (a broken connection) resets it too.
        q.push_frame(1, 0, &[Bytes::from(vec![9u8; 100])]).unwrap();
        w.per_call = 10;
        assert!(!q.flush(&mut w).unwrap());
        q.clear();
        q.push_frame(1, 0, &[Bytes::from_static(b"fresh")]).unwrap();
        assert_eq!(q.clear_unwritten(), Some(1));
    }

    #[test]
    fn backoff_doubles_to_the_cap() {
        let mut b = Backoff::new(10, 1000);
        let d: Vec<u64> = (0..9).map(|_| b.next_delay().as_millis() as u64).collect();
        assert_eq!(d, [10, 20, 40, 80, 160, 320, 640, 1000, 1000]);
        b.reset();
        assert_eq!(b.next_delay().as_millis(), 10);
    }
}
