//! The token ring (`protocol = "token"`, seed 002) as `abcast node` runs it, on real
//! sockets: three nodes on 127.0.0.1 (data as UDP datagrams to each member, the token on a
//! UDP socket of its own) order the values proposed at every node into one sequence, as
//! the Accelerated Ring and as the original Totem ring (`accelerated_window = 0`); a bad
//! `[token]` names its field; garbage, strangers' datagrams and a malformed token are
//! dropped and counted while the ring goes on.

mod token_support;

use abcast_core::{Instance, NodeId, ValueId};
use abcast_node::client::Client;
use abcast_node::nodeconfig;
use abcast_node::token::TOKEN_PORT_OFFSET_DEFAULT;
use abcast_runtime::multicast::{self, Sender};
use bytes::Bytes;
use std::net::{SocketAddr, UdpSocket};
use std::thread::JoinHandle;
use token_support::*;

/// Proposes `per_node` values at every node at once and returns each node's delivered
/// sequence: (instance, value id, payload) in delivery order.
fn order_values(nodes: &[Node], per_node: usize) -> Vec<Vec<(Instance, ValueId, Bytes)>> {
    let total = per_node * nodes.len();
    let mut learners: Vec<Client> = nodes.iter().map(|n| connect(n.client)).collect();
    for l in &mut learners {
        l.subscribe(1).unwrap();
    }
    let proposers: Vec<JoinHandle<Vec<ValueId>>> = nodes
        .iter()
        .enumerate()
        .map(|(i, n)| {
            let addr = n.client;
            std::thread::spawn(move || {
                let mut c = connect(addr);
                let payloads = (0..per_node)
                    // Sizes from 1 byte to 3 KiB: several values share a datagram, and
                    // a few do not fit one message of 1350 bytes.
                    .map(|k| Bytes::from(vec![b'a' + i as u8; 1 + (k * 97) % 3000]))
                    .collect();
                c.propose_all(payloads, PATIENCE, |_| {}).unwrap()
            })
        })
        .collect();
    for p in proposers {
        assert_eq!(p.join().unwrap().len(), per_node);
    }
    learners
        .iter_mut()
        .map(|l| {
            let mut got = Vec::new();
            while got.len() < total {
                let (instance, batch) = l.next_delivery(Some(PATIENCE)).unwrap();
                for v in batch.values() {
                    got.push((instance, v.id, v.payload));
                }
            }
            got
        })
        .collect()
}

fn assert_one_sequence(seqs: &[Vec<(Instance, ValueId, Bytes)>], total: usize) {
    assert_eq!(seqs[0].len(), total);
    let mut ids: Vec<ValueId> = seqs[0].iter().map(|(_, id, _)| *id).collect();
    ids.sort();
    ids.dedup();
    assert_eq!(ids.len(), total, "a value delivered twice");
    for (i, s) in seqs.iter().enumerate().skip(1) {
        assert!(
            s == &seqs[0],
            "node {i} delivered another sequence than node 0"
        );
    }
}

fn run_ring(name: &str, token: &str) {
    let dir = temp_dir(name);
    let peers: Vec<u16> = (0..3).map(|_| free_peer_port()).collect();
    let clients: Vec<u16> = (0..3).map(|_| free_port()).collect();
    let path = dir.join("cluster.toml");
    std::fs::write(&path, token_config(&peers, &clients, token)).unwrap();
    let cfg = nodeconfig::load(&path, Some(0)).unwrap();
    assert_eq!(
        cfg.transport.control_port_offset,
        Some(TOKEN_PORT_OFFSET_DEFAULT)
    );
    let nodes = start(&path, &peers, &clients, 3);
    wait_for_the_whole_ring(&nodes);
    let seqs = order_values(&nodes, 300);
    assert_one_sequence(&seqs, 900);
    for n in nodes {
        let (report, lines) = n.stop();
        assert_eq!(report.delivered_values, 900);
        assert_eq!(report.duplicate_deliveries, 0);
        let last = lines.last().unwrap();
        assert_eq!(last["type"], "final");
        assert_eq!(last["datagrams_rejected"], 0, "{last}");
    }
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn three_token_nodes_order_every_value_into_one_sequence() {
    run_ring("token-accel", "");
}

#[test]
fn the_original_totem_ring_orders_too() {
    // accelerated_window = 0: every message before the token; and the seed's large
    // datagrams (about 8850 payload bytes, loopback's MTU carries them whole).
    run_ring(
        "token-orig",
        "accelerated_window = 0\nmax_message_bytes = 8850\n",
    );
}

#[test]
fn values_larger_than_a_frame_travel_as_segments_and_order_the_same() {
    // Messages of up to 30,000 bytes by IP multicast on the loopback, each leaving as
    // segments of 1472 bytes in one GSO send and joined at every member.
    // Below the ephemeral range (32768..), where the other tests' free ports come from: a
    // peer socket of a test beside this one must not be bound on the group's port.
    let port = 24_000 + (std::process::id() % 4000) as u16;
    run_ring(
        "token-segments",
        &format!(
            "max_message_bytes = 30000\n[multicast]\ngroup = \"239.255.80.7:{port}\"\n\
             segment_bytes = 1472\n"
        ),
    );
}

#[test]
fn token_config_errors_name_their_field() {
    let dir = temp_dir("token-cfg");
    let ok = token_config(&[7400, 7401, 7402], &[], "");
    let cases = [
        (
            ok.replace("[token]\n", "[token]\naccelerated_window = 40\n"),
            "token.accelerated_window",
        ),
        (
            ok.replace("[token]\n", "[token]\nservice = \"fast\"\n"),
            "token.service",
        ),
        (ok.replace("[token]\n", "[token]\ncolour = 1\n"), "colour"),
        (
            ok.replace("[token]\n", "[token]\ntoken_timeout_us = 1\n"),
            "token.token_timeout_us",
        ),
        (
            ok.replace("[token]\n", "[token]\ntoken_port_offset = 0\n"),
            "token.token_port_offset",
        ),
        (
            ok.replace("[token]\n", "[token]\ntoken_port_offset = 70000\n"),
            "token.token_port_offset",
        ),
        (
            ok.replace("[token]\n", "[ring]\nwindow_values = 5\n[token]\n"),
            "ring.window_values",
        ),
        (
            ok.replace("protocol = \"token\"\n", ""),
            "token: only with protocol = \"token\"",
        ),
        (
            ok.replace("dir = \"data\"", "dir = \"data\"\nkind = \"durable\""),
            "storage.kind",
        ),
        (
            ok.replace("id = 1\n", "id = 1\nroles = [\"learner\"]\n"),
            "members[1].roles",
        ),
        (
            ok.replace("[token]\n", "[ringpaxos]\nbuffer_instances = 4\n[token]\n"),
            "ringpaxos",
        ),
    ];
    for (text, needle) in cases {
        let path = dir.join("cluster.toml");
        std::fs::write(&path, &text).unwrap();
        let err = nodeconfig::load(&path, Some(0)).unwrap_err().to_string();
        assert!(err.contains(needle), "error {err:?} should name {needle:?}");
    }
    // A member's address so high that its token port would pass 65535.
    let high = token_config(&[65400, 7401, 7402], &[], "");
    std::fs::write(dir.join("high.toml"), high).unwrap();
    let err = nodeconfig::load(&dir.join("high.toml"), Some(1))
        .unwrap_err()
        .to_string();
    assert!(
        err.contains("token.token_port_offset") && err.contains("members[0]"),
        "{err}"
    );
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn garbage_and_strangers_datagrams_are_counted_and_the_ring_goes_on() {
    let dir = temp_dir("token-garbage");
    // Node 3 is this test: configured, never running (the others form their ring without
    // it), its two sockets bound here so that its datagrams come from its addresses.
    let peers: Vec<u16> = (0..4).map(|_| free_peer_port()).collect();
    let clients: Vec<u16> = (0..3).map(|_| free_port()).collect();
    let path = dir.join("cluster.toml");
    std::fs::write(&path, token_config(&peers, &clients, "")).unwrap();
    let nodes = start(&path, &peers, &clients, 3);
    let my_data = UdpSocket::bind(("127.0.0.1", peers[3])).unwrap();
    let my_token = UdpSocket::bind(("127.0.0.1", peers[3] + TOKEN_PORT_OFFSET_DEFAULT)).unwrap();
    let stranger = UdpSocket::bind("127.0.0.1:0").unwrap();
    wait_for_the_whole_ring(&nodes);

    let target = nodes[0].peer_port;
    let data_port = SocketAddr::from(([127, 0, 0, 1], target));
    let token_port = SocketAddr::from(([127, 0, 0, 1], target + TOKEN_PORT_OFFSET_DEFAULT));
    let me = |node: u32| Sender {
        cluster_id: CLUSTER_ID,
        node: NodeId(node),
        incarnation: 0,
    };
    let datagram = |from: u32, kind: u8, body: &[u8]| {
        multicast::encode_to_bytes(&me(from), kind, 0, &[Bytes::copy_from_slice(body)]).unwrap()
    };
    // Plain garbage, to both sockets: bad magic (2 rejected).
    for to in [data_port, token_port] {
        stranger
            .send_to(b"not an abcast datagram at all", to)
            .unwrap();
    }
    // Well-formed datagrams from a node outside the members, and naming member 1 from a
    // stranger's address (2 rejected, 2 strangers).
    stranger.send_to(&datagram(9, 2, b"x"), data_port).unwrap();
    stranger.send_to(&datagram(1, 1, b"x"), token_port).unwrap();
    // From member 3's own addresses: a token and a data message that do not decode
    // (2 rejected, logged with the decoder's reason).
    my_token
        .send_to(&datagram(3, 1, &[0xff; 40]), token_port)
        .unwrap();
    my_data
        .send_to(&datagram(3, 2, &[1, 2, 3]), data_port)
        .unwrap();

    // The ring goes on.
    let seqs = order_values(&nodes, 100);
    assert_one_sequence(&seqs, 300);
    let mut nodes = nodes.into_iter();
    let (_, lines) = nodes.next().unwrap().stop();
    for n in nodes {
        n.stop();
    }
    let last = lines.last().unwrap();
    assert_eq!(last["type"], "final");
    assert_eq!(last["datagrams_rejected"], 6, "{last}");
    assert_eq!(last["datagrams_unknown_sender"], 2, "{last}");
    let _ = std::fs::remove_dir_all(&dir);
}
