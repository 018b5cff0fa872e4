//! The client port: values proposed through one node are decided and reach a learn client
//! on another node in order; a learn client that stops reading is disconnected instead of
//! growing the node's memory.

// The runtime tests' support module, shared rather than copied.
#[path = "../../abcast-runtime/tests/runtime_support/mod.rs"]
mod runtime_support;

use abcast_node::client::{Client, ClientError};
use abcast_runtime::TransportConfig;
use bytes::Bytes;
use runtime_support::*;

#[test]
fn proposed_values_are_decided_and_streamed_to_learners_in_order() {
    let nodes = seq_cluster(3, 0, TransportConfig::default(), true, |_, _, a| a);
    let learn_addr = nodes[2].client_addr.unwrap().to_string();
    let mut learner = Client::connect(&learn_addr).unwrap();
    learner.subscribe(0).unwrap();

    let mut proposer = Client::connect(&nodes[1].client_addr.unwrap().to_string()).unwrap();
    let payloads: Vec<Bytes> = (0..500)
        .map(|i| Bytes::from(format!("value {i}")))
        .collect();
    let mut decided = Vec::new();
    let ids = proposer
        .propose_all(payloads.clone(), PATIENCE, |id| decided.push(id))
        .unwrap();
    assert_eq!(ids.len(), 500);
    decided.sort();
    let mut sorted = ids.clone();
    sorted.sort();
    assert_eq!(
        decided, sorted,
        "every proposed id is reported decided exactly once"
    );

    let mut got = Vec::new();
    let mut last_instance = 0;
    while got.len() < 500 {
        let (instance, batch) = learner.next_delivery(Some(PATIENCE)).unwrap();
        assert!(instance > last_instance, "deliveries out of order");
        last_instance = instance;
        got.extend(batch.values().map(|v| (v.id, v.payload)));
    }
    let got_ids: Vec<_> = got.iter().map(|g| g.0).collect();
    assert_eq!(
        got_ids, ids,
        "one proposer's values are delivered in proposal order here"
    );
    assert!(got.iter().zip(&payloads).all(|(g, p)| g.1 == p));

    // A late subscriber gets the history the node still holds.
    let mut late = Client::connect(&learn_addr).unwrap();
    late.subscribe(1).unwrap();
    let (instance, _) = late.next_delivery(Some(PATIENCE)).unwrap();
    assert_eq!(instance, 1);
}

#[test]
fn a_learn_client_that_stops_reading_is_disconnected() {
    let transport = TransportConfig {
        buffer_size: 16 << 10,
        client_queue_bytes: 64 << 10,
        ..TransportConfig::default()
    };
    let nodes = seq_cluster(1, 0, transport, true, |_, _, a| a);
    let addr = nodes[0].client_addr.unwrap().to_string();
    let mut stalled = Client::connect(&addr).unwrap();
    stalled.subscribe(0).unwrap();
    // 16 MiB of deliveries, far more than the queue and both socket buffers hold.
    let mut proposer = Client::connect(&addr).unwrap();
    let payloads: Vec<Bytes> = (0..2048)
        .map(|_| Bytes::from(vec![b'x'; 8 << 10]))
        .collect();
    proposer.propose_all(payloads, PATIENCE, |_| {}).unwrap();
    // Now read: whatever was buffered arrives, then the node's close.
    let end = loop {
        match stalled.next_delivery(Some(PATIENCE)) {
            Ok(_) => continue,
            Err(e) => break e,
        }
    };
    assert!(
        matches!(end, ClientError::Closed) || matches!(&end, ClientError::Io(_)),
        "expected the node to close the stalled learner, got {end}"
    );
}
