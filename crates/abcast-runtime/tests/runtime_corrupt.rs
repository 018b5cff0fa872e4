//! A corrupt frame injected into a live connection closes that connection with a logged
//! reason; the dialer reconnects and traffic continues until every value is delivered.

mod runtime_support;

use abcast_runtime::TransportConfig;
use runtime_support::*;
use std::sync::atomic::Ordering;

/// Node 1 reaches node 0 (the sequencer) through a proxy that corrupts frame `at` of the
/// first connection.
fn corrupt_and_recover(corruption: Corruption) {
    // The proxy needs node 0's address, which exists once the listeners are bound: bind
    // first, then route node 1 -> node 0 through a proxy in front of it.
    let mut specs = local_specs(3, TransportConfig::default(), false, |_, _, a| a);
    let node0 = specs[0].1.peer.local_addr().unwrap();
    let proxy = start_proxy(node0, corruption, 20);
    specs[1].0.peers[0].1 = proxy.addr;
    let members: Vec<_> = (0..3).map(abcast_core::NodeId).collect();
    let nodes: Vec<_> = specs
        .into_iter()
        .map(|(cfg, listeners)| {
            let protocol = SeqBcast::new(cfg.me, members.clone(), 1);
            let load = Some(abcast_runtime::LoadConfig {
                rate_per_s: 0,
                value_bytes: 64,
                window_values: 16,
                max_values: Some(200),
                leader_only: false,
                stamp: false,
            });
            start(NodeSpec {
                cfg,
                protocol,
                listeners,
                load,
            })
        })
        .collect();
    assert!(
        wait_until(PATIENCE, || all_delivered(&nodes, 600)),
        "not all values delivered after the corruption"
    );
    assert_agreement(&nodes, 600);
    assert!(
        proxy.corrupted.load(Ordering::SeqCst),
        "the proxy never saw enough frames to corrupt one"
    );
    assert!(
        proxy.connections.load(Ordering::SeqCst) >= 2,
        "node 1 never reconnected"
    );
    let stats: Vec<_> = nodes
        .into_iter()
        .map(|n| n.stop().transport_stats())
        .collect();
    assert!(
        stats[0].bad_input_closes >= 1,
        "node 0 did not close the bad connection: {:?}",
        stats[0]
    );
    assert!(
        stats[1].disconnects >= 1,
        "node 1 did not notice the close: {:?}",
        stats[1]
    );
    assert!(
        stats[1].connects >= 2,
        "node 1 did not reconnect: {:?}",
        stats[1]
    );
}

#[test]
fn bad_checksum_closes_the_connection_and_traffic_resumes() {
    corrupt_and_recover(Corruption::BadChecksum);
}

#[test]
fn bad_magic_closes_the_connection_and_traffic_resumes() {
    corrupt_and_recover(Corruption::BadMagic);
}

#[test]
fn undecodable_message_closes_the_connection_and_traffic_resumes() {
    corrupt_and_recover(Corruption::UndecodableMessage);
}

/// Connects to a node's peer port, sends `bytes`, and reports whether the node closed the
/// connection (within a generous bound).
fn node_closes_after(addr: std::net::SocketAddr, bytes: &[u8]) -> bool {
    use std::io::{Read, Write};
    let mut s = std::net::TcpStream::connect(addr).unwrap();
    s.write_all(bytes).unwrap();
    s.set_read_timeout(Some(PATIENCE)).unwrap();
    let mut b = [0u8; 16];
    // The node never writes on a connection it accepted: any return is the close.
    matches!(s.read(&mut b), Ok(0) | Err(_))
}

fn hello(cluster_id: u64, node: u32) -> Vec<u8> {
    use abcast_runtime::driver::Hello;
    let body = Hello {
        cluster_id,
        node: abcast_core::NodeId(node),
        incarnation: 0,
    }
    .encode();
    abcast_runtime::frame::encode_to_bytes(0, 0, &[body])
        .unwrap()
        .to_vec()
}

#[test]
fn a_connection_that_does_not_open_with_a_valid_hello_is_closed() {
    let nodes = seq_cluster(2, 0, TransportConfig::default(), false, |_, _, a| a);
    // Node 1 is not the sequencer and there is no load, so node 0 never dials it: the
    // test's connection is the only one claiming to be node 0.
    let addr = nodes[1].peer_addr;
    let protocol_frame = abcast_runtime::frame::encode_to_bytes(
        3,
        0,
        &[bytes::Bytes::from_static(&[1, 0, 0, 0, 0, 0, 0, 0])],
    )
    .unwrap();
    let mut oversized = hello(42, 0);
    oversized[8..12].copy_from_slice(&(1u32 << 20).to_le_bytes());
    let cases: [(&str, Vec<u8>); 5] = [
        ("wrong cluster", hello(7, 0)),
        ("unknown node id", hello(42, 9)),
        ("this node's own id", hello(42, 1)),
        ("a protocol frame before Hello", protocol_frame.to_vec()),
        ("a first frame too long for a Hello", oversized),
    ];
    for (what, bytes) in cases {
        assert!(
            node_closes_after(addr, &bytes),
            "{what}: connection not closed"
        );
    }
    // A valid Hello followed by a valid message keeps the connection open: the node
    // answers nothing on it, so the read times out instead of returning.
    use std::io::{Read, Write};
    let mut s = std::net::TcpStream::connect(addr).unwrap();
    s.write_all(&hello(42, 0)).unwrap();
    s.write_all(&protocol_frame).unwrap();
    s.set_read_timeout(Some(std::time::Duration::from_millis(300)))
        .unwrap();
    let r = s.read(&mut [0u8; 16]);
    assert!(
        matches!(&r, Err(e) if e.kind() == std::io::ErrorKind::WouldBlock || e.kind() == std::io::ErrorKind::TimedOut),
        "{r:?}"
    );
    let stats = nodes.into_iter().nth(1).unwrap().stop().transport_stats();
    assert_eq!(stats.bad_input_closes, 5, "{stats:?}");
}
