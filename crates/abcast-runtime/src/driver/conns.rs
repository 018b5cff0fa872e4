//! Client connections on the client port: accept, read frames, close, flush. (Peers'
//! connections belong to the TCP transport, `crate::transport::tcp`.)
//!
//! A client connects over TCP (`client_addr`) or, on the node's own host, over a Unix
//! domain socket (`client_path`, [`Driver::attach_client_socket`]). Both carry the same
//! frames; a Unix connection costs less than half of a loopback TCP one per byte (no
//! segments, acknowledgements or softirq: docs/benchmarks/group-peer/README.md), which is
//! the place of Corosync's shared-memory IPC for its local clients.
//!
//! A Unix connection may go one step further: its client asks with `ShmOpen`, and from
//! then on the frames travel through two shared-memory rings (`crate::shm`) and the
//! socket only carries doorbells: a readable socket means "look at the rings", so reading
//! the connection drains the doorbells, then reads the client's ring, and flushing it
//! writes the queue into the node's ring.

use super::clients::ClientState;
use super::{Driver, DriverError, MAX_CONNS, READS_PER_EVENT};
use crate::Hooks;
use crate::clientwire::{ClientFrame, KIND_GROUP_MULTICAST, KIND_PROPOSE};
use crate::frame::{self, KIND_CLIENT_MIN};
use crate::shm::{self, ShmLink};
use crate::transport::intake::{
    Allowance, CLIENT_FREE_BYTES, CONTROL_BODY_MAX_BYTES, Intake, Plan,
};
use crate::transport::{self, OutQueue, ReadOutcome};
use abcast_core::{Micros, Protocol};
use bytes::BytesMut;
use mio::event::Source;
use mio::net::{TcpStream, UnixStream};
use mio::{Interest, Registry, Token};
use std::fmt;
use std::io::{self, IoSlice, Write};
use std::net::SocketAddr;
use std::os::fd::{AsFd, BorrowedFd};

/// A client's connection: TCP, or a Unix domain socket on this host.
#[derive(Debug)]
pub(super) enum ClientStream {
    Tcp(TcpStream),
    Unix(UnixStream),
}

/// Who is at the other end, for the log.
#[derive(Debug, Clone, Copy)]
pub(super) enum ClientPeer {
    Tcp(SocketAddr),
    /// A Unix socket's client has no name worth printing; the token tells them apart.
    Unix(Token),
}

impl fmt::Display for ClientPeer {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            ClientPeer::Tcp(a) => write!(f, "{a}"),
            ClientPeer::Unix(t) => write!(f, "the client socket (connection {})", t.0),
        }
    }
}

impl AsFd for ClientStream {
    fn as_fd(&self) -> BorrowedFd<'_> {
        match self {
            ClientStream::Tcp(s) => s.as_fd(),
            ClientStream::Unix(s) => s.as_fd(),
        }
    }
}

impl Write for ClientStream {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        match self {
            ClientStream::Tcp(s) => s.write(buf),
            ClientStream::Unix(s) => s.write(buf),
        }
    }

    fn write_vectored(&mut self, bufs: &[IoSlice<'_>]) -> io::Result<usize> {
        match self {
            ClientStream::Tcp(s) => s.write_vectored(bufs),
            ClientStream::Unix(s) => s.write_vectored(bufs),
        }
    }

    fn flush(&mut self) -> io::Result<()> {
        Ok(())
    }
}

impl Source for ClientStream {
    fn register(&mut self, r: &Registry, t: Token, i: Interest) -> io::Result<()> {
        match self {
            ClientStream::Tcp(s) => s.register(r, t, i),
            ClientStream::Unix(s) => s.register(r, t, i),
        }
    }

    fn reregister(&mut self, r: &Registry, t: Token, i: Interest) -> io::Result<()> {
        match self {
            ClientStream::Tcp(s) => s.reregister(r, t, i),
            ClientStream::Unix(s) => s.reregister(r, t, i),
        }
    }

    fn deregister(&mut self, r: &Registry) -> io::Result<()> {
        match self {
            ClientStream::Tcp(s) => s.deregister(r),
            ClientStream::Unix(s) => s.deregister(r),
        }
    }
}

#[derive(Debug)]
pub(super) struct Conn {
    pub(super) stream: ClientStream,
    pub(super) peer: ClientPeer,
    pub(super) rbuf: BytesMut,
    /// What the connection may read next (`transport::intake`).
    pub(super) intake: Intake,
    pub(super) out: OutQueue,
    pub(super) client: ClientState,
    pub(super) dirty: bool,
    /// The shared-memory rings, once the client asked for them (`ShmOpen`).
    pub(super) shm: Option<ShmLink>,
}

/// The largest body a client frame of `kind` may announce (`transport::intake`): a value's
/// worth for the frames that carry values, a control frame's for the rest (frames a client
/// may not send at all are refused once read, with their own reason).
fn client_body_max(kind: u8) -> usize {
    match kind {
        KIND_PROPOSE | KIND_GROUP_MULTICAST => frame::MAX_BODY_BYTES,
        _ => CONTROL_BODY_MAX_BYTES,
    }
}

/// Writes into the node's ring of a shared-memory connection, for `OutQueue::flush`: a
/// full ring is `WouldBlock`, as a full socket buffer is.
struct RingWriter<'a>(&'a mut ShmLink);

impl Write for RingWriter<'_> {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        self.write_vectored(&[IoSlice::new(buf)])
    }

    fn write_vectored(&mut self, bufs: &[IoSlice<'_>]) -> io::Result<usize> {
        let n = self.0.write_vectored(bufs)?;
        if n == 0 && bufs.iter().any(|b| !b.is_empty()) {
            return Err(io::ErrorKind::WouldBlock.into());
        }
        Ok(n)
    }

    fn flush(&mut self) -> io::Result<()> {
        Ok(())
    }
}

/// Writes the queue into the node's ring of a shared-memory connection, rings the client's
/// doorbell if it sleeps, and, when the ring fills first, asks the client for a doorbell
/// once it has read (or goes on, if it made room meanwhile). Any write that stops short
/// must leave that request behind, or the client drains the ring and both sleep.
fn flush_ring(out: &mut OutQueue, link: &mut ShmLink, stream: &ClientStream) -> io::Result<()> {
    loop {
        let done = out.flush(&mut RingWriter(link))?;
        if link.take_doorbell() {
            shm::ring_doorbell(stream.as_fd())?;
        }
        if done || out.is_empty() || !link.wait_for_room()? {
            return Ok(());
        }
    }
}

/// Reads what the client's ring holds into `rbuf`, as `transport::read_into` reads a
/// socket; an empty ring is `WouldBlock` once the client is asked for a doorbell.
fn read_ring(
    link: &mut ShmLink,
    stream: &ClientStream,
    rbuf: &mut BytesMut,
    max: usize,
) -> io::Result<ReadOutcome> {
    loop {
        let n = link.read_into(rbuf, max)?;
        if link.take_doorbell() {
            // The client waits for room in its ring: this read made some.
            shm::ring_doorbell(stream.as_fd())?;
        }
        if n > 0 {
            return Ok(ReadOutcome::Data(n));
        }
        if !link.wait_for_data()? {
            return Ok(ReadOutcome::WouldBlock);
        }
    }
}

impl<P: Protocol> Driver<P> {
    /// Accepts what waits on the TCP client listener.
    pub(super) fn accept(&mut self, _now: Micros) {
        loop {
            let Some(listener) = self.client_listener.as_ref() else {
                return;
            };
            let (stream, addr) = match listener.accept() {
                Ok(s) => s,
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => return,
                Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
                Err(e) => {
                    // E.g. EMFILE or a connection reset before accept: log, keep serving.
                    self.log(format_args!("accept failed: {e}"));
                    return;
                }
            };
            if let Err(e) = transport::configure_stream(&stream, &self.cfg.transport) {
                self.log(format_args!("cannot set socket options for {addr}: {e}"));
            }
            // A client on this host gets its frames without a body checksum
            // (`frame::CLIENT_UNCHECKED`); the client decides the same for what it sends.
            let same_host = stream
                .local_addr()
                .is_ok_and(|local| crate::frame::same_host(local, addr));
            self.admit(ClientStream::Tcp(stream), Some(addr), same_host);
        }
    }

    /// Accepts what waits on the Unix client socket: clients on this host, whose frames
    /// go without a body checksum both ways.
    pub(super) fn accept_unix(&mut self, _now: Micros) {
        loop {
            let Some(listener) = self.client_socket.as_ref() else {
                return;
            };
            let stream = match listener.accept() {
                Ok((s, _)) => s,
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => return,
                Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
                Err(e) => {
                    self.log(format_args!("accept on the client socket failed: {e}"));
                    return;
                }
            };
            self.admit(ClientStream::Unix(stream), None, true);
        }
    }

    /// Registers an accepted connection, within [`MAX_CONNS`].
    fn admit(&mut self, mut stream: ClientStream, addr: Option<SocketAddr>, same_host: bool) {
        if self.conns.len() >= MAX_CONNS {
            if !self.conn_limit_logged {
                self.conn_limit_logged = true;
                let who = addr.map_or_else(|| "the client socket".to_string(), |a| a.to_string());
                self.log(format_args!(
                    "refusing connection from {who}: {MAX_CONNS} connections open"
                ));
            }
            return;
        }
        let token = self.new_token();
        let peer = addr.map_or(ClientPeer::Unix(token), ClientPeer::Tcp);
        if let Err(e) = self.poll.registry().register(
            &mut stream,
            token,
            Interest::READABLE | Interest::WRITABLE,
        ) {
            self.log(format_args!("cannot register connection from {peer}: {e}"));
            return;
        }
        let mut out = OutQueue::new(self.cfg.transport.client_queue_bytes);
        out.set_client_unchecked(same_host);
        self.conns.insert(
            token,
            Conn {
                stream,
                peer,
                rbuf: BytesMut::new(),
                intake: Intake::new(),
                out,
                client: ClientState::default(),
                dirty: false,
                shm: None,
            },
        );
    }

    pub(super) fn read_conn<A: Hooks + ?Sized>(
        &mut self,
        now: Micros,
        app: &mut A,
        token: Token,
    ) -> Result<(), DriverError> {
        let chunk_max = self.cfg.transport.read_buffer_bytes;
        if !self.take_doorbells(token) {
            return Ok(());
        }
        for _ in 0..READS_PER_EVENT {
            let Some(conn) = self.conns.get_mut(&token) else {
                return Ok(());
            };
            // What the bytes already here allow (issue 33): a frame over its kind's limit
            // is refused at its header, a large one waits for the client port's budget.
            let allow = Allowance {
                free_bytes: CLIENT_FREE_BYTES,
                chunk_max_bytes: chunk_max,
                body_max: client_body_max,
            };
            let max =
                match conn
                    .intake
                    .plan(token, &conn.rbuf, &allow, &mut self.client_budget, now)
                {
                    Plan::Read(n) => n,
                    Plan::Wait { first } => {
                        // Not read until the budget wakes it (`Driver::collect_woken`).
                        if first {
                            self.stats.read_budget_waits += 1;
                        }
                        return Ok(());
                    }
                    Plan::Refuse(reason) => {
                        self.stats.bad_input_closes += 1;
                        self.stats.frames_over_kind_limit += 1;
                        self.close_conn(token, format_args!("{reason}"));
                        return Ok(());
                    }
                };
            let outcome = match conn.shm.as_mut() {
                Some(link) => read_ring(link, &conn.stream, &mut conn.rbuf, max),
                None => transport::read_into(&conn.stream, &mut conn.rbuf, max),
            };
            let mut frames = std::mem::take(&mut self.frames);
            let mut bad: Option<String> = None;
            match outcome {
                Ok(ReadOutcome::Data(n)) => {
                    conn.intake.after_read(max, n);
                    loop {
                        match conn
                            .intake
                            .decode(token, &mut conn.rbuf, &mut self.client_budget)
                        {
                            Ok(Some(f)) => frames.push(f),
                            Ok(None) => break,
                            Err(e) => {
                                bad = Some(e.to_string());
                                break;
                            }
                        }
                    }
                }
                Ok(ReadOutcome::WouldBlock) => {
                    self.frames = frames;
                    return Ok(());
                }
                Ok(ReadOutcome::Eof) => {
                    // A client that hangs up is not news.
                    self.frames = frames;
                    self.drop_conn(token);
                    return Ok(());
                }
                Err(e) => {
                    self.frames = frames;
                    if e.kind() == io::ErrorKind::InvalidData {
                        // A shared-memory ring the client broke (`shm::ShmError::Corrupt`).
                        self.stats.bad_input_closes += 1;
                    }
                    self.close_conn(token, format_args!("read failed: {e}"));
                    return Ok(());
                }
            }
            self.stats.frames_received += frames.len() as u64;
            let mut closed = false;
            for f in frames.drain(..) {
                let verdict = if f.kind < KIND_CLIENT_MIN {
                    Err(format!("peer frame kind {} on the client port", f.kind))
                } else {
                    self.on_client_frame(now, app, token, f)?
                };
                if let Err(reason) = verdict {
                    self.stats.bad_input_closes += 1;
                    self.close_conn(token, format_args!("{reason}"));
                    closed = true;
                    break;
                }
            }
            frames.clear();
            self.frames = frames;
            if closed {
                return Ok(());
            }
            if let Some(e) = bad {
                self.stats.bad_input_closes += 1;
                self.close_conn(token, format_args!("{e}"));
                return Ok(());
            }
        }
        // Budget used up with data possibly left: come back next iteration.
        self.ready_again.push(token);
        Ok(())
    }

    pub(super) fn close_conn(&mut self, token: Token, reason: fmt::Arguments<'_>) {
        if let Some(conn) = self.conns.get(&token) {
            let peer = conn.peer;
            self.log(format_args!(
                "closing connection from client at {peer}: {reason}"
            ));
        }
        self.drop_conn(token);
    }

    pub(super) fn drop_conn(&mut self, token: Token) {
        self.client_budget.forget(token);
        if let Some(mut conn) = self.conns.remove(&token) {
            // Deregistering can only fail if the socket is already gone from the poller.
            let _ = self.poll.registry().deregister(&mut conn.stream);
            self.leave_bound(&conn.client);
        }
    }

    pub(super) fn flush_conn(&mut self, token: Token) {
        let Some(conn) = self.conns.get_mut(&token) else {
            return;
        };
        conn.dirty = false;
        let flushed = match conn.shm.as_mut() {
            Some(link) => flush_ring(&mut conn.out, link, &conn.stream),
            None => conn.out.flush(&mut conn.stream).map(|_| ()),
        };
        if let Err(e) = flushed {
            self.close_conn(token, format_args!("write failed: {e}"));
        }
    }

    /// A shared-memory connection's socket carries doorbells: reads them all (the socket
    /// is edge-triggered) and retries the flush a full ring stopped. False: the connection
    /// is gone (the client hung up, or the socket failed).
    fn take_doorbells(&mut self, token: Token) -> bool {
        let Some(conn) = self.conns.get_mut(&token) else {
            return false;
        };
        if conn.shm.is_none() {
            return true;
        }
        match shm::drain_doorbells(conn.stream.as_fd()) {
            Ok(true) => {}
            Ok(false) => {
                self.drop_conn(token);
                return false;
            }
            Err(e) => {
                self.close_conn(token, format_args!("read failed: {e}"));
                return false;
            }
        }
        if !conn.out.is_empty() && !conn.dirty {
            conn.dirty = true;
            self.dirty_conns.push(token);
        }
        true
    }

    /// `ShmOpen` (`clientwire`): opens the shared-memory rings for a client on the Unix
    /// socket and hands it the region with `ShmReady`. Refused with `Error`, the connection
    /// going on as it was, when the node offers none, on TCP, or with bytes still in flight
    /// on the socket either way (the switch must fall between two frames). Err: the
    /// connection cannot go on (it is closed).
    pub(super) fn open_shm(&mut self, token: Token) -> Result<(), String> {
        let ring_bytes = self.cfg.transport.client_shm_bytes;
        let Some(conn) = self.conns.get_mut(&token) else {
            return Ok(());
        };
        let refusal = if ring_bytes == 0 {
            Some("this node offers no shared memory ([transport] client_shm_bytes = 0)".to_string())
        } else if !matches!(conn.stream, ClientStream::Unix(_)) {
            Some("shared memory is for a client on the node's Unix client socket".to_string())
        } else if conn.shm.is_some() || !conn.out.is_empty() || !conn.rbuf.is_empty() {
            Some("ShmOpen must come between frames, with nothing in flight".to_string())
        } else {
            None
        };
        let link = match refusal {
            Some(text) => Err(text),
            None => ShmLink::create_for_node(ring_bytes).map_err(|e| e.to_string()),
        };
        let link = match link {
            Ok(l) => l,
            Err(text) => {
                self.reply(token, &ClientFrame::Error { text });
                return Ok(());
            }
        };
        let ready = ClientFrame::ShmReady {
            ring_bytes: link.ring_bytes() as u64,
        };
        let chunks = ready.encode();
        let header = frame::encode_client_header_unchecked(ready.kind(), &chunks)
            .map_err(|e| e.to_string())?;
        let mut bytes = header.to_vec();
        for c in &chunks {
            bytes.extend_from_slice(c);
        }
        match shm::send_with_fd(conn.stream.as_fd(), &bytes, link.fd()) {
            Ok(n) if n == bytes.len() => {}
            Ok(n) => {
                return Err(format!(
                    "the shared memory answer went out short ({n} bytes)"
                ));
            }
            Err(e) => return Err(format!("cannot hand over the shared memory: {e}")),
        }
        // The loop reads the client's ring when a doorbell says so: ask for the first.
        let mut link = link;
        if link.wait_for_data().map_err(|e| e.to_string())? {
            self.ready_again.push(token);
        }
        conn.shm = Some(link);
        self.stats.client_shm_opened += 1;
        Ok(())
    }
}
