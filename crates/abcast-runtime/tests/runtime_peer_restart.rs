//! A peer that restarts while frames wait for it (bug B1, the transport's part): node A
//! queues frames for node B while it cannot reach B; B restarts with a higher incarnation
//! and dials A before A reaches it. A must drop the frames it built for B's earlier life
//! (they are stale: replies to requests of a process that no longer exists), count them,
//! and the two must go on ordering values together.
//!
//! A is driven in this thread, so its counters can be read between steps; B runs in a
//! thread. A reaches B only through a "gate", a local port nobody listens on (connects are
//! refused, as to a host that is down) until the test opens it and forwards it to B's new
//! life. So the order of events is fixed, not raced: B's new `Hello` reaches A while A's
//! link to B is down and its queue untouched.

mod runtime_support;

use abcast_core::config::StartInfo;
use abcast_core::{NodeId, ValueId};
use abcast_runtime::{Driver, DriverConfig, Listeners, LoadConfig, TransportConfig};
use runtime_support::*;
use std::io::{Read, Write};
use std::net::{Shutdown, SocketAddr, TcpListener, TcpStream};
use std::time::Instant;

const A: NodeId = NodeId(0);
const B: NodeId = NodeId(1);

fn transport() -> TransportConfig {
    TransportConfig {
        // Reconnect soon once the gate opens.
        backoff_ms_min: 10,
        backoff_ms_max: 100,
        ..TransportConfig::default()
    }
}

/// A local address nobody listens on (for now): connects to it are refused.
fn closed_gate() -> SocketAddr {
    let l = TcpListener::bind("127.0.0.1:0").unwrap();
    l.local_addr().unwrap()
}

/// Starts listening on `gate` and forwards every connection to `target`, both ways, until
/// either side closes.
fn open_gate(gate: SocketAddr, target: SocketAddr) {
    let listener = TcpListener::bind(gate).expect("the gate's port was taken meanwhile");
    std::thread::spawn(move || {
        for inbound in listener.incoming() {
            let Ok(mut inbound) = inbound else { continue };
            let Ok(mut outbound) = TcpStream::connect(target) else {
                let _ = inbound.shutdown(Shutdown::Both);
                continue;
            };
            let (mut back_from, mut back_to) =
                (outbound.try_clone().unwrap(), inbound.try_clone().unwrap());
            std::thread::spawn(move || {
                let mut b = [0u8; 4096];
                while let Ok(n) = back_from.read(&mut b) {
                    if n == 0 || back_to.write_all(&b[..n]).is_err() {
                        break;
                    }
                }
                let _ = back_to.shutdown(Shutdown::Both);
            });
            std::thread::spawn(move || {
                let _ = std::io::copy(&mut inbound, &mut outbound);
                let _ = outbound.shutdown(Shutdown::Both);
            });
        }
    });
}

/// Runs A's loop for `ms` milliseconds.
fn step(a: &mut Driver<SeqBcast>, app: &mut Recorder, ms: u64) {
    let end = a.now() + ms * 1000;
    a.run(app, |now| now >= end).unwrap();
}

/// Runs A's loop until `cond` holds, for at most `PATIENCE`.
fn step_until(
    a: &mut Driver<SeqBcast>,
    app: &mut Recorder,
    mut cond: impl FnMut(&Driver<SeqBcast>, &Recorder) -> bool,
) -> bool {
    let end = Instant::now() + PATIENCE;
    while Instant::now() < end {
        if cond(a, app) {
            return true;
        }
        step(a, app, 10);
    }
    cond(a, app)
}

fn b_life(
    a_addr: SocketAddr,
    incarnation: u64,
    amnesic: bool,
    values: u64,
) -> RunningNode<SeqBcast> {
    let listener = bind_local(&transport());
    let b_addr = listener.local_addr().unwrap();
    let mut cfg = DriverConfig::new(B, 42, vec![(A, a_addr), (B, b_addr)]);
    cfg.transport = transport();
    cfg.incarnation = incarnation;
    let life = StartInfo::restart(incarnation, amnesic).unwrap();
    start(NodeSpec {
        cfg,
        protocol: SeqBcast::new(B, vec![A, B], life.start_seq),
        listeners: Listeners {
            peer: listener,
            client: None,
        },
        load: load(values),
    })
}

fn load(values: u64) -> Option<LoadConfig> {
    load_of(values, 100, 32)
}

#[test]
fn frames_queued_for_a_peers_earlier_life_are_dropped_when_its_new_life_says_hello() {
    const A_VALUES: u64 = 200;
    const B0_VALUES: u64 = 20;
    const B1_VALUES: u64 = 100;
    let gate = closed_gate();
    let a_listener = bind_local(&transport());
    let a_addr = a_listener.local_addr().unwrap();
    let mut a_cfg = DriverConfig::new(A, 42, vec![(A, a_addr), (B, gate)]);
    a_cfg.transport = transport();
    let mut a = Driver::new(
        a_cfg,
        SeqBcast::new(A, vec![A, B], 1),
        Listeners {
            peer: a_listener,
            client: None,
        },
    )
    .unwrap();
    let mut a_app = Recorder::default();

    // B's first life dials A (its requests go to the sequencer): A learns incarnation 0
    // before it queues anything for B (it only answers B's requests, which follow B's
    // Hello, until its own load starts), so what it queues is known to be for life 0.
    let b0 = b_life(a_addr, 0, false, B0_VALUES);
    assert!(
        step_until(&mut a, &mut a_app, |a, _| a
            .transport_stats()
            .hellos_accepted
            >= 1),
        "B's first life never said Hello"
    );
    // A orders its values and B's; every Order for B waits in A's queue: the gate is shut.
    a.start_load(load(A_VALUES).unwrap());
    let total_before = (A_VALUES + B0_VALUES) as usize;
    assert!(
        step_until(&mut a, &mut a_app, |_, app| app.delivered_count()
            >= total_before),
        "A did not order its values and B's"
    );
    drop(b0.stop());
    // Let A read the rest of B0's connection (requests it answers into the queue) and its
    // close: until A queues nothing more for 300 ms.
    loop {
        let queued = a.transport_stats().frames_queued;
        step(&mut a, &mut a_app, 300);
        if a.transport_stats().frames_queued == queued {
            break;
        }
    }
    let before = a.transport_stats();
    assert!(before.frames_queued > 0, "{before:?}");
    assert_eq!(before.connects, 0, "the gate was shut: {before:?}");
    assert_eq!(before.frames_dropped, 0, "{before:?}");
    assert_eq!(before.stale_frames_dropped, 0, "{before:?}");

    // B restarts as incarnation 1 and dials A while A still cannot reach it.
    let b1 = b_life(a_addr, 1, true, B1_VALUES);
    assert!(
        step_until(&mut a, &mut a_app, |a, _| a
            .transport_stats()
            .stale_frames_dropped
            > 0),
        "A kept the frames it queued for B's earlier life"
    );
    let after = a.transport_stats();
    assert_eq!(
        after.stale_frames_dropped, before.frames_queued,
        "every frame queued for life 0, none of life 1's: {after:?}"
    );
    assert_eq!(after.connects, 0, "{after:?}");
    assert_eq!(after.hellos_accepted, 2, "{after:?}");

    // The network heals: A reaches B's new life, which catches up and proposes.
    open_gate(gate, b1.peer_addr);
    let total = total_before + B1_VALUES as usize;
    assert!(
        step_until(&mut a, &mut a_app, |_, app| app.delivered_count() >= total
            && b1.recorder.delivered_count() >= total),
        "A delivered {}, B's new life {} of {total}",
        a_app.delivered_count(),
        b1.recorder.delivered_count()
    );
    let order = a_app.ids();
    assert_eq!(order.len(), total);
    assert_eq!(b1.recorder.ids(), order, "both lives' values, in one order");
    let mut distinct = order.clone();
    distinct.sort();
    distinct.dedup();
    assert_eq!(distinct.len(), total, "no value id of B was reused");
    // Each life of B proposed from its own id range (`StartInfo::restart`).
    let (life0, life1): (Vec<&ValueId>, Vec<&ValueId>) = order
        .iter()
        .filter(|id| id.node == B)
        .partition(|id| id.seq < 1 << 40);
    assert_eq!(life0.len() as u64, B0_VALUES);
    assert_eq!(life1.len() as u64, B1_VALUES);
    assert!(life1.iter().all(|id| id.seq < 2 << 40));

    let b1_stats = b1.stop().transport_stats();
    let a_stats = a.transport_stats();
    assert!(a_stats.connects >= 1, "{a_stats:?}");
    assert!(b1_stats.hellos_accepted >= 1, "{b1_stats:?}");
    assert_eq!(a_stats.bad_input_closes + b1_stats.bad_input_closes, 0);
    assert_eq!(b1_stats.stale_frames_dropped, 0, "{b1_stats:?}");
}
