//! Snapshot files: written whole or not at all, taken on a timer, and adopted when the
//! protocol installs a peer's snapshot.

use super::{Driver, DriverError};
use crate::Hooks;
use crate::history::GapReason;
use abcast_core::{Micros, Protocol};
use std::io;

/// Writes a snapshot file so that a crash leaves the old one or the new one, whole: a
/// temporary file, fdatasync, rename over, fsync the directory.
pub fn write_snapshot(path: &std::path::Path, snap: &abcast_core::Snapshot) -> io::Result<()> {
    use std::io::Write as _;
    let tmp = path.with_extension("tmp");
    {
        let mut f = std::fs::File::create(&tmp)?;
        f.write_all(&snap.encode())?;
        f.sync_data()?;
    }
    std::fs::rename(&tmp, path)?;
    if let Some(dir) = path.parent() {
        std::fs::File::open(dir)?.sync_all()?;
    }
    Ok(())
}

/// Reads the snapshot file, if there is one; a damaged file is an error naming it.
pub fn read_snapshot(path: &std::path::Path) -> Result<Option<abcast_core::Snapshot>, String> {
    match std::fs::read(path) {
        Ok(bytes) => abcast_core::Snapshot::decode(&bytes)
            .map(Some)
            .map_err(|e| format!("snapshot {}: {e}", path.display())),
        Err(e) if e.kind() == io::ErrorKind::NotFound => Ok(None),
        Err(e) => Err(format!("snapshot {}: {e}", path.display())),
    }
}

impl<P: Protocol> Driver<P> {
    /// Takes and writes a snapshot when one is due. Runs with the outbox carried out, so
    /// the application's state matches what the protocol delivered.
    pub(super) fn maybe_snapshot<A: Hooks + ?Sized>(
        &mut self,
        now: Micros,
        app: &mut A,
    ) -> Result<(), DriverError> {
        let every = self.cfg.snapshot_interval_us;
        if every == 0 || now < self.next_snapshot_us {
            return Ok(());
        }
        if !self.outbox.is_empty() || self.pipeline.in_flight() > 0 {
            // The loop waits for a moment with nothing gathered and no sync in flight. A
            // node under steady load never has one (a leader-based log syncs every
            // iteration: Raft and Sequence Paxos took no snapshot in a whole `demo
            // --storage durable`), so one interval past due it makes one: it waits for the
            // syncs in flight and carries the gathered outbox out, as at shutdown.
            if now < self.next_snapshot_us.saturating_add(every) {
                return Ok(());
            }
            self.wait_in_flight(now, app)?;
            self.carry_out_now(now, app)?;
            if !self.outbox.is_empty() || self.pipeline.in_flight() > 0 {
                return Ok(());
            }
        }
        self.next_snapshot_us = now.saturating_add(every);
        let Some(path) = self.cfg.snapshot_path.clone() else {
            return Ok(());
        };
        let Some(state) = app.snapshot() else {
            return Ok(());
        };
        let snap = match self.protocol.take_snapshot(state) {
            Ok(s) => s,
            Err(e) if self.protocol.snapshots_supported() => {
                // Passing (a transfer or a reconfiguration under way): asked again at the
                // next interval. Before, one such refusal turned snapshots off for the
                // node's life, and its log grew without bound. Said once per reason.
                if self.snapshot_refused.as_deref() != Some(e.as_str()) {
                    self.log(format_args!(
                        "snapshot not taken, retried in an interval: {e}"
                    ));
                    self.snapshot_refused = Some(e);
                }
                self.stats.snapshots_refused += 1;
                return Ok(());
            }
            Err(e) => {
                self.log(format_args!("snapshots off: {e}"));
                self.cfg.snapshot_interval_us = 0;
                return Ok(());
            }
        };
        // The history first: a snapshot never covers an instance the journal lost.
        if let Err(e) = self.history.sync() {
            self.history.disable_journal(&e);
        }
        write_snapshot(&path, &snap).map_err(|source| DriverError::Io {
            what: "writing a snapshot",
            source,
        })?;
        self.history.snapshot.upto = snap.upto;
        self.stats.snapshots += 1;
        self.snapshot_refused = None;
        Ok(())
    }

    /// The protocol installed a peer's snapshot and the application took its state: the
    /// snapshot becomes this node's own (a restart goes on from it).
    pub(super) fn installed(&mut self, snap: &abcast_core::Snapshot) -> Result<(), DriverError> {
        if let Err(e) = self.history.sync() {
            self.history.disable_journal(&e);
        }
        if let Some(path) = self.cfg.snapshot_path.clone() {
            write_snapshot(&path, snap).map_err(|source| DriverError::Io {
                what: "writing an installed snapshot",
                source,
            })?;
        }
        self.stats.snapshots_installed += 1;
        if !self.protocol.snapshot_groups(snap).is_empty() {
            // A protocol of several groups (Multi-Ring Paxos): `upto` is a merge position,
            // not an instance of one sequence, and its history is kept per delivery in the
            // order delivered (`History::ordered` is false), so there is no range of
            // instances to mark; the subscribers see the deliveries after the install.
            return Ok(());
        }
        self.history.snapshot.upto = self.history.snapshot.upto.max(snap.upto);
        let from = self.history.end();
        self.passed_over(
            from,
            snap.upto.saturating_add(1),
            GapReason::SnapshotInstalled,
        );
        Ok(())
    }
}
