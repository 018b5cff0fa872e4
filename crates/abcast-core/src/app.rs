//! The application contract: what a replicated state machine gives the toolkit and gets
//! from it. One trait for every driver: the simulator's checked state, the runtime's node
//! statistics, a user's counter or key-value map (see `examples/`). The driver hands it
//! the protocol's output through [`crate::carry::carry_out`], so every driver calls it in
//! the same order.

use crate::protocol::{ConfigChange, Delivery, Skip, Snapshot};
use crate::types::Micros;
use bytes::Bytes;

/// A replicated state machine.
pub trait Application {
    /// Applies the values of `d.batch`, in order (deliveries come in instance order). For a
    /// per-command result, push one entry per value to `results` (empty when the
    /// application has none: the driver then reports acknowledgements only); the node that
    /// proposed value `i` hands `results[i]` to the client awaiting it. `results` comes
    /// empty and is reused, so the steady state allocates nothing here.
    fn deliver(&mut self, now: Micros, d: &Delivery, results: &mut Vec<Bytes>);

    /// The application's state after every delivery so far, for a snapshot (`None`: this
    /// application takes none). Called with no delivery pending.
    fn snapshot(&mut self) -> Option<Bytes> {
        None
    }

    /// The learner installed `snapshot` (fetched from a peer, because it fell behind what
    /// the acceptors still hold): replace the state with `snapshot.app`; the next delivery
    /// follows `snapshot.upto`. `Err` stops the node: its state would no longer match the
    /// sequence.
    fn install(&mut self, now: Micros, snapshot: &Snapshot) -> Result<(), String> {
        let _ = now;
        Err(format!(
            "this application cannot install a snapshot (up to instance {})",
            snapshot.upto
        ))
    }

    /// The learner passed over instances no acceptor holds any more and that no snapshot
    /// covers (a group whose learners take no snapshots): the state no longer covers the
    /// whole sequence.
    fn skipped(&mut self, now: Micros, skip: &Skip) {
        let _ = (now, skip);
    }

    /// The configuration changed at this point of the sequence (see [`ConfigChange`]).
    fn config_changed(&mut self, now: Micros, change: &ConfigChange) {
        let _ = (now, change);
    }
}

/// An application that keeps nothing (a node that only relays and serves clients).
#[derive(Debug, Default, Clone, Copy)]
pub struct NoApplication;

impl Application for NoApplication {
    fn deliver(&mut self, _now: Micros, _d: &Delivery, _results: &mut Vec<Bytes>) {}
}
