//! Client connections on the client port: accept, read frames, close, flush. (Peers'
//! connections belong to the TCP transport, `crate::transport::tcp`.)

use super::clients::ClientState;
use super::{Driver, DriverError, MAX_CONNS, READS_PER_EVENT};
use crate::Hooks;
use crate::frame::{self, KIND_CLIENT_MIN};
use crate::transport::{self, OutQueue, ReadOutcome};
use abcast_core::{Micros, Protocol};
use bytes::BytesMut;
use mio::net::TcpStream;
use mio::{Interest, Token};
use std::fmt;
use std::io;
use std::net::SocketAddr;

#[derive(Debug)]
pub(super) struct Conn {
    pub(super) stream: TcpStream,
    pub(super) addr: SocketAddr,
    pub(super) rbuf: BytesMut,
    pub(super) out: OutQueue,
    pub(super) client: ClientState,
    pub(super) dirty: bool,
}

impl<P: Protocol> Driver<P> {
    pub(super) fn accept(&mut self, _now: Micros) {
        loop {
            let Some(listener) = self.client_listener.as_ref() else {
                return;
            };
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
            let limit = self.cfg.transport.client_queue_bytes;
            let mut out = OutQueue::new(limit);
            // A client on this host gets its frames without a body checksum
            // (`frame::CLIENT_UNCHECKED`); the client decides the same for what it sends.
            out.set_client_unchecked(
                stream
                    .local_addr()
                    .is_ok_and(|local| crate::frame::same_host(local, addr)),
            );
            self.conns.insert(
                token,
                Conn {
                    stream,
                    addr,
                    rbuf: BytesMut::new(),
                    out,
                    client: ClientState::default(),
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
                    // A client that hangs up is not news.
                    self.frames = frames;
                    self.drop_conn(token);
                    return Ok(());
                }
                Err(e) => {
                    self.frames = frames;
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
            let addr = conn.addr;
            self.log(format_args!(
                "closing connection from client at {addr}: {reason}"
            ));
        }
        self.drop_conn(token);
    }

    pub(super) fn drop_conn(&mut self, token: Token) {
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
        if let Err(e) = conn.out.flush(&mut conn.stream) {
            self.close_conn(token, format_args!("write failed: {e}"));
        }
    }
}
