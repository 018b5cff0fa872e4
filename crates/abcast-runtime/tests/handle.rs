//! The handle into the event loop (`abcast_runtime::handle`): values proposed through it
//! come back with the application's result; subscriptions replay from a position and are
//! cut off, with a reason, when not read; reconfiguration passes the protocol's answer on;
//! every bound answers instead of growing.

use abcast_core::config::{Configuration, Member, Roles, StartInfo};
use abcast_core::protocol::ReconfigureError;
use abcast_core::storage::MemoryStore;
use abcast_core::uring::{RingConfig, URing};
use abcast_core::{Application, Delivery, Micros, NodeId, ProposeError};
use abcast_runtime::handle::{self, NodeHandle};
use abcast_runtime::{
    DriverConfig, EndReason, HandleError, Hooks, Listeners, StreamEvent, TransportConfig, transport,
};
use bytes::Bytes;
use std::time::Duration;

const PATIENCE: Duration = Duration::from_secs(60);

/// Answers each value with its length, and counts.
#[derive(Default)]
struct Echo {
    values: u64,
}

impl Application for Echo {
    fn deliver(&mut self, _now: Micros, d: &Delivery, results: &mut Vec<Bytes>) {
        for v in d.batch.values() {
            self.values += 1;
            results.push(Bytes::from(format!("len {}", v.payload.len())));
        }
    }
}

impl Hooks for Echo {}

fn ring(n: u32) -> Vec<NodeHandle<Echo>> {
    let t = TransportConfig::default();
    let listeners: Vec<Listeners> = (0..n)
        .map(|_| Listeners {
            peer: transport::bind_listener("127.0.0.1:0".parse().unwrap(), &t).unwrap(),
            client: None,
        })
        .collect();
    let peers: Vec<_> = listeners
        .iter()
        .enumerate()
        .map(|(i, l)| (NodeId(i as u32), l.peer.local_addr().unwrap()))
        .collect();
    let ids: Vec<u32> = (0..n).collect();
    listeners
        .into_iter()
        .enumerate()
        .map(|(i, l)| {
            let me = NodeId(i as u32);
            let store = Box::new(MemoryStore::new(1 << 16, 64 << 20));
            let p = URing::new(RingConfig::pal(&ids), me, StartInfo::FRESH, store).unwrap();
            handle::start(
                DriverConfig::new(me, 9, peers.clone()),
                l,
                p,
                Echo::default(),
            )
            .unwrap()
        })
        .collect()
}

#[test]
fn a_proposed_value_comes_back_with_its_result_and_streams_replay_from_a_position() {
    let nodes = ring(3);
    let mut instances = Vec::new();
    for i in 0..20usize {
        let t = nodes[i % 3].propose(Bytes::from(vec![b'x'; i])).unwrap();
        t.wait_decided(PATIENCE).unwrap();
        let a = t.wait(PATIENCE).unwrap();
        assert_eq!(a.id, t.id);
        assert_eq!(a.result.as_deref(), Some(format!("len {i}").as_bytes()));
        instances.push(a.instance);
    }
    // A late subscriber from instance 5 gets every instance from 5 on, in order, replayed
    // from the history, then live.
    let s = nodes[2].subscribe(5, 1024).unwrap();
    let mut next = 5;
    while next <= *instances.last().unwrap() {
        match s.next(PATIENCE).unwrap() {
            StreamEvent::Delivered(d) => {
                assert_eq!(d.instance, next, "in order, none missed");
                next += 1;
            }
            StreamEvent::Gap(g) => panic!("nothing was dropped, yet {g:?}"),
        }
    }
    let t = nodes[0].propose(Bytes::from_static(b"live")).unwrap();
    let a = t.wait(PATIENCE).unwrap();
    match s.next(PATIENCE).unwrap() {
        StreamEvent::Delivered(d) => assert_eq!(d.instance, a.instance),
        other => panic!("{other:?}"),
    }
    let st = nodes[1].status().unwrap();
    assert!(st.delivered_upto >= *instances.last().unwrap() || st.protocol.delivered_upto > 0);
    let r = nodes[1].read_barrier(PATIENCE).unwrap();
    assert!(
        r.upto > a.instance,
        "the log-ordered barrier is after every earlier value"
    );
    let counts: Vec<u64> = nodes
        .into_iter()
        .map(|n| n.shutdown().unwrap().app.values)
        .collect();
    assert!(counts.iter().all(|&c| c >= 21), "{counts:?}");
}

#[test]
fn a_subscriber_that_does_not_read_is_cut_off_with_a_reason() {
    let nodes = ring(1);
    let s = nodes[0].subscribe(1, 4).unwrap();
    for i in 0..10u8 {
        nodes[0]
            .propose(Bytes::from(vec![i]))
            .unwrap()
            .wait(PATIENCE)
            .unwrap();
    }
    let mut got = 0;
    let end = loop {
        match s.next(PATIENCE) {
            Ok(_) => got += 1,
            Err(e) => break e,
        }
    };
    assert_eq!(got, 4, "what the stream held is still read");
    assert_eq!(end, HandleError::Ended(EndReason::TooSlow { capacity: 4 }));
    assert!(matches!(
        nodes[0].subscribe(1, 0),
        Err(HandleError::Invalid(_))
    ));
}

#[test]
fn reconfiguration_passes_the_protocols_answer_back() {
    let nodes = ring(1);
    let config = Configuration {
        id: 2,
        members: vec![Member {
            id: NodeId(0),
            roles: Roles::PAL,
        }],
    };
    assert_eq!(
        nodes[0].reconfigure(config),
        Err(HandleError::Reconfigure(ReconfigureError::Refused(
            ProposeError::Unsupported {
                what: "reconfiguration"
            }
        )))
    );
    let empty = Configuration {
        id: 3,
        members: vec![],
    };
    assert!(matches!(
        nodes[0].reconfigure(empty),
        Err(HandleError::Reconfigure(ReconfigureError::Invalid(_)))
    ));
    let stopped = nodes.into_iter().next().unwrap().shutdown().unwrap();
    assert_eq!(stopped.app.values, 0);
}

/// Polls `cond` on `node`'s status until it holds, for at most `PATIENCE`.
fn wait_status(
    node: &NodeHandle<Echo>,
    cond: impl Fn(&abcast_runtime::NodeStatus) -> bool,
) -> bool {
    let end = std::time::Instant::now() + PATIENCE;
    while std::time::Instant::now() < end {
        if cond(&node.status().unwrap()) {
            return true;
        }
        std::thread::sleep(Duration::from_millis(5));
    }
    false
}

#[test]
fn the_peer_set_changes_through_the_handle() {
    let t = TransportConfig::default();
    let bind = || Listeners {
        peer: transport::bind_listener("127.0.0.1:0".parse().unwrap(), &t).unwrap(),
        client: None,
    };
    let (la, lb) = (bind(), bind());
    let (a_addr, b_addr) = (la.peer.local_addr().unwrap(), lb.peer.local_addr().unwrap());
    let (a, b) = (NodeId(0), NodeId(1));
    let start = |me: NodeId, peers: Vec<(NodeId, std::net::SocketAddr)>, l: Listeners| {
        let store = Box::new(MemoryStore::new(1 << 16, 64 << 20));
        let p = URing::new(RingConfig::pal(&[0, 1]), me, StartInfo::FRESH, store).unwrap();
        handle::start(DriverConfig::new(me, 9, peers), l, p, Echo::default()).unwrap()
    };
    // A starts knowing no peer; B knows A.
    let node_a = start(a, vec![(a, a_addr)], la);
    let node_b = start(b, vec![(a, a_addr), (b, b_addr)], lb);
    let ticket = node_b.propose(Bytes::from_static(b"hello")).unwrap();
    assert!(
        wait_status(&node_a, |s| s.transport.bad_input_closes >= 1),
        "A accepted B's Hello before B was a peer"
    );
    assert!(matches!(
        node_a.add_peer(a, a_addr),
        Err(HandleError::Invalid(_))
    ));
    node_a.add_peer(b, b_addr).unwrap();
    ticket.wait_decided(PATIENCE).unwrap();
    assert!(node_a.status().unwrap().transport.hellos_accepted >= 1);
    assert!(node_a.remove_peer(b).unwrap());
    assert!(!node_a.remove_peer(b).unwrap(), "removed twice");
    let closes = node_a.status().unwrap().transport.bad_input_closes;
    // B keeps dialing A (its ring successor), and A refuses it again.
    drop(node_b.propose(Bytes::from_static(b"again")));
    assert!(
        wait_status(&node_a, |s| s.transport.bad_input_closes > closes),
        "A accepted a removed peer's Hello"
    );
    node_a.shutdown().unwrap();
    node_b.shutdown().unwrap();
}
