//! A snapshot the protocol refuses for the moment is asked for again an interval later.
//! Sequence Paxos refuses while a stop-sign's configuration is not yet entered, Raft and
//! Sequence Paxos while a fetched snapshot is not yet handed to the application: before,
//! one such refusal turned snapshots off for the node's life, and its log grew without
//! bound. A protocol that takes no snapshots at all is not asked again.

use abcast_core::config::StartInfo;
use abcast_core::storage::MemoryStore;
use abcast_core::uring::{RingConfig, URing};
use abcast_core::{
    Application, Delivery, Micros, NodeId, Outbox, ProposeError, Protocol, Snapshot, Status,
    ValueId,
};
use abcast_runtime::handle;
use abcast_runtime::{DriverConfig, Hooks, Listeners, TransportConfig, transport};
use bytes::Bytes;
use std::sync::Arc;
use std::sync::atomic::{AtomicU32, Ordering};
use std::time::{Duration, Instant};

const PATIENCE: Duration = Duration::from_secs(60);

/// Counts values; its state is the count.
#[derive(Default)]
struct Counter {
    values: u64,
}

impl Application for Counter {
    fn deliver(&mut self, _now: Micros, d: &Delivery, _results: &mut Vec<Bytes>) {
        self.values += d.batch.len() as u64;
    }
    fn snapshot(&mut self) -> Option<Bytes> {
        Some(Bytes::copy_from_slice(&self.values.to_le_bytes()))
    }
}

impl Hooks for Counter {}

/// U-Ring Paxos that refuses its first `refusals` snapshots, as a protocol in the middle
/// of a transfer does; `supported = false` plays a protocol without snapshots.
struct Refusing {
    inner: URing,
    refusals: u32,
    supported: bool,
    asked: Arc<AtomicU32>,
}

impl Protocol for Refusing {
    type Message = <URing as Protocol>::Message;
    fn node(&self) -> NodeId {
        self.inner.node()
    }
    fn propose(
        &mut self,
        now: Micros,
        payload: Bytes,
        out: &mut Outbox<Self::Message>,
    ) -> Result<ValueId, ProposeError> {
        self.inner.propose(now, payload, out)
    }
    fn receive(
        &mut self,
        now: Micros,
        from: NodeId,
        msg: Self::Message,
        out: &mut Outbox<Self::Message>,
    ) {
        self.inner.receive(now, from, msg, out)
    }
    fn tick(&mut self, now: Micros, out: &mut Outbox<Self::Message>) {
        self.inner.tick(now, out)
    }
    fn tick_interval_us(&self) -> Micros {
        self.inner.tick_interval_us()
    }
    fn can_propose(&self) -> bool {
        self.inner.can_propose()
    }
    fn status(&self) -> Status {
        self.inner.status()
    }
    fn snapshots_supported(&self) -> bool {
        self.supported
    }
    fn take_snapshot(&mut self, app: Bytes) -> Result<Snapshot, String> {
        let asked = self.asked.fetch_add(1, Ordering::SeqCst) + 1;
        if !self.supported {
            return Err("this protocol takes no snapshots".into());
        }
        if asked <= self.refusals {
            return Err("a transfer is under way".into());
        }
        self.inner.take_snapshot(app)
    }
}

/// One node of a ring of one, snapshotting every 20 ms into `dir`; proposes values for
/// `for_ms` and returns how often the protocol was asked and what the driver counted.
fn run(dir: &std::path::Path, refusals: u32, supported: bool, for_ms: u64) -> (u32, u64, u64) {
    let t = TransportConfig::default();
    let l = Listeners {
        peer: transport::bind_listener("127.0.0.1:0".parse().unwrap(), &t).unwrap(),
        client: None,
    };
    let me = NodeId(0);
    let peers = vec![(me, l.peer.local_addr().unwrap())];
    let store = Box::new(MemoryStore::new(1 << 16, 64 << 20));
    let inner = URing::new(RingConfig::pal(&[0]), me, StartInfo::FRESH, store).unwrap();
    let asked = Arc::new(AtomicU32::new(0));
    let p = Refusing {
        inner,
        refusals,
        supported,
        asked: asked.clone(),
    };
    let mut cfg = DriverConfig::new(me, 1, peers);
    cfg.snapshot_interval_us = 20_000;
    cfg.snapshot_path = Some(dir.join("snapshot"));
    let node = handle::start(cfg, l, p, Counter::default()).unwrap();
    let end = Instant::now() + Duration::from_millis(for_ms);
    while Instant::now() < end {
        let ticket = node.propose(Bytes::from_static(b"v")).unwrap();
        ticket.wait(PATIENCE).unwrap();
        std::thread::sleep(Duration::from_millis(5));
    }
    let done = node.shutdown().unwrap();
    (
        asked.load(Ordering::SeqCst),
        done.transport.snapshots,
        done.transport.snapshots_refused,
    )
}

/// An empty directory of this test's own.
fn scratch(name: &str) -> std::path::PathBuf {
    let d = std::env::temp_dir().join(format!(
        "abcast-snapshot-retry-{name}-{}",
        std::process::id()
    ));
    let _ = std::fs::remove_dir_all(&d);
    std::fs::create_dir_all(&d).unwrap();
    d
}

#[test]
fn a_snapshot_refused_for_the_moment_is_taken_an_interval_later() {
    let dir = scratch("retry");
    let (asked, taken, refused) = run(&dir, 3, true, 600);
    assert_eq!(refused, 3, "the three refusals were counted");
    assert!(
        taken >= 1 && asked > 3,
        "asked again after the refusals and taken: asked {asked}, taken {taken}"
    );
    let bytes = std::fs::read(dir.join("snapshot")).unwrap();
    let snap = Snapshot::decode(&bytes).unwrap();
    assert!(snap.upto >= 1, "the snapshot covers delivered values");
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn a_protocol_without_snapshots_is_asked_once() {
    let dir = scratch("unsupported");
    let (asked, taken, refused) = run(&dir, 0, false, 300);
    assert_eq!((asked, taken, refused), (1, 0, 0));
    assert!(!dir.join("snapshot").exists());
    let _ = std::fs::remove_dir_all(&dir);
}
