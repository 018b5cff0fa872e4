//! The peer set changes while the loop runs (`Driver::add_peer`, `Driver::remove_peer`):
//! a node the driver was not configured with is refused at `Hello` until it is added, is
//! then linked like any peer and orders values with this node; once removed, its
//! connections close, nothing more is sent to it, and its `Hello` is refused again.
//!
//! A (the sequencer) runs in this thread, so its peer set changes between steps; B runs
//! in a thread, configured with A from the start.

mod runtime_support;

use abcast_core::NodeId;
use abcast_runtime::{Driver, DriverConfig, DriverError, Listeners, TransportConfig};
use runtime_support::*;
use std::time::Instant;

const A: NodeId = NodeId(0);
const B: NodeId = NodeId(1);
/// B proposes without end (its window bounds what is in flight), so it keeps dialing A.
const B_VALUES: u64 = 1 << 40;
/// Values both must deliver while B is a peer.
const ORDERED_MIN: usize = 50;

fn transport() -> TransportConfig {
    TransportConfig {
        backoff_ms_min: 10,
        backoff_ms_max: 100,
        ..TransportConfig::default()
    }
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
        let until = a.now() + 10_000;
        a.run(app, |now| now >= until).unwrap();
    }
    cond(a, app)
}

#[test]
fn a_peer_added_at_run_time_is_linked_and_a_removed_one_is_refused() {
    let a_listener = bind_local(&transport());
    let a_addr = a_listener.local_addr().unwrap();
    let mut a_cfg = DriverConfig::new(A, 42, vec![(A, a_addr)]);
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
    assert!(matches!(
        a.add_peer(A, a_addr),
        Err(DriverError::Config { .. })
    ));
    assert!(!a.remove_peer(B), "B is not a peer yet");

    // B proposes to A, which does not know it: every Hello is refused.
    let b_listener = bind_local(&transport());
    let b_addr = b_listener.local_addr().unwrap();
    let mut b_cfg = DriverConfig::new(B, 42, vec![(A, a_addr), (B, b_addr)]);
    b_cfg.transport = transport();
    let b = start(NodeSpec {
        cfg: b_cfg,
        protocol: SeqBcast::new(B, vec![A, B], 1),
        listeners: Listeners {
            peer: b_listener,
            client: None,
        },
        load: load_of(B_VALUES, 100, 16),
    });
    assert!(
        step_until(&mut a, &mut a_app, |a, _| a
            .transport_stats()
            .bad_input_closes
            >= 1),
        "A accepted a Hello from a node outside its peer set"
    );
    assert_eq!(a.transport_stats().hellos_accepted, 0);

    // Added: A accepts B's Hello, dials B, and both deliver B's values in one order.
    a.add_peer(B, b_addr).unwrap();
    a.add_peer(B, b_addr).unwrap();
    let total = ORDERED_MIN;
    assert!(
        step_until(&mut a, &mut a_app, |_, app| app.delivered_count() >= total
            && b.recorder.delivered_count() >= total),
        "A delivered {}, B {} of {total}",
        a_app.delivered_count(),
        b.recorder.delivered_count()
    );
    let linked = a.transport_stats();
    assert!(linked.hellos_accepted >= 1, "{linked:?}");
    assert!(linked.connects >= 1, "{linked:?}");

    // Removed: B's connection closes, and its next Hello is refused.
    assert!(a.remove_peer(B));
    let refused_before = a.transport_stats().bad_input_closes;
    // B keeps proposing (and resending what A no longer orders), so it dials again.
    assert!(
        step_until(&mut a, &mut a_app, |a, _| a
            .transport_stats()
            .bad_input_closes
            > refused_before),
        "A accepted a removed peer's Hello: {:?}",
        a.transport_stats()
    );
    let removed = a.transport_stats();
    assert_eq!(removed.connects, linked.connects, "A dialed a removed peer");
    assert_eq!(
        removed.hellos_accepted, linked.hellos_accepted,
        "{removed:?}"
    );
    drop(b.stop());
}
