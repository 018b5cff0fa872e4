//! Clients of a running node's client port: `abcast propose`, `learn`, `follow`,
//! `status`, `reconfigure` and `read`, and the small blocking [`Client`] they are built on
//! (the wire format is in `runtime::clientwire`).
//!
//! `reconfigure` is a cluster-wide operation: a node that is not the leader answers with a
//! `NotLeader` hint naming the leader and its client port, and the client asks there
//! ([`reconfigure_and_wait`], at most [`REDIRECTS_MAX`] times), then polls the status until
//! the new configuration is in effect. `read` is per node (its read point is about that
//! node's state), so a `NotLeader` answer is an error that names the leader.
//!
//! A client keeps one `Propose` request in flight and at most [`PROPOSE_WINDOW_VALUES`]
//! values waiting to be decided, so it never asks the node to hold more than that for it.

use abcast_core::config::{Configuration, Member, Roles};
use abcast_core::{Batch, DecodeError, Instance, NodeId, ValueId};
use abcast_runtime::clientwire::{ClientFrame, MAX_VALUES_PER_FRAME, StatusReport};
use abcast_runtime::frame::{self, FrameError};
use abcast_runtime::history::Gap;
use abcast_runtime::shm::{self, ShmLink};
use bytes::{Bytes, BytesMut};
use serde_json::{Value, json};
use std::collections::{HashSet, VecDeque};
use std::fmt;
use std::io::{self, BufRead, BufWriter, IoSlice, Write};
use std::net::{SocketAddr, TcpStream, ToSocketAddrs};
use std::os::fd::{AsFd, AsRawFd};
use std::os::unix::net::UnixStream;
use std::time::{Duration, Instant};

/// Most values one client has proposed and not yet seen decided.
pub const PROPOSE_WINDOW_VALUES: usize = 4096;
/// Values per `Propose` frame.
const VALUES_PER_REQUEST: usize = 256;
/// Pause after the node answered `Busy`.
const BUSY_PAUSE: Duration = Duration::from_millis(10);
/// `reconfigure` follows this many `NotLeader` hints at most before it gives up.
pub const REDIRECTS_MAX: usize = 4;
/// Pause between two status polls (and before asking again after `Busy` or a node that
/// knows no leader yet).
const POLL_PAUSE: Duration = Duration::from_millis(5);
/// Most nodes one list names (`--members`, `--learners`).
const LIST_NODES_MAX: usize = 1024;

/// Arguments of `abcast propose`.
#[derive(clap::Args, Debug, Clone)]
pub struct ProposeArgs {
    /// Client address of a node (its `client_addr`, or its `client_path` socket).
    #[arg(long)]
    pub node: String,
    /// Values to propose; without any, one value per line of standard input.
    pub values: Vec<String>,
    /// Give up when the node answers nothing for this many seconds.
    #[arg(long, default_value_t = 30)]
    pub timeout_s: u64,
}

/// Arguments of `abcast learn`.
#[derive(clap::Args, Debug, Clone)]
pub struct LearnArgs {
    /// Client address of a node (its `client_addr`, or its `client_path` socket).
    #[arg(long)]
    pub node: String,
    /// Exit after this many values.
    #[arg(long)]
    pub count: Option<u64>,
    /// First instance wanted (0 and 1 both mean the start); the node replays its delivery
    /// history from there, then streams what comes. Instances it cannot hand over (not
    /// held, covered by a snapshot, skipped) come as one `gap` line each, never silently.
    #[arg(long, default_value_t = 0)]
    pub from: Instance,
}

/// Arguments of `abcast follow`.
#[derive(clap::Args, Debug, Clone)]
pub struct FollowArgs {
    /// Client address of a Multi-Ring node (its `client_addr`, or its `client_path` socket).
    #[arg(long)]
    pub node: String,
    /// The ring (its `group` in `[[rings]]`).
    #[arg(long)]
    pub ring: u16,
    /// Stop following the ring instead of starting.
    #[arg(long)]
    pub stop: bool,
}

/// Arguments of `abcast status`.
#[derive(clap::Args, Debug, Clone)]
pub struct StatusArgs {
    /// Client address of a node (its `client_addr`, or its `client_path` socket).
    #[arg(long)]
    pub node: String,
    /// Print one JSON object instead of the text.
    #[arg(long)]
    pub json: bool,
    /// Give up when the node answers nothing for this many seconds.
    #[arg(long, default_value_t = 10, allow_hyphen_values = true,
          value_parser = clap::value_parser!(u64).range(1..=3600))]
    pub timeout_s: u64,
}

/// Arguments of `abcast reconfigure`.
#[derive(clap::Args, Debug, Clone)]
pub struct ReconfigureArgs {
    /// Client address of a node (its `client_addr`, or its `client_path` socket); a node
    /// that is not the leader names the leader, which is asked instead.
    #[arg(long)]
    pub node: String,
    /// The voting members of the new configuration, comma-separated node ids (e.g. 0,1,3).
    #[arg(long, value_name = "IDS", value_parser = parse_node_list)]
    pub members: NodeList,
    /// Non-voting learners of the new configuration (Raft only; Sequence Paxos refuses
    /// them: every member is a replica).
    #[arg(long, value_name = "IDS", value_parser = parse_node_list)]
    pub learners: Option<NodeList>,
    /// Give up when the change is not in effect after this many seconds.
    #[arg(long, default_value_t = 30, allow_hyphen_values = true,
          value_parser = clap::value_parser!(u64).range(1..=86400))]
    pub timeout_s: u64,
    /// Print one JSON object instead of the text.
    #[arg(long)]
    pub json: bool,
}

/// Arguments of `abcast read`.
#[derive(clap::Args, Debug, Clone)]
pub struct ReadArgs {
    /// Client address of a node (its `client_addr`, or its `client_path` socket): the
    /// leader, for a protocol with a read index (Sequence Paxos, Raft).
    #[arg(long)]
    pub node: String,
    /// Give up when no read point comes within this many seconds.
    #[arg(long, default_value_t = 10, allow_hyphen_values = true,
          value_parser = clap::value_parser!(u64).range(1..=3600))]
    pub timeout_s: u64,
    /// Print one JSON object instead of the text.
    #[arg(long)]
    pub json: bool,
}

/// Node ids as `--members` and `--learners` give them.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct NodeList(pub Vec<u32>);

/// A comma-separated list of node ids, each once (`--members 0,1,3`).
pub fn parse_node_list(text: &str) -> Result<NodeList, String> {
    let mut ids: Vec<u32> = Vec::new();
    for part in text.split(',') {
        let part = part.trim();
        if part.is_empty() {
            return Err(format!(
                "{text:?}: an empty entry; give node ids separated by commas, e.g. 0,1,3"
            ));
        }
        let id: u32 = part.parse().map_err(|_| {
            format!(
                "{part:?} is not a node id (a number from 0 to {})",
                u32::MAX
            )
        })?;
        if ids.contains(&id) {
            return Err(format!("node {id} is named twice"));
        }
        ids.push(id);
        if ids.len() > LIST_NODES_MAX {
            return Err(format!("more than {LIST_NODES_MAX} nodes"));
        }
    }
    Ok(NodeList(ids))
}

/// The configuration `--members` and `--learners` describe: members with every role,
/// learners without the acceptor role. A node in both lists is refused.
pub fn configuration_of(members: &[u32], learners: &[u32]) -> Result<Configuration, String> {
    if members.is_empty() {
        return Err("--members names no node: a configuration needs a voting member".into());
    }
    if let Some(n) = learners.iter().find(|n| members.contains(n)) {
        return Err(format!(
            "node {n} is in --members and in --learners: a node votes or only learns"
        ));
    }
    let mut out: Vec<Member> = members
        .iter()
        .map(|&id| Member {
            id: NodeId(id),
            roles: Roles::PAL,
        })
        .collect();
    out.extend(learners.iter().map(|&id| Member {
        id: NodeId(id),
        roles: Roles {
            proposer: true,
            acceptor: false,
            learner: true,
        },
    }));
    let c = Configuration {
        id: 0,
        members: out,
    };
    c.validate().map_err(|e| e.to_string())?;
    Ok(c)
}

/// Why a client command failed.
#[derive(Debug)]
pub enum ClientError {
    /// A command-line argument is out of its space (exit status 2).
    Usage(String),
    /// The node is not the leader: `hint` is the one it believes in, with its client port.
    NotLeader {
        hint: Option<NodeId>,
        client_addr: Option<SocketAddr>,
    },
    /// The node is busy (a bound reached, a change already under way): retry later.
    Busy,
    Connect {
        addr: String,
        source: io::Error,
    },
    Io(io::Error),
    /// The node sent bytes that are not a frame.
    Frame(FrameError),
    /// The node sent a frame that does not decode.
    Decode(DecodeError),
    /// The node refused a value, with its reason.
    Refused(String),
    /// The node sent something this client did not ask for.
    Unexpected(String),
    /// The node answered nothing for this long.
    Timeout(Duration),
    /// The node closed the connection.
    Closed,
    /// The subscription does not carry instances `[gap.from, gap.to)` (from
    /// `next_delivery`; `next_event` returns gaps as events).
    Gap(Gap),
}

/// One event of a subscription.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum LearnEvent {
    Delivered(Instance, Batch),
    Gap(Gap),
}

impl fmt::Display for ClientError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            ClientError::Usage(m) => write!(f, "{m}"),
            ClientError::NotLeader { hint, client_addr } => match (hint, client_addr) {
                (Some(l), Some(a)) => write!(
                    f,
                    "the node is not the leader; the leader is node {} (client port {a})",
                    l.0
                ),
                (Some(l), None) => write!(
                    f,
                    "the node is not the leader; the leader is node {} (its client port is \
                     not in the node's config)",
                    l.0
                ),
                (None, _) => write!(
                    f,
                    "the node is not the leader and knows no leader (an election may be \
                     under way, or the node is outside the configuration)"
                ),
            },
            ClientError::Busy => write!(
                f,
                "the node is busy (a change already under way, the leader still preparing, \
                 or a bound reached); retry later"
            ),
            ClientError::Connect { addr, source } => {
                write!(f, "cannot connect to {addr}: {source}")
            }
            ClientError::Io(e) => write!(f, "{e}"),
            ClientError::Frame(e) => write!(f, "bad frame from the node: {e}"),
            ClientError::Decode(e) => write!(f, "bad answer from the node: {e}"),
            ClientError::Refused(m) => write!(f, "the node refused: {m}"),
            ClientError::Unexpected(m) => write!(f, "unexpected answer from the node: {m}"),
            ClientError::Timeout(d) => {
                write!(f, "no answer from the node for {:.1} s", d.as_secs_f64())
            }
            ClientError::Closed => write!(f, "the node closed the connection"),
            ClientError::Gap(g) => write!(f, "{}", format_gap(g)),
        }
    }
}

impl std::error::Error for ClientError {}

impl ClientError {
    /// The process exit status for this error: 2 for bad input, 1 otherwise.
    pub fn exit_code(&self) -> u8 {
        match self {
            ClientError::Usage(_) => 2,
            _ => 1,
        }
    }
}

impl From<io::Error> for ClientError {
    fn from(e: io::Error) -> Self {
        ClientError::Io(e)
    }
}

/// A client's connection: TCP, the node's Unix socket (`client_path`) on its host, or
/// that socket with the shared-memory rings behind it (`runtime::shm`).
#[derive(Debug)]
enum Stream {
    Tcp(TcpStream),
    Unix(UnixStream),
    Shm(ShmStream),
}

/// The shared-memory channel's client end: frames go through the rings, the socket
/// carries doorbells.
#[derive(Debug)]
struct ShmStream {
    sock: UnixStream,
    link: ShmLink,
    /// What `set_read_timeout` asked for: the longest one wait for data may take.
    read_timeout: Option<Duration>,
}

impl ShmStream {
    fn write_vectored(&mut self, iov: &[IoSlice<'_>]) -> io::Result<usize> {
        loop {
            let n = self.link.write_vectored(iov)?;
            if self.link.take_doorbell() {
                shm::ring_doorbell(self.sock.as_fd())?;
            }
            if n > 0 || iov.iter().all(|b| b.is_empty()) {
                return Ok(n);
            }
            // The node rings when it has read: no timeout, as a blocking write has none.
            if !self.link.wait_for_room()? && !self.sleep(None)? {
                return Err(io::Error::new(
                    io::ErrorKind::BrokenPipe,
                    "the node closed the connection",
                ));
            }
        }
    }

    /// Reads what the node's ring holds onto the end of `rbuf`, waiting up to the read
    /// timeout for some; 0: the node closed the connection.
    fn read_into(&mut self, rbuf: &mut BytesMut, max: usize) -> io::Result<usize> {
        loop {
            let n = self.link.read_into(rbuf, max)?;
            if self.link.take_doorbell() {
                shm::ring_doorbell(self.sock.as_fd())?;
            }
            if n > 0 {
                return Ok(n);
            }
            if !self.link.wait_for_data()? && !self.sleep(self.read_timeout)? {
                // Closed, and the ring is read to its end (a last look: the node writes
                // before it closes).
                return Ok(self.link.read_into(rbuf, max)?);
            }
        }
    }

    /// Sleeps until a doorbell (or `timeout`: `TimedOut`), then drains the doorbells.
    /// False: the node closed the socket.
    fn sleep(&mut self, timeout: Option<Duration>) -> io::Result<bool> {
        let ms = timeout.map_or(-1, |t| t.as_millis().clamp(1, i32::MAX as u128) as i32);
        let mut p = libc::pollfd {
            fd: self.sock.as_raw_fd(),
            events: libc::POLLIN,
            revents: 0,
        };
        // SAFETY: poll on one pollfd that lives through the call.
        let r = unsafe { libc::poll(&mut p, 1, ms) };
        if r < 0 {
            let e = io::Error::last_os_error();
            return if e.kind() == io::ErrorKind::Interrupted {
                Ok(true)
            } else {
                Err(e)
            };
        }
        if r == 0 {
            return Err(io::ErrorKind::TimedOut.into());
        }
        shm::drain_doorbells(self.sock.as_fd())
    }
}

impl Stream {
    fn write_vectored(&mut self, iov: &[IoSlice<'_>]) -> io::Result<usize> {
        match self {
            Stream::Tcp(s) => s.write_vectored(iov),
            Stream::Unix(s) => s.write_vectored(iov),
            Stream::Shm(s) => s.write_vectored(iov),
        }
    }

    fn set_read_timeout(&mut self, t: Option<Duration>) -> io::Result<()> {
        match self {
            Stream::Tcp(s) => s.set_read_timeout(t),
            Stream::Unix(s) => s.set_read_timeout(t),
            Stream::Shm(s) => {
                s.read_timeout = t;
                Ok(())
            }
        }
    }
}

/// How a client on the node's host uses its Unix client socket.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum LocalMode {
    /// `unix:PATH`: frames on the socket.
    Socket,
    /// `shm:PATH`: frames through the shared-memory rings; fails if the node offers none.
    Shm,
    /// A bare path: the rings when the node offers them, else the socket.
    Auto,
}

/// The path in a node address that names a Unix socket, and how to use it: `unix:PATH`,
/// `shm:PATH`, or any address with a `/` in it (`host:port` never has one).
pub fn local_path(addr: &str) -> Option<(&str, LocalMode)> {
    if let Some(p) = addr.strip_prefix("unix:") {
        return Some((p, LocalMode::Socket));
    }
    if let Some(p) = addr.strip_prefix("shm:") {
        return Some((p, LocalMode::Shm));
    }
    addr.contains('/').then_some((addr, LocalMode::Auto))
}

/// The path in a node address that names a Unix socket (see [`local_path`]).
pub fn unix_path(addr: &str) -> Option<&str> {
    local_path(addr).map(|(p, _)| p)
}

/// Asks the node behind `sock` for the shared-memory rings (`ShmOpen`, the connection's
/// first frame) and maps them. `Refused`: the node offers none; the socket goes on as it
/// was.
fn open_shm(sock: &UnixStream) -> Result<ShmLink, ClientError> {
    let ask = ClientFrame::ShmOpen;
    let header = frame::encode_client_header_unchecked(ask.kind(), &ask.encode())
        .map_err(ClientError::Frame)?;
    (&*sock).write_all(&header)?;
    // The answer comes alone (nothing else is in flight), with the region's descriptor.
    let mut buf = [0u8; 256];
    let mut got = BytesMut::new();
    let mut region = None;
    let frame = loop {
        let (n, fd) = shm::recv_with_fd(sock.as_fd(), &mut buf)?;
        if n == 0 {
            return Err(ClientError::Closed);
        }
        region = region.or(fd);
        got.extend_from_slice(&buf[..n]);
        if let Some(f) = frame::decode(&mut got).map_err(ClientError::Frame)? {
            if !got.is_empty() {
                return Err(ClientError::Unexpected(format!(
                    "{} bytes after the answer to ShmOpen",
                    got.len()
                )));
            }
            break f;
        }
    };
    match ClientFrame::decode(frame.kind, frame.body).map_err(ClientError::Decode)? {
        ClientFrame::ShmReady { ring_bytes } => {
            let fd = region.ok_or_else(|| {
                ClientError::Unexpected("ShmReady came without the region".into())
            })?;
            let ring_bytes = usize::try_from(ring_bytes).unwrap_or(usize::MAX);
            ShmLink::open_for_client(fd, ring_bytes)
                .map_err(|e| ClientError::Unexpected(e.to_string()))
        }
        ClientFrame::Error { text } => Err(ClientError::Refused(text)),
        other => Err(unexpected(&other)),
    }
}

/// A blocking connection to a node's client port or client socket.
#[derive(Debug)]
pub struct Client {
    stream: Stream,
    rbuf: BytesMut,
    /// The read timeout last set on the socket (`recv` sets it only when it must shrink).
    read_timeout: Option<Duration>,
    /// The node is on this host: frames leave without a body checksum
    /// (`frame::CLIENT_UNCHECKED`; the node decides the same for its own).
    unchecked: bool,
}

impl Client {
    /// Connects to `addr`: `host:port` (the node's `client_addr`), or the path of its
    /// client socket (`client_path`, see [`unix_path`]) for a client on the node's host.
    pub fn connect(addr: &str) -> Result<Client, ClientError> {
        let err = |source| ClientError::Connect {
            addr: addr.to_string(),
            source,
        };
        if let Some((path, mode)) = local_path(addr) {
            let sock = UnixStream::connect(path).map_err(err)?;
            let stream = match mode {
                LocalMode::Socket => Stream::Unix(sock),
                LocalMode::Shm | LocalMode::Auto => match open_shm(&sock) {
                    Ok(link) => Stream::Shm(ShmStream {
                        sock,
                        link,
                        read_timeout: None,
                    }),
                    Err(ClientError::Refused(_)) if mode == LocalMode::Auto => Stream::Unix(sock),
                    // A node older than the rings closes on the unknown frame: start over
                    // on the plain socket.
                    Err(ClientError::Closed | ClientError::Io(_)) if mode == LocalMode::Auto => {
                        Stream::Unix(UnixStream::connect(path).map_err(err)?)
                    }
                    Err(e) => return Err(e),
                },
            };
            // One host, no wire: frames go without a body checksum, as the node's do.
            return Ok(Client {
                stream,
                rbuf: BytesMut::with_capacity(1 << 16),
                read_timeout: None,
                unchecked: true,
            });
        }
        let addrs: Vec<_> = addr.to_socket_addrs().map_err(err)?.collect();
        let mut last = io::Error::new(io::ErrorKind::NotFound, "address resolves to nothing");
        for a in addrs {
            match TcpStream::connect(a) {
                Ok(stream) => {
                    stream.set_nodelay(true).map_err(err)?;
                    let unchecked = match (stream.local_addr(), stream.peer_addr()) {
                        (Ok(l), Ok(p)) => frame::same_host(l, p),
                        _ => false,
                    };
                    return Ok(Client {
                        stream: Stream::Tcp(stream),
                        rbuf: BytesMut::with_capacity(1 << 16),
                        read_timeout: None,
                        unchecked,
                    });
                }
                Err(e) => last = e,
            }
        }
        Err(err(last))
    }

    /// How this client reaches its node: "TCP", "Unix socket" or "shared memory".
    pub fn channel(&self) -> &'static str {
        match self.stream {
            Stream::Tcp(_) => "TCP",
            Stream::Unix(_) => "Unix socket",
            Stream::Shm(_) => "shared memory",
        }
    }

    /// Writes one frame: its header and body chunks in vectored writes, without copying
    /// the body into one buffer first.
    pub fn send(&mut self, f: &ClientFrame) -> Result<(), ClientError> {
        let chunks = f.encode();
        let header = if self.unchecked {
            frame::encode_client_header_unchecked(f.kind(), &chunks)
        } else {
            frame::encode_header(f.kind(), 0, &chunks)
        }
        .map_err(ClientError::Frame)?;
        let mut parts: Vec<&[u8]> = Vec::with_capacity(chunks.len() + 1);
        parts.push(&header);
        parts.extend(chunks.iter().map(|c| &c[..]).filter(|c| !c.is_empty()));
        let (mut at, mut off) = (0usize, 0usize);
        while at < parts.len() {
            let iov: Vec<IoSlice<'_>> = std::iter::once(IoSlice::new(&parts[at][off..]))
                .chain(parts[at + 1..].iter().take(1023).map(|p| IoSlice::new(p)))
                .collect();
            let mut n = match self.stream.write_vectored(&iov) {
                Ok(0) => return Err(io::Error::from(io::ErrorKind::WriteZero).into()),
                Ok(n) => n,
                Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
                Err(e) => return Err(e.into()),
            };
            // Step over what was written: whole parts, then into the next one.
            while n > 0 && at < parts.len() {
                let left = parts[at].len() - off;
                if n >= left {
                    n -= left;
                    at += 1;
                    off = 0;
                } else {
                    off += n;
                    n = 0;
                }
            }
        }
        Ok(())
    }

    /// The next frame from the node; `timeout` bounds the wait (`None` = forever).
    pub fn recv(&mut self, timeout: Option<Duration>) -> Result<ClientFrame, ClientError> {
        let deadline = timeout.map(|t| (Instant::now() + t, t));
        loop {
            if let Some(f) = frame::decode(&mut self.rbuf).map_err(ClientError::Frame)? {
                return ClientFrame::decode(f.kind, f.body).map_err(ClientError::Decode);
            }
            let wait = match deadline {
                Some((d, total)) => {
                    let left = d.saturating_duration_since(Instant::now());
                    if left.is_zero() {
                        return Err(ClientError::Timeout(total));
                    }
                    Some(left)
                }
                None => None,
            };
            // A socket timeout no longer than what is left serves this wait too (a read
            // that ends early loops): one setsockopt per change, not one per read.
            let keep = match (self.read_timeout, wait) {
                (None, None) => true,
                (Some(set), Some(w)) => set <= w,
                _ => false,
            };
            if !keep {
                self.stream.set_read_timeout(wait)?;
                self.read_timeout = wait;
            }
            match self.read_more() {
                Ok(0) => return Err(ClientError::Closed),
                Ok(_) => {}
                Err(e)
                    if matches!(
                        e.kind(),
                        io::ErrorKind::WouldBlock | io::ErrorKind::TimedOut
                    ) => {}
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                Err(e) => return Err(e.into()),
            }
        }
    }

    /// Reads what the socket holds into the free room at the end of `rbuf`, without an
    /// intermediate buffer; the count read.
    fn read_more(&mut self) -> io::Result<usize> {
        const READ_BYTES: usize = 256 << 10;
        let fd = match &mut self.stream {
            Stream::Tcp(s) => s.as_raw_fd(),
            Stream::Unix(s) => s.as_raw_fd(),
            Stream::Shm(s) => return s.read_into(&mut self.rbuf, READ_BYTES),
        };
        self.rbuf.reserve(READ_BYTES);
        let spare = self.rbuf.spare_capacity_mut();
        // SAFETY: read(2) writes at most `spare.len()` bytes into memory this BytesMut owns
        // and has reserved; `set_len` then covers only the bytes it wrote.
        let n = unsafe { libc::read(fd, spare.as_mut_ptr().cast::<libc::c_void>(), spare.len()) };
        if n < 0 {
            return Err(io::Error::last_os_error());
        }
        let n = n as usize;
        // SAFETY: the kernel initialised exactly `n` bytes past the old length.
        unsafe { self.rbuf.set_len(self.rbuf.len() + n) };
        Ok(n)
    }

    /// Proposes every payload, in order, and returns when all are decided. `on_decided` sees
    /// each id as its decision arrives. Fails if the node answers nothing for `timeout`.
    pub fn propose_all(
        &mut self,
        payloads: Vec<Bytes>,
        timeout: Duration,
        mut on_decided: impl FnMut(ValueId),
    ) -> Result<Vec<ValueId>, ClientError> {
        let mut queue: VecDeque<Bytes> = payloads.into();
        let mut all_ids = Vec::with_capacity(queue.len());
        let mut pending: HashSet<ValueId> = HashSet::new();
        // Decisions can overtake the `Proposed` answer (a one-node ring decides at once).
        let mut early: HashSet<ValueId> = HashSet::new();
        let mut asked: Option<usize> = None;
        loop {
            if asked.is_none() && !queue.is_empty() && pending.len() < PROPOSE_WINDOW_VALUES {
                let n = queue
                    .len()
                    .min(VALUES_PER_REQUEST)
                    .min(PROPOSE_WINDOW_VALUES - pending.len());
                let n = n.min(MAX_VALUES_PER_FRAME);
                let batch: Vec<Bytes> = queue.iter().take(n).cloned().collect();
                self.send(&ClientFrame::Propose { payloads: batch })?;
                asked = Some(n);
            }
            if asked.is_none() && queue.is_empty() && pending.is_empty() {
                return Ok(all_ids);
            }
            match self.recv(Some(timeout))? {
                ClientFrame::Proposed { ids } => {
                    let Some(n) = asked.take() else {
                        return Err(ClientError::Unexpected("Proposed without a request".into()));
                    };
                    if ids.len() > n {
                        return Err(ClientError::Unexpected(format!(
                            "{} ids for {n} values",
                            ids.len()
                        )));
                    }
                    for id in &ids {
                        queue.pop_front();
                        all_ids.push(*id);
                        if early.remove(id) {
                            on_decided(*id);
                        } else {
                            pending.insert(*id);
                        }
                    }
                    if ids.len() < n {
                        std::thread::sleep(BUSY_PAUSE);
                    }
                }
                ClientFrame::Busy => {
                    asked = None;
                    std::thread::sleep(BUSY_PAUSE);
                }
                ClientFrame::Error { text } => return Err(ClientError::Refused(text)),
                ClientFrame::Decided { ids } => {
                    for id in ids {
                        if pending.remove(&id) {
                            on_decided(id);
                        } else {
                            early.insert(id);
                        }
                    }
                }
                other => {
                    return Err(ClientError::Unexpected(format!(
                        "frame kind {}",
                        other.kind()
                    )));
                }
            }
        }
    }

    /// Asks for every delivery from `from_instance` on.
    pub fn subscribe(&mut self, from_instance: Instance) -> Result<(), ClientError> {
        self.send(&ClientFrame::Subscribe { from_instance })
    }

    /// Asks a Multi-Ring node's learner to start (`on`) or stop following a ring. Returns
    /// once the node has asked the ring; the change takes effect when the ring decides it.
    pub fn follow(&mut self, group: u16, on: bool) -> Result<(), ClientError> {
        self.send(&ClientFrame::Follow { group, on })?;
        loop {
            match self.recv(Some(Duration::from_secs(10)))? {
                ClientFrame::FollowAsked => return Ok(()),
                ClientFrame::Error { text } => return Err(ClientError::Refused(text)),
                // Deliveries or acks of an earlier request on this connection.
                ClientFrame::Delivered { .. } | ClientFrame::Decided { .. } => continue,
                other => {
                    return Err(ClientError::Unexpected(format!(
                        "frame kind {}",
                        other.kind()
                    )));
                }
            }
        }
    }

    /// One answer to a request on this connection: the first frame that is not a delivery
    /// or a decision of an earlier request (those are skipped).
    fn answer(&mut self, timeout: Duration) -> Result<ClientFrame, ClientError> {
        let deadline = Instant::now() + timeout;
        loop {
            let left = deadline.saturating_duration_since(Instant::now());
            if left.is_zero() {
                return Err(ClientError::Timeout(timeout));
            }
            match self.recv(Some(left))? {
                ClientFrame::Delivered { .. } | ClientFrame::Decided { .. } => continue,
                ClientFrame::Gap { .. } => continue,
                f => return Ok(f),
            }
        }
    }

    /// The node's status: leader, configuration, followers' progress (`abcast status`).
    pub fn status(&mut self, timeout: Duration) -> Result<StatusReport, ClientError> {
        self.send(&ClientFrame::GetStatus)?;
        match self.answer(timeout)? {
            ClientFrame::StatusReport { report } => Ok(*report),
            ClientFrame::Error { text } => Err(ClientError::Refused(text)),
            other => Err(unexpected(&other)),
        }
    }

    /// Asks the node to move to `config` (its id is ignored). `Ok` once the leader started
    /// the change; `NotLeader` (with the leader, when known), `Busy`, or `Refused` with
    /// the protocol's reason otherwise.
    pub fn reconfigure(
        &mut self,
        config: &Configuration,
        timeout: Duration,
    ) -> Result<(), ClientError> {
        self.send(&ClientFrame::Reconfigure {
            config: config.clone(),
        })?;
        match self.answer(timeout)? {
            ClientFrame::ReconfigureAsked => Ok(()),
            f => Err(refusal(f)),
        }
    }

    /// A linearizable-read barrier at this node: the read point (`abcast read`).
    pub fn read_barrier(&mut self, timeout: Duration) -> Result<Instance, ClientError> {
        self.send(&ClientFrame::ReadBarrier)?;
        match self.answer(timeout)? {
            ClientFrame::ReadPoint { upto } => Ok(upto),
            f => Err(refusal(f)),
        }
    }

    /// The next delivered batch after `subscribe`; a gap is an error (`ClientError::Gap`).
    pub fn next_delivery(
        &mut self,
        timeout: Option<Duration>,
    ) -> Result<(Instance, Batch), ClientError> {
        match self.next_event(timeout)? {
            LearnEvent::Delivered(i, b) => Ok((i, b)),
            LearnEvent::Gap(g) => Err(ClientError::Gap(g)),
        }
    }

    /// The next event of a subscription: a delivered batch or a gap.
    pub fn next_event(&mut self, timeout: Option<Duration>) -> Result<LearnEvent, ClientError> {
        loop {
            match self.recv(timeout)? {
                ClientFrame::Delivered { instance, batch } => {
                    return Ok(LearnEvent::Delivered(instance, batch));
                }
                ClientFrame::Gap { gap } => return Ok(LearnEvent::Gap(gap)),
                ClientFrame::Decided { .. } => continue,
                other => {
                    return Err(ClientError::Unexpected(format!(
                        "frame kind {}",
                        other.kind()
                    )));
                }
            }
        }
    }
}

fn unexpected(f: &ClientFrame) -> ClientError {
    ClientError::Unexpected(format!("frame kind {}", f.kind()))
}

/// A refusal frame as an error.
fn refusal(f: ClientFrame) -> ClientError {
    match f {
        ClientFrame::NotLeader { hint, client_addr } => {
            ClientError::NotLeader { hint, client_addr }
        }
        ClientFrame::Busy => ClientError::Busy,
        ClientFrame::Error { text } => ClientError::Refused(text),
        other => unexpected(&other),
    }
}

/// Whether `have` is `want` as `reconfigure` asked for it: the same nodes, each voting or
/// not as asked (ids and order of members aside).
pub fn same_members(have: &Configuration, want: &Configuration) -> bool {
    let key = |c: &Configuration| {
        let mut v: Vec<(u32, bool)> = c
            .members
            .iter()
            .map(|m| (m.id.0, m.roles.acceptor))
            .collect();
        v.sort_unstable();
        v
    };
    key(have) == key(want)
}

/// What [`reconfigure_and_wait`] saw.
#[derive(Debug, Clone)]
pub struct ReconfigureOutcome {
    /// The client port of the node that took the request (the leader then).
    pub asked_at: String,
    /// The leader's id when it took the request, if it said.
    pub asked_leader: Option<NodeId>,
    /// Since the call: until the leader took the request, until the change was in effect.
    pub asked_after: Duration,
    pub in_effect_after: Duration,
    /// The status that showed the change in effect (`configuration` is the new one).
    pub report: StatusReport,
    /// The `NotLeader` hints followed, as `(node, client port)`.
    pub redirects: Vec<(Option<NodeId>, String)>,
}

/// Asks `node` to move the cluster to `config`, following `NotLeader` hints to the leader
/// (at most [`REDIRECTS_MAX`]) and asking again after `Busy` or a node that knows no
/// leader yet, then polls the status until the new configuration is in effect: a status
/// whose `configuration` has `config`'s members (voters and learners as asked), a higher
/// id than before the request, and no change pending. Fails when that is not so within
/// `timeout`, saying how far it got.
pub fn reconfigure_and_wait(
    node: &str,
    config: &Configuration,
    timeout: Duration,
) -> Result<ReconfigureOutcome, ClientError> {
    let t0 = Instant::now();
    let deadline = t0 + timeout;
    let left = |what: &str| -> Result<Duration, ClientError> {
        let l = deadline.saturating_duration_since(Instant::now());
        if l.is_zero() {
            Err(ClientError::Refused(format!(
                "no answer within {:.1} s while {what}",
                timeout.as_secs_f64()
            )))
        } else {
            Ok(l)
        }
    };
    let mut addr = node.to_string();
    let mut redirects = Vec::new();
    // 1. The leader takes the request.
    let (mut client, before) = loop {
        let mut c = Client::connect(&addr)?;
        let before = c.status(left("reading the status")?)?;
        match c.reconfigure(config, left("asking for the change")?) {
            Ok(()) => break (c, before),
            Err(ClientError::NotLeader {
                hint,
                client_addr: Some(a),
            }) if redirects.len() < REDIRECTS_MAX && a.to_string() != addr => {
                addr = a.to_string();
                redirects.push((hint, addr.clone()));
            }
            Err(ClientError::NotLeader { hint: None, .. }) | Err(ClientError::Busy) => {
                left("waiting for a leader that takes the change")?;
                std::thread::sleep(POLL_PAUSE * 10);
            }
            Err(e) => return Err(e),
        }
    };
    let asked_after = t0.elapsed();
    let before_id = before.configuration.as_ref().map(|c| c.id);
    // 2. Until the new configuration is in effect. The node that took the request may
    // step down (a leader that removed itself); its status still shows the change, and if
    // it does not, the leader it names is asked.
    let mut last: Option<StatusReport> = None;
    loop {
        let wait = match left("waiting for the new configuration to take effect") {
            Ok(w) => w,
            Err(e) => {
                return Err(match last {
                    Some(r) => ClientError::Refused(format!(
                        "{e}; the last status ({}) shows {}{}",
                        addr,
                        r.configuration
                            .as_ref()
                            .map_or("no configuration".to_string(), describe_configuration),
                        r.configuration_pending
                            .as_ref()
                            .map_or(String::new(), |p| format!(
                                ", a change pending to {}",
                                describe_configuration(p)
                            ))
                    )),
                    None => e,
                });
            }
        };
        match client.status(wait.min(Duration::from_secs(2))) {
            Ok(r) => {
                let done = r.configuration_pending.is_none()
                    && r.configuration.as_ref().is_some_and(|c| {
                        same_members(c, config) && before_id.is_none_or(|b| c.id > b)
                    });
                if done {
                    return Ok(ReconfigureOutcome {
                        asked_at: addr,
                        asked_leader: before.leader,
                        asked_after,
                        in_effect_after: t0.elapsed(),
                        report: r,
                        redirects,
                    });
                }
                let elsewhere = r
                    .leader
                    .filter(|&l| l != r.node)
                    .and(r.leader_client_addr)
                    .map(|a| a.to_string())
                    .filter(|a| *a != addr);
                last = Some(r);
                if let Some(a) = elsewhere
                    && let Ok(c) = Client::connect(&a)
                {
                    client = c;
                    addr = a;
                }
            }
            Err(_) => {
                // The connection broke (or the node is slow): connect again.
                if let Ok(c) = Client::connect(&addr) {
                    client = c;
                }
            }
        }
        std::thread::sleep(POLL_PAUSE);
    }
}

/// `voters 0, 1, 3; learners 4` (configuration 2).
pub fn describe_configuration(c: &Configuration) -> String {
    let list = |acceptor: bool| {
        let v: Vec<String> = (c.members.iter())
            .filter(|m| m.roles.acceptor == acceptor)
            .map(|m| m.id.0.to_string())
            .collect();
        v.join(", ")
    };
    let learners = list(false);
    if learners.is_empty() {
        format!("configuration {}: voters {}", c.id, list(true))
    } else {
        format!(
            "configuration {}: voters {}; learners {learners}",
            c.id,
            list(true)
        )
    }
}

fn configuration_json(c: &Configuration) -> Value {
    let ids = |acceptor: bool| -> Vec<u32> {
        (c.members.iter())
            .filter(|m| m.roles.acceptor == acceptor)
            .map(|m| m.id.0)
            .collect()
    };
    json!({ "id": c.id, "voters": ids(true), "learners": ids(false) })
}

/// The status as one JSON object (`abcast status --json`).
pub fn status_json(r: &StatusReport) -> Value {
    json!({
        "node": r.node.0,
        "leader": r.leader.map(|n| n.0),
        "leader_client_addr": r.leader_client_addr.map(|a| a.to_string()),
        "leading": r.leading,
        "amnesic": r.amnesic,
        "ballot": { "round": r.ballot.round, "node": r.ballot.node.0,
                    "incarnation": r.ballot.incarnation },
        "delivered_upto": r.delivered_upto,
        "decided_max": r.decided_max,
        "values_in_flight": r.values_in_flight,
        "configuration": r.configuration.as_ref().map(configuration_json),
        "configuration_pending": r.configuration_pending.as_ref().map(configuration_json),
        "followers": r.followers.iter().map(|f| json!({
            "node": f.node.0,
            "voter": f.voter,
            "accepted": f.accepted,
            "decided": f.decided,
        })).collect::<Vec<_>>(),
    })
}

/// The status as text (`abcast status`).
pub fn status_text(r: &StatusReport, addr: &str) -> String {
    use std::fmt::Write as _;
    let mut s = String::new();
    let leader = match (r.leader, r.leader_client_addr) {
        (Some(l), _) if l == r.node => format!(
            "this node ({})",
            if r.leading {
                "leading"
            } else {
                "taking the lead: preparing"
            }
        ),
        (Some(l), Some(a)) => format!("node {} (client port {a})", l.0),
        (Some(l), None) => format!("node {}", l.0),
        (None, _) => "none known".into(),
    };
    let _ = writeln!(s, "node {} at {addr}", r.node.0);
    let _ = writeln!(s, "  leader:        {leader}");
    let _ = writeln!(
        s,
        "  ballot:        round {}, node {}, incarnation {}{}",
        r.ballot.round,
        r.ballot.node.0,
        r.ballot.incarnation,
        if r.amnesic {
            " (amnesic: lost its state at a restart, not yet repaired)"
        } else {
            ""
        }
    );
    let _ = writeln!(
        s,
        "  delivered:     up to {} here; decided up to {}; {} of this node's values in flight",
        r.delivered_upto, r.decided_max, r.values_in_flight
    );
    match &r.configuration {
        Some(c) => {
            let _ = writeln!(s, "  configuration: {}", describe_configuration(c));
        }
        None => {
            let _ = writeln!(
                s,
                "  configuration: none in effect (a token ring forming its next ring) or not \
                 reported by this protocol"
            );
        }
    }
    if let Some(p) = &r.configuration_pending {
        let _ = writeln!(s, "  pending:       {}", describe_configuration(p));
    }
    if !r.followers.is_empty() {
        let _ = writeln!(s, "  followers, as this leader sees them:");
        let _ = writeln!(
            s,
            "    {:>6}  {:>5}  {:>12}  {:>12}  {:>10}",
            "node", "votes", "accepted", "decided", "behind"
        );
        let top = r
            .followers
            .iter()
            .map(|f| f.accepted)
            .max()
            .unwrap_or(0)
            .max(r.decided_max);
        for f in &r.followers {
            let _ = writeln!(
                s,
                "    {:>6}  {:>5}  {:>12}  {:>12}  {:>10}",
                f.node.0,
                if f.voter { "yes" } else { "no" },
                f.accepted,
                f.decided,
                top.saturating_sub(f.accepted)
            );
        }
    }
    s
}

/// `abcast status`.
pub fn run_status(args: StatusArgs) -> Result<(), ClientError> {
    let mut client = Client::connect(&args.node)?;
    let r = client.status(Duration::from_secs(args.timeout_s))?;
    if args.json {
        println!("{}", status_json(&r));
    } else {
        print!("{}", status_text(&r, &args.node));
    }
    Ok(())
}

/// `abcast reconfigure`.
pub fn run_reconfigure(args: ReconfigureArgs) -> Result<(), ClientError> {
    let learners = args.learners.clone().map(|l| l.0).unwrap_or_default();
    let config = configuration_of(&args.members.0, &learners).map_err(ClientError::Usage)?;
    let o = reconfigure_and_wait(&args.node, &config, Duration::from_secs(args.timeout_s))?;
    let c = o.report.configuration.clone().unwrap_or(config);
    if args.json {
        println!(
            "{}",
            json!({
                "ok": true,
                "asked_at": o.asked_at,
                "asked_leader": o.asked_leader.map(|n| n.0),
                "asked_ms": o.asked_after.as_secs_f64() * 1e3,
                "in_effect_ms": o.in_effect_after.as_secs_f64() * 1e3,
                "configuration": configuration_json(&c),
                "leader": o.report.leader.map(|n| n.0),
                "redirects": o.redirects.iter().map(|(n, a)| json!({
                    "node": n.map(|n| n.0), "client_addr": a })).collect::<Vec<_>>(),
            })
        );
    } else {
        for (n, a) in &o.redirects {
            match n {
                Some(n) => println!("not the leader; asked the leader, node {}, at {a}", n.0),
                None => println!("not the leader; asked {a}"),
            }
        }
        println!(
            "asked at {} after {:.0} ms; in effect after {:.0} ms: {}",
            o.asked_at,
            o.asked_after.as_secs_f64() * 1e3,
            o.in_effect_after.as_secs_f64() * 1e3,
            describe_configuration(&c)
        );
        match o.report.leader {
            Some(l) => println!("leader: node {}", l.0),
            None => println!("leader: none known yet (an election is under way)"),
        }
    }
    Ok(())
}

/// `abcast read`.
pub fn run_read(args: ReadArgs) -> Result<(), ClientError> {
    let timeout = Duration::from_secs(args.timeout_s);
    let mut client = Client::connect(&args.node)?;
    let t0 = Instant::now();
    let upto = match client.read_barrier(timeout) {
        Ok(u) => u,
        Err(ClientError::Timeout(_)) => {
            return Err(ClientError::Refused(format!(
                "no read point within {} s: the leader could not confirm its leadership with \
                 a majority (a partition, or an election under way), or this node did not \
                 deliver up to the read point",
                args.timeout_s
            )));
        }
        Err(ClientError::NotLeader { hint, client_addr }) => {
            let e = ClientError::NotLeader { hint, client_addr };
            return Err(ClientError::Refused(match client_addr {
                Some(a) => format!("{e}; ask it: abcast read --node {a}"),
                None => e.to_string(),
            }));
        }
        Err(e) => return Err(e),
    };
    let ms = t0.elapsed().as_secs_f64() * 1e3;
    if args.json {
        println!(
            "{}",
            json!({ "ok": true, "node": args.node, "read_point": upto, "ms": ms })
        );
    } else {
        println!(
            "read point {upto} ({ms:.1} ms): the node at {} has applied every instance up to \
             {upto}, so a read of its state now is linearizable",
            args.node
        );
    }
    Ok(())
}

/// Formats a value id as `node:seq` (the format `abcast propose` and `abcast learn` print).
pub fn format_id(id: ValueId) -> String {
    format!("{}:{}", id.node.0, id.seq)
}

/// A payload as UTF-8 (lossy) on one line: control characters are escaped so a value can
/// never break the line-per-value output.
pub fn format_payload(payload: &[u8]) -> String {
    let text = String::from_utf8_lossy(payload);
    let mut s = String::with_capacity(text.len());
    for c in text.chars() {
        match c {
            '\n' => s.push_str("\\n"),
            '\r' => s.push_str("\\r"),
            '\t' => s.push_str("\\t"),
            c if c.is_control() => s.push_str(&format!("\\u{{{:x}}}", c as u32)),
            c => s.push(c),
        }
    }
    s
}

/// How [`run_load`] loads a node.
#[derive(Clone, Debug)]
pub struct LoadSpec {
    /// Values proposed and not yet decided, at most (at most `MAX_CLIENT_PENDING_VALUES`
    /// of the node, 65,536).
    pub window_values: usize,
    /// Bytes per value (at least 8: the first 8 are the value's number, little-endian).
    pub value_bytes: usize,
    /// After `stop`, wait this long at most for the values in flight to be decided.
    pub drain: Duration,
    /// Fail when values are in flight and none is decided for this long.
    pub stall_max: Duration,
}

/// What [`run_load`]'s callback hears, as it happens.
#[derive(Debug)]
pub enum LoadEvent<'a> {
    /// The node took these values: from now on they are the cluster's to decide.
    Proposed(&'a [ValueId]),
    /// These values (taken before) are decided.
    Decided(&'a [ValueId]),
    /// The node took none of a request (`Busy`, or a refusal with its reason): the client
    /// waits a little and asks again; nothing was given to the cluster.
    Refused(Option<&'a str>),
}

/// What [`run_load`] counted.
#[derive(Clone, Debug, Default)]
pub struct LoadReport {
    /// Values the node took (`Proposed`), and of those the ones decided.
    pub proposed: u64,
    pub decided: u64,
    /// Requests the node refused whole (`Busy` or `Error`), retried.
    pub refused_requests: u64,
    /// Values taken and never decided, after the drain: dropped.
    pub undecided: Vec<ValueId>,
    /// The first few refusal texts, for the log.
    pub refusal_texts: Vec<String>,
}

/// A client that proposes continuously at `addr` (the seed 001 §4.1 client: a window of
/// proposals in flight, the next as soon as one is decided) until `stop`, then waits up
/// to `spec.drain` for what is in flight. Every value the node took and never decided is
/// reported as dropped. A `Busy` or refused request is asked again after a pause; it is no
/// drop (nothing was taken) but its time is lost, as the seed's client retries.
pub fn run_load(
    addr: &str,
    spec: &LoadSpec,
    stop: &std::sync::atomic::AtomicBool,
    mut on: impl FnMut(Instant, LoadEvent<'_>),
) -> Result<LoadReport, ClientError> {
    use std::sync::atomic::Ordering;
    const REFUSAL_TEXTS_MAX: usize = 8;
    if spec.value_bytes < 8 || spec.window_values == 0 {
        return Err(ClientError::Usage(
            "the load needs values of at least 8 bytes and a window of at least 1".into(),
        ));
    }
    let mut client = Client::connect(addr)?;
    let mut report = LoadReport::default();
    let mut pending: HashSet<ValueId> = HashSet::new();
    let mut early: HashSet<ValueId> = HashSet::new();
    let mut asked: Option<usize> = None;
    let mut next_value: u64 = 0;
    let mut last_progress = Instant::now();
    let mut drain_until: Option<Instant> = None;
    let mut retry_at: Option<Instant> = None;
    loop {
        let now = Instant::now();
        if drain_until.is_none() && stop.load(Ordering::Relaxed) {
            drain_until = Some(now + spec.drain);
        }
        if let Some(d) = drain_until
            && asked.is_none()
            && (pending.is_empty() || now >= d)
        {
            report.undecided = pending.into_iter().collect();
            report
                .undecided
                .sort_unstable_by_key(|id| (id.node.0, id.seq));
            return Ok(report);
        }
        if !pending.is_empty() && now.duration_since(last_progress) > spec.stall_max {
            return Err(ClientError::Refused(format!(
                "no value decided for {:.1} s with {} in flight",
                spec.stall_max.as_secs_f64(),
                pending.len()
            )));
        }
        if asked.is_none()
            && drain_until.is_none()
            && retry_at.is_none_or(|t| now >= t)
            && pending.len() < spec.window_values
        {
            let n = (spec.window_values - pending.len())
                .min(VALUES_PER_REQUEST)
                .min(MAX_VALUES_PER_FRAME);
            let payloads = (0..n)
                .map(|i| {
                    let mut v = vec![0u8; spec.value_bytes];
                    v[..8].copy_from_slice(&(next_value + i as u64).to_le_bytes());
                    Bytes::from(v)
                })
                .collect();
            next_value += n as u64;
            client.send(&ClientFrame::Propose { payloads })?;
            asked = Some(n);
            retry_at = None;
        }
        let frame = match client.recv(Some(Duration::from_millis(20))) {
            Ok(f) => f,
            Err(ClientError::Timeout(_)) => continue,
            Err(e) => return Err(e),
        };
        let at = Instant::now();
        match frame {
            ClientFrame::Proposed { ids } => {
                let Some(n) = asked.take() else {
                    return Err(ClientError::Unexpected("Proposed without a request".into()));
                };
                if ids.len() > n {
                    return Err(ClientError::Unexpected(format!(
                        "{} ids for {n} values",
                        ids.len()
                    )));
                }
                report.proposed += ids.len() as u64;
                on(at, LoadEvent::Proposed(&ids));
                let mut decided_now = Vec::new();
                for id in ids.iter().copied() {
                    if early.remove(&id) {
                        decided_now.push(id);
                    } else {
                        pending.insert(id);
                    }
                }
                if !decided_now.is_empty() {
                    report.decided += decided_now.len() as u64;
                    last_progress = at;
                    on(at, LoadEvent::Decided(&decided_now));
                }
                if ids.len() < n {
                    retry_at = Some(at + BUSY_PAUSE);
                }
                if pending.is_empty() {
                    last_progress = at;
                }
            }
            ClientFrame::Busy => {
                asked = None;
                report.refused_requests += 1;
                retry_at = Some(at + BUSY_PAUSE);
                on(at, LoadEvent::Refused(None));
            }
            ClientFrame::Error { text } => {
                asked = None;
                report.refused_requests += 1;
                retry_at = Some(at + BUSY_PAUSE);
                on(at, LoadEvent::Refused(Some(&text)));
                if report.refusal_texts.len() < REFUSAL_TEXTS_MAX {
                    report.refusal_texts.push(text);
                }
            }
            ClientFrame::Decided { ids } => {
                let mut decided_now = Vec::with_capacity(ids.len());
                for id in ids {
                    if pending.remove(&id) {
                        decided_now.push(id);
                    } else {
                        early.insert(id);
                    }
                }
                if !decided_now.is_empty() {
                    report.decided += decided_now.len() as u64;
                    last_progress = at;
                    on(at, LoadEvent::Decided(&decided_now));
                }
            }
            other => return Err(unexpected(&other)),
        }
    }
}

/// `abcast propose`: proposes the values (or one per stdin line) and prints each value's id
/// (`node:seq`) once it is decided.
pub fn run_propose(args: ProposeArgs) -> Result<(), ClientError> {
    let payloads: Vec<Bytes> = if args.values.is_empty() {
        let mut v = Vec::new();
        for line in io::stdin().lock().lines() {
            v.push(Bytes::from(line?));
        }
        v
    } else {
        args.values.into_iter().map(Bytes::from).collect()
    };
    let mut client = Client::connect(&args.node)?;
    let stdout = io::stdout();
    let mut out = stdout.lock();
    let mut write_err = None;
    client.propose_all(payloads, Duration::from_secs(args.timeout_s.max(1)), |id| {
        if write_err.is_none()
            && let Err(e) = writeln!(out, "{}", format_id(id)).and_then(|_| out.flush())
        {
            write_err = Some(e);
        }
    })?;
    match write_err {
        Some(e) if e.kind() != io::ErrorKind::BrokenPipe => Err(e.into()),
        _ => Ok(()),
    }
}

/// `abcast follow`: asks a node to start or stop following a ring.
pub fn run_follow(args: FollowArgs) -> Result<(), ClientError> {
    let mut client = Client::connect(&args.node)?;
    client.follow(args.ring, !args.stop)?;
    println!(
        "asked: node at {} {} ring {}; it takes effect once the ring decides it",
        args.node,
        if args.stop {
            "stops following"
        } else {
            "follows"
        },
        args.ring
    );
    Ok(())
}

/// The line `abcast learn` prints for a gap:
/// `gap<TAB>FROM..TO<TAB>reason<TAB>snapshot_upto=S<TAB>how to fetch` (`TO` exclusive).
pub fn format_gap(g: &Gap) -> String {
    format!(
        "gap\t{}..{}\t{}\tsnapshot_upto={}\t{}",
        g.from, g.to, g.reason, g.snapshot_upto, g.how_to_fetch
    )
}

/// `abcast learn`: prints deliveries in order as `instance<TAB>node:seq<TAB>payload`, and
/// each gap as [`format_gap`]'s line.
pub fn run_learn(args: LearnArgs) -> Result<(), ClientError> {
    let mut client = Client::connect(&args.node)?;
    client.subscribe(args.from)?;
    let stdout = io::stdout();
    let mut out = BufWriter::new(stdout.lock());
    let mut printed = 0u64;
    while args.count.is_none_or(|c| printed < c) {
        let (instance, batch) = match client.next_event(None)? {
            LearnEvent::Delivered(i, b) => (i, b),
            LearnEvent::Gap(g) => {
                match writeln!(out, "{}", format_gap(&g)).and_then(|()| out.flush()) {
                    Ok(()) => continue,
                    Err(e) if e.kind() == io::ErrorKind::BrokenPipe => return Ok(()),
                    Err(e) => return Err(e.into()),
                }
            }
        };
        let result = (|| -> io::Result<()> {
            for v in batch.values() {
                if args.count.is_some_and(|c| printed >= c) {
                    break;
                }
                writeln!(
                    out,
                    "{instance}\t{}\t{}",
                    format_id(v.id),
                    format_payload(&v.payload)
                )?;
                printed += 1;
            }
            out.flush()
        })();
        match result {
            Ok(()) => {}
            // `abcast learn | head` closing the pipe is a normal way to stop.
            Err(e) if e.kind() == io::ErrorKind::BrokenPipe => return Ok(()),
            Err(e) => return Err(e.into()),
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use abcast_core::NodeId;

    #[test]
    fn node_lists_and_configurations_are_checked() {
        assert_eq!(parse_node_list("0, 1,3"), Ok(NodeList(vec![0, 1, 3])));
        for bad in ["", "0,", "a", "1,1", "-1", "4294967296"] {
            assert!(parse_node_list(bad).is_err(), "{bad:?}");
        }
        let c = configuration_of(&[0, 1, 3], &[4]).unwrap();
        assert_eq!(
            describe_configuration(&c),
            "configuration 0: voters 0, 1, 3; learners 4"
        );
        assert!(configuration_of(&[], &[4]).is_err());
        assert!(configuration_of(&[1], &[1]).is_err());
        // The same nodes with the same votes, in any order and under any id.
        let mut other = configuration_of(&[3, 0, 1], &[4]).unwrap();
        other.id = 9;
        assert!(same_members(&c, &other));
        assert!(!same_members(
            &c,
            &configuration_of(&[0, 1, 3, 4], &[]).unwrap()
        ));
        assert!(!same_members(
            &c,
            &configuration_of(&[0, 1, 3], &[]).unwrap()
        ));
    }

    #[test]
    fn a_leaders_status_shows_its_followers_and_the_pending_change() {
        let r = StatusReport {
            node: NodeId(2),
            leader: Some(NodeId(2)),
            leading: true,
            delivered_upto: 10,
            decided_max: 12,
            configuration: configuration_of(&[0, 1, 2], &[]).ok(),
            configuration_pending: configuration_of(&[0, 1, 3], &[]).ok(),
            followers: vec![abcast_core::FollowerProgress {
                node: NodeId(0),
                accepted: 9,
                decided: 8,
                voter: true,
            }],
            ..StatusReport::default()
        };
        let text = status_text(&r, "127.0.0.1:7502");
        assert!(
            text.contains("leader:        this node (leading)"),
            "{text}"
        );
        assert!(text.contains("pending:       configuration 0: voters 0, 1, 3"));
        assert!(text.contains("yes"), "{text}");
        let j = status_json(&r);
        assert_eq!(j["leader"], 2);
        assert_eq!(j["followers"][0]["accepted"], 9);
        assert_eq!(j["configuration_pending"]["voters"][2], 3);
    }

    #[test]
    fn output_formats() {
        assert_eq!(
            format_id(ValueId {
                node: NodeId(2),
                seq: 17
            }),
            "2:17"
        );
        assert_eq!(format_payload(b"a\tb\nc\x01"), "a\\tb\\nc\\u{1}");
        assert_eq!(format_payload(&[0xff, b'x']), "\u{fffd}x");
    }
}
