//! The `Transport` interface on its own, without the event loop: one test body, run over
//! the TCP links and over UDP unicast datagrams, checks what the driver relies on. A frame
//! sent to a peer arrives once, named by its sender, with its kind, group and body; a send to
//! a node outside the peer set is not carried; a removed peer is neither sent to nor heard;
//! a rejected frame closes a stream but not a datagram endpoint; link changes are reported.
//! A future transport (shared memory, seed 004) gets the same body.

use abcast_core::NodeId;
use abcast_runtime::multicast::{self, Multicast};
use abcast_runtime::transport::datagram::{Datagrams, Shape};
use abcast_runtime::transport::tcp::{Identity, TcpLinks};
use abcast_runtime::transport::{
    self, InFrame, LinkNotice, Logger, OutFrame, Readiness, Ready, Sent, Transport, TransportConfig,
};
use bytes::Bytes;
use mio::{Events, Interest, Poll, Token};
use std::net::SocketAddr;
use std::time::{Duration, Instant};

const A: NodeId = NodeId(1);
const B: NodeId = NodeId(2);
const STRANGER: NodeId = NodeId(9);
const CLUSTER: u64 = 77;
const PATIENCE: Duration = Duration::from_secs(20);
const UDP_TOKEN: Token = Token(5);

/// One endpoint: its poller and its transport.
struct End {
    poll: Poll,
    t: Box<dyn Transport>,
    now_us: u64,
}

impl End {
    /// Serves ready registrations and timers once; returns what arrived.
    fn step(&mut self) -> Vec<InFrame> {
        let mut events = Events::with_capacity(64);
        self.poll
            .poll(&mut events, Some(Duration::from_millis(5)))
            .unwrap();
        self.now_us += 5_000;
        let mut inbox = Vec::new();
        self.t.on_iteration();
        for ev in events.iter() {
            let ready = Readiness {
                readable: ev.is_readable() || ev.is_read_closed() || ev.is_error(),
                writable: ev.is_writable() || ev.is_write_closed() || ev.is_error(),
            };
            assert!(
                self.t.owns(ev.token()),
                "an event for a token it never made"
            );
            for _ in 0..self.t.reads_per_event() {
                if self.t.on_ready(self.now_us, ev.token(), ready, &mut inbox) == Ready::Drained {
                    break;
                }
            }
        }
        self.t.on_timers(self.now_us);
        self.t.flush(self.now_us);
        inbox
    }

    fn notices(&mut self) -> Vec<LinkNotice> {
        let mut n = Vec::new();
        self.t.take_notices(&mut n);
        n
    }
}

fn logger(me: NodeId) -> Logger {
    Logger {
        me,
        start: Instant::now(),
    }
}

fn tcp_pair() -> (End, End) {
    let cfg = TransportConfig {
        backoff_ms_min: 5,
        backoff_ms_max: 50,
        ..TransportConfig::default()
    };
    let la = transport::bind_listener("127.0.0.1:0".parse().unwrap(), &cfg).unwrap();
    let lb = transport::bind_listener("127.0.0.1:0".parse().unwrap(), &cfg).unwrap();
    let peers = vec![(A, la.local_addr().unwrap()), (B, lb.local_addr().unwrap())];
    let end = |me: NodeId, l: std::net::TcpListener| {
        let poll = Poll::new().unwrap();
        let id = Identity {
            cluster_id: CLUSTER,
            me,
            incarnation: 1,
        };
        let registry = poll.registry().try_clone().unwrap();
        let t = TcpLinks::new(id, cfg.clone(), logger(me), registry, l, &peers).unwrap();
        End {
            poll,
            t: Box::new(t),
            now_us: 0,
        }
    };
    (end(A, la), end(B, lb))
}

/// A free port: bind, read it, release it for the datagram socket.
fn free_udp_addr() -> SocketAddr {
    let s = std::net::UdpSocket::bind("127.0.0.1:0").unwrap();
    s.local_addr().unwrap()
}

fn udp_pair() -> (End, End) {
    let (aa, ab) = (free_udp_addr(), free_udp_addr());
    let peers = [(A, aa), (B, ab)];
    let end = |me: NodeId, bind: SocketAddr| {
        let poll = Poll::new().unwrap();
        let sender = multicast::Sender {
            cluster_id: CLUSTER,
            node: me,
            incarnation: 1,
        };
        let ids = [A, B];
        let mut m = Multicast::open_unicast(bind, (1 << 20, 1 << 20), sender, &ids).unwrap();
        poll.registry()
            .register(
                m.socket_mut(),
                UDP_TOKEN,
                Interest::READABLE | Interest::WRITABLE,
            )
            .unwrap();
        let others: Vec<_> = peers.iter().copied().filter(|&(id, _)| id != me).collect();
        let t = Datagrams::new(m, UDP_TOKEN, Shape::Unicast, logger(me), &others);
        End {
            poll,
            t: Box::new(t),
            now_us: 0,
        }
    };
    (end(A, aa), end(B, ab))
}

/// Steps both ends until `b` received something, for at most `PATIENCE`.
fn deliver(a: &mut End, b: &mut End) -> Vec<InFrame> {
    let end = Instant::now() + PATIENCE;
    while Instant::now() < end {
        a.step();
        let got = b.step();
        if !got.is_empty() {
            return got;
        }
    }
    Vec::new()
}

fn frame<'a>(chunks: &'a [Bytes]) -> OutFrame<'a> {
    OutFrame {
        kind: 7,
        group: 3,
        chunks,
        urgent: false,
        lane: abcast_core::codec::Lane::Data,
    }
}

/// The one body every transport passes (see the module comment). `stream`: a connection
/// transport, which reports link changes and closes on a rejected frame.
fn transport_contract(mut a: End, mut b: End, stream: bool) {
    // A message arrives once, whole, named by its sender; its body may come in pieces.
    let chunks = [Bytes::from_static(b"head:"), Bytes::from(vec![b'p'; 3000])];
    assert_eq!(a.t.send(a.now_us, B, frame(&chunks)), Sent::Queued);
    let got = deliver(&mut a, &mut b);
    assert_eq!(got.len(), 1, "{got:?}");
    let f = &got[0];
    assert_eq!((f.from, f.kind, f.group), (A, 7, 3));
    assert_eq!(f.body.len(), 5 + 3000);
    assert!(f.body.starts_with(b"head:"));
    if stream {
        assert_eq!(a.notices(), vec![LinkNotice::Reconnected(B)]);
    }

    // Nobody outside the peer set is sent to.
    assert_ne!(a.t.send(a.now_us, STRANGER, frame(&chunks)), Sent::Queued);

    // A frame the receiver cannot decode: a stream closes (and the sender hears of it), a
    // datagram endpoint goes on.
    let closed = b.t.reject(f, "test: undecodable");
    assert_eq!(closed, stream);
    let mut stats = Default::default();
    b.t.add_stats(&mut stats);
    if stream {
        assert_eq!(stats.bad_input_closes, 1, "{stats:?}");
        let end = Instant::now() + PATIENCE;
        let mut heard = Vec::new();
        while heard.is_empty() && Instant::now() < end {
            a.step();
            b.step();
            heard = a.notices();
        }
        assert_eq!(
            heard,
            vec![LinkNotice::Unreachable(B)],
            "the sender never heard"
        );
    } else {
        assert_eq!(stats.unicast.datagrams_rejected, 1, "{stats:?}");
    }

    // Messages flow again (a stream redials).
    let small = [Bytes::from_static(b"again")];
    let end = Instant::now() + PATIENCE;
    let mut arrived = false;
    while !arrived && Instant::now() < end {
        a.t.send(a.now_us, B, frame(&small));
        arrived = deliver(&mut a, &mut b)
            .iter()
            .any(|f| f.from == A && &f.body[..] == b"again");
    }
    assert!(arrived, "nothing arrived after the rejected frame");

    // A removed peer is neither sent to nor heard.
    b.t.remove_peer(b.now_us, A);
    a.t.remove_peer(a.now_us, B);
    assert_ne!(a.t.send(a.now_us, B, frame(&small)), Sent::Queued);
    for _ in 0..20 {
        a.step();
        assert!(b.step().is_empty(), "a removed peer was heard");
    }
}

#[test]
fn tcp_links_keep_the_transport_contract() {
    let (a, b) = tcp_pair();
    transport_contract(a, b, true);
}

#[test]
fn udp_unicast_keeps_the_transport_contract() {
    let (a, b) = udp_pair();
    transport_contract(a, b, false);
}
