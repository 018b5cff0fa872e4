//! U-Ring Paxos from abcast-core, unchanged, over the real runtime: three nodes on
//! 127.0.0.1 with the built-in load generator agree on one sequence, and the client port
//! refuses a value over the ring's limit with the protocol's reason.

// The runtime tests' support module, shared rather than copied.
#[path = "../../abcast-runtime/tests/runtime_support/mod.rs"]
mod runtime_support;

use abcast_core::config::StartInfo;
use abcast_core::storage::MemoryStore;
use abcast_core::uring::{RingConfig, URing};
use abcast_node::client::{Client, ClientError};
use abcast_runtime::TransportConfig;
use bytes::Bytes;
use runtime_support::*;

fn uring_cluster(n: usize, values_per_node: u64, ring: RingConfig) -> Vec<RunningNode<URing>> {
    cluster(
        n,
        load_of(values_per_node, 256, 64),
        TransportConfig::default(),
        true,
        |_, _, a| a,
        |me| {
            let store = MemoryStore::new(ring.store_capacity_instances, ring.store_capacity_bytes);
            URing::new(ring.clone(), me, StartInfo::FRESH, Box::new(store)).unwrap()
        },
    )
}

#[test]
fn three_uring_nodes_agree_on_one_sequence() {
    let nodes = uring_cluster(3, 500, RingConfig::pal(&[0, 1, 2]));
    assert!(
        wait_until(PATIENCE, || all_delivered(&nodes, 1500)),
        "not all values delivered in time"
    );
    assert_agreement(&nodes, 1500);
    let stats: Vec<_> = nodes
        .into_iter()
        .map(|n| n.stop().transport_stats())
        .collect();
    assert_eq!(sum_stats(&stats).bad_input_closes, 0);
}

#[test]
fn a_value_over_the_ring_limit_is_refused_with_the_reason() {
    let ring = RingConfig {
        max_value_bytes: 1000,
        ..RingConfig::pal(&[0])
    };
    let nodes = uring_cluster(1, 0, ring);
    let mut c = Client::connect(&nodes[0].client_addr.unwrap().to_string()).unwrap();
    match c.propose_all(vec![Bytes::from(vec![0u8; 1001])], PATIENCE, |_| {}) {
        Err(ClientError::Refused(reason)) => assert!(reason.contains("1001"), "{reason}"),
        other => panic!("expected a refusal, got {other:?}"),
    }
    // The connection stays usable.
    let ids = c
        .propose_all(vec![Bytes::from_static(b"ok")], PATIENCE, |_| {})
        .unwrap();
    assert_eq!(ids.len(), 1);
}
