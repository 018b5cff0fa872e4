//! Issue 33, suspect 8 (c): a Multi-Ring node's subscriptions count positions in the node's
//! merged delivery order. Its rings number their instances apart, so the history used to
//! keep them by ring instance and a subscription resuming from N dropped every delivery of
//! a ring whose instances were below N, replayed and live alike. One node, two rings (it
//! accepts and learns both), values proposed round-robin: a subscriber from position N
//! gets exactly the deliveries a subscriber from 1 got from its N-th on, in order, then
//! the live ones.

use abcast_core::GroupId;
use abcast_core::config::StartInfo;
use abcast_core::multiring::{MultiRing, MultiRingConfig, ProposeTo, RingSpec};
use abcast_core::storage::{AcceptorStore, MemoryStore};
use abcast_core::uring::RingConfig;
use abcast_core::{Application, Delivery, Micros, NodeId, ValueId};
use abcast_runtime::handle::{self, DeliveryStream};
use abcast_runtime::{DriverConfig, Hooks, Listeners, StreamEvent, TransportConfig, transport};
use bytes::Bytes;
use std::time::Duration;

const PATIENCE: Duration = Duration::from_secs(60);
const VALUES: usize = 60;

struct Quiet;

impl Application for Quiet {
    fn deliver(&mut self, _now: Micros, _d: &Delivery, _results: &mut Vec<Bytes>) {}
}

impl Hooks for Quiet {}

/// The next `n` deliveries of `s`, as (position, ring, value id); a gap fails the test
/// (nothing is dropped here).
fn take(s: &DeliveryStream, n: usize) -> Vec<(u64, GroupId, ValueId)> {
    let mut out = Vec::new();
    while out.len() < n {
        match s.next(PATIENCE).expect("a delivery") {
            StreamEvent::Delivered(d) => {
                for id in d.batch.ids() {
                    out.push((d.instance, d.group, id));
                }
            }
            StreamEvent::Gap(g) => panic!("nothing was dropped, yet {g:?}"),
        }
    }
    out
}

#[test]
fn a_multiring_subscription_resumes_at_its_position_in_the_merged_order() {
    let t = TransportConfig::default();
    let listeners = Listeners {
        peer: transport::bind_listener("127.0.0.1:0".parse().unwrap(), &t).unwrap(),
        client: None,
    };
    let me = NodeId(0);
    let peers = vec![(me, listeners.peer.local_addr().unwrap())];
    let ring = |g: u16| RingSpec {
        group: GroupId(g),
        ring: RingConfig::pal(&[0]),
    };
    let cfg = MultiRingConfig {
        rings: vec![ring(1), ring(2)],
        propose_to: ProposeTo::RoundRobin,
        ..MultiRingConfig::default()
    };
    let p = MultiRing::new(cfg, me, StartInfo::FRESH, |_| {
        Box::new(MemoryStore::new(1 << 16, 64 << 20)) as Box<dyn AcceptorStore + Send>
    })
    .unwrap();
    let mut dcfg = DriverConfig::new(me, 3, peers);
    dcfg.history_merged = true;
    let node = handle::start(dcfg, listeners, p, Quiet).unwrap();
    let all = node.subscribe(1, 4096).unwrap();
    for i in 0..VALUES {
        node.propose(Bytes::from(vec![i as u8; 8]))
            .unwrap()
            .wait(PATIENCE)
            .unwrap();
    }
    let seen = take(&all, VALUES);
    let rings: Vec<GroupId> = seen.iter().map(|s| s.1).collect();
    assert!(
        rings.contains(&GroupId(1)) && rings.contains(&GroupId(2)),
        "both rings deliver: {rings:?}"
    );
    for (k, s) in seen.iter().enumerate() {
        assert!(
            s.0 >= 1 && s.0 <= k as u64 + 1,
            "positions count deliveries: {seen:?}"
        );
    }
    // Resume from a position past what either ring's instances reached.
    let (from, _, _) = seen[VALUES * 3 / 4];
    let start = seen.iter().position(|s| s.0 == from).unwrap();
    let resumed = node.subscribe(from, 4096).unwrap();
    let replayed = take(&resumed, VALUES - start);
    assert_eq!(replayed, seen[start..], "the replay from position {from}");
    // And live: both streams get the next value at the same position.
    node.propose(Bytes::from_static(b"live"))
        .unwrap()
        .wait(PATIENCE)
        .unwrap();
    assert_eq!(take(&resumed, 1), take(&all, 1), "the live delivery");
}
