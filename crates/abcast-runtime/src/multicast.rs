//! UDP IP-multicast for the runtime: the "ip-multicast" of seed 003 Algorithm 2 (Task 3
//! line 19, Task 5 line 35) and §6.1 (one packet per proposal, decisions piggy-backed),
//! with the socket buffers of §6.5. A protocol's `Outbox::multicasts` leave as one datagram
//! each instead of one TCP copy per peer.
//!
//! Datagram layout, little-endian:
//!
//! | bytes | field |
//! | --- | --- |
//! | 0..4 | magic `u32` = 0x314D_4241 ("ABM1"), distinct from the TCP frame's "ABC1" |
//! | 4 | version `u8` = 1 |
//! | 5..8 | reserved, zero |
//! | 8..16 | cluster id `u64` |
//! | 16..20 | sender node id `u32` |
//! | 20..28 | sender incarnation `u64` |
//! | 28..32 | crc32c of bytes 0..28 and 32..48 (both headers) |
//! | 32..48 | the frame header of `frame.rs` (magic, version, kind, group, length, body crc) |
//! | 48.. | the frame body |
//!
//! Every datagram is checked before anything of it reaches the protocol: size, magic,
//! version, reserved bytes, header checksum, cluster, sender (a configured peer, not an
//! older incarnation than one already heard), frame header and body checksum, and that the
//! frame fills the datagram exactly. A failure drops the datagram and counts it; nothing
//! panics on any byte string. Loss is Ring Paxos' business: it re-multicasts undecided
//! proposals and learners ask for what they missed (seed 003 §4.2).
//!
//! Sending: a datagram is encoded once (its header and the body chunks go to the kernel as
//! one `sendmsg` iovec, without copying payloads) and queued in a small bounded queue, which
//! the driver flushes at the end of each event; a socket that would block keeps the queue
//! until it is writable again, so a burst is smoothed instead of lost. What does not fit the
//! queue is dropped and counted. A message whose datagram would exceed
//! [`MAX_DATAGRAM_BYTES`] is refused by [`Multicast::encode`] and the driver falls back to
//! TCP for it.
//!
//! The sender's own datagram comes back to it (IP_MULTICAST_LOOP is on, so that nodes on one
//! host hear each other) and is ignored: the driver loops its own multicasts back in-process,
//! losslessly.
//!
//! **Batching** (Linux UDP GSO and GRO). A flush sends each run of queued datagrams to one
//! destination, of one size (the run's last may be shorter), as one `sendmsg` with
//! `UDP_SEGMENT`: the kernel builds the run's datagrams itself, one pass through the IP
//! stack instead of one per datagram, and they leave as separate datagrams of the same
//! bytes (a switch or a receiver without GRO sees exactly what one send each would have
//! sent). The socket has `UDP_GRO` on: such a run arrives in one `recvmsg` with its
//! segment size, and is split here into its datagrams again, each checked alone. A kernel
//! that refuses a GSO send turns GSO off for the socket (said once in the log); one
//! without `UDP_GRO` delivers datagrams one by one. Seed 002's token ring sends up to a
//! personal window of data messages per token visit to one group: one syscall for them
//! instead of one each, on the sender and on every receiver.
//!
//! **Segments** (`[multicast] segment_bytes`). A datagram larger than an Ethernet frame is
//! cut by IP into fragments, and every fragment costs a pass through the sender's and each
//! receiver's IP stack, a software UDP checksum (fragments get no offload), and reassembly.
//! With `segment_bytes` set (the path MTU less 28 bytes of IP and UDP header), a datagram
//! larger than that leaves as consecutive segment datagrams of that size instead, sent as
//! one GSO run: one skb through the stack, the checksum offloaded, and, on a virtual or
//! offloading path, one read of the whole run at each receiver (GRO). The receiver joins
//! the parts and checks the joined datagram as any other. A segment:
//!
//! | bytes | field |
//! | --- | --- |
//! | 0..4 | magic `u32` = 0x3153_4241 ("ABS1") |
//! | 4 | version `u8` = 1 |
//! | 5..8 | reserved, zero |
//! | 8..16 | cluster id `u64` |
//! | 16..20 | sender node id `u32` |
//! | 20..28 | sender incarnation `u64` |
//! | 28..36 | the whole datagram's number from this sender `u64` |
//! | 36..38 | this segment's index `u16` |
//! | 38..40 | segments of the whole `u16`, at least 2 |
//! | 40..44 | bytes of the whole `u32` |
//! | 44..48 | crc32c of bytes 0..44 |
//! | 48.. | the next part of the whole datagram |
//!
//! A receiver joins one datagram per sender at a time, its parts in order (a GSO run
//! arrives in order); a missing or foreign part drops what was joined, and the protocol
//! recovers it as any lost datagram. Only a configured member's segments are joined, into
//! at most one whole datagram's room each.
//!
//! **Unicast datagrams.** The same endpoint, opened with [`Multicast::open_unicast`] on the
//! node's own peer address (UDP beside the TCP listener, same port), carries frames to one
//! peer each ([`Multicast::push_to`]): `TransportConfig::unicast = Udp`, the transport the
//! token of seed 002's ring travels by. One datagram format, one set of checks and one send
//! queue serve both; only the destination differs.

use super::frame::{self, Frame, FrameError, KIND_PROTOCOL_MAX};
use super::linkfault::{LinkFault, RecvLoss};
use abcast_core::codec::Lane;
use abcast_core::{Micros, NodeId};
use bytes::{Buf, Bytes, BytesMut};
use mio::net::UdpSocket;
use socket2::{Domain, Protocol as SockProtocol, SockAddr, SockRef, Socket, Type};
use std::collections::{HashMap, VecDeque};
use std::fmt;
use std::io::{self, IoSlice};
use std::mem::MaybeUninit;
use std::net::{Ipv4Addr, SocketAddr, SocketAddrV4};

/// "ABM1" read as a little-endian `u32`.
pub const MAGIC: u32 = u32::from_le_bytes(*b"ABM1");
/// The only datagram version this build speaks.
pub const VERSION: u8 = 1;
/// The datagram's own header, before the frame header.
pub const DATAGRAM_HEADER_BYTES: usize = 32;
/// Both headers: what a datagram carries besides the message body.
pub const OVERHEAD_BYTES: usize = DATAGRAM_HEADER_BYTES + frame::HEADER_BYTES;
/// Largest datagram sent or accepted. UDP over IPv4 carries at most 65 507 bytes; the
/// margin keeps clear of the edge (IP options, tunnels).
pub const MAX_DATAGRAM_BYTES: usize = 65_000;
/// "ABS1" read as a little-endian `u32`: a segment of a larger datagram.
pub const SEGMENT_MAGIC: u32 = u32::from_le_bytes(*b"ABS1");
/// A segment's header, before its part of the whole datagram.
pub const SEGMENT_HEADER_BYTES: usize = 48;
/// Smallest `segment_bytes`: the IPv4 minimum datagram every host takes (576) less the
/// IP and UDP headers.
pub const SEGMENT_BYTES_MIN: usize = 548;
/// Largest `segment_bytes`: a 9000-byte jumbo frame less the IP and UDP headers.
pub const SEGMENT_BYTES_MAX: usize = 8972;
/// Largest message body one datagram carries.
pub const MAX_BODY_BYTES: usize = MAX_DATAGRAM_BYTES - OVERHEAD_BYTES;
/// Datagrams read per readiness event before the loop serves other sockets.
pub const READS_PER_EVENT: usize = 64;
/// Bound of the send queue, in datagram bytes (headers included).
pub const SEND_QUEUE_BYTES: usize = 8 << 20;
/// Bound of the send queue, in datagrams.
pub const SEND_QUEUE_DATAGRAMS: usize = 4096;
/// The receive buffer grows by this much when less than one datagram of room is left.
const RECV_CHUNK_BYTES: usize = 1 << 20;
/// Room for the largest possible UDP datagram, so a receive never truncates silently.
const RECV_ROOM_BYTES: usize = 1 << 16;
/// Shortest interval between two log lines about dropped datagrams.
const LOG_INTERVAL_US: Micros = 1_000_000;
/// Different reasons one such line names at most.
const LOG_REASONS_MAX: usize = 4;

/// Most datagrams one GSO send carries (the kernel's `UDP_MAX_SEGMENTS` is 64 before
/// Linux 6.4, 128 since).
pub const GSO_SEGMENTS_MAX: usize = 64;
/// Most payload bytes one GSO send carries (one UDP datagram's worth, as the kernel wants).
pub const GSO_BYTES_MAX: usize = MAX_DATAGRAM_BYTES;

/// SO_RCVBUF of a datagram socket unless configured: room for a burst between two reads.
pub const RECV_BUFFER_BYTES_DEFAULT: usize = 8 << 20;
/// SO_SNDBUF of a datagram socket unless configured.
pub const SEND_BUFFER_BYTES_DEFAULT: usize = 4 << 20;

/// `[multicast]` in the node config; `TransportConfig::multicast`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct MulticastConfig {
    /// The group and port every member sends to and listens on, e.g. 239.255.77.1:30000.
    pub group: SocketAddrV4,
    /// The interface (by address) that joins the group and sends: 127.0.0.1 for nodes on one
    /// machine over `lo`; 0.0.0.0 lets each host's route to the group choose (one config
    /// for nodes on different hosts).
    pub interface: Ipv4Addr,
    /// IP_MULTICAST_TTL; 1 keeps datagrams on the local network.
    pub ttl: u32,
    /// SO_RCVBUF of the socket (seed 003 §6.5 used 16 MB); set with SO_RCVBUFFORCE when the
    /// process may, else capped by net.core.rmem_max.
    pub recv_buffer_bytes: usize,
    /// SO_SNDBUF of the socket; SO_SNDBUFFORCE when permitted.
    pub send_buffer_bytes: usize,
    /// IP_MULTICAST_LOOP: a member's datagrams come back to its own host, where the other
    /// members on it read them. Members that each have a host of their own may turn it off:
    /// the sender's own copy is then never made, reassembled and read only to be dropped
    /// (a member takes its own messages in-process; `MulticastStats::datagrams_own`).
    pub multicast_loop: bool,
    /// Datagrams larger than this leave as segments of this many bytes, sent as one GSO
    /// run (see the module's "Segments"); 0 sends them whole, for IP to fragment. The
    /// path MTU less 28: 8972 on a LAN of 9000-byte jumbo frames, 1472 on 1500.
    pub segment_bytes: usize,
}

impl MulticastConfig {
    /// A config for `group` with the defaults for nodes on one machine.
    pub fn new(group: SocketAddrV4) -> MulticastConfig {
        MulticastConfig {
            group,
            interface: Ipv4Addr::LOCALHOST,
            ttl: 1,
            recv_buffer_bytes: RECV_BUFFER_BYTES_DEFAULT,
            send_buffer_bytes: SEND_BUFFER_BYTES_DEFAULT,
            multicast_loop: true,
            segment_bytes: 0,
        }
    }

    /// Checks the config; the error names the field (without a table prefix).
    pub fn validate(&self) -> Result<(), (&'static str, String)> {
        if !self.group.ip().is_multicast() {
            return Err((
                "group",
                format!(
                    "{} is not an IPv4 multicast address (224.0.0.0/4)",
                    self.group.ip()
                ),
            ));
        }
        if self.group.port() == 0 {
            return Err(("group", "the port must not be 0".into()));
        }
        if self.interface.is_multicast() || self.interface.is_broadcast() {
            return Err((
                "interface",
                format!("{} is not an interface address", self.interface),
            ));
        }
        if self.ttl == 0 || self.ttl > 255 {
            return Err(("ttl", format!("{}, must be 1 to 255", self.ttl)));
        }
        for (field, v) in [
            ("recv_buffer_bytes", self.recv_buffer_bytes),
            ("send_buffer_bytes", self.send_buffer_bytes),
        ] {
            if v == 0 || v > (1 << 30) {
                return Err((field, format!("{v}, must be 1 byte to 1 GiB")));
            }
        }
        let b = self.segment_bytes;
        if b != 0 && !(SEGMENT_BYTES_MIN..=SEGMENT_BYTES_MAX).contains(&b) {
            return Err((
                "segment_bytes",
                format!(
                    "{b}, must be 0 (off) or {SEGMENT_BYTES_MIN} to {SEGMENT_BYTES_MAX} (the \
                     path MTU less 28 bytes of IP and UDP header)"
                ),
            ));
        }
        Ok(())
    }
}

/// Who sent a datagram, from its header.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Sender {
    pub cluster_id: u64,
    pub node: NodeId,
    pub incarnation: u64,
}

/// Why a datagram was dropped.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum DatagramError {
    /// Shorter than both headers.
    TooShort {
        len: usize,
    },
    /// Longer than [`MAX_DATAGRAM_BYTES`].
    TooLong {
        len: usize,
    },
    BadMagic {
        found: u32,
    },
    UnsupportedVersion {
        found: u8,
    },
    /// The reserved bytes are not zero.
    Reserved,
    /// The headers do not match their checksum.
    HeaderChecksum,
    WrongCluster {
        found: u64,
    },
    UnknownSender {
        node: u32,
    },
    /// A unicast datagram naming a member as its sender that came from another address
    /// than that member's socket: a stranger's datagram.
    WrongSource {
        node: u32,
        source: SocketAddr,
        expected: SocketAddr,
    },
    /// An older incarnation of a sender than one already heard (a stale process).
    StaleIncarnation {
        node: u32,
        found: u64,
        known: u64,
    },
    Frame(FrameError),
    /// The frame's length does not fill the datagram exactly.
    SizeMismatch {
        datagram: usize,
        frame: usize,
    },
    /// A transport or client frame kind, not a protocol message.
    NotProtocolKind {
        kind: u8,
    },
    /// A segment that cannot be joined (see the module's "Segments").
    BadSegment {
        reason: &'static str,
    },
}

impl fmt::Display for DatagramError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            DatagramError::TooShort { len } => write!(f, "datagram of {len} bytes is too short"),
            DatagramError::TooLong { len } => write!(
                f,
                "datagram of {len} bytes exceeds the limit of {MAX_DATAGRAM_BYTES} bytes"
            ),
            DatagramError::BadMagic { found } => {
                write!(
                    f,
                    "bad datagram magic {found:#010x} (expected {MAGIC:#010x})"
                )
            }
            DatagramError::UnsupportedVersion { found } => {
                write!(f, "unsupported datagram version {found}")
            }
            DatagramError::Reserved => write!(f, "reserved header bytes are not zero"),
            DatagramError::HeaderChecksum => write!(f, "datagram header checksum mismatch"),
            DatagramError::WrongCluster { found } => write!(f, "datagram from cluster {found}"),
            DatagramError::UnknownSender { node } => {
                write!(
                    f,
                    "datagram from node {node}, which is not a configured peer"
                )
            }
            DatagramError::WrongSource {
                node,
                source,
                expected,
            } => write!(
                f,
                "datagram naming node {node} came from {source}, not from its address {expected}"
            ),
            DatagramError::StaleIncarnation { node, found, known } => write!(
                f,
                "datagram from node {node} incarnation {found}, older than incarnation {known}"
            ),
            DatagramError::Frame(e) => write!(f, "{e}"),
            DatagramError::SizeMismatch { datagram, frame } => write!(
                f,
                "frame of {frame} bytes in a datagram of {datagram} bytes"
            ),
            DatagramError::NotProtocolKind { kind } => {
                write!(f, "frame kind {kind} is not a protocol message")
            }
            DatagramError::BadSegment { reason } => write!(f, "segment dropped: {reason}"),
        }
    }
}

impl std::error::Error for DatagramError {}

fn u32_at(b: &[u8], at: usize) -> u32 {
    u32::from_le_bytes([b[at], b[at + 1], b[at + 2], b[at + 3]])
}

fn u64_at(b: &[u8], at: usize) -> u64 {
    let mut a = [0u8; 8];
    a.copy_from_slice(&b[at..at + 8]);
    u64::from_le_bytes(a)
}

fn header_crc(head: &[u8; 28], frame_header: &[u8]) -> u32 {
    crc32c::crc32c_append(crc32c::crc32c(head), frame_header)
}

/// The checks a datagram and a segment share: at least `min_len` and at most
/// [`MAX_DATAGRAM_BYTES`] bytes, `magic`, this build's version, reserved bytes zero.
fn check_prefix(dgram: &[u8], min_len: usize, magic: u32) -> Result<(), DatagramError> {
    let len = dgram.len();
    if len < min_len {
        return Err(DatagramError::TooShort { len });
    }
    if len > MAX_DATAGRAM_BYTES {
        return Err(DatagramError::TooLong { len });
    }
    let found = u32_at(dgram, 0);
    if found != magic {
        return Err(DatagramError::BadMagic { found });
    }
    if dgram[4] != VERSION {
        return Err(DatagramError::UnsupportedVersion { found: dgram[4] });
    }
    if dgram[5..8] != [0, 0, 0] {
        return Err(DatagramError::Reserved);
    }
    Ok(())
}

/// Both headers of a datagram carrying a frame of `kind`, `group` and body `chunks`, or
/// `None` when the datagram would exceed [`MAX_DATAGRAM_BYTES`].
pub fn encode_headers(
    from: &Sender,
    kind: u8,
    group: u16,
    chunks: &[Bytes],
) -> Option<[u8; OVERHEAD_BYTES]> {
    let body: usize = chunks.iter().map(Bytes::len).sum();
    if body > MAX_BODY_BYTES {
        return None;
    }
    let fh = frame::encode_header(kind, group, chunks).ok()?;
    let mut head = [0u8; 28];
    head[0..4].copy_from_slice(&MAGIC.to_le_bytes());
    head[4] = VERSION;
    head[8..16].copy_from_slice(&from.cluster_id.to_le_bytes());
    head[16..20].copy_from_slice(&from.node.0.to_le_bytes());
    head[20..28].copy_from_slice(&from.incarnation.to_le_bytes());
    let mut out = [0u8; OVERHEAD_BYTES];
    out[..28].copy_from_slice(&head);
    out[28..32].copy_from_slice(&header_crc(&head, &fh).to_le_bytes());
    out[32..].copy_from_slice(&fh);
    Some(out)
}

const _: () = assert!(SEGMENT_HEADER_BYTES == OVERHEAD_BYTES);

/// The header of segment `index` of `count` of whole datagram `number` (`total` bytes)
/// from `from`.
pub fn encode_segment_header(
    from: &Sender,
    number: u64,
    index: u16,
    count: u16,
    total: u32,
) -> [u8; SEGMENT_HEADER_BYTES] {
    let mut h = [0u8; SEGMENT_HEADER_BYTES];
    h[0..4].copy_from_slice(&SEGMENT_MAGIC.to_le_bytes());
    h[4] = VERSION;
    h[8..16].copy_from_slice(&from.cluster_id.to_le_bytes());
    h[16..20].copy_from_slice(&from.node.0.to_le_bytes());
    h[20..28].copy_from_slice(&from.incarnation.to_le_bytes());
    h[28..36].copy_from_slice(&number.to_le_bytes());
    h[36..38].copy_from_slice(&index.to_le_bytes());
    h[38..40].copy_from_slice(&count.to_le_bytes());
    h[40..44].copy_from_slice(&total.to_le_bytes());
    let crc = crc32c::crc32c(&h[..44]);
    h[44..48].copy_from_slice(&crc.to_le_bytes());
    h
}

/// A segment's header, checked.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct SegmentHeader {
    pub from: Sender,
    pub number: u64,
    pub index: u16,
    pub count: u16,
    /// Bytes of the whole datagram.
    pub total: usize,
}

/// Whether `dgram` is a segment (by its magic); [`decode_segment_header`] checks the rest.
pub fn is_segment(dgram: &[u8]) -> bool {
    dgram.len() >= 4 && u32_at(dgram, 0) == SEGMENT_MAGIC
}

/// Checks a segment's header: size, magic, version, reserved bytes, checksum, cluster, and
/// that index, count and total describe a whole datagram this build accepts.
pub fn decode_segment_header(
    dgram: &[u8],
    cluster_id: u64,
) -> Result<SegmentHeader, DatagramError> {
    // A segment carries at least one byte of its whole.
    check_prefix(dgram, SEGMENT_HEADER_BYTES + 1, SEGMENT_MAGIC)?;
    if u32_at(dgram, 44) != crc32c::crc32c(&dgram[..44]) {
        return Err(DatagramError::HeaderChecksum);
    }
    let from = Sender {
        cluster_id: u64_at(dgram, 8),
        node: NodeId(u32_at(dgram, 16)),
        incarnation: u64_at(dgram, 20),
    };
    if from.cluster_id != cluster_id {
        return Err(DatagramError::WrongCluster {
            found: from.cluster_id,
        });
    }
    let index = u16::from_le_bytes([dgram[36], dgram[37]]);
    let count = u16::from_le_bytes([dgram[38], dgram[39]]);
    let total = u32_at(dgram, 40) as usize;
    let bad = |reason| Err(DatagramError::BadSegment { reason });
    if count < 2 {
        return bad("a whole of fewer than two segments");
    }
    if index >= count {
        return bad("an index past the segment count");
    }
    if !(OVERHEAD_BYTES..=MAX_DATAGRAM_BYTES).contains(&total) {
        return bad("a whole datagram size out of bounds");
    }
    if usize::from(count) > total {
        return bad("more segments than bytes");
    }
    Ok(SegmentHeader {
        from,
        number: u64_at(dgram, 28),
        index,
        count,
        total,
    })
}

/// A whole datagram being joined from one sender's segments.
#[derive(Debug)]
struct Joining {
    incarnation: u64,
    number: u64,
    count: u16,
    total: usize,
    /// The index of the part expected next.
    next: u16,
    buf: BytesMut,
}

/// A whole datagram in one buffer (copies; for tests and tools).
pub fn encode_to_bytes(from: &Sender, kind: u8, group: u16, chunks: &[Bytes]) -> Option<Bytes> {
    let h = encode_headers(from, kind, group, chunks)?;
    let mut b =
        BytesMut::with_capacity(OVERHEAD_BYTES + chunks.iter().map(Bytes::len).sum::<usize>());
    b.extend_from_slice(&h);
    for c in chunks {
        b.extend_from_slice(c);
    }
    Some(b.freeze())
}

/// Checks a datagram's headers and splits off its frame (the body is not copied).
/// `cluster_id` is this node's; the sender is checked by the caller.
pub fn decode(mut dgram: BytesMut, cluster_id: u64) -> Result<(Sender, Frame), DatagramError> {
    let len = dgram.len();
    check_prefix(&dgram, OVERHEAD_BYTES, MAGIC)?;
    let mut head = [0u8; 28];
    head.copy_from_slice(&dgram[..28]);
    if u32_at(&dgram, 28) != header_crc(&head, &dgram[32..OVERHEAD_BYTES]) {
        return Err(DatagramError::HeaderChecksum);
    }
    let sender = Sender {
        cluster_id: u64_at(&dgram, 8),
        node: NodeId(u32_at(&dgram, 16)),
        incarnation: u64_at(&dgram, 20),
    };
    if sender.cluster_id != cluster_id {
        return Err(DatagramError::WrongCluster {
            found: sender.cluster_id,
        });
    }
    dgram.advance(DATAGRAM_HEADER_BYTES);
    let frame_len =
        frame::peek_body_len(&dgram).map_or(0, |n| n.saturating_add(frame::HEADER_BYTES));
    if frame_len != dgram.len() {
        return Err(DatagramError::SizeMismatch {
            datagram: len,
            frame: frame_len.saturating_add(DATAGRAM_HEADER_BYTES),
        });
    }
    let f = match frame::decode(&mut dgram) {
        Ok(Some(f)) => f,
        Ok(None) => {
            // Unreachable after the size check; reported rather than assumed.
            return Err(DatagramError::SizeMismatch {
                datagram: len,
                frame: frame_len.saturating_add(DATAGRAM_HEADER_BYTES),
            });
        }
        Err(e) => return Err(DatagramError::Frame(e)),
    };
    if f.kind == frame::KIND_HELLO || f.kind > KIND_PROTOCOL_MAX {
        return Err(DatagramError::NotProtocolKind { kind: f.kind });
    }
    Ok((sender, f))
}

/// Counters of the multicast endpoint (part of the driver's `TransportStats`).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct MulticastStats {
    /// Datagrams handed to the kernel.
    pub datagrams_sent: u64,
    /// Valid datagrams from other members, passed on.
    pub datagrams_received: u64,
    /// This node's own datagrams heard back and ignored.
    pub datagrams_own: u64,
    /// Datagrams dropped by a check (bad bytes, other cluster, unknown or stale sender).
    pub datagrams_rejected: u64,
    /// Of `datagrams_rejected`: those from outside the configured members (a sender id
    /// that is no member, or, on a unicast socket, a source address that is not the named
    /// member's).
    pub datagrams_unknown_sender: u64,
    /// Datagrams not sent: the send queue was full, or the kernel refused them.
    pub send_drops: u64,
    /// Datagrams dropped on receipt by injected loss (`[[link_faults]]`).
    pub datagrams_lost: u64,
    /// `sendmsg` calls that carried several datagrams (UDP GSO), and reads that returned
    /// several (UDP GRO).
    pub gso_sends: u64,
    pub gro_reads: u64,
    /// Datagrams sent as segments, and joined from segments on receipt.
    pub segmented_sent: u64,
    pub segmented_joined: u64,
}

/// One datagram waiting for the socket.
#[derive(Debug)]
struct Queued {
    dest: SockAddr,
    /// Both headers of a whole datagram, or a segment's header (the same size).
    headers: [u8; OVERHEAD_BYTES],
    chunks: Vec<Bytes>,
    bytes: usize,
}

/// Whether a datagram from `source` comes from the socket bound at `expected`: the same
/// port, and the same address unless `expected` is a wildcard (a socket bound to 0.0.0.0
/// sends from the address of its route). An IPv4 address seen as IPv4-mapped IPv6 is the
/// same address.
fn same_source(source: SocketAddr, expected: SocketAddr) -> bool {
    let canonical = |ip: std::net::IpAddr| match ip {
        std::net::IpAddr::V6(v6) => v6
            .to_ipv4_mapped()
            .map_or(std::net::IpAddr::V6(v6), std::net::IpAddr::V4),
        v4 => v4,
    };
    source.port() == expected.port()
        && (expected.ip().is_unspecified() || canonical(source.ip()) == canonical(expected.ip()))
}

/// How many datagrams from the front of a send queue (each `(destination, bytes)`) one
/// GSO send may carry: the same destination, the first's size for all but the last (which
/// may be shorter, and ends the run), at most [`GSO_SEGMENTS_MAX`] datagrams and
/// [`GSO_BYTES_MAX`] bytes. At least 1 for a non-empty queue.
pub fn gso_run<'a>(mut queue: impl Iterator<Item = (&'a SockAddr, usize)>) -> usize {
    let Some((dest, size)) = queue.next() else {
        return 0;
    };
    let (mut n, mut total) = (1, size);
    for (d, bytes) in queue {
        if n >= GSO_SEGMENTS_MAX || d != dest || bytes > size || total + bytes > GSO_BYTES_MAX {
            break;
        }
        n += 1;
        total += bytes;
        if bytes < size {
            break;
        }
    }
    n
}

/// Reorders `queue` so that the datagrams of each destination are consecutive, in the
/// order of each destination's first datagram, keeping each destination's own order: a
/// logical multicast (one datagram to each member in turn) becomes one GSO run per
/// member. Datagrams to different destinations have no order between them on the wire.
pub fn group_by_destination<T>(queue: &mut VecDeque<T>, dest: impl Fn(&T) -> &SockAddr) {
    let Some(first) = queue.front() else {
        return;
    };
    let first = dest(first).clone();
    if queue.iter().all(|q| *dest(q) == first) {
        return;
    }
    let mut order: Vec<SockAddr> = Vec::new();
    for q in queue.iter() {
        if !order.iter().any(|d| d == dest(q)) {
            order.push(dest(q).clone());
        }
    }
    let mut groups: Vec<Vec<T>> = order.iter().map(|_| Vec::new()).collect();
    for q in queue.drain(..) {
        let i = order.iter().position(|d| d == dest(&q)).unwrap_or(0);
        groups[i].push(q);
    }
    queue.extend(groups.into_iter().flatten());
}

/// Room for the control messages a read may carry (`UDP_GRO`'s segment size).
const GRO_CONTROL_BYTES: usize = 64;

/// The `UDP_SEGMENT` control message of a GSO send, in a buffer aligned for `cmsghdr`.
#[repr(C, align(8))]
struct SegmentControl([u8; SegmentControl::BYTES]);

impl SegmentControl {
    // SAFETY: CMSG_SPACE only computes a size.
    const BYTES: usize = unsafe { libc::CMSG_SPACE(std::mem::size_of::<u16>() as u32) } as usize;

    fn new(segment_bytes: u16) -> SegmentControl {
        let mut c = SegmentControl([0; SegmentControl::BYTES]);
        // SAFETY: the buffer is CMSG_SPACE(2) bytes, aligned for a cmsghdr, and the msghdr
        // built here only names it: CMSG_FIRSTHDR returns its start (non-null: the buffer
        // holds a whole cmsghdr), and the header and its 2 data bytes lie inside it.
        unsafe {
            let mut msg: libc::msghdr = std::mem::zeroed();
            msg.msg_control = c.0.as_mut_ptr().cast();
            msg.msg_controllen = SegmentControl::BYTES as _;
            let cm = libc::CMSG_FIRSTHDR(&msg);
            if !cm.is_null() {
                (*cm).cmsg_level = libc::SOL_UDP;
                (*cm).cmsg_type = libc::UDP_SEGMENT;
                (*cm).cmsg_len = libc::CMSG_LEN(std::mem::size_of::<u16>() as u32) as _;
                std::ptr::write_unaligned(libc::CMSG_DATA(cm).cast::<u16>(), segment_bytes);
            }
        }
        c
    }

    fn as_bytes(&self) -> &[u8] {
        &self.0
    }
}

/// The segment size a coalesced read (`UDP_GRO`) reports in its control messages, if any.
/// `control` is what the kernel wrote.
pub fn gro_segment_bytes(control: &[u8]) -> Option<usize> {
    // Walked with the libc macros, on a copy aligned for `cmsghdr`: the kernel's layout.
    let mut aligned = [0u64; GRO_CONTROL_BYTES / 8];
    let len = control.len().min(GRO_CONTROL_BYTES);
    for (word, chunk) in aligned.iter_mut().zip(control[..len].chunks(8)) {
        let mut b = [0u8; 8];
        b[..chunk.len()].copy_from_slice(chunk);
        *word = u64::from_ne_bytes(b);
    }
    let base = aligned.as_ptr() as usize;
    // SAFETY: the msghdr names `aligned` (8-byte aligned; its first `len` bytes are the
    // kernel's). CMSG_FIRSTHDR and CMSG_NXTHDR return only headers that lie wholly inside
    // `msg_controllen`, and the data is read only after checking that the header's length
    // covers it and that it ends inside the buffer.
    unsafe {
        let mut msg: libc::msghdr = std::mem::zeroed();
        msg.msg_control = aligned.as_mut_ptr().cast();
        msg.msg_controllen = len as _;
        let need = libc::CMSG_LEN(std::mem::size_of::<libc::c_int>() as u32) as usize;
        let mut cm = libc::CMSG_FIRSTHDR(&msg);
        while !cm.is_null() {
            let hdr = std::ptr::read_unaligned(cm);
            let offset = (cm as usize).saturating_sub(base);
            let hdr_len = hdr.cmsg_len as usize;
            if hdr_len < need || offset.saturating_add(hdr_len) > len {
                return None;
            }
            if hdr.cmsg_level == libc::SOL_UDP && hdr.cmsg_type == libc::UDP_GRO {
                let v = std::ptr::read_unaligned(libc::CMSG_DATA(cm).cast::<libc::c_int>());
                return usize::try_from(v).ok();
            }
            cm = libc::CMSG_NXTHDR(&msg, cm);
        }
    }
    None
}

/// Turns `UDP_GRO` on: a GSO run arrives in one read.
fn set_udp_gro(sock: &Socket) -> io::Result<()> {
    let on: libc::c_int = 1;
    let fd = std::os::fd::AsRawFd::as_raw_fd(sock);
    // SAFETY: `fd` is an open socket owned by `sock`; the option value is a c_int that
    // lives across the call, and its size is passed.
    let rc = unsafe {
        libc::setsockopt(
            fd,
            libc::SOL_UDP,
            libc::UDP_GRO,
            (&on as *const libc::c_int).cast(),
            std::mem::size_of::<libc::c_int>() as libc::socklen_t,
        )
    };
    if rc == 0 {
        Ok(())
    } else {
        Err(io::Error::last_os_error())
    }
}

/// What one read produced.
#[derive(Debug)]
pub enum Received {
    /// A valid message frame from another member.
    Frame(NodeId, Frame),
    /// Something was read and dropped (own, bad or lost); keep reading.
    Dropped,
    /// Nothing more to read now.
    Empty,
}

/// The datagram socket of one node: its multicast group's, or its unicast one.
#[derive(Debug)]
pub struct Multicast {
    socket: UdpSocket,
    /// The group `push` sends to; `None` for a unicast endpoint (`push_to` only).
    group: Option<SockAddr>,
    me: Sender,
    peers: HashMap<NodeId, u64>,
    /// A unicast endpoint: the address each member's datagrams must come from (its own
    /// socket of this lane). Empty for a group socket, whose senders all share the group's
    /// port.
    sources: HashMap<NodeId, SocketAddr>,
    queue: VecDeque<Queued>,
    queued_bytes: usize,
    /// The last send would have blocked: wait for a writable event.
    blocked: bool,
    /// Runs of datagrams go as one GSO send; off once the kernel refused one.
    gso: bool,
    /// Why the kernel refused GSO, until the log has said it.
    gso_refused: Option<String>,
    /// `MulticastConfig::segment_bytes`; 0: datagrams leave whole.
    segment_bytes: usize,
    /// The number of the last datagram sent as segments.
    segment_number: u64,
    /// One whole datagram being joined per sender.
    joining: HashMap<NodeId, Joining>,
    rbuf: BytesMut,
    /// Datagrams of a coalesced read (UDP GRO) not yet handed out, with their source.
    backlog: VecDeque<(BytesMut, Option<SocketAddr>)>,
    loss: Option<RecvLoss>,
    pub stats: MulticastStats,
    /// Drops since the last log line, and the first reason among them.
    unlogged: u64,
    /// The different reasons among them, the first `LOG_REASONS_MAX`.
    unlogged_reasons: Vec<String>,
    last_log_us: Micros,
    /// Socket buffer sizes the kernel granted, for the start-up log line.
    pub granted_recv_buffer_bytes: usize,
    pub granted_send_buffer_bytes: usize,
}

/// Sets SO_RCVBUFFORCE/SO_SNDBUFFORCE (needs CAP_NET_ADMIN) or, failing that, the capped
/// SO_RCVBUF/SO_SNDBUF.
fn set_buffer(sock: &Socket, bytes: usize, recv: bool) -> io::Result<usize> {
    let value = libc::c_int::try_from(bytes).unwrap_or(libc::c_int::MAX);
    let opt = if recv {
        libc::SO_RCVBUFFORCE
    } else {
        libc::SO_SNDBUFFORCE
    };
    let fd = std::os::fd::AsRawFd::as_raw_fd(sock);
    // SAFETY: `fd` is an open socket owned by `sock`; the option value is a c_int that
    // lives across the call, and its size is passed.
    let rc = unsafe {
        libc::setsockopt(
            fd,
            libc::SOL_SOCKET,
            opt,
            (&value as *const libc::c_int).cast(),
            std::mem::size_of::<libc::c_int>() as libc::socklen_t,
        )
    };
    if rc != 0 {
        if recv {
            sock.set_recv_buffer_size(bytes)?;
        } else {
            sock.set_send_buffer_size(bytes)?;
        }
    }
    if recv {
        sock.recv_buffer_size()
    } else {
        sock.send_buffer_size()
    }
}

impl Multicast {
    /// Opens the socket: bound to the group's address and port (so only this group's
    /// datagrams arrive), SO_REUSEADDR (every node on a host binds the same port), joined on
    /// `interface`, sending through `interface` with loopback on. `peers` are the members
    /// this node accepts datagrams from; `faults` the cluster's `[[link_faults]]` (their loss
    /// applies to datagrams from each sender to this node).
    pub fn open(
        cfg: &MulticastConfig,
        me: Sender,
        peers: &[NodeId],
        faults: &[LinkFault],
    ) -> io::Result<Multicast> {
        let sock = Socket::new(Domain::IPV4, Type::DGRAM, Some(SockProtocol::UDP))?;
        sock.set_reuse_address(true)?;
        sock.bind(&SockAddr::from(SocketAddr::V4(cfg.group)))?;
        sock.join_multicast_v4(cfg.group.ip(), &cfg.interface)?;
        sock.set_multicast_if_v4(&cfg.interface)?;
        sock.set_multicast_loop_v4(cfg.multicast_loop)?;
        sock.set_multicast_ttl_v4(cfg.ttl)?;
        let buffers = (cfg.recv_buffer_bytes, cfg.send_buffer_bytes);
        let group = Some(SockAddr::from(SocketAddr::V4(cfg.group)));
        let mut m = Multicast::with_socket(sock, group, buffers, me, peers, faults)?;
        m.segment_bytes = cfg.segment_bytes;
        Ok(m)
    }

    /// Opens a unicast endpoint bound to `bind` (the node's own peer address: UDP and TCP
    /// share the port number), with `buffers` = (SO_RCVBUF, SO_SNDBUF). It accepts datagrams
    /// from `peers` only. No receive-side loss: injected link faults apply where the driver
    /// sends, as they do to TCP frames.
    pub fn open_unicast(
        bind: SocketAddr,
        buffers: (usize, usize),
        me: Sender,
        peers: &[NodeId],
    ) -> io::Result<Multicast> {
        let domain = if bind.is_ipv4() {
            Domain::IPV4
        } else {
            Domain::IPV6
        };
        let sock = Socket::new(domain, Type::DGRAM, Some(SockProtocol::UDP))?;
        sock.bind(&SockAddr::from(bind))?;
        Multicast::with_socket(sock, None, buffers, me, peers, &[])
    }

    fn with_socket(
        sock: Socket,
        group: Option<SockAddr>,
        (recv_buffer_bytes, send_buffer_bytes): (usize, usize),
        me: Sender,
        peers: &[NodeId],
        faults: &[LinkFault],
    ) -> io::Result<Multicast> {
        let granted_recv_buffer_bytes = set_buffer(&sock, recv_buffer_bytes, true)?;
        let granted_send_buffer_bytes = set_buffer(&sock, send_buffer_bytes, false)?;
        // Coalesced runs of datagrams arrive whole (split in `read`); a kernel without
        // UDP_GRO splits them itself, which only costs more reads.
        let _ = set_udp_gro(&sock);
        sock.set_nonblocking(true)?;
        let std_sock: std::net::UdpSocket = sock.into();
        let members: Vec<NodeId> = std::iter::once(me.node)
            .chain(peers.iter().copied())
            .collect();
        // The driver validated the rules already; an invalid set shapes nothing here.
        let loss = RecvLoss::new(me.node, me.cluster_id, faults, &members);
        Ok(Multicast {
            socket: UdpSocket::from_std(std_sock),
            group,
            me,
            peers: peers
                .iter()
                .filter(|&&p| p != me.node)
                .map(|&p| (p, 0))
                .collect(),
            sources: HashMap::new(),
            queue: VecDeque::new(),
            queued_bytes: 0,
            blocked: false,
            gso: true,
            gso_refused: None,
            segment_bytes: 0,
            segment_number: 0,
            joining: HashMap::new(),
            rbuf: BytesMut::new(),
            backlog: VecDeque::new(),
            loss,
            stats: MulticastStats::default(),
            unlogged: 0,
            unlogged_reasons: Vec::new(),
            last_log_us: 0,
            granted_recv_buffer_bytes,
            granted_send_buffer_bytes,
        })
    }

    /// The socket, to register with the driver's poller.
    pub fn socket_mut(&mut self) -> &mut UdpSocket {
        &mut self.socket
    }

    /// Queues one message as a datagram. Returns `false`, queuing nothing, when the
    /// datagram would exceed [`MAX_DATAGRAM_BYTES`] (the caller falls back to TCP). A full
    /// queue drops the datagram and counts it (the protocol retransmits), returning `true`.
    pub fn push(&mut self, kind: u8, group: u16, chunks: Vec<Bytes>) -> bool {
        let Some(dest) = self.group.clone() else {
            return false;
        };
        self.push_dest(dest, kind, group, chunks)
    }

    /// Queues one message as a datagram to `to` alone, as [`Multicast::push`] does to the
    /// group (the same refusal when too large, the same drop when the queue is full).
    pub fn push_to(&mut self, to: SocketAddr, kind: u8, group: u16, chunks: Vec<Bytes>) -> bool {
        self.push_dest(SockAddr::from(to), kind, group, chunks)
    }

    fn push_dest(&mut self, dest: SockAddr, kind: u8, group: u16, chunks: Vec<Bytes>) -> bool {
        let Some(headers) = encode_headers(&self.me, kind, group, &chunks) else {
            return false;
        };
        let bytes = OVERHEAD_BYTES + chunks.iter().map(Bytes::len).sum::<usize>();
        if self.segment_bytes > 0 && bytes > self.segment_bytes {
            self.push_segments(dest, headers, chunks, bytes);
            return true;
        }
        if self.queue.len() >= SEND_QUEUE_DATAGRAMS
            || (self.queued_bytes + bytes > SEND_QUEUE_BYTES && !self.queue.is_empty())
        {
            self.note_drop("send queue full");
            self.stats.send_drops += 1;
            return true;
        }
        self.queued_bytes += bytes;
        self.queue.push_back(Queued {
            dest,
            headers,
            chunks,
            bytes,
        });
        true
    }

    /// Queues a whole datagram of `total` bytes (`headers`, then `chunks`) as consecutive
    /// segments of `segment_bytes` (the last shorter), which `flush` sends as one GSO run.
    /// The parts are slices of the chunks, not copies. A queue without room for every
    /// segment drops the datagram and counts it, as `push_dest` does.
    fn push_segments(
        &mut self,
        dest: SockAddr,
        headers: [u8; OVERHEAD_BYTES],
        chunks: Vec<Bytes>,
        total: usize,
    ) {
        let part = self.segment_bytes - SEGMENT_HEADER_BYTES;
        let count = total.div_ceil(part);
        let bytes = total + count * SEGMENT_HEADER_BYTES;
        let (Ok(count16), Ok(total32)) = (u16::try_from(count), u32::try_from(total)) else {
            // Unreachable: total <= MAX_DATAGRAM_BYTES and part >= 500.
            self.note_drop("a datagram too large to segment");
            self.stats.send_drops += 1;
            return;
        };
        if self.queue.len() + count > SEND_QUEUE_DATAGRAMS
            || (self.queued_bytes + bytes > SEND_QUEUE_BYTES && !self.queue.is_empty())
        {
            self.note_drop("send queue full");
            self.stats.send_drops += 1;
            return;
        }
        self.segment_number += 1;
        let number = self.segment_number;
        let mut pieces: VecDeque<Bytes> = std::iter::once(Bytes::copy_from_slice(&headers))
            .chain(chunks)
            .filter(|c| !c.is_empty())
            .collect();
        for index in 0..count16 {
            let want = part.min(total - usize::from(index) * part);
            let mut parts = Vec::with_capacity(2);
            let mut got = 0;
            while got < want {
                let Some(front) = pieces.front_mut() else {
                    break;
                };
                let take = (want - got).min(front.len());
                parts.push(front.split_to(take));
                got += take;
                if front.is_empty() {
                    pieces.pop_front();
                }
            }
            // The pieces hold exactly `total` bytes, cut in parts of `want` in turn.
            assert_eq!(
                got, want,
                "segment {index} of {count}: {got} of {want} bytes"
            );
            self.queue.push_back(Queued {
                dest: dest.clone(),
                headers: encode_segment_header(&self.me, number, index, count16, total32),
                chunks: parts,
                bytes: SEGMENT_HEADER_BYTES + want,
            });
        }
        self.queued_bytes += bytes;
        self.stats.segmented_sent += 1;
    }

    /// Takes one segment: the whole datagram and its sender when this was its last part,
    /// `None` while parts are missing. See the module's "Segments".
    fn join(&mut self, seg: BytesMut) -> Result<Option<(NodeId, BytesMut)>, DatagramError> {
        let h = decode_segment_header(&seg, self.me.cluster_id)?;
        let node = h.from.node;
        if node == self.me.node {
            self.stats.datagrams_own += 1;
            return Ok(None);
        }
        if !self.peers.contains_key(&node) {
            self.stats.datagrams_unknown_sender += 1;
            return Err(DatagramError::UnknownSender { node: node.0 });
        }
        let part = &seg[SEGMENT_HEADER_BYTES..];
        if h.index == 0 {
            // A new whole datagram; one not finished from this sender is lost with it.
            let mut buf = BytesMut::with_capacity(h.total);
            buf.extend_from_slice(part);
            let j = Joining {
                incarnation: h.from.incarnation,
                number: h.number,
                count: h.count,
                total: h.total,
                next: 1,
                buf,
            };
            if self.joining.insert(node, j).is_some() {
                self.note_drop("a datagram's segments stopped short");
            }
        } else {
            let fits = self.joining.get(&node).is_some_and(|j| {
                (j.incarnation, j.number, j.count, j.total, j.next)
                    == (h.from.incarnation, h.number, h.count, h.total, h.index)
            });
            if !fits {
                self.joining.remove(&node);
                return Err(DatagramError::BadSegment {
                    reason: "a part out of order or of another datagram",
                });
            }
            if let Some(j) = self.joining.get_mut(&node) {
                j.buf.extend_from_slice(part);
                j.next += 1;
            }
        }
        let Some(j) = self.joining.get(&node) else {
            return Ok(None);
        };
        if j.buf.len() > j.total || (j.next == j.count && j.buf.len() != j.total) {
            self.joining.remove(&node);
            return Err(DatagramError::BadSegment {
                reason: "parts that do not add up to the whole",
            });
        }
        if j.next < j.count {
            return Ok(None);
        }
        let whole = self.joining.remove(&node).map(|j| j.buf);
        self.stats.segmented_joined += 1;
        Ok(whole.map(|w| (node, w)))
    }

    pub fn has_queued(&self) -> bool {
        !self.queue.is_empty()
    }

    /// Accepts datagrams from `node` from now on (`Driver::add_peer`).
    pub fn add_peer(&mut self, node: NodeId) {
        if node != self.me.node {
            self.peers.entry(node).or_insert(0);
        }
    }

    /// Refuses datagrams from `node` from now on (`Driver::remove_peer`).
    pub fn remove_peer(&mut self, node: NodeId) {
        self.peers.remove(&node);
        self.sources.remove(&node);
    }

    /// A unicast endpoint: accepts `node`'s datagrams only from `addr` (where its socket of
    /// this lane is bound), so that a datagram naming a member but sent by anyone else is
    /// dropped and counted as a stranger's.
    pub fn expect_source(&mut self, node: NodeId, addr: SocketAddr) {
        if node != self.me.node {
            self.sources.insert(node, addr);
        }
    }

    /// The socket became writable: the next flush may send again.
    pub fn on_writable(&mut self) {
        self.blocked = false;
    }

    /// Sends queued datagrams until the queue is empty or the socket would block: each run
    /// that [`gso_run`] finds as one GSO send, the rest one by one.
    pub fn flush(&mut self) {
        if self.blocked {
            return;
        }
        if self.gso {
            group_by_destination(&mut self.queue, |q| &q.dest);
        }
        while let Some(q) = self.queue.front() {
            let run = if self.gso {
                gso_run(self.queue.iter().map(|q| (&q.dest, q.bytes)))
            } else {
                1
            };
            let sent = if run > 1 {
                self.send_run(run)
            } else {
                let mut iov: Vec<IoSlice<'_>> = Vec::with_capacity(1 + q.chunks.len());
                iov.push(IoSlice::new(&q.headers));
                iov.extend(q.chunks.iter().map(|c| IoSlice::new(c)));
                SockRef::from(&self.socket)
                    .send_to_vectored(&iov, &q.dest)
                    .map(|_| ())
            };
            match sent {
                Ok(()) => {
                    self.stats.datagrams_sent += run as u64;
                    if run > 1 {
                        self.stats.gso_sends += 1;
                    }
                }
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => {
                    self.blocked = true;
                    return;
                }
                Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
                Err(e) if e.raw_os_error() == Some(libc::ENOBUFS) => {
                    // The kernel is out of buffers right now; keep the datagrams and try
                    // again at the next flush (the next event or loop iteration).
                    return;
                }
                Err(e) if run > 1 => {
                    // This kernel or route takes no GSO (EIO without checksum offload,
                    // EINVAL past the path MTU): one datagram per send from now on.
                    self.gso = false;
                    self.gso_refused = Some(e.to_string());
                    continue;
                }
                Err(e) => {
                    self.note_drop(&format!("send failed: {e}"));
                    self.stats.send_drops += 1;
                }
            }
            for _ in 0..run {
                if let Some(q) = self.queue.pop_front() {
                    self.queued_bytes = self.queued_bytes.saturating_sub(q.bytes);
                }
            }
        }
    }

    /// Sends the first `run` queued datagrams (one destination, segment size the first's)
    /// as one `sendmsg` with `UDP_SEGMENT`.
    fn send_run(&self, run: usize) -> io::Result<()> {
        let Some(first) = self.queue.front() else {
            return Ok(());
        };
        let Ok(segment) = u16::try_from(first.bytes) else {
            return Err(io::Error::from_raw_os_error(libc::EINVAL));
        };
        let mut iov: Vec<IoSlice<'_>> = Vec::with_capacity(run * 4);
        for q in self.queue.iter().take(run) {
            iov.push(IoSlice::new(&q.headers));
            iov.extend(q.chunks.iter().map(|c| IoSlice::new(c)));
        }
        let control = SegmentControl::new(segment);
        let msg = socket2::MsgHdr::new()
            .with_addr(&first.dest)
            .with_buffers(&iov)
            .with_control(control.as_bytes());
        SockRef::from(&self.socket).sendmsg(&msg, 0).map(|_| ())
    }

    /// One datagram from the socket (or the rest of a coalesced read), with its source;
    /// `None` when nothing is waiting.
    fn read(&mut self) -> io::Result<Option<(BytesMut, Option<SocketAddr>)>> {
        if let Some(d) = self.backlog.pop_front() {
            return Ok(Some(d));
        }
        if self.rbuf.capacity() - self.rbuf.len() < RECV_ROOM_BYTES {
            self.rbuf.reserve(RECV_CHUNK_BYTES.max(RECV_ROOM_BYTES));
        }
        // Any address fits the room of an IPv6 one; the kernel writes the family it has.
        let mut source = SockAddr::from(SocketAddr::from((std::net::Ipv6Addr::UNSPECIFIED, 0)));
        let mut control = [MaybeUninit::new(0u8); GRO_CONTROL_BYTES];
        let sock = SockRef::from(&self.socket);
        let (n, control_len) = loop {
            let mut bufs = [socket2::MaybeUninitSlice::new(
                self.rbuf.spare_capacity_mut(),
            )];
            let mut msg = socket2::MsgHdrMut::new()
                .with_addr(&mut source)
                .with_buffers(&mut bufs)
                .with_control(&mut control);
            match sock.recvmsg(&mut msg, 0) {
                Ok(n) => break (n, msg.control_len()),
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => return Ok(None),
                Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
                Err(e) => return Err(e),
            }
        };
        let free = self.rbuf.capacity() - self.rbuf.len();
        let n = n.min(free);
        // SAFETY: `recvmsg` initialised the first `n` bytes of the spare capacity (it
        // returns how many bytes it wrote, never more than the buffer it was given).
        unsafe { self.rbuf.set_len(self.rbuf.len() + n) };
        let mut data = self.rbuf.split_to(self.rbuf.len());
        let source = source.as_socket();
        // The control buffer started zeroed and the kernel wrote `control_len` bytes.
        let control: Vec<u8> = control[..control_len.min(GRO_CONTROL_BYTES)]
            .iter()
            // SAFETY: every byte was initialised (to 0) before the call.
            .map(|b| unsafe { b.assume_init() })
            .collect();
        match gro_segment_bytes(&control) {
            Some(segment) if segment > 0 && data.len() > segment => {
                self.stats.gro_reads += 1;
                let first = data.split_to(segment);
                while !data.is_empty() {
                    let next = data.split_to(segment.min(data.len()));
                    self.backlog.push_back((next, source));
                }
                Ok(Some((first, source)))
            }
            _ => Ok(Some((data, source))),
        }
    }

    /// Reads and checks one datagram.
    pub fn recv(&mut self) -> io::Result<Received> {
        let Some((dgram, source)) = self.read()? else {
            return Ok(Received::Empty);
        };
        Ok(self.check_received(dgram, source))
    }

    /// Checks one datagram as [`Multicast::recv`] does with what it read from `source`
    /// (`None`: unknown): a segment joins its whole, a whole datagram is decoded, and its
    /// sender must be a member of a current incarnation. Every byte string is either a
    /// frame or counted as dropped; nothing panics. Public for the fuzz target
    /// (`abcast-fuzz`, `datagram`), which feeds it bytes without a socket.
    pub fn check_received(&mut self, dgram: BytesMut, source: Option<SocketAddr>) -> Received {
        let (dgram, segment_sender) = if is_segment(&dgram) {
            match self.join(dgram) {
                Ok(Some((node, whole))) => (whole, Some(node)),
                Ok(None) => return Received::Dropped,
                Err(e) => return self.reject(e),
            }
        } else {
            (dgram, None)
        };
        let (from, f) = match decode(dgram, self.me.cluster_id) {
            Ok(x) => x,
            Err(e) => return self.reject(e),
        };
        if segment_sender.is_some_and(|n| n != from.node) {
            return self.reject(DatagramError::BadSegment {
                reason: "the joined datagram names another sender than its segments",
            });
        }
        if from.node == self.me.node {
            self.stats.datagrams_own += 1;
            return Received::Dropped;
        }
        let Some(known) = self.peers.get_mut(&from.node) else {
            self.stats.datagrams_unknown_sender += 1;
            return self.reject(DatagramError::UnknownSender { node: from.node.0 });
        };
        if let Some(&expected) = self.sources.get(&from.node)
            && let Some(source) = source
            && !same_source(source, expected)
        {
            self.stats.datagrams_unknown_sender += 1;
            return self.reject(DatagramError::WrongSource {
                node: from.node.0,
                source,
                expected,
            });
        }
        if from.incarnation < *known {
            let known = *known;
            return self.reject(DatagramError::StaleIncarnation {
                node: from.node.0,
                found: from.incarnation,
                known,
            });
        }
        *known = from.incarnation;
        self.stats.datagrams_received += 1;
        Received::Frame(from.node, f)
    }

    /// The latest incarnation of `node` this endpoint took a datagram from (0: none yet,
    /// or its first life).
    pub fn known_incarnation(&self, node: NodeId) -> u64 {
        self.peers.get(&node).copied().unwrap_or(0)
    }

    /// The injected loss of the link from `from` to this node (`[[link_faults]]`), rolled
    /// for one decoded message of `group` on `lane` that arrived on this endpoint: true
    /// when it is lost, and then counted as lost instead of received. Called once the
    /// message is decoded, because a rule may name a lane (`linkfault::LinkFault::lane`),
    /// which only the message knows.
    pub fn lost_on_receipt(&mut self, from: NodeId, group: u16, lane: Lane) -> bool {
        let Some(loss) = self.loss.as_mut() else {
            return false;
        };
        if !loss.lost(from, group, lane) {
            return false;
        }
        self.stats.datagrams_received = self.stats.datagrams_received.saturating_sub(1);
        self.stats.datagrams_lost += 1;
        true
    }

    /// A datagram that passed the checks held a message that did not decode.
    pub fn reject_message(&mut self, from: NodeId, kind: u8, reason: &str) {
        self.stats.datagrams_received = self.stats.datagrams_received.saturating_sub(1);
        self.stats.datagrams_rejected += 1;
        self.note_drop(&format!(
            "message kind {kind} from {from} does not decode: {reason}"
        ));
    }

    fn reject(&mut self, e: DatagramError) -> Received {
        self.stats.datagrams_rejected += 1;
        self.note_drop(&e.to_string());
        Received::Dropped
    }

    fn note_drop(&mut self, reason: &str) {
        self.unlogged += 1;
        // One line a second names the first few different reasons: a malformed token
        // among garbage is still said.
        if self.unlogged_reasons.len() < LOG_REASONS_MAX
            && !self.unlogged_reasons.iter().any(|r| r == reason)
        {
            self.unlogged_reasons.push(reason.to_string());
        }
    }

    /// A log line about drops since the last one, at most one per second; or, once, that
    /// the kernel refused a GSO send.
    pub fn take_log(&mut self, now: Micros) -> Option<String> {
        if let Some(e) = self.gso_refused.take() {
            return Some(format!(
                "the kernel refused a UDP GSO send ({e}); one datagram per send from now on"
            ));
        }
        if self.unlogged == 0
            || (self.last_log_us != 0 && now.saturating_sub(self.last_log_us) < LOG_INTERVAL_US)
        {
            return None;
        }
        self.last_log_us = now.max(1);
        let n = std::mem::take(&mut self.unlogged);
        let reasons = std::mem::take(&mut self.unlogged_reasons).join("; ");
        Some(format!(
            "dropped {n} datagram(s) since the last report (first reasons: {reasons})"
        ))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const ME: Sender = Sender {
        cluster_id: 7,
        node: NodeId(3),
        incarnation: 2,
    };

    fn dgram(body: &[u8]) -> Bytes {
        encode_to_bytes(&ME, 4, 1, &[Bytes::copy_from_slice(body)]).unwrap()
    }

    #[test]
    fn roundtrip_keeps_sender_kind_group_and_body() {
        let chunks = [Bytes::from_static(b"head"), Bytes::from(vec![9u8; 5000])];
        let d = encode_to_bytes(&ME, 4, 1, &chunks).unwrap();
        assert_eq!(d.len(), OVERHEAD_BYTES + 5004);
        let (s, f) = decode(BytesMut::from(&d[..]), 7).unwrap();
        assert_eq!(s, ME);
        assert_eq!((f.kind, f.group), (4, 1));
        assert_eq!(&f.body[..4], b"head");
        assert_eq!(f.body.len(), 5004);
    }

    #[test]
    fn a_body_over_the_datagram_limit_is_not_encoded() {
        let ok = Bytes::from(vec![0u8; MAX_BODY_BYTES]);
        assert!(encode_headers(&ME, 1, 0, &[ok]).is_some());
        let big = Bytes::from(vec![0u8; MAX_BODY_BYTES + 1]);
        assert!(encode_headers(&ME, 1, 0, &[big]).is_none());
    }

    #[test]
    fn other_clusters_and_non_protocol_kinds_are_refused() {
        let d = dgram(b"x");
        assert_eq!(
            decode(BytesMut::from(&d[..]), 8).unwrap_err(),
            DatagramError::WrongCluster { found: 7 }
        );
        let hello =
            encode_to_bytes(&ME, frame::KIND_HELLO, 0, &[Bytes::from_static(b"h")]).unwrap();
        assert_eq!(
            decode(BytesMut::from(&hello[..]), 7).unwrap_err(),
            DatagramError::NotProtocolKind { kind: 0 }
        );
        let client = encode_to_bytes(&ME, 130, 0, &[Bytes::from_static(b"c")]).unwrap();
        assert!(matches!(
            decode(BytesMut::from(&client[..]), 7),
            Err(DatagramError::NotProtocolKind { kind: 130 })
        ));
    }

    #[test]
    fn every_truncation_is_refused() {
        let d = dgram(b"some body bytes");
        for cut in 0..d.len() {
            assert!(
                decode(BytesMut::from(&d[..cut]), 7).is_err(),
                "cut at {cut}"
            );
        }
        let mut longer = BytesMut::from(&d[..]);
        longer.extend_from_slice(b"trailing");
        assert!(matches!(
            decode(longer, 7),
            Err(DatagramError::SizeMismatch { .. })
        ));
    }

    #[test]
    fn every_single_bit_flip_is_refused() {
        let d = dgram(b"a body to protect, long enough to matter");
        for byte in 0..d.len() {
            for bit in 0..8 {
                let mut b = BytesMut::from(&d[..]);
                b[byte] ^= 1 << bit;
                assert!(
                    decode(b, 7).is_err(),
                    "flip of bit {bit} in byte {byte} went through"
                );
            }
        }
    }

    #[test]
    fn random_bytes_never_panic() {
        // xorshift64*, deterministic.
        let mut x = 0x9E37_79B9_7F4A_7C15u64;
        let mut next = move || {
            x ^= x >> 12;
            x ^= x << 25;
            x ^= x >> 27;
            x.wrapping_mul(0x2545_F491_4F6C_DD1D)
        };
        let valid = dgram(&[5u8; 300]);
        for round in 0..20_000 {
            let b = if round % 2 == 0 {
                let len = (next() % 400) as usize;
                (0..len).map(|_| next() as u8).collect::<Vec<u8>>()
            } else {
                let mut v = valid.to_vec();
                for _ in 0..1 + next() % 4 {
                    let at = (next() as usize) % v.len();
                    v[at] = next() as u8;
                }
                v.truncate((next() as usize) % (v.len() + 1));
                v
            };
            let _ = decode(BytesMut::from(&b[..]), 7);
        }
    }

    #[test]
    fn segment_bytes_is_off_or_within_one_frame() {
        let mut c = MulticastConfig::new(SocketAddrV4::new([239, 1, 1, 1].into(), 5000));
        for ok in [0, SEGMENT_BYTES_MIN, 1472, SEGMENT_BYTES_MAX] {
            c.segment_bytes = ok;
            assert!(c.validate().is_ok(), "{ok}");
        }
        for bad in [1, SEGMENT_BYTES_MIN - 1, SEGMENT_BYTES_MAX + 1, 65_000] {
            c.segment_bytes = bad;
            assert_eq!(c.validate().unwrap_err().0, "segment_bytes", "{bad}");
        }
    }

    #[test]
    fn config_errors_name_the_field() {
        let ok = MulticastConfig::new("239.255.77.1:30000".parse().unwrap());
        assert_eq!(ok.validate(), Ok(()));
        let mut c = ok.clone();
        c.group = "10.0.0.1:30000".parse().unwrap();
        assert_eq!(c.validate().unwrap_err().0, "group");
        let mut c = ok.clone();
        c.ttl = 0;
        assert_eq!(c.validate().unwrap_err().0, "ttl");
        let mut c = ok.clone();
        c.recv_buffer_bytes = 0;
        assert_eq!(c.validate().unwrap_err().0, "recv_buffer_bytes");
        let mut c = ok;
        c.interface = "239.1.1.1".parse().unwrap();
        assert_eq!(c.validate().unwrap_err().0, "interface");
    }

    #[test]
    fn a_unicast_datagram_must_come_from_the_named_members_socket() {
        let at = |s: &str| s.parse::<SocketAddr>().unwrap();
        assert!(same_source(at("127.0.0.1:7400"), at("127.0.0.1:7400")));
        assert!(same_source(
            at("[::ffff:127.0.0.1]:7400"),
            at("127.0.0.1:7400")
        ));
        assert!(!same_source(at("127.0.0.1:7401"), at("127.0.0.1:7400")));
        assert!(!same_source(at("10.0.0.9:7400"), at("127.0.0.1:7400")));
        // A member bound to a wildcard address sends from its route's: the port decides.
        assert!(same_source(at("10.0.0.9:7400"), at("0.0.0.0:7400")));
    }

    #[test]
    fn a_gso_run_is_one_destination_one_size_and_a_shorter_last() {
        let a = SockAddr::from("127.0.0.1:1".parse::<SocketAddr>().unwrap());
        let b = SockAddr::from("127.0.0.1:2".parse::<SocketAddr>().unwrap());
        let run = |q: &[(&SockAddr, usize)]| gso_run(q.iter().copied());
        assert_eq!(run(&[]), 0);
        assert_eq!(run(&[(&a, 100)]), 1);
        assert_eq!(run(&[(&a, 100), (&a, 100), (&a, 60), (&a, 100)]), 3);
        assert_eq!(run(&[(&a, 100), (&b, 100)]), 1, "another destination");
        assert_eq!(run(&[(&a, 100), (&a, 120)]), 1, "a longer datagram");
        let many: Vec<(&SockAddr, usize)> = (0..200).map(|_| (&a, 10)).collect();
        assert_eq!(run(&many), GSO_SEGMENTS_MAX);
        let big: Vec<(&SockAddr, usize)> = (0..40).map(|_| (&a, 9000)).collect();
        assert_eq!(run(&big), GSO_BYTES_MAX / 9000);
    }

    /// A control buffer holding one cmsg of `level`/`kind` with an int, as the kernel
    /// writes it.
    fn control_with(level: libc::c_int, kind: libc::c_int, v: libc::c_int) -> Vec<u8> {
        let mut buf = [0u64; 4];
        // SAFETY: the buffer is 32 bytes, aligned, and holds a cmsghdr and an int.
        unsafe {
            let mut msg: libc::msghdr = std::mem::zeroed();
            msg.msg_control = buf.as_mut_ptr().cast();
            msg.msg_controllen = libc::CMSG_SPACE(4) as _;
            let cm = libc::CMSG_FIRSTHDR(&msg);
            (*cm).cmsg_level = level;
            (*cm).cmsg_type = kind;
            (*cm).cmsg_len = libc::CMSG_LEN(4) as _;
            std::ptr::write_unaligned(libc::CMSG_DATA(cm).cast::<libc::c_int>(), v);
        }
        let space = unsafe { libc::CMSG_SPACE(4) } as usize;
        buf.iter()
            .flat_map(|w| w.to_ne_bytes())
            .take(space)
            .collect()
    }

    #[test]
    fn the_gro_segment_size_is_read_from_its_control_message_and_nothing_else() {
        assert_eq!(
            gro_segment_bytes(&control_with(libc::SOL_UDP, libc::UDP_GRO, 1456)),
            Some(1456)
        );
        assert_eq!(
            gro_segment_bytes(&control_with(libc::SOL_IP, libc::UDP_GRO, 1456)),
            None
        );
        assert_eq!(gro_segment_bytes(&[]), None);
        let c = control_with(libc::SOL_UDP, libc::UDP_GRO, 1456);
        for cut in 0..c.len() {
            // A truncated control buffer never yields a size from beyond its end.
            let got = gro_segment_bytes(&c[..cut]);
            assert!(got.is_none() || cut >= c.len() - 4, "cut {cut}: {got:?}");
        }
        let mut garbage = c.clone();
        garbage[0] = 0xff; // a header length far past the buffer
        assert_eq!(gro_segment_bytes(&garbage), None);
        // The send side's control message is the same layout with UDP_SEGMENT.
        let seg = SegmentControl::new(1456);
        assert_eq!(seg.as_bytes().len(), unsafe { libc::CMSG_SPACE(2) }
            as usize);
    }

    /// The bodies of up to `n` frames `rx` reads from `from` within 30 s, in order.
    fn receive(rx: &mut Multicast, from: NodeId, n: usize) -> Vec<Bytes> {
        let mut got = Vec::new();
        let end = std::time::Instant::now() + std::time::Duration::from_secs(30);
        while got.len() < n && std::time::Instant::now() < end {
            match rx.recv().unwrap() {
                Received::Frame(node, f) => {
                    assert_eq!(node, from);
                    got.push(f.body);
                }
                Received::Dropped => {}
                Received::Empty => std::thread::sleep(std::time::Duration::from_millis(5)),
            }
        }
        got
    }

    #[test]
    fn a_run_sent_with_gso_arrives_as_its_datagrams_in_order() {
        let port = 41_000 + (std::process::id() % 2000) as u16 * 3;
        let cfg = MulticastConfig::new(SocketAddrV4::new([239, 255, 79, 9].into(), port));
        let who = |n: u32| Sender {
            cluster_id: 5,
            node: NodeId(n),
            incarnation: 1,
        };
        let mut tx = Multicast::open(&cfg, who(1), &[NodeId(2)], &[]).unwrap();
        let mut rx = Multicast::open(&cfg, who(2), &[NodeId(1)], &[]).unwrap();
        // Ten equal datagrams and a shorter last: one GSO run.
        for i in 0..11u8 {
            let len = if i == 10 { 300 } else { 1400 };
            assert!(tx.push(4, 0, vec![Bytes::from(vec![i; len])]));
        }
        tx.flush();
        assert!(!tx.has_queued());
        assert_eq!(tx.stats.datagrams_sent, 11);
        if tx.gso {
            assert_eq!(tx.stats.gso_sends, 1, "{:?}", tx.stats);
        }
        let got = receive(&mut rx, NodeId(1), 11);
        assert_eq!(got.len(), 11, "rx: {:?}", rx.stats);
        for (i, body) in got.iter().enumerate() {
            let len = if i == 10 { 300 } else { 1400 };
            assert_eq!(body.len(), len);
            assert!(
                body.iter().all(|&b| b == i as u8),
                "datagram {i} out of order or torn"
            );
        }
        assert_eq!(rx.stats.datagrams_received, 11);
        eprintln!("tx {:?}\nrx {:?}", tx.stats, rx.stats);
    }

    /// A unicast endpoint on the loopback for `me` accepting `peers`, to feed by hand.
    fn endpoint(me: u32, peers: &[u32]) -> Multicast {
        let who = Sender {
            cluster_id: 7,
            node: NodeId(me),
            incarnation: 1,
        };
        let peers: Vec<NodeId> = peers.iter().map(|&p| NodeId(p)).collect();
        let bind: SocketAddr = "127.0.0.1:0".parse().unwrap();
        Multicast::open_unicast(bind, (1 << 20, 1 << 20), who, &peers).unwrap()
    }

    /// What `tx` queued, as the datagrams' bytes, emptying its queue.
    fn drain_queue(tx: &mut Multicast) -> Vec<BytesMut> {
        let out = tx
            .queue
            .drain(..)
            .map(|q| {
                let mut b = BytesMut::from(&q.headers[..]);
                q.chunks.iter().for_each(|c| b.extend_from_slice(c));
                assert_eq!(b.len(), q.bytes);
                b
            })
            .collect();
        tx.queued_bytes = 0;
        out
    }

    /// A body of `len` bytes that tells its bytes apart.
    fn body_of(len: usize) -> Vec<Bytes> {
        let b: Vec<u8> = (0..len).map(|i| (i * 7 + i / 251) as u8).collect();
        // Two chunks, so that segment parts cut across a chunk boundary too.
        let b = Bytes::from(b);
        vec![b.slice(..len / 3), b.slice(len / 3..)]
    }

    #[test]
    fn a_large_datagram_is_queued_as_equal_segments_and_joined_whole_in_order() {
        let mut tx = endpoint(1, &[2]);
        tx.segment_bytes = 1472;
        let to: SocketAddr = "127.0.0.1:9".parse().unwrap();
        assert!(tx.push_to(to, 4, 3, body_of(20_000)));
        assert!(
            tx.push_to(to, 4, 3, body_of(1000)),
            "a small one leaves whole"
        );
        let dgrams = drain_queue(&mut tx);
        let part = 1472 - SEGMENT_HEADER_BYTES;
        let count = (20_000 + OVERHEAD_BYTES).div_ceil(part);
        assert_eq!(dgrams.len(), count + 1);
        assert!(dgrams[..count - 1].iter().all(|d| d.len() == 1472));
        assert!(dgrams[..count].iter().all(|d| is_segment(d)));
        assert!(!is_segment(&dgrams[count]));
        // One GSO run: one destination, equal sizes, the last shorter.
        let dest = SockAddr::from(to);
        let sizes: Vec<(&SockAddr, usize)> = dgrams.iter().map(|d| (&dest, d.len())).collect();
        assert_eq!(gso_run(sizes.iter().copied()), count);
        assert_eq!(tx.stats.segmented_sent, 1);

        let mut rx = endpoint(2, &[1]);
        let mut wholes = Vec::new();
        for d in dgrams.iter().take(count) {
            if let Some(w) = rx.join(d.clone()).unwrap() {
                wholes.push(w);
            }
        }
        assert_eq!(wholes.len(), 1, "joined once, at the last part");
        let (node, whole) = wholes.pop().unwrap();
        assert_eq!(node, NodeId(1));
        let (from, f) = decode(whole, 7).unwrap();
        assert_eq!((from.node, f.kind, f.group), (NodeId(1), 4, 3));
        let want: Vec<u8> = body_of(20_000).iter().flat_map(|c| c.to_vec()).collect();
        assert_eq!(&f.body[..], &want[..]);
        assert_eq!(rx.stats.segmented_joined, 1);
        assert!(rx.joining.is_empty());
    }

    #[test]
    fn a_missing_repeated_or_foreign_part_joins_nothing() {
        let mut tx = endpoint(1, &[2]);
        tx.segment_bytes = 600;
        let to: SocketAddr = "127.0.0.1:9".parse().unwrap();
        assert!(tx.push_to(to, 4, 0, body_of(3000)));
        let first = drain_queue(&mut tx);
        assert!(tx.push_to(to, 4, 0, body_of(3000)));
        let second = drain_queue(&mut tx);
        assert!(first.len() >= 4);
        let n = first.len();
        let feed = |rx: &mut Multicast, ds: &[&BytesMut]| -> (usize, usize) {
            let (mut wholes, mut errors) = (0, 0);
            for d in ds {
                match rx.join((*d).clone()) {
                    Ok(Some(_)) => wholes += 1,
                    Ok(None) => {}
                    Err(DatagramError::BadSegment { .. }) => errors += 1,
                    Err(e) => panic!("unexpected {e}"),
                }
            }
            (wholes, errors)
        };
        let mut rx = endpoint(2, &[1]);
        // A part missing: the next one is refused, nothing is joined.
        let skip: Vec<&BytesMut> = first
            .iter()
            .enumerate()
            .filter(|(i, _)| *i != 1)
            .map(|(_, d)| d)
            .collect();
        assert_eq!(feed(&mut rx, &skip), (0, n - 2));
        // A part repeated.
        let mut rep: Vec<&BytesMut> = first.iter().collect();
        rep.insert(2, &first[1]);
        assert_eq!(feed(&mut rx, &rep).0, 0);
        // A part of the next datagram in the middle: both are lost, the next one whole.
        let mut mixed: Vec<&BytesMut> = first[..2].iter().collect();
        mixed.push(&second[1]);
        mixed.extend(first[2..].iter());
        mixed.extend(second.iter());
        assert_eq!(feed(&mut rx, &mixed), (1, n - 1));
        // In order, after all that: joined.
        let all: Vec<&BytesMut> = first.iter().collect();
        assert_eq!(feed(&mut rx, &all), (1, 0));
        // From a node that is no member: refused before any room is taken.
        let mut stranger = endpoint(2, &[]);
        assert!(matches!(
            stranger.join(first[0].clone()),
            Err(DatagramError::UnknownSender { node: 1 })
        ));
        assert!(stranger.joining.is_empty());
        // Its own segments, heard back: ignored.
        let mut own = endpoint(1, &[2]);
        assert!(matches!(own.join(first[0].clone()), Ok(None)));
        assert_eq!(own.stats.datagrams_own, 1);
    }

    #[test]
    fn a_joined_datagram_must_name_the_sender_of_its_segments() {
        // Node 1's segments carrying a datagram that names node 3.
        let three = Sender {
            cluster_id: 7,
            node: NodeId(3),
            incarnation: 1,
        };
        let whole = encode_to_bytes(&three, 4, 0, &body_of(2000)).unwrap();
        let one = Sender {
            node: NodeId(1),
            ..three
        };
        let total = whole.len() as u32;
        let half = whole.len() / 2;
        let seg = |i: u16, part: &[u8]| {
            let mut b = BytesMut::from(&encode_segment_header(&one, 1, i, 2, total)[..]);
            b.extend_from_slice(part);
            b
        };
        let mut rx = endpoint(2, &[1, 3]);
        rx.backlog.push_back((seg(0, &whole[..half]), None));
        rx.backlog.push_back((seg(1, &whole[half..]), None));
        assert!(matches!(rx.recv().unwrap(), Received::Dropped));
        assert!(matches!(rx.recv().unwrap(), Received::Dropped));
        assert_eq!(rx.stats.datagrams_received, 0);
        assert_eq!(rx.stats.datagrams_rejected, 1, "{:?}", rx.stats);
    }

    #[test]
    fn every_segment_header_corruption_is_refused_and_random_segments_never_panic() {
        let me = Sender {
            cluster_id: 7,
            node: NodeId(1),
            incarnation: 1,
        };
        let mut seg = BytesMut::from(&encode_segment_header(&me, 9, 1, 3, 4000)[..]);
        seg.extend_from_slice(&[0xAB; 100]);
        assert!(decode_segment_header(&seg, 7).is_ok());
        assert!(decode_segment_header(&seg, 8).is_err(), "other cluster");
        for byte in 0..SEGMENT_HEADER_BYTES {
            for bit in 0..8 {
                let mut b = seg.clone();
                b[byte] ^= 1 << bit;
                assert!(
                    decode_segment_header(&b, 7).is_err(),
                    "flip of bit {bit} of byte {byte} accepted"
                );
            }
        }
        for (index, count, total) in [(3, 3, 4000), (0, 1, 4000), (0, 2, 10), (0, 2, 70_000)] {
            let h = encode_segment_header(&me, 1, index, count, total);
            let mut b = BytesMut::from(&h[..]);
            b.extend_from_slice(&[1]);
            assert!(
                matches!(
                    decode_segment_header(&b, 7),
                    Err(DatagramError::BadSegment { .. })
                ),
                "index {index} count {count} total {total}"
            );
        }
        // Random headers with a valid checksum, fed in any order: errors, never a panic,
        // never more than one whole datagram's room per sender.
        let mut x = 0x9E37_79B9_7F4A_7C15u64;
        let mut next = move || {
            x ^= x >> 12;
            x ^= x << 25;
            x ^= x >> 27;
            x.wrapping_mul(0x2545_F491_4F6C_DD1D)
        };
        let mut rx = endpoint(2, &[1]);
        for _ in 0..20_000 {
            let count = (next() % 5) as u16;
            let index = (next() % 6) as u16;
            let total = (next() % 70_000) as u32;
            let mut b =
                BytesMut::from(&encode_segment_header(&me, next() % 3, index, count, total)[..]);
            b.extend_from_slice(&vec![next() as u8; (next() % 3000) as usize]);
            let _ = rx.join(b);
            assert!(rx.joining.len() <= 1);
            assert!(
                rx.joining
                    .values()
                    .all(|j| j.buf.len() <= MAX_DATAGRAM_BYTES)
            );
        }
    }

    #[test]
    fn segments_cross_a_real_socket_in_one_gso_send() {
        let port = 41_001 + (std::process::id() % 2000) as u16 * 3;
        let mut cfg = MulticastConfig::new(SocketAddrV4::new([239, 255, 79, 9].into(), port));
        cfg.segment_bytes = 1472;
        let who = |n: u32| Sender {
            cluster_id: 5,
            node: NodeId(n),
            incarnation: 1,
        };
        let mut tx = Multicast::open(&cfg, who(1), &[NodeId(2)], &[]).unwrap();
        let mut rx = Multicast::open(&cfg, who(2), &[NodeId(1)], &[]).unwrap();
        for len in [30_000, 500, 60_000] {
            assert!(tx.push(4, 0, body_of(len)));
        }
        tx.flush();
        assert!(!tx.has_queued());
        assert_eq!(tx.stats.segmented_sent, 2);
        let got = receive(&mut rx, NodeId(1), 3);
        let lens: Vec<usize> = got.iter().map(Bytes::len).collect();
        assert_eq!(lens, [30_000, 500, 60_000], "rx: {:?}", rx.stats);
        for body in &got {
            let want: Vec<u8> = body_of(body.len())
                .iter()
                .flat_map(|c| c.to_vec())
                .collect();
            assert_eq!(&body[..], &want[..]);
        }
        assert_eq!(rx.stats.segmented_joined, 2, "{:?}", rx.stats);
        assert_eq!(rx.stats.datagrams_rejected, 0, "{:?}", rx.stats);
    }

    #[test]
    fn grouping_by_destination_keeps_each_destinations_order() {
        let a = SockAddr::from("127.0.0.1:1".parse::<SocketAddr>().unwrap());
        let b = SockAddr::from("127.0.0.1:2".parse::<SocketAddr>().unwrap());
        let mut q: VecDeque<(SockAddr, u32)> = [(&b, 1), (&a, 2), (&b, 3), (&a, 4), (&b, 5)]
            .into_iter()
            .map(|(d, i)| (d.clone(), i))
            .collect();
        group_by_destination(&mut q, |x| &x.0);
        let order: Vec<u32> = q.iter().map(|x| x.1).collect();
        assert_eq!(order, [1, 3, 5, 2, 4]);
        let mut one: VecDeque<(SockAddr, u32)> = VecDeque::from([(a.clone(), 1), (a.clone(), 2)]);
        group_by_destination(&mut one, |x| &x.0);
        assert_eq!(one.iter().map(|x| x.1).collect::<Vec<_>>(), [1, 2]);
    }
}
