//! Must-show 5: a subscription never misses silently. Three U-Ring Paxos nodes on durable
//! storage (driver threads, real files) under load; a learn client follows node 2; node 2's
//! driver is stopped and restarted on its directory; the client resubscribes from the last
//! instance it saw + 1. Every instance from 1 to the end is delivered or inside a gap
//! marker, and what was delivered is what node 0 delivered at the same instances. A node
//! whose journal is small answers a subscription from 1 with a `Gap` first.

#[path = "../../abcast-runtime/tests/runtime_support/mod.rs"]
mod runtime_support;

use abcast_core::config::StartInfo;
use abcast_core::storage::{DurableOptions, DurableStore};
use abcast_core::uring::{RingConfig, URing};
use abcast_core::{Instance, NodeId, ValueId};
use abcast_node::client::{Client, ClientError, LearnEvent};
use abcast_runtime::disk::OsDir;
use abcast_runtime::{DriverConfig, GapReason, Listeners, LoadConfig, TransportConfig};
use runtime_support::*;
use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

const VALUES_PER_NODE: u64 = 1500;

fn uring_on(dir: &Path, me: NodeId, start: StartInfo) -> URing {
    let opts = DurableOptions {
        sync: true,
        segment_bytes: 1 << 20,
        cache_instances: 1 << 14,
        cache_bytes: 64 << 20,
    };
    let (store, _) = DurableStore::open(OsDir::open(&dir.join("log")).unwrap(), opts).unwrap();
    URing::new(RingConfig::pal(&[0, 1, 2]), me, start, Box::new(store)).unwrap()
}

fn driver_cfg(
    me: NodeId,
    peers: &[(NodeId, SocketAddr)],
    dir: &Path,
    journal: u64,
) -> DriverConfig {
    let mut cfg = DriverConfig::new(me, 5, peers.to_vec());
    cfg.group_commit = true;
    cfg.history_dir = Some(dir.join("history"));
    cfg.history_file_bytes = journal;
    cfg
}

/// Follows a subscription: checks each event starts where the last ended (no silent
/// gap), keeps the delivered batches' ids per instance. Returns how it ended.
struct Follower {
    next: Instance,
    delivered: BTreeMap<Instance, Vec<ValueId>>,
    gaps: Vec<(Instance, Instance, GapReason)>,
}

impl Follower {
    fn take(&mut self, ev: LearnEvent) {
        let (first, end) = match &ev {
            LearnEvent::Delivered(i, _) => (*i, i + 1),
            LearnEvent::Gap(g) => (g.from, g.to),
        };
        assert_eq!(first, self.next, "a silent gap before {ev:?}");
        match ev {
            LearnEvent::Delivered(i, b) => {
                assert!(self.delivered.insert(i, b.ids().collect()).is_none());
            }
            LearnEvent::Gap(g) => self.gaps.push((g.from, g.to, g.reason)),
        }
        self.next = end;
    }
}

fn temp_dir(name: &str) -> PathBuf {
    let d = std::env::temp_dir().join(format!("abcast-{name}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&d);
    d
}

#[test]
fn a_resumed_subscription_covers_every_instance_across_a_restart_of_its_node() {
    let base = temp_dir("resume");
    let t = TransportConfig::default();
    let listeners: Vec<Listeners> = (0..3)
        .map(|_| Listeners {
            peer: bind_local(&t),
            client: Some(bind_local(&t)),
        })
        .collect();
    let peers: Vec<(NodeId, SocketAddr)> = listeners
        .iter()
        .enumerate()
        .map(|(i, l)| (NodeId(i as u32), l.peer.local_addr().unwrap()))
        .collect();
    // Node 1's journal is small: its oldest instances are dropped (a gap from 1).
    let journals = [8 << 20, 64 << 10, 8 << 20];
    let dirs: Vec<PathBuf> = (0..3).map(|i| base.join(format!("node-{i}"))).collect();
    let mut nodes: Vec<_> = listeners
        .into_iter()
        .enumerate()
        .map(|(i, l)| {
            let me = NodeId(i as u32);
            start(NodeSpec {
                cfg: driver_cfg(me, &peers, &dirs[i], journals[i]),
                protocol: uring_on(&dirs[i], me, StartInfo::FRESH),
                listeners: l,
                // About 1.5 s of load, so the stop comes in the middle of it.
                load: Some(LoadConfig {
                    rate_per_s: 1000,
                    value_bytes: 200,
                    window_values: 32,
                    max_values: Some(VALUES_PER_NODE),
                    leader_only: false,
                    stamp: false,
                }),
            })
        })
        .collect();

    // A learn client on node 2 from instance 1, until node 2 stops under it.
    let mut f = Follower {
        next: 1,
        delivered: BTreeMap::new(),
        gaps: Vec::new(),
    };
    let mut sub = Client::connect(&nodes[2].client_addr.unwrap().to_string()).unwrap();
    sub.subscribe(1).unwrap();
    while f.next <= 50 {
        f.take(sub.next_event(Some(PATIENCE)).unwrap());
    }
    let x = nodes.pop().unwrap();
    let x_peer = x.peer_addr;
    drop(x.stop());
    loop {
        match sub.next_event(Some(PATIENCE)) {
            Ok(ev) => f.take(ev),
            Err(ClientError::Closed | ClientError::Io(_)) => break,
            Err(e) => panic!("{e}"),
        }
    }
    let seen_before = f.next - 1;

    // Restart node 2 on its directory (a new life), and resume from the next instance.
    let restarted = start(NodeSpec {
        cfg: {
            let mut c = driver_cfg(NodeId(2), &peers, &dirs[2], journals[2]);
            c.incarnation = 1;
            c
        },
        protocol: uring_on(&dirs[2], NodeId(2), StartInfo::restart(1, false).unwrap()),
        listeners: Listeners {
            peer: abcast_runtime::transport::bind_listener(x_peer, &t).unwrap(),
            client: Some(bind_local(&t)),
        },
        load: None,
    });
    let mut sub = Client::connect(&restarted.client_addr.unwrap().to_string()).unwrap();
    sub.subscribe(seen_before + 1).unwrap();

    // The end: node 0 delivered every value of nodes 0 and 1 (node 2's, cut by the stop,
    // are decided or not; either way they are at instances below the end).
    let y = &nodes[0].recorder;
    assert!(wait_until(PATIENCE, || y.delivered_count()
        >= 2 * VALUES_PER_NODE as usize));
    std::thread::sleep(Duration::from_millis(500));
    let reference: BTreeMap<Instance, Vec<ValueId>> = {
        let r = y.0.lock().unwrap();
        let mut m: BTreeMap<Instance, Vec<ValueId>> = BTreeMap::new();
        for (i, id, _) in &r.delivered {
            m.entry(*i).or_default().push(*id);
        }
        m
    };
    let end = *reference.keys().last().unwrap();
    let deadline = Instant::now() + PATIENCE;
    while f.next <= end {
        assert!(
            Instant::now() < deadline,
            "resumed stream stuck at {}",
            f.next
        );
        f.take(sub.next_event(Some(PATIENCE)).unwrap());
    }
    // Covered from 1 to the end without a silent gap (checked event by event), and what
    // was delivered agrees with node 0.
    for (i, ids) in &f.delivered {
        if *i <= end {
            assert_eq!(
                Some(ids),
                reference.get(i),
                "instance {i} differs from node 0"
            );
        }
    }
    // Nothing was lost on the way: the journal held every instance the stop cut off, and
    // the only gaps are instances decided without values (no-ops at the takeover).
    assert!(
        f.gaps.iter().all(|g| g.2 == GapReason::Empty),
        "{:?}",
        f.gaps
    );
    for (from, to, _) in &f.gaps {
        assert!(
            (*from..*to).all(|i| !reference.contains_key(&i)),
            "a gap over instances node 0 delivered values at"
        );
    }
    let delivered_after = f.delivered.range(seen_before + 1..).count();
    assert!(delivered_after > 0, "the resumed stream carried values");
    eprintln!(
        "resume: saw 1..={seen_before} before the stop, resumed at {}, covered to {end}: \
         {} instances delivered, gaps {:?}",
        seen_before + 1,
        f.delivered.len(),
        f.gaps
    );

    // Node 1's small journal no longer holds instance 1: a subscription from 1 starts with
    // a gap marker, then goes on without a silent gap.
    let mut g = Follower {
        next: 1,
        delivered: BTreeMap::new(),
        gaps: Vec::new(),
    };
    let mut small = Client::connect(&nodes[1].client_addr.unwrap().to_string()).unwrap();
    small.subscribe(1).unwrap();
    while g.next <= end {
        g.take(small.next_event(Some(PATIENCE)).unwrap());
    }
    assert!(
        matches!(g.gaps.first(), Some((1, _, GapReason::NotHeld))),
        "{:?}",
        g.gaps
    );
    for (i, ids) in &g.delivered {
        if *i <= end {
            assert_eq!(Some(ids), reference.get(i), "node 1 instance {i} differs");
        }
    }
    drop(restarted);
    drop(nodes);
    let _ = std::fs::remove_dir_all(&base);
}
