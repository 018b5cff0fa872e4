//! Drivers in threads on 127.0.0.1 exchanging a fixed-sequencer broadcast: the runtime
//! carries messages, self-sends and load, and every node delivers the same sequence.

mod runtime_support;

use abcast_runtime::TransportConfig;
use runtime_support::*;

#[test]
fn three_nodes_deliver_the_same_sequence() {
    let nodes = seq_cluster(3, 300, TransportConfig::default(), false, |_, _, a| a);
    assert!(
        wait_until(PATIENCE, || all_delivered(&nodes, 900)),
        "not all values delivered in time"
    );
    assert_agreement(&nodes, 900);
    for n in &nodes {
        let r = n.recorder.0.lock().unwrap();
        assert_eq!(
            r.acked, 300,
            "node {} saw {} of its 300 values acknowledged",
            n.id, r.acked
        );
        // The load generator's payloads start with their 8-byte sequence number.
        assert!(r.delivered.iter().all(|d| d.2.len() == 100));
    }
    let stats: Vec<_> = nodes
        .into_iter()
        .map(|n| n.stop().transport_stats())
        .collect();
    let total = sum_stats(&stats);
    assert_eq!(total.bad_input_closes, 0);
    assert!(total.hellos_accepted >= 4, "{total:?}");
}

#[test]
fn two_nodes_with_tiny_socket_buffers_and_queues_still_converge() {
    // Small kernel buffers force partial writes; a small send queue forces drops that the
    // protocol must repair by retransmission.
    let transport = TransportConfig {
        buffer_size: 8 << 10,
        send_queue_bytes: 4 << 10,
        ..TransportConfig::default()
    };
    let nodes = seq_cluster(2, 400, transport, false, |_, _, a| a);
    assert!(
        wait_until(PATIENCE, || all_delivered(&nodes, 800)),
        "not all values delivered in time"
    );
    assert_agreement(&nodes, 800);
}

#[test]
fn a_single_node_delivers_through_loopback_only() {
    let nodes = seq_cluster(1, 200, TransportConfig::default(), false, |_, _, a| a);
    assert!(wait_until(PATIENCE, || all_delivered(&nodes, 200)));
    assert_agreement(&nodes, 200);
    let d = nodes.into_iter().next().unwrap().stop();
    assert_eq!(
        d.transport_stats().frames_queued,
        0,
        "a self-send must never touch a socket"
    );
}
