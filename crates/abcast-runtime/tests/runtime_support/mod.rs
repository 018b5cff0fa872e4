//! Shared pieces of the runtime tests: a tiny fixed-sequencer broadcast protocol, a
//! recording application, a cluster of drivers in threads, a frame-level TCP proxy that can
//! corrupt one frame, and bounded waiting. Nothing here asserts on timing: every wait is a
//! generous bound on a condition.
#![allow(dead_code)]

use abcast_core::codec::{Decoder, Encoder, WireMessage};
use abcast_core::protocol::Ack;
use abcast_core::{
    Batch, BatchKey, DecodeError, Delivery, Instance, Micros, NodeId, Outbox, ProposeError,
    Protocol, Status, ValueId,
};
use abcast_runtime::transport::{self, TransportConfig};
use abcast_runtime::{
    Application, Driver, DriverConfig, Hooks, Listeners, LoadConfig, TransportStats, frame,
};
use bytes::{Bytes, BytesMut};
use std::collections::{BTreeMap, HashMap};
use std::io::{Read, Write};
use std::net::{Shutdown, SocketAddr, TcpListener, TcpStream};
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

// ----- a fixed-sequencer broadcast ------------------------------------------------------

/// Messages of the sequencer protocol.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum SeqMsg {
    /// Proposer -> sequencer: please order this value.
    Req { id: ValueId, payload: Bytes },
    /// Sequencer -> everyone: `id` is instance `instance`.
    Order {
        instance: Instance,
        id: ValueId,
        payload: Bytes,
    },
    /// Learner -> sequencer: I have everything below `next`; send what follows.
    Need { next: Instance },
}

impl WireMessage for SeqMsg {
    fn kind(&self) -> u8 {
        match self {
            SeqMsg::Req { .. } => 1,
            SeqMsg::Order { .. } => 2,
            SeqMsg::Need { .. } => 3,
        }
    }
    fn encode(&self, e: &mut Encoder) {
        match self {
            SeqMsg::Req { id, payload } => {
                e.put_u32(id.node.0);
                e.put_u64(id.seq);
                e.put_bytes(payload);
            }
            SeqMsg::Order {
                instance,
                id,
                payload,
            } => {
                e.put_u64(*instance);
                e.put_u32(id.node.0);
                e.put_u64(id.seq);
                e.put_bytes(payload);
            }
            SeqMsg::Need { next } => e.put_u64(*next),
        }
    }
    fn decode(kind: u8, body: Bytes) -> Result<Self, DecodeError> {
        let mut d = Decoder::new(body);
        let m = match kind {
            1 => {
                let id = ValueId {
                    node: NodeId(d.u32("node")?),
                    seq: d.u64("seq")?,
                };
                let n = d.remaining();
                SeqMsg::Req {
                    id,
                    payload: d.bytes(n, "payload")?,
                }
            }
            2 => {
                let instance = d.u64("instance")?;
                let id = ValueId {
                    node: NodeId(d.u32("node")?),
                    seq: d.u64("seq")?,
                };
                let n = d.remaining();
                SeqMsg::Order {
                    instance,
                    id,
                    payload: d.bytes(n, "payload")?,
                }
            }
            3 => SeqMsg::Need {
                next: d.u64("next")?,
            },
            k => return Err(DecodeError::UnknownKind(k)),
        };
        d.finish()?;
        Ok(m)
    }
}

/// Node `members[0]` orders everything. Proposers resend unordered values, learners ask
/// the sequencer for what they miss: every lost message is recovered, which is what the
/// runtime's "drop and let the protocol retransmit" needs.
pub struct SeqBcast {
    me: NodeId,
    members: Vec<NodeId>,
    window: usize,
    next_seq: u64,
    unacked: BTreeMap<u64, (Bytes, Micros)>,
    log: Vec<(ValueId, Bytes)>,
    ordered: HashMap<ValueId, Instance>,
    next_deliver: Instance,
    pending: BTreeMap<Instance, (ValueId, Bytes)>,
    last_need_us: Micros,
}

const RESEND_US: Micros = 200_000;
const NEED_US: Micros = 50_000;

impl SeqBcast {
    pub fn new(me: NodeId, members: Vec<NodeId>, start_seq: u64) -> SeqBcast {
        SeqBcast {
            me,
            members,
            window: 64,
            next_seq: start_seq,
            unacked: BTreeMap::new(),
            log: Vec::new(),
            ordered: HashMap::new(),
            next_deliver: 1,
            pending: BTreeMap::new(),
            last_need_us: 0,
        }
    }
    fn sequencer(&self) -> NodeId {
        self.members[0]
    }
}

impl Protocol for SeqBcast {
    type Message = SeqMsg;

    fn node(&self) -> NodeId {
        self.me
    }

    fn propose(
        &mut self,
        now: Micros,
        payload: Bytes,
        out: &mut Outbox<SeqMsg>,
    ) -> Result<ValueId, ProposeError> {
        if self.unacked.len() >= self.window {
            return Err(ProposeError::Busy);
        }
        let id = ValueId {
            node: self.me,
            seq: self.next_seq,
        };
        self.next_seq += 1;
        self.unacked.insert(id.seq, (payload.clone(), now));
        out.send(self.sequencer(), SeqMsg::Req { id, payload });
        Ok(id)
    }

    fn receive(&mut self, _now: Micros, from: NodeId, msg: SeqMsg, out: &mut Outbox<SeqMsg>) {
        match msg {
            SeqMsg::Req { id, payload } => {
                if self.me != self.sequencer() {
                    return;
                }
                if let Some(&instance) = self.ordered.get(&id) {
                    out.send(
                        from,
                        SeqMsg::Order {
                            instance,
                            id,
                            payload,
                        },
                    );
                    return;
                }
                self.log.push((id, payload.clone()));
                let instance = self.log.len() as Instance;
                self.ordered.insert(id, instance);
                for &m in &self.members {
                    out.send(
                        m,
                        SeqMsg::Order {
                            instance,
                            id,
                            payload: payload.clone(),
                        },
                    );
                }
            }
            SeqMsg::Order {
                instance,
                id,
                payload,
            } => {
                if id.node == self.me && self.unacked.remove(&id.seq).is_some() {
                    out.acks.push(Ack {
                        key: BatchKey {
                            origin: self.me,
                            first_seq: id.seq,
                        },
                        count: 1,
                    });
                }
                if instance >= self.next_deliver {
                    self.pending.insert(instance, (id, payload));
                }
                while let Some((id, payload)) = self.pending.remove(&self.next_deliver) {
                    out.deliveries
                        .push(Delivery::new(self.next_deliver, Batch::single(id, payload)));
                    self.next_deliver += 1;
                }
            }
            SeqMsg::Need { next } => {
                if self.me != self.sequencer() || next == 0 {
                    return;
                }
                let upto = (self.log.len() as Instance).min(next + 63);
                for instance in next..=upto {
                    let (id, payload) = self.log[(instance - 1) as usize].clone();
                    out.send(
                        from,
                        SeqMsg::Order {
                            instance,
                            id,
                            payload,
                        },
                    );
                }
            }
        }
    }

    fn tick(&mut self, now: Micros, out: &mut Outbox<SeqMsg>) {
        if now.saturating_sub(self.last_need_us) >= NEED_US {
            self.last_need_us = now;
            if self.me != self.sequencer() {
                out.send(
                    self.sequencer(),
                    SeqMsg::Need {
                        next: self.next_deliver,
                    },
                );
            }
        }
        let seq = self.sequencer();
        for (&s, (payload, sent)) in self.unacked.iter_mut().take(64) {
            if now.saturating_sub(*sent) >= RESEND_US {
                *sent = now;
                out.send(
                    seq,
                    SeqMsg::Req {
                        id: ValueId {
                            node: self.me,
                            seq: s,
                        },
                        payload: payload.clone(),
                    },
                );
            }
        }
    }

    fn tick_interval_us(&self) -> Micros {
        10_000
    }

    fn can_propose(&self) -> bool {
        self.unacked.len() < self.window
    }

    fn status(&self) -> Status {
        Status {
            node: self.me,
            coordinator: Some(self.sequencer()),
            delivered_upto: self.next_deliver - 1,
            values_in_flight: self.unacked.len(),
            view: self.members.clone(),
            ..Status::default()
        }
    }
}

// ----- a recording application ----------------------------------------------------------

#[derive(Default)]
pub struct Recorded {
    pub delivered: Vec<(Instance, ValueId, Bytes)>,
    pub acked: u64,
}

#[derive(Clone, Default)]
pub struct Recorder(pub Arc<Mutex<Recorded>>);

impl Recorder {
    pub fn delivered_count(&self) -> usize {
        self.0.lock().unwrap().delivered.len()
    }
    pub fn ids(&self) -> Vec<ValueId> {
        self.0
            .lock()
            .unwrap()
            .delivered
            .iter()
            .map(|d| d.1)
            .collect()
    }
}

impl Application for Recorder {
    fn deliver(&mut self, _now: Micros, d: &Delivery, _results: &mut Vec<Bytes>) {
        let mut r = self.0.lock().unwrap();
        for v in d.batch.values() {
            r.delivered.push((d.instance, v.id, v.payload));
        }
    }
}

impl Hooks for Recorder {
    fn ack(&mut self, _now: Micros, a: &Ack) {
        self.0.lock().unwrap().acked += u64::from(a.count);
    }
}

// ----- clusters of drivers in threads ---------------------------------------------------

pub fn bind_local(cfg: &TransportConfig) -> TcpListener {
    transport::bind_listener("127.0.0.1:0".parse().unwrap(), cfg).unwrap()
}

pub struct RunningNode<P: Protocol + Send + 'static> {
    pub id: NodeId,
    pub recorder: Recorder,
    pub client_addr: Option<SocketAddr>,
    pub peer_addr: SocketAddr,
    stop: Arc<AtomicBool>,
    handle: Option<JoinHandle<Driver<P>>>,
}

impl<P: Protocol + Send + 'static> RunningNode<P> {
    /// Stops the loop and returns the driver (for its counters).
    pub fn stop(mut self) -> Driver<P> {
        self.stop.store(true, Ordering::Relaxed);
        self.handle.take().unwrap().join().unwrap()
    }
}

impl<P: Protocol + Send + 'static> Drop for RunningNode<P> {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
    }
}

/// Everything to start one node.
pub struct NodeSpec<P> {
    pub cfg: DriverConfig,
    pub protocol: P,
    pub listeners: Listeners,
    pub load: Option<LoadConfig>,
}

pub fn start<P: Protocol + Send + 'static>(spec: NodeSpec<P>) -> RunningNode<P>
where
    P::Message: Send,
{
    let mut driver = Driver::new(spec.cfg, spec.protocol, spec.listeners).unwrap();
    if let Some(load) = spec.load {
        driver.start_load(load);
    }
    spawn(driver)
}

/// Runs a driver the caller built (and set up: its load, ...) on a thread of its own.
pub fn spawn<P: Protocol + Send + 'static>(mut driver: Driver<P>) -> RunningNode<P>
where
    P::Message: Send,
{
    let id = driver.protocol().node();
    let recorder = Recorder::default();
    let stop = Arc::new(AtomicBool::new(false));
    let client_addr = driver.client_addr();
    let peer_addr = driver.peer_addr().unwrap();
    let (mut app, flag) = (recorder.clone(), Arc::clone(&stop));
    let handle = std::thread::Builder::new()
        .name(format!("node-{}", id.0))
        .spawn(move || {
            driver
                .run(&mut app, |_| flag.load(Ordering::Relaxed))
                .unwrap();
            driver
        })
        .unwrap();
    RunningNode {
        id,
        recorder,
        client_addr,
        peer_addr,
        stop,
        handle: Some(handle),
    }
}

/// Listeners and driver configs for `n` nodes on ephemeral ports. `route(from, to, addr)`
/// may replace the address `from` uses for `to` (to put a proxy in between).
pub fn local_specs(
    n: usize,
    transport: TransportConfig,
    with_client_port: bool,
    route: impl Fn(usize, usize, SocketAddr) -> SocketAddr,
) -> Vec<(DriverConfig, Listeners)> {
    let listeners: Vec<Listeners> = (0..n)
        .map(|_| Listeners {
            peer: bind_local(&transport),
            client: with_client_port.then(|| bind_local(&transport)),
        })
        .collect();
    let addrs: Vec<SocketAddr> = listeners
        .iter()
        .map(|l| l.peer.local_addr().unwrap())
        .collect();
    listeners
        .into_iter()
        .enumerate()
        .map(|(i, l)| {
            let peers = (0..n)
                .map(|j| (NodeId(j as u32), route(i, j, addrs[j])))
                .collect();
            let mut cfg = DriverConfig::new(NodeId(i as u32), 42, peers);
            cfg.transport = transport.clone();
            (cfg, l)
        })
        .collect()
}

/// Starts `n` nodes of the protocol `make` builds, each running `load` (if any).
pub fn cluster<P: Protocol + Send + 'static>(
    n: usize,
    load: Option<LoadConfig>,
    transport: TransportConfig,
    with_client_port: bool,
    route: impl Fn(usize, usize, SocketAddr) -> SocketAddr,
    make: impl Fn(NodeId) -> P,
) -> Vec<RunningNode<P>>
where
    P::Message: Send,
{
    local_specs(n, transport, with_client_port, route)
        .into_iter()
        .map(|(cfg, listeners)| {
            start(NodeSpec {
                protocol: make(cfg.me),
                cfg,
                listeners,
                load: load.clone(),
            })
        })
        .collect()
}

/// The built-in load generator proposing `values` values of `value_bytes`, at most
/// `window_values` in flight; `None` for no load.
pub fn load_of(values: u64, value_bytes: usize, window_values: usize) -> Option<LoadConfig> {
    (values > 0).then_some(LoadConfig {
        rate_per_s: 0,
        value_bytes,
        window_values,
        max_values: Some(values),
        leader_only: false,
        stamp: false,
    })
}

/// Starts `n` sequencer-broadcast nodes; node `i` proposes `values_per_node` values.
pub fn seq_cluster(
    n: usize,
    values_per_node: u64,
    transport: TransportConfig,
    with_client_port: bool,
    route: impl Fn(usize, usize, SocketAddr) -> SocketAddr,
) -> Vec<RunningNode<SeqBcast>> {
    let members: Vec<NodeId> = (0..n as u32).map(NodeId).collect();
    cluster(
        n,
        load_of(values_per_node, 100, 32),
        transport,
        with_client_port,
        route,
        |me| SeqBcast::new(me, members.clone(), 1),
    )
}

/// Waits until `cond` holds, checking every 20 ms, for at most `limit`.
pub fn wait_until(limit: Duration, mut cond: impl FnMut() -> bool) -> bool {
    let end = Instant::now() + limit;
    while Instant::now() < end {
        if cond() {
            return true;
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    cond()
}

/// A bound that is never reached on a healthy run, even on a loaded 2-core machine.
pub const PATIENCE: Duration = Duration::from_secs(90);

/// Every node delivered the same sequence of `total` distinct values.
pub fn assert_agreement<P: Protocol + Send + 'static>(nodes: &[RunningNode<P>], total: usize) {
    let first = nodes[0].recorder.ids();
    assert_eq!(
        first.len(),
        total,
        "node 0 delivered {} values, expected {total}",
        first.len()
    );
    let mut distinct = first.clone();
    distinct.sort();
    distinct.dedup();
    assert_eq!(distinct.len(), total, "duplicates delivered");
    for n in &nodes[1..] {
        assert_eq!(
            n.recorder.ids(),
            first,
            "node {} delivered another sequence",
            n.id
        );
    }
}

pub fn all_delivered<P: Protocol + Send + 'static>(nodes: &[RunningNode<P>], total: usize) -> bool {
    nodes.iter().all(|n| n.recorder.delivered_count() >= total)
}

// ----- a frame-level proxy --------------------------------------------------------------

/// What the proxy does to the `at`-th frame (counting from 0, the `Hello`) of the first
/// connection it forwards.
#[derive(Clone, Copy, Debug)]
pub enum Corruption {
    BadChecksum,
    BadMagic,
    /// A well-framed message of a kind the protocol does not know.
    UndecodableMessage,
}

pub struct Proxy {
    pub addr: SocketAddr,
    pub connections: Arc<AtomicUsize>,
    pub corrupted: Arc<AtomicBool>,
}

/// Forwards frames from whoever connects to `target`, corrupting one frame of the first
/// connection. When either side closes, both are closed, as a real network path would.
pub fn start_proxy(target: SocketAddr, corruption: Corruption, at: usize) -> Proxy {
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = listener.local_addr().unwrap();
    let connections = Arc::new(AtomicUsize::new(0));
    let corrupted = Arc::new(AtomicBool::new(false));
    let (conns, done) = (Arc::clone(&connections), Arc::clone(&corrupted));
    std::thread::spawn(move || {
        for inbound in listener.incoming() {
            let Ok(mut inbound) = inbound else { continue };
            let Ok(mut outbound) = TcpStream::connect(target) else {
                continue;
            };
            let first = conns.fetch_add(1, Ordering::SeqCst) == 0;
            // The target never writes on this connection; a read returning means it closed.
            let (mut watch, kill) = (outbound.try_clone().unwrap(), inbound.try_clone().unwrap());
            std::thread::spawn(move || {
                let mut b = [0u8; 1024];
                while matches!(watch.read(&mut b), Ok(n) if n > 0) {}
                let _ = kill.shutdown(Shutdown::Both);
            });
            let mut buf = BytesMut::new();
            let mut index = 0usize;
            let mut chunk = vec![0u8; 1 << 16];
            'conn: loop {
                let n = match inbound.read(&mut chunk) {
                    Ok(0) | Err(_) => break,
                    Ok(n) => n,
                };
                buf.extend_from_slice(&chunk[..n]);
                while let Ok(Some(f)) = frame::decode(&mut buf) {
                    let mut bytes = BytesMut::from(
                        &frame::encode_to_bytes(f.kind, f.group, std::slice::from_ref(&f.body))
                            .unwrap()[..],
                    );
                    if first && index == at {
                        match corruption {
                            Corruption::BadChecksum => {
                                let last = bytes.len() - 1;
                                if bytes.len() > frame::HEADER_BYTES {
                                    bytes[last] ^= 0x55;
                                } else {
                                    bytes[12] ^= 0x55;
                                }
                            }
                            Corruption::BadMagic => bytes[0] ^= 0xff,
                            Corruption::UndecodableMessage => {
                                let body = Bytes::from_static(b"not a message");
                                bytes = BytesMut::from(
                                    &frame::encode_to_bytes(99, f.group, &[body]).unwrap()[..],
                                );
                            }
                        }
                        done.store(true, Ordering::SeqCst);
                    }
                    index += 1;
                    if outbound.write_all(&bytes).is_err() {
                        break 'conn;
                    }
                }
            }
            let _ = inbound.shutdown(Shutdown::Both);
            let _ = outbound.shutdown(Shutdown::Both);
        }
    });
    Proxy {
        addr,
        connections,
        corrupted,
    }
}

/// Totals of the transport counters of stopped drivers.
pub fn sum_stats(stats: &[TransportStats]) -> TransportStats {
    let mut t = TransportStats::default();
    for s in stats {
        t.frames_queued += s.frames_queued;
        t.frames_dropped += s.frames_dropped;
        t.frames_received += s.frames_received;
        t.bad_input_closes += s.bad_input_closes;
        t.connects += s.connects;
        t.disconnects += s.disconnects;
        t.hellos_accepted += s.hellos_accepted;
        t.stale_frames_dropped += s.stale_frames_dropped;
    }
    t
}
