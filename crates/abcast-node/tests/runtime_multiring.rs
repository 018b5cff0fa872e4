//! Multi-Ring Paxos over real sockets: two rings multiplexed on one connection per node
//! pair (the ring is the frame's group), learners that follow different ring sets, and the
//! atomic-multicast property checked on what the drivers delivered; over U-Ring Paxos rings
//! and over Ring Paxos rings (their multicasts as TCP copies), with one check.

// The runtime tests' support module, shared rather than copied.
#[path = "../../abcast-runtime/tests/runtime_support/mod.rs"]
mod runtime_support;

use abcast_core::MultiRingPaxos;
use abcast_core::config::{Member, Roles, StartInfo};
use abcast_core::multiring::{MultiRing, MultiRingConfig, MultiRingConfigOf, RingSpec, RingSpecOf};
use abcast_core::ringpaxos::RingPaxosConfig;
use abcast_core::storage::{AcceptorStore, MemoryStore};
use abcast_core::uring::RingConfig;
use abcast_core::{GroupId, NodeId, Protocol, ValueId};
use abcast_runtime::{LoadConfig, TransportConfig};
use runtime_support::*;
use std::collections::HashSet;
use std::time::Duration;

const VALUES_PER_RING: u64 = 3_000;
const PACED_VALUES_PER_S: u64 = 20_000;

/// Four nodes: `proposer` proposes, 0 to 2 accept, 2 and 3 learn.
fn members(proposer: u32) -> Vec<Member> {
    (0..4)
        .map(|i| Member {
            id: NodeId(i),
            roles: Roles {
                proposer: i == proposer,
                acceptor: i < 3,
                learner: i >= 2,
            },
        })
        .collect()
}

fn ring(group: u16, proposer: u32) -> RingSpec {
    let members = members(proposer);
    RingSpec {
        group: GroupId(group),
        ring: RingConfig {
            members,
            ..RingConfig::default()
        },
    }
}

fn ring_of(id: ValueId) -> u64 {
    // MultiRing numbers each ring's values with the group in the top 8 bits.
    id.seq >> 56
}

/// Rings 1 (proposer 0) and 2 (proposer 1); node 3 follows ring 2 only, node 2 both.
fn two_rings<C>(ring: impl Fn(u16, u32) -> RingSpecOf<C>) -> MultiRingConfigOf<C> {
    MultiRingConfigOf {
        rings: vec![ring(1, 0), ring(2, 1)],
        subscriptions: vec![(NodeId(3), vec![GroupId(2)])],
        ..MultiRingConfigOf::default()
    }
}

fn memory_store(_: GroupId) -> Box<dyn AcceptorStore + Send> {
    Box::new(MemoryStore::new(1 << 16, 1 << 28))
}

#[test]
fn two_rings_share_connections_and_learners_merge_them_in_one_order() {
    let cfg: MultiRingConfig = two_rings(ring);
    learners_merge_two_rings_in_one_order(|me| {
        MultiRing::new(cfg.clone(), me, StartInfo::FRESH, memory_store).unwrap()
    });
}

#[test]
fn two_ring_paxos_rings_merge_in_one_order_at_every_learner() {
    let cfg = two_rings(|group, proposer| RingSpecOf {
        group: GroupId(group),
        ring: RingPaxosConfig {
            members: members(proposer),
            ..RingPaxosConfig::default()
        },
    });
    learners_merge_two_rings_in_one_order(|me| {
        MultiRingPaxos::new(cfg.clone(), me, StartInfo::FRESH, memory_store).unwrap()
    });
}

/// Starts four nodes of `make` under load (each ring's proposer offers `VALUES_PER_RING`
/// values) and checks what the learners delivered: node 2 follows rings 1 and 2, node 3
/// ring 2 only.
fn learners_merge_two_rings_in_one_order<P: Protocol + Send + 'static>(make: impl Fn(NodeId) -> P)
where
    P::Message: Send,
{
    // Each proposer is paced (3,000 values over about 150 ms), so the two rings' loads
    // overlap whatever the nodes' start skew: unpaced, a ring's 3,000 values took about
    // 3 ms, and one CI run saw ring 1 finish before ring 2's proposer had connected, which
    // the interleaving check below then (rightly) reported.
    let load = load_of(VALUES_PER_RING, 256, 200).map(|l| LoadConfig {
        rate_per_s: PACED_VALUES_PER_S,
        ..l
    });
    let nodes = cluster(
        4,
        load,
        TransportConfig::default(),
        false,
        |_, _, a| a,
        make,
    );
    let both = &nodes[2];
    let only2 = &nodes[3];
    let done = wait_until(Duration::from_secs(60), || {
        both.recorder.delivered_count() as u64 >= 2 * VALUES_PER_RING
            && only2.recorder.delivered_count() as u64 >= VALUES_PER_RING
    });
    let seq_both = both.recorder.ids();
    let seq_only2 = only2.recorder.ids();
    assert!(
        done,
        "learners stalled: node 2 delivered {} of {}, node 3 {} of {}",
        seq_both.len(),
        2 * VALUES_PER_RING,
        seq_only2.len(),
        VALUES_PER_RING
    );
    // Integrity: each value once, and only values of the followed rings.
    for (who, seq) in [("node 2", &seq_both), ("node 3", &seq_only2)] {
        let unique: HashSet<_> = seq.iter().collect();
        assert_eq!(unique.len(), seq.len(), "{who} delivered a value twice");
    }
    assert!(seq_only2.iter().all(|id| ring_of(*id) == 2));
    assert_eq!(
        seq_both.iter().filter(|id| ring_of(**id) == 1).count() as u64,
        VALUES_PER_RING
    );
    // Atomic multicast: the learners agree on the relative order of the ring they share.
    let shared: Vec<ValueId> = seq_both
        .iter()
        .copied()
        .filter(|id| ring_of(*id) == 2)
        .collect();
    assert_eq!(shared, seq_only2, "ring 2's values in different orders");
    // Both rings' values are interleaved by the merge, not one ring after the other.
    let first_ring2 = seq_both.iter().position(|id| ring_of(*id) == 2).unwrap();
    let last_ring1 = seq_both.iter().rposition(|id| ring_of(*id) == 1).unwrap();
    assert!(
        first_ring2 < last_ring1,
        "the merge delivered ring 1 entirely before ring 2"
    );
    for n in nodes {
        let d = n.stop();
        assert_eq!(d.transport_stats().frames_dropped, 0);
    }
}

#[test]
fn a_learner_starts_following_a_ring_at_run_time_at_an_agreed_point() {
    const VALUES: u64 = 20_000;
    let cfg = MultiRingConfig {
        rings: vec![ring(1, 0), ring(2, 1)],
        subscriptions: vec![(NodeId(3), vec![GroupId(2)])],
        ..MultiRingConfig::default()
    };
    let nodes = cluster(
        4,
        load_of(VALUES, 128, 100),
        TransportConfig::default(),
        true,
        |_, _, a| a,
        |me| {
            MultiRing::new(cfg.clone(), me, StartInfo::FRESH, |_| {
                Box::new(MemoryStore::new(1 << 16, 1 << 28))
            })
            .unwrap()
        },
    );
    let (both, late) = (&nodes[2], &nodes[3]);
    assert!(wait_until(Duration::from_secs(30), || {
        late.recorder.delivered_count() >= 1_000
    }));
    let addr = late.client_addr.unwrap().to_string();
    let mut client = abcast_node::client::Client::connect(&addr).unwrap();
    // Refusals are answers, not closed connections.
    let e = client.follow(7, true).unwrap_err();
    assert!(e.to_string().contains("ring 7"), "{e}");
    let e = client.follow(2, true).unwrap_err();
    assert!(e.to_string().contains("already"), "{e}");
    client.follow(1, true).unwrap();
    assert!(
        wait_until(Duration::from_secs(60), || {
            both.recorder.delivered_count() as u64 >= 2 * VALUES
                && late
                    .recorder
                    .ids()
                    .last()
                    .is_some_and(|last| both.recorder.ids().last() == Some(last))
        }),
        "the late follower did not catch up: node 2 {} values, node 3 {}",
        both.recorder.delivered_count(),
        late.recorder.delivered_count()
    );
    let seq_both = both.recorder.ids();
    let seq_late = late.recorder.ids();
    let late_set: HashSet<ValueId> = seq_late.iter().copied().collect();
    assert_eq!(
        late_set.len(),
        seq_late.len(),
        "node 3 delivered a value twice"
    );
    // Pairwise merge order: on the values both delivered, the same order.
    let common: Vec<ValueId> = seq_both
        .iter()
        .copied()
        .filter(|id| late_set.contains(id))
        .collect();
    assert_eq!(
        common, seq_late,
        "the learners disagree on the merged order"
    );
    // Ring 1 joined at one point: node 3 has a suffix of ring 1's order, and a non-empty one.
    let ring1_both: Vec<ValueId> = seq_both
        .iter()
        .copied()
        .filter(|id| ring_of(*id) == 1)
        .collect();
    let ring1_late: Vec<ValueId> = seq_late
        .iter()
        .copied()
        .filter(|id| ring_of(*id) == 1)
        .collect();
    assert!(!ring1_late.is_empty() && ring1_late.len() < ring1_both.len());
    assert_eq!(
        ring1_late[..],
        ring1_both[ring1_both.len() - ring1_late.len()..]
    );
    drop(nodes);
}
