//! Inbound connections, peers' and clients': accept, read frames (a peer's first must be
//! its `Hello`), close, flush.

use super::clients::ClientState;
use super::{Driver, DriverError, MAX_CONNS, MAX_HELLO_BODY_BYTES, READS_PER_EVENT};
use crate::Hooks;
use crate::frame::{self, KIND_CLIENT_MIN};
use crate::transport::{self, OutQueue, ReadOutcome};
use abcast_core::{Micros, NodeId, Protocol};
use bytes::BytesMut;
use mio::net::TcpStream;
use mio::{Interest, Token};
use std::fmt;
use std::io;
use std::net::SocketAddr;

#[derive(Debug)]
pub(super) enum Role {
    /// A peer's connection to us; `None` until its `Hello`.
    PeerIn {
        peer: Option<NodeId>,
    },
    Client(ClientState),
}

#[derive(Debug)]
pub(super) struct Conn {
    pub(super) stream: TcpStream,
    pub(super) addr: SocketAddr,
    pub(super) rbuf: BytesMut,
    pub(super) out: OutQueue,
    pub(super) role: Role,
    pub(super) dirty: bool,
}

impl<P: Protocol> Driver<P> {
    pub(super) fn accept(&mut self, _now: Micros, client: bool) {
        loop {
            let listener = if client {
                self.client_listener.as_ref()
            } else {
                Some(&self.peer_listener)
            };
            let Some(listener) = listener else { return };
            let (mut stream, addr) = match listener.accept() {
                Ok(s) => s,
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => return,
                Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
                Err(e) => {
                    // E.g. EMFILE or a connection reset before accept: log, keep serving.
                    self.log(format_args!("accept failed: {e}"));
                    return;
                }
            };
            if self.conns.len() >= MAX_CONNS {
                if !self.conn_limit_logged {
                    self.conn_limit_logged = true;
                    self.log(format_args!(
                        "refusing connection from {addr}: {MAX_CONNS} connections open"
                    ));
                }
                continue;
            }
            if let Err(e) = transport::configure_stream(&stream, &self.cfg.transport) {
                self.log(format_args!("cannot set socket options for {addr}: {e}"));
            }
            let token = self.new_token();
            if let Err(e) = self.poll.registry().register(
                &mut stream,
                token,
                Interest::READABLE | Interest::WRITABLE,
            ) {
                self.log(format_args!("cannot register connection from {addr}: {e}"));
                continue;
            }
            let (role, limit) = if client {
                (
                    Role::Client(ClientState::default()),
                    self.cfg.transport.client_queue_bytes,
                )
            } else {
                (Role::PeerIn { peer: None }, 1 << 10)
            };
            self.conns.insert(
                token,
                Conn {
                    stream,
                    addr,
                    rbuf: BytesMut::new(),
                    out: OutQueue::new(limit),
                    role,
                    dirty: false,
                },
            );
        }
    }

    pub(super) fn read_conn<A: Hooks + ?Sized>(
        &mut self,
        now: Micros,
        app: &mut A,
        token: Token,
    ) -> Result<(), DriverError> {
        let min_free = self.cfg.transport.read_buffer_bytes;
        for _ in 0..READS_PER_EVENT {
            let Some(conn) = self.conns.get_mut(&token) else {
                return Ok(());
            };
            let outcome = transport::read_into(&conn.stream, &mut conn.rbuf, min_free);
            let mut frames = std::mem::take(&mut self.frames);
            let mut bad: Option<String> = None;
            match outcome {
                Ok(ReadOutcome::Data(_)) => loop {
                    // Before its Hello a connection is nobody: it may not make this node
                    // buffer a large frame.
                    if frames.is_empty()
                        && matches!(conn.role, Role::PeerIn { peer: None })
                        && frame::peek_body_len(&conn.rbuf)
                            .is_some_and(|n| n > MAX_HELLO_BODY_BYTES)
                    {
                        bad = Some(format!(
                            "first frame longer than {MAX_HELLO_BODY_BYTES} bytes, expected Hello"
                        ));
                        break;
                    }
                    match frame::decode(&mut conn.rbuf) {
                        Ok(Some(f)) => frames.push(f),
                        Ok(None) => break,
                        Err(e) => {
                            bad = Some(e.to_string());
                            break;
                        }
                    }
                },
                Ok(ReadOutcome::WouldBlock) => {
                    self.frames = frames;
                    return Ok(());
                }
                Ok(ReadOutcome::Eof) => {
                    self.frames = frames;
                    let quiet = matches!(conn.role, Role::Client(_));
                    if quiet {
                        self.drop_conn(token);
                    } else {
                        self.close_conn(token, format_args!("closed by the peer"));
                    }
                    return Ok(());
                }
                Err(e) => {
                    self.frames = frames;
                    self.close_conn(token, format_args!("read failed: {e}"));
                    return Ok(());
                }
            }
            let is_client = matches!(conn.role, Role::Client(_));
            self.stats.frames_received += frames.len() as u64;
            let mut closed = false;
            for f in frames.drain(..) {
                let verdict = if is_client {
                    if f.kind < KIND_CLIENT_MIN {
                        Err(format!("peer frame kind {} on the client port", f.kind))
                    } else {
                        self.on_client_frame(now, app, token, f)?
                    }
                } else {
                    self.on_peer_frame(now, app, token, f)?
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
            let who = match &conn.role {
                Role::PeerIn { peer: Some(p) } => format!("{p} at {}", conn.addr),
                Role::PeerIn { peer: None } => format!("unidentified peer at {}", conn.addr),
                Role::Client(_) => format!("client at {}", conn.addr),
            };
            self.log(format_args!("closing connection from {who}: {reason}"));
        }
        self.drop_conn(token);
    }

    pub(super) fn drop_conn(&mut self, token: Token) {
        if let Some(mut conn) = self.conns.remove(&token) {
            // Deregistering can only fail if the socket is already gone from the poller.
            let _ = self.poll.registry().deregister(&mut conn.stream);
        }
    }

    pub(super) fn flush_conn(&mut self, token: Token) {
        let Some(conn) = self.conns.get_mut(&token) else {
            return;
        };
        conn.dirty = false;
        if let Err(e) = conn.out.flush(&mut conn.stream) {
            self.close_conn(token, format_args!("write failed: {e}"));
        }
    }
}
