//! Issue 33, suspect 5, on real sockets: a stranger who opens every client connection a
//! node admits, and on each announces the largest frame and sends the start of its body,
//! does not take the node's memory, and the node goes on serving its clients.
//!
//! Before the fix the node reserved each announced length (65 MiB) and read whatever came
//! into per-connection buffers of 1 MiB: 1,023 connections sending 256 KiB each made it
//! hold 256 MiB. Now a frame longer than a connection's free allowance (64 KiB) is read
//! only once the client port's budget (3 frames of the largest size) holds it, and the
//! others wait unread (`abcast_runtime::transport::intake`).
//!
//! The node runs in this process, alone in its own test binary, so `VmRSS` of
//! `/proc/self/status` is the node's memory plus this test's few buffers.

mod runtime_support;

use abcast_core::NodeId;
use abcast_runtime::clientwire::{ClientFrame, KIND_PROPOSE};
use abcast_runtime::frame::{self, HEADER_BYTES, MAX_BODY_BYTES};
use abcast_runtime::handle;
use abcast_runtime::{DriverConfig, Listeners, TransportConfig};
use bytes::{Bytes, BytesMut};
use runtime_support::{PATIENCE, Recorder, SeqBcast, bind_local, wait_until};
use std::io::{ErrorKind, Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::time::{Duration, Instant};

/// The node's limit on client connections (`driver::MAX_CONNS`) is 1,024: the strangers
/// take every slot but the one the honest client holds.
const STRANGERS: usize = 1023;
/// Body bytes each stranger sends after its header (as much as the kernel takes).
const SENT_PER_STRANGER: usize = 256 << 10;
/// The stated bound: the node's resident memory grows by less than this under the attack
/// (before the fix: 256 MiB and more).
const RSS_GROWTH_MAX_KIB: u64 = 64 << 10;

/// The two tests measure one process's memory: one at a time.
static ONE_AT_A_TIME: std::sync::Mutex<()> = std::sync::Mutex::new(());

fn vm_rss_kib() -> u64 {
    let status = std::fs::read_to_string("/proc/self/status").expect("/proc/self/status");
    status
        .lines()
        .find_map(|l| l.strip_prefix("VmRSS:"))
        .and_then(|v| v.split_whitespace().next())
        .and_then(|v| v.parse().ok())
        .expect("a VmRSS line")
}

/// Raises this process's soft limit on open files to `need` (both ends of every
/// connection live here), within the hard limit.
fn raise_fd_limit(need: u64) {
    let mut lim = libc::rlimit {
        rlim_cur: 0,
        rlim_max: 0,
    };
    // SAFETY: getrlimit writes into the struct we own.
    assert_eq!(
        unsafe { libc::getrlimit(libc::RLIMIT_NOFILE, &mut lim) },
        0,
        "getrlimit"
    );
    if lim.rlim_cur >= need {
        return;
    }
    assert!(
        lim.rlim_max >= need,
        "this test needs {need} open files; the hard limit is {} (raise it with ulimit -Hn)",
        lim.rlim_max
    );
    lim.rlim_cur = need;
    // SAFETY: setrlimit reads the struct we own; raising the soft limit up to the hard one
    // needs no privilege.
    assert_eq!(
        unsafe { libc::setrlimit(libc::RLIMIT_NOFILE, &lim) },
        0,
        "setrlimit: {}",
        std::io::Error::last_os_error()
    );
}

/// A client speaking the client protocol by hand: propose, wait for the decision.
struct Plain {
    s: TcpStream,
    buf: BytesMut,
}

impl Plain {
    fn connect(addr: SocketAddr) -> Plain {
        let s = TcpStream::connect(addr).expect("connect");
        s.set_read_timeout(Some(Duration::from_millis(200)))
            .expect("timeout");
        Plain {
            s,
            buf: BytesMut::new(),
        }
    }

    fn send(&mut self, f: &ClientFrame) {
        let bytes = frame::encode_to_bytes(f.kind(), 0, &f.encode()).expect("encode");
        self.s.write_all(&bytes).expect("send");
    }

    fn next(&mut self, until: Instant) -> ClientFrame {
        loop {
            if let Some(f) = frame::decode(&mut self.buf).expect("a valid frame") {
                return ClientFrame::decode(f.kind, f.body).expect("a client frame");
            }
            assert!(Instant::now() < until, "no answer from the node");
            let mut chunk = [0u8; 4096];
            match self.s.read(&mut chunk) {
                Ok(0) => panic!("the node closed the connection"),
                Ok(n) => self.buf.extend_from_slice(&chunk[..n]),
                Err(e) if matches!(e.kind(), ErrorKind::WouldBlock | ErrorKind::TimedOut) => {}
                Err(e) => panic!("read: {e}"),
            }
        }
    }

    /// Proposes `payload` until taken, and waits for its decision.
    fn propose(&mut self, payload: Bytes) {
        let until = Instant::now() + PATIENCE;
        loop {
            self.send(&ClientFrame::Propose {
                payloads: vec![payload.clone()],
            });
            let id = loop {
                match self.next(until) {
                    ClientFrame::Proposed { ids } if !ids.is_empty() => break Some(ids[0]),
                    ClientFrame::Busy => break None,
                    ClientFrame::Error { text } => panic!("refused: {text}"),
                    _ => {}
                }
            };
            let Some(id) = id else {
                std::thread::sleep(Duration::from_millis(20));
                continue;
            };
            loop {
                if let ClientFrame::Decided { ids } = self.next(until)
                    && ids.contains(&id)
                {
                    return;
                }
            }
        }
    }
}

/// Opens a connection and sends a header announcing the largest proposal, then up to
/// `SENT_PER_STRANGER` bytes of its body, as far as the socket buffers take them.
fn stranger(addr: SocketAddr, body: &[u8]) -> TcpStream {
    let mut s = TcpStream::connect(addr).expect("connect");
    let mut header = frame::encode_header(KIND_PROPOSE, 0, &[]).expect("header");
    header[8..12].copy_from_slice(&(MAX_BODY_BYTES as u32).to_le_bytes());
    s.write_all(&header).expect("header");
    s.set_nonblocking(true).expect("nonblocking");
    let mut sent = 0;
    while sent < body.len() {
        match s.write(&body[sent..]) {
            Ok(n) => sent += n,
            Err(e) if e.kind() == ErrorKind::WouldBlock => break,
            Err(e) => panic!("stranger write: {e}"),
        }
    }
    s
}

#[test]
fn strangers_announcing_the_largest_frame_on_every_client_connection_take_no_memory() {
    let _one = ONE_AT_A_TIME.lock().unwrap_or_else(|e| e.into_inner());
    raise_fd_limit(2 * (STRANGERS as u64 + 1) + 256);
    let transport = TransportConfig::default();
    let listeners = Listeners {
        peer: bind_local(&transport),
        client: Some(bind_local(&transport)),
    };
    let mut cfg = DriverConfig::new(NodeId(0), 7, Vec::new());
    cfg.transport = transport;
    let protocol = SeqBcast::new(NodeId(0), vec![NodeId(0)], 1);
    let node = handle::start(cfg, listeners, protocol, Recorder::default()).expect("node");
    let addr = node.client_addr().expect("client port");

    // The honest client is served once before, so what serving costs is in the base.
    let mut honest = Plain::connect(addr);
    honest.propose(Bytes::from_static(b"before"));
    let base_kib = vm_rss_kib();

    let body = vec![0x5a; SENT_PER_STRANGER];
    let strangers: Vec<TcpStream> = (0..STRANGERS).map(|_| stranger(addr, &body)).collect();
    // Every stranger's header was read: all but the few the budget admits wait, unread.
    let admitted_max = (TransportConfig::default().client_read_budget_bytes
        / (HEADER_BYTES + MAX_BODY_BYTES)) as u64;
    let waiting = STRANGERS as u64 - admitted_max;
    assert!(
        wait_until(PATIENCE, || node
            .status()
            .is_ok_and(|s| s.transport.read_budget_waits >= waiting)),
        "fewer than {waiting} connections waited for the read budget: {:?}",
        node.status().map(|s| s.transport)
    );
    // The honest client is still served while the strangers hold their connections.
    honest.propose(Bytes::from_static(b"during"));
    let during_kib = vm_rss_kib();
    let growth_kib = during_kib.saturating_sub(base_kib);
    eprintln!(
        "{STRANGERS} connections announcing {MAX_BODY_BYTES} bytes and sending {SENT_PER_STRANGER} \
         bytes each: VmRSS {base_kib} KiB before, {during_kib} KiB during (+{growth_kib} KiB, \
         bound {RSS_GROWTH_MAX_KIB} KiB)"
    );
    assert!(
        growth_kib < RSS_GROWTH_MAX_KIB,
        "the node's resident memory grew by {growth_kib} KiB under the strangers' headers"
    );
    let status = node.status().expect("status");
    assert_eq!(status.transport.read_overdue_closes, 0);

    // The strangers leave: the budget is given back, and a proposal larger than a
    // connection's free allowance (so it needs the budget) is taken and decided.
    drop(strangers);
    honest.propose(Bytes::from(vec![7u8; 1 << 20]));
    let stopped = node.shutdown().expect("clean stop");
    let delivered = stopped.app.0.lock().expect("recorder").delivered.len();
    assert_eq!(delivered, 3, "before, during, and the large value");
}

/// The peer port: a connection that has not said `Hello` may not make the node buffer
/// more than a `Hello`, whatever it announces, and is closed at the header.
#[test]
fn strangers_announcing_large_frames_on_the_peer_port_are_closed_at_the_header() {
    let _one = ONE_AT_A_TIME.lock().unwrap_or_else(|e| e.into_inner());
    raise_fd_limit(2 * (STRANGERS as u64 + 1) + 256);
    let transport = TransportConfig::default();
    let listeners = Listeners {
        peer: bind_local(&transport),
        client: Some(bind_local(&transport)),
    };
    let peer_addr = listeners.peer.local_addr().expect("addr");
    let mut cfg = DriverConfig::new(NodeId(0), 7, Vec::new());
    cfg.transport = transport;
    let protocol = SeqBcast::new(NodeId(0), vec![NodeId(0)], 1);
    let node = handle::start(cfg, listeners, protocol, Recorder::default()).expect("node");
    let body = vec![0x5a; 64 << 10];
    let base_kib = vm_rss_kib();
    let strangers: Vec<TcpStream> = (0..256)
        .map(|_| {
            let mut s = TcpStream::connect(peer_addr).expect("connect");
            let mut header = frame::encode_header(1, 0, &[]).expect("header");
            header[8..12].copy_from_slice(&(MAX_BODY_BYTES as u32).to_le_bytes());
            s.write_all(&header).expect("header");
            s.set_nonblocking(true).expect("nonblocking");
            let _ = s.write(&body);
            s
        })
        .collect();
    assert!(
        wait_until(PATIENCE, || node
            .status()
            .is_ok_and(|s| s.transport.frames_over_kind_limit >= 256)),
        "not every stranger was refused at its header: {:?}",
        node.status().map(|s| s.transport)
    );
    let growth_kib = vm_rss_kib().saturating_sub(base_kib);
    assert!(growth_kib < RSS_GROWTH_MAX_KIB, "grew by {growth_kib} KiB");
    drop(strangers);
    let mut honest = Plain::connect(node.client_addr().expect("client port"));
    honest.propose(Bytes::from_static(b"after"));
    node.shutdown().expect("clean stop");
}
