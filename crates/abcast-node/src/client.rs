//! Clients of a running node's client port: `abcast propose` and `abcast learn`, and the
//! small blocking [`Client`] they are built on (the wire format is in
//! `runtime::clientwire`).
//!
//! A client keeps one `Propose` request in flight and at most [`PROPOSE_WINDOW_VALUES`]
//! values waiting to be decided, so it never asks the node to hold more than that for it.

use abcast_core::{Batch, DecodeError, Instance, ValueId};
use abcast_runtime::clientwire::{ClientFrame, MAX_VALUES_PER_FRAME};
use abcast_runtime::frame::{self, FrameError};
use abcast_runtime::history::Gap;
use bytes::{Bytes, BytesMut};
use std::collections::{HashSet, VecDeque};
use std::fmt;
use std::io::{self, BufRead, BufWriter, Read, Write};
use std::net::{TcpStream, ToSocketAddrs};
use std::time::{Duration, Instant};

/// Most values one client has proposed and not yet seen decided.
pub const PROPOSE_WINDOW_VALUES: usize = 4096;
/// Values per `Propose` frame.
const VALUES_PER_REQUEST: usize = 256;
/// Pause after the node answered `Busy`.
const BUSY_PAUSE: Duration = Duration::from_millis(10);

/// Arguments of `abcast propose`.
#[derive(clap::Args, Debug, Clone)]
pub struct ProposeArgs {
    /// Client address of a node (its `client_addr`).
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
    /// Client address of a node (its `client_addr`).
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
    /// Client address of a Multi-Ring node (its `client_addr`).
    #[arg(long)]
    pub node: String,
    /// The ring (its `group` in `[[rings]]`).
    #[arg(long)]
    pub ring: u16,
    /// Stop following the ring instead of starting.
    #[arg(long)]
    pub stop: bool,
}

/// Why a client command failed.
#[derive(Debug)]
pub enum ClientError {
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

impl From<io::Error> for ClientError {
    fn from(e: io::Error) -> Self {
        ClientError::Io(e)
    }
}

/// A blocking connection to a node's client port.
#[derive(Debug)]
pub struct Client {
    stream: TcpStream,
    rbuf: BytesMut,
}

impl Client {
    pub fn connect(addr: &str) -> Result<Client, ClientError> {
        let err = |source| ClientError::Connect {
            addr: addr.to_string(),
            source,
        };
        let addrs: Vec<_> = addr.to_socket_addrs().map_err(err)?.collect();
        let mut last = io::Error::new(io::ErrorKind::NotFound, "address resolves to nothing");
        for a in addrs {
            match TcpStream::connect(a) {
                Ok(stream) => {
                    stream.set_nodelay(true).map_err(err)?;
                    return Ok(Client {
                        stream,
                        rbuf: BytesMut::with_capacity(1 << 16),
                    });
                }
                Err(e) => last = e,
            }
        }
        Err(err(last))
    }

    pub fn send(&mut self, f: &ClientFrame) -> Result<(), ClientError> {
        let bytes = frame::encode_to_bytes(f.kind(), 0, &f.encode()).map_err(ClientError::Frame)?;
        self.stream.write_all(&bytes)?;
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
            self.stream.set_read_timeout(wait)?;
            let mut chunk = [0u8; 64 << 10];
            match self.stream.read(&mut chunk) {
                Ok(0) => return Err(ClientError::Closed),
                Ok(n) => self.rbuf.extend_from_slice(&chunk[..n]),
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
