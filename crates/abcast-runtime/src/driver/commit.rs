//! The group-commit pipeline's ordering rules, as a small state machine with no I/O.
//!
//! The driver gathers the outboxes of an iteration's inputs into one and, before any of
//! its messages leave, makes the store durable (docs/CONTRACTS.md, "Pipelined
//! alternative"). Pipelined, the sync runs as a job on the sync thread (`syncer.rs`) and
//! the gathered outbox is *held* until its job is done. This module decides what happens
//! when; the driver does it (writes, submits the job, waits, carries out). The rules:
//!
//! - at most [`SYNC_JOBS_IN_FLIGHT_MAX`] jobs in flight; past that, the next group keeps
//!   gathering;
//! - each held item waits behind its own job, in the order the jobs started; an item that
//!   needs no sync still waits behind the jobs in flight, as it came after them;
//! - jobs end oldest first, and the room a job frees is free at once: the next group's
//!   job may start before the item the ended job held is carried out;
//! - no in-place sync while a job is in flight (a job still queued would write its bytes
//!   after the in-place ones);
//! - a failed job fails the node: nothing it held, nor anything held behind it, is ever
//!   carried out, and no job starts again.
//!
//! Generic over the held item (the driver holds `Outbox<P::Message>`), so the rules are
//! tested without a protocol, a disk or a thread.

use crate::syncer::SYNC_JOBS_IN_FLIGHT_MAX;
use std::collections::VecDeque;
use std::fmt;

/// A gathering group commit is carried out early once it holds this many messages, to
/// bound the outbox (and the latency of the first vote in it).
pub(super) const GROUP_COMMIT_MAX_SENDS: usize = 4096;

/// How the driver makes the store durable before sends (`DriverConfig::group_commit`,
/// `DriverConfig::sync_thread`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum Mode {
    /// Every outbox is carried out at once, after an in-place sync if it needs one.
    Immediate,
    /// The outboxes of one iteration gather under one in-place sync at its end.
    Gathered,
    /// As `Gathered`, with the sync as a job on the sync thread while the loop goes on.
    Pipelined,
}

impl Mode {
    pub(super) fn new(group_commit: bool, sync_thread: bool) -> Mode {
        match (group_commit, sync_thread) {
            (false, _) => Mode::Immediate,
            (true, false) => Mode::Gathered,
            (true, true) => Mode::Pipelined,
        }
    }
}

/// What to do with the outbox after one input (a message, a proposal, a command).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum AfterInput {
    /// Carry it out now (syncing in place if it needs a sync).
    CarryOut,
    /// Leave it gathering for the iteration's group commit.
    Gather,
    /// It grew past `GROUP_COMMIT_MAX_SENDS`: end every job in flight (carrying out what
    /// they hold), then carry it out with an in-place sync.
    DrainThenCarryOut,
}

/// What to do with the gathered outbox at the end of an iteration.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum AtIterationEnd {
    /// Carry it out now (syncing in place if it needs one; nothing is in flight).
    CarryOut,
    /// Keep it gathering: it waits behind the jobs in flight, or for room for its own.
    Gather,
    /// Begin its sync job and hold it (`job_started`); if the store turns out durable
    /// already, clear its `needs_sync` and ask again.
    BeginJob,
}

/// A job ended well: the item it held, to carry out now.
#[derive(Debug, PartialEq, Eq)]
pub(super) struct Ended<H> {
    pub held: H,
    /// The gathered group needs a sync and there is room: begin its job *before*
    /// carrying out `held` (its messages leave after `held`'s anyway, and the disk would
    /// otherwise wait for the carry-out).
    pub start_next_first: bool,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum PipelineError {
    /// A job ended with an error: the node stops.
    JobFailed,
    /// A job was started with `SYNC_JOBS_IN_FLIGHT_MAX` in flight, or none was in flight
    /// when one ended (a driver bug).
    OutOfOrder,
}

impl fmt::Display for PipelineError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            PipelineError::JobFailed => write!(f, "a sync job failed earlier"),
            PipelineError::OutOfOrder => write!(f, "sync jobs started or ended out of order"),
        }
    }
}

/// The jobs in flight and the items held behind them, oldest first.
#[derive(Debug)]
pub(super) struct CommitPipeline<H> {
    mode: Mode,
    /// One item per job in flight, in the order the jobs started.
    held: VecDeque<H>,
    failed: bool,
}

impl<H> CommitPipeline<H> {
    pub(super) fn new(mode: Mode) -> CommitPipeline<H> {
        CommitPipeline {
            mode,
            held: VecDeque::with_capacity(SYNC_JOBS_IN_FLIGHT_MAX),
            failed: false,
        }
    }

    /// Jobs started and not yet ended.
    pub(super) fn in_flight(&self) -> usize {
        self.held.len()
    }

    /// Whether another job may start now.
    pub(super) fn has_room(&self) -> bool {
        !self.failed && self.held.len() < SYNC_JOBS_IN_FLIGHT_MAX
    }

    /// An in-place sync is allowed only with no job in flight.
    pub(super) fn may_sync_in_place(&self) -> bool {
        self.held.is_empty()
    }

    /// The outbox just took one input's effects; `needs_sync`: it (or what gathered in it
    /// before) depends on unsynced writes; `messages`: sends and multicasts gathered.
    pub(super) fn after_input(&self, needs_sync: bool, messages: usize) -> AfterInput {
        if self.mode == Mode::Immediate || (!needs_sync && self.held.is_empty()) {
            return AfterInput::CarryOut;
        }
        if messages < GROUP_COMMIT_MAX_SENDS {
            AfterInput::Gather
        } else {
            AfterInput::DrainThenCarryOut
        }
    }

    /// The iteration ends with a gathered outbox (`empty` when nothing gathered).
    pub(super) fn at_iteration_end(&self, empty: bool, needs_sync: bool) -> AtIterationEnd {
        if empty {
            return AtIterationEnd::Gather;
        }
        if self.mode != Mode::Pipelined {
            return AtIterationEnd::CarryOut;
        }
        if needs_sync && self.has_room() {
            return AtIterationEnd::BeginJob;
        }
        if self.held.is_empty() && !needs_sync {
            AtIterationEnd::CarryOut
        } else {
            AtIterationEnd::Gather
        }
    }

    /// The job for `held` was handed to the sync thread; `held` waits behind it.
    pub(super) fn job_started(&mut self, held: H) -> Result<(), PipelineError> {
        if self.failed {
            return Err(PipelineError::JobFailed);
        }
        if self.held.len() >= SYNC_JOBS_IN_FLIGHT_MAX {
            return Err(PipelineError::OutOfOrder);
        }
        self.held.push_back(held);
        Ok(())
    }

    /// The oldest job in flight ended (`ok`: its writes are durable). `gathered_needs_sync`:
    /// the group gathering meanwhile waits for a sync of its own.
    pub(super) fn job_ended(
        &mut self,
        ok: bool,
        gathered_needs_sync: bool,
    ) -> Result<Ended<H>, PipelineError> {
        if self.failed || !ok {
            // Whatever was held depends on writes that may not be durable.
            self.failed = true;
            self.held.clear();
            return Err(PipelineError::JobFailed);
        }
        let held = self.held.pop_front().ok_or(PipelineError::OutOfOrder)?;
        Ok(Ended {
            held,
            start_next_first: gathered_needs_sync && self.has_room(),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn pipelined() -> CommitPipeline<&'static str> {
        CommitPipeline::new(Mode::Pipelined)
    }

    #[test]
    fn at_most_sync_jobs_in_flight_max_jobs_are_in_flight() {
        let mut p = pipelined();
        for k in 0..SYNC_JOBS_IN_FLIGHT_MAX {
            assert!(p.has_room());
            assert_eq!(p.at_iteration_end(false, true), AtIterationEnd::BeginJob);
            p.job_started(["a", "b", "c"][k % 3]).expect("room");
        }
        assert!(!p.has_room());
        assert_eq!(
            p.at_iteration_end(false, true),
            AtIterationEnd::Gather,
            "the next group keeps gathering"
        );
        assert_eq!(p.job_started("late"), Err(PipelineError::OutOfOrder));
        assert_eq!(p.in_flight(), SYNC_JOBS_IN_FLIGHT_MAX);
    }

    #[test]
    fn held_items_are_carried_out_in_the_order_their_jobs_started() {
        let mut p = pipelined();
        p.job_started("first").expect("room");
        p.job_started("second").expect("room");
        assert_eq!(p.job_ended(true, false).map(|e| e.held), Ok("first"));
        p.job_started("third").expect("room");
        assert_eq!(p.job_ended(true, false).map(|e| e.held), Ok("second"));
        assert_eq!(p.job_ended(true, false).map(|e| e.held), Ok("third"));
        assert_eq!(p.in_flight(), 0);
        assert_eq!(p.job_ended(true, false), Err(PipelineError::OutOfOrder));
    }

    #[test]
    fn an_outbox_without_a_sync_still_waits_behind_the_jobs_in_flight() {
        let mut p = pipelined();
        assert_eq!(
            p.after_input(false, 1),
            AfterInput::CarryOut,
            "nothing in flight"
        );
        assert_eq!(p.at_iteration_end(false, false), AtIterationEnd::CarryOut);
        p.job_started("synced").expect("room");
        assert_eq!(p.after_input(false, 1), AfterInput::Gather);
        assert_eq!(p.at_iteration_end(false, false), AtIterationEnd::Gather);
        p.job_ended(true, false).expect("ended");
        assert_eq!(p.at_iteration_end(false, false), AtIterationEnd::CarryOut);
    }

    #[test]
    fn the_next_groups_job_starts_before_the_last_group_is_carried_out() {
        let mut p = pipelined();
        for k in 0..SYNC_JOBS_IN_FLIGHT_MAX {
            p.job_started(["a", "b"][k % 2]).expect("room");
        }
        let e = p.job_ended(true, true).expect("ended");
        assert_eq!(e.held, "a");
        assert!(e.start_next_first, "room is free once the job ended");
        assert!(p.has_room());
        p.job_started("next")
            .expect("the next group's job, before \"a\" leaves");
        let e = p.job_ended(true, false).expect("ended");
        assert!(!e.start_next_first, "nothing gathered that needs a sync");
    }

    #[test]
    fn no_in_place_sync_while_a_job_is_in_flight() {
        let mut p = pipelined();
        assert!(p.may_sync_in_place());
        p.job_started("held").expect("room");
        assert!(!p.may_sync_in_place());
        // A group too large to keep gathering drains the jobs first, then syncs in place.
        assert_eq!(
            p.after_input(true, GROUP_COMMIT_MAX_SENDS),
            AfterInput::DrainThenCarryOut
        );
        assert_eq!(
            p.after_input(false, GROUP_COMMIT_MAX_SENDS),
            AfterInput::DrainThenCarryOut,
            "behind a job even without a sync of its own"
        );
        p.job_ended(true, false).expect("ended");
        assert!(p.may_sync_in_place());
    }

    #[test]
    fn a_failed_job_fails_the_node_and_nothing_held_is_carried_out() {
        let mut p = pipelined();
        p.job_started("first").expect("room");
        p.job_started("second").expect("room");
        assert_eq!(p.job_ended(false, true), Err(PipelineError::JobFailed));
        assert_eq!(
            p.in_flight(),
            0,
            "what it held is dropped, and what came after"
        );
        assert!(!p.has_room());
        assert_eq!(p.job_started("third"), Err(PipelineError::JobFailed));
        assert_eq!(p.job_ended(true, false), Err(PipelineError::JobFailed));
        assert_ne!(p.at_iteration_end(false, true), AtIterationEnd::BeginJob);
    }

    #[test]
    fn without_a_sync_thread_outboxes_are_carried_out_or_gathered_in_place() {
        let p = CommitPipeline::<()>::new(Mode::Immediate);
        assert_eq!(p.after_input(true, 1), AfterInput::CarryOut);
        assert_eq!(p.at_iteration_end(false, true), AtIterationEnd::CarryOut);
        let g = CommitPipeline::<()>::new(Mode::Gathered);
        assert_eq!(g.after_input(true, 1), AfterInput::Gather);
        assert_eq!(g.after_input(false, 1), AfterInput::CarryOut);
        assert_eq!(
            g.after_input(true, GROUP_COMMIT_MAX_SENDS),
            AfterInput::DrainThenCarryOut
        );
        assert_eq!(g.at_iteration_end(false, true), AtIterationEnd::CarryOut);
        assert_eq!(g.at_iteration_end(true, false), AtIterationEnd::Gather);
    }

    #[test]
    fn mode_follows_the_driver_config() {
        assert_eq!(Mode::new(false, true), Mode::Immediate);
        assert_eq!(Mode::new(true, false), Mode::Gathered);
        assert_eq!(Mode::new(true, true), Mode::Pipelined);
    }
}
