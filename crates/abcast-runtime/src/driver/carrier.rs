//! Carrying out an outbox: the group commit around the one carry-out, and `LoopCarrier`,
//! what each effect means here (docs/CONTRACTS.md).
//!
//! Group commit (`DriverConfig::group_commit`, set for durable storage): an outbox that
//! needs a sync is not carried out at once; the outboxes of every input of the iteration
//! gather into one, which is carried out at the end of the iteration (or when it grows past
//! `GROUP_COMMIT_MAX_SENDS`) after one sync: one write and one fdatasync for every vote of
//! the iteration, and no message that depends on them leaves before.
//!
//! Pipelined (`DriverConfig::sync_thread`, the default with group commit): at the end of
//! the iteration the writes reach the OS (`Protocol::begin_sync_storage`) and the fdatasync
//! runs on the sync thread (`syncer.rs`) while the loop goes on: the gathered outbox waits
//! *in flight* until the thread reports the job done (a `mio::Waker`). The next iteration's
//! group begins its own sync at once, behind it, while fewer than
//! `syncer::SYNC_JOBS_IN_FLIGHT_MAX` (2) jobs are in flight; past that, what the loop
//! produces gathers, in order, for the next sync. So a voter writes the next group while
//! the disk flushes the last one, and the disk does not wait for the loop to notice that
//! a job is done. Outboxes are carried out in the order of their jobs.
//!
//! The ordering rules are `commit.rs`'s; this file does what they say.

use super::commit::{self, AfterInput, AtIterationEnd, PipelineError};
use super::{Driver, DriverError};
use crate::Hooks;
use crate::history::GapReason;
use crate::syncer::Syncer;
use abcast_core::protocol::{Ack, Install, ReadState};
use abcast_core::storage::StorageError;
use abcast_core::{
    Carrier, ConfigChange, Delivery, GroupId, Micros, NodeId, Outbox, Protocol, Skip, Subscription,
};
use bytes::Bytes;

/// The group commit cannot go on: the node stops rather than send what is not durable.
pub(super) fn pipeline_failed(e: PipelineError) -> DriverError {
    DriverError::Storage(StorageError(format!("group commit: {e}")))
}

/// The runtime's side of the one carry-out (`abcast_core::carry`): frames to peers and the
/// multicast socket, deliveries and acknowledgements to clients, snapshots to disk.
pub(super) struct LoopCarrier<'d, 'a, P: Protocol, A: ?Sized> {
    pub(super) d: &'d mut Driver<P>,
    pub(super) app: &'a mut A,
    pub(super) now: Micros,
}

impl<P: Protocol, A: Hooks + ?Sized> Carrier<P::Message> for LoopCarrier<'_, '_, P, A> {
    type App = A;
    type Error = DriverError;

    fn app(&mut self) -> &mut A {
        self.app
    }

    fn send(&mut self, to: NodeId, msg: P::Message) {
        self.d.send_to(self.now, to, msg);
    }

    fn multicast(&mut self, msg: P::Message) {
        // A multicast reaches every member, this node included (as IP multicast with
        // loopback enabled would): one datagram for the others, or one TCP copy each, and
        // an in-process copy for this node, which is never lost.
        self.d.multicast_to_peers(self.now, &msg);
        self.d.loopback.push_back(msg);
    }

    fn handed_over(&mut self) {
        // With two lanes (the token ring), a token handling's post-token data leave before
        // its deliveries are carried out, not after them (seed 002 §III-B3: the successor
        // waits for them).
        if self.d.control.is_some() {
            self.d.flush_datagrams(self.now);
        }
    }

    fn delivered(
        &mut self,
        _now: Micros,
        d: &Delivery,
        results: &[Bytes],
    ) -> Result<(), DriverError> {
        self.d.on_delivered(d, results);
        self.d.group_delivered(d);
        Ok(())
    }

    fn installed(&mut self, _now: Micros, install: &Install) -> Result<(), DriverError> {
        self.d.installed(&install.snapshot)
    }

    fn install_refused(&mut self, _now: Micros, _install: &Install, why: String) -> DriverError {
        DriverError::Install(why)
    }

    fn skipped(&mut self, _now: Micros, skip: &Skip) -> Result<(), DriverError> {
        if skip.group == GroupId(0) {
            self.d.passed_over(skip.from, skip.to, GapReason::Skipped);
        } else {
            self.d.ring_skipped(skip.group, skip.from, skip.to);
        }
        Ok(())
    }

    fn read(&mut self, _now: Micros, r: &ReadState) -> Result<(), DriverError> {
        self.d.on_read(r);
        Ok(())
    }

    fn subscription(&mut self, _now: Micros, s: &Subscription) -> Result<(), DriverError> {
        self.d.log(format_args!(
            "{} group {} at delivery {} of this step",
            if s.subscribed {
                "follows"
            } else {
                "stops following"
            },
            s.group.0,
            s.position
        ));
        Ok(())
    }

    fn config_changed(&mut self, _now: Micros, c: &ConfigChange) -> Result<(), DriverError> {
        self.d.log(format_args!(
            "configuration {} ({:?}): {} members",
            c.config.id,
            c.kind,
            c.config.members.len()
        ));
        self.d.group_config_changed(c);
        Ok(())
    }

    fn acked(&mut self, now: Micros, a: &Ack) -> Result<(), DriverError> {
        if a.key.origin == self.d.cfg.me
            && let Some(load) = &mut self.d.load
        {
            load.on_acked(a.count as usize);
        }
        self.app.ack(now, a);
        self.d.ack_to_clients(a);
        self.d.ack_tickets(a);
        Ok(())
    }

    fn event(&mut self, _now: Micros, event: &abcast_core::Event) {
        self.d.log(format_args!("{event}"));
    }
}

impl<P: Protocol> Driver<P> {
    /// Carries out the outbox, unless it waits for the iteration's group commit.
    pub(super) fn carry_out<A: Hooks + ?Sized>(
        &mut self,
        now: Micros,
        app: &mut A,
    ) -> Result<(), DriverError> {
        let gathered = self.outbox.sends.len() + self.outbox.multicasts.len();
        match self.pipeline.after_input(self.outbox.needs_sync, gathered) {
            AfterInput::Gather => Ok(()),
            AfterInput::CarryOut => self.carry_out_now(now, app),
            AfterInput::DrainThenCarryOut => {
                // Too much gathered: finish the syncs in flight, then sync this group in
                // place.
                self.wait_in_flight(now, app)?;
                self.carry_out_now(now, app)
            }
        }
    }

    /// The end of an iteration: the gathered outbox is carried out, after its sync. With
    /// the sync thread, the writes go out now and the outbox waits in flight for the
    /// thread's fdatasync, behind the jobs already in flight (up to
    /// `SYNC_JOBS_IN_FLIGHT_MAX`); when they are that many, the next group keeps gathering.
    /// An outbox that needs no sync still goes after the ones in flight, as it came after
    /// them (`commit.rs` has the rules).
    pub(super) fn commit<A: Hooks + ?Sized>(
        &mut self,
        now: Micros,
        app: &mut A,
    ) -> Result<(), DriverError> {
        let step = self
            .pipeline
            .at_iteration_end(self.outbox.is_empty(), self.outbox.needs_sync);
        match step {
            AtIterationEnd::Gather => Ok(()),
            AtIterationEnd::CarryOut => self.carry_out_now(now, app),
            AtIterationEnd::BeginJob => {
                if self.start_sync()? {
                    return Ok(());
                }
                // Durable already: it goes once those in flight are carried out.
                match self
                    .pipeline
                    .at_iteration_end(self.outbox.is_empty(), false)
                {
                    AtIterationEnd::CarryOut => self.carry_out_now(now, app),
                    AtIterationEnd::Gather | AtIterationEnd::BeginJob => Ok(()),
                }
            }
        }
    }

    /// Begins the gathered outbox's sync: its job goes to the sync thread and the outbox
    /// waits in flight (true), or the store was durable already (synced in place, or
    /// nothing to sync) and the outbox may be carried out once those in flight are
    /// (false).
    pub(super) fn start_sync(&mut self) -> Result<bool, DriverError> {
        let Some(job) = self
            .protocol
            .begin_sync_storage()
            .map_err(DriverError::Storage)?
        else {
            self.outbox.needs_sync = false;
            return Ok(false);
        };
        if let Some(s) = self.syncer.as_mut() {
            s.submit(job).map_err(DriverError::Storage)?;
        }
        self.stats.storage_syncs += 1;
        let mut held = std::mem::take(&mut self.outbox);
        held.needs_sync = false;
        self.pipeline.job_started(held).map_err(pipeline_failed)?;
        Ok(true)
    }

    /// The oldest sync job ended with `result`: the protocol learns it, and the pipeline
    /// gives back the outbox the job held (an error if the job failed).
    pub(super) fn end_job(
        &mut self,
        result: Result<(), StorageError>,
        gathered_needs_sync: bool,
    ) -> Result<commit::Ended<Outbox<P::Message>>, DriverError> {
        let ended = self.pipeline.job_ended(result.is_ok(), gathered_needs_sync);
        self.protocol
            .end_sync_storage(result)
            .map_err(DriverError::Storage)?;
        ended.map_err(pipeline_failed)
    }

    /// The sync thread's waker fired: carry out the outboxes its jobs made durable, oldest
    /// first, starting the next group's sync as soon as there is room.
    pub(super) fn on_sync_done<A: Hooks + ?Sized>(
        &mut self,
        now: Micros,
        app: &mut A,
    ) -> Result<(), DriverError> {
        while let Some(result) = self.syncer.as_mut().and_then(Syncer::try_done) {
            let ended = self.end_job(result, self.outbox.needs_sync)?;
            // The next group's sync starts before the last group is carried out (its sends,
            // deliveries and acks take the loop a while at full speed, and the disk would
            // wait for them): its messages leave after the last group's anyway.
            if ended.start_next_first {
                self.start_sync()?;
            }
            self.carry_out_held(now, app, ended.held)?;
        }
        self.commit(now, app)
    }

    /// Waits for every job in flight, and carries out their outboxes, oldest first.
    pub(super) fn wait_in_flight<A: Hooks + ?Sized>(
        &mut self,
        now: Micros,
        app: &mut A,
    ) -> Result<(), DriverError> {
        while let Some(s) = self.syncer.as_mut().filter(|s| s.in_flight() > 0) {
            let result = s.wait();
            let ended = self.end_job(result, false)?;
            self.carry_out_held(now, app, ended.held)?;
        }
        debug_assert_eq!(
            self.pipeline.in_flight(),
            0,
            "an outbox in flight without its job"
        );
        Ok(())
    }

    /// Carries out an outbox its sync job made durable. What gathered meanwhile stays in
    /// `self.outbox`, to go after it, as it came after it.
    pub(super) fn carry_out_held<A: Hooks + ?Sized>(
        &mut self,
        now: Micros,
        app: &mut A,
        held: Outbox<P::Message>,
    ) -> Result<(), DriverError> {
        debug_assert!(!held.needs_sync, "an outbox in flight is synced by its job");
        let newer = std::mem::replace(&mut self.outbox, held);
        let r = self.carry_out_now(now, app);
        self.outbox = newer;
        r
    }

    /// Carries out the outbox in the contract's order: the sync, then the one carry-out
    /// (`abcast_core::carry`), which the simulator uses too.
    pub(super) fn carry_out_now<A: Hooks + ?Sized>(
        &mut self,
        now: Micros,
        app: &mut A,
    ) -> Result<(), DriverError> {
        if self.outbox.is_empty() {
            return Ok(());
        }
        let mut out = std::mem::take(&mut self.outbox);
        if out.needs_sync {
            // In place only with no job in flight: a job still queued would write its
            // bytes after these (and a direct write rewrites the block they share).
            debug_assert!(
                self.pipeline.may_sync_in_place(),
                "an in-place sync behind a job in flight"
            );
            self.protocol.sync_storage().map_err(DriverError::Storage)?;
            self.stats.storage_syncs += 1;
            out.needs_sync = false;
        }
        let r = abcast_core::carry_out(now, &mut out, &mut LoopCarrier { d: self, app, now });
        self.outbox = out;
        r
    }
}
