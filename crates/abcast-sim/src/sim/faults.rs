//! The fault schedule: partitions, crashes (plain, in the middle of a group commit, and
//! half-way through one outbox), process pauses, a correlated power loss, and the
//! faults-remain phase that follows the fault phase.
//!
//! **Partial fan-out** ([`FaultKind::PartialFanout`]). A crash of the crash mixes may be
//! *armed* instead of immediate: the node crashes in the middle of carrying out one outbox
//! with at least two sends, after a random prefix of them left (the sync the outbox needed
//! is done; its deliveries and acknowledgements die with it). `Any` arms the next such
//! outbox; the takeover modes wait for the moment a takeover is most fragile, read from the
//! node's `Status`: `Phase1` the outbox that starts its phase 1 (its own ballot appeared:
//! Phase 1a reaches only some acceptors), `Leading` the one where phase 1 ended (it leads
//! under a newer ballot: no Phase 2, or only some, left). When the crash mixes crash the
//! coordinator, its successor among the acceptors may be armed for the takeover; a late
//! joiner (the lowest id, the next coordinator) may be armed too. The f rule is checked
//! when the crash strikes, so on 5 nodes it can strike while another acceptor is amnesic.
//!
//! **Pauses** ([`FaultKind::Pause`]). A frozen node gets no ticks, no messages (they wait,
//! in order, in its inbox) and no sync completions; clients do not reach it. It resumes
//! with everything overdue. Pauses end with the fault phase at the latest. Some pauses
//! stall the whole machine (`FaultPlan::stall_ppm`): what it sent and the network still
//! holds waits too, and leaves when it resumes (a frozen coordinator's last Phase 2s then
//! arrive after a takeover, at acceptors that may have restarted since).
//!
//! **Power loss** ([`FaultKind::PowerLoss`]). Every acceptor's machine crashes at the same
//! instant: the next acceptor group commit after `FaultPlan::power_loss_at_us` is
//! interrupted (its write reached the OS, its fdatasync never completes), and every other
//! acceptor goes down with it, jobs in flight unrun. The f rule does not hold here on
//! purpose: durable, synced stores must survive it with no acknowledged value lost and no
//! decision changed. Everyone restarts after a drawn downtime.
//!
//! **Faults remain** ([`FaultKind::FaultsRemain`]). When the plan says so, the fault phase
//! does not end in a full heal: up to f acceptors stay down or cut off (both ways), chosen
//! so that those still down and the amnesic ones count in the f; everything else heals;
//! clients keep proposing to the connected nodes; and by `heal_load_us +
//! SimConfig::faults_remain_bound_us` the connected learners must have converged (values of
//! the faulty nodes' own proposers excepted unless acknowledged). Then the full heal.

use super::{Action, Phase, Pipe, SimResult, Violation, World};
use crate::checker::{Failure, ViolationKind};
use crate::faults::FaultKind;
use crate::rng::SimRng;
use crate::trace::TraceEvent;
use abcast_core::config::StartInfo;
use abcast_core::storage::{DiskFault, MemDir, StorageError, Tear};
use abcast_core::{Ballot, Micros, NodeId, Outbox, Protocol};
use std::collections::{BTreeMap, BTreeSet};

/// How long an armed partial fan-out crash waits for its moment, at most.
const PARTIAL_ARM_US: Micros = 2_000_000;

/// Which outbox an armed partial fan-out crash strikes in.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum PartialMode {
    /// The next outbox with at least two sends.
    Any,
    /// The outbox that starts the node's own phase 1.
    Phase1,
    /// The outbox in which the node starts leading under a newer ballot.
    Leading,
}

/// A partial fan-out crash waiting for its moment.
#[derive(Clone, Copy, Debug)]
pub(super) struct PartialArm {
    mode: PartialMode,
    /// The node's ballot and leadership when armed.
    ballot: Ballot,
    leading: bool,
    until_us: Micros,
    down_us: Micros,
}

impl<P, F> World<'_, P, F>
where
    P: Protocol,
    F: Fn(NodeId, StartInfo, MemDir) -> Result<P, StorageError>,
{
    /// The node's process ends; with `machine`, its machine loses power too (see the module
    /// comment), torn as the disk plan draws.
    /// A node crashed: some of its messages still in the network are held a further
    /// 0.5-5 s (`FaultPlan::last_words_ppm`), so that a coordinator's last words arrive
    /// after its successor took over, and at acceptors that restarted meanwhile.
    fn hold_last_words(&mut self, id: NodeId) {
        if self.plan.last_words_ppm == 0 || self.now_us >= self.fault_end_us {
            return;
        }
        let events = std::mem::take(&mut self.queue).into_vec();
        let (lo, hi) = self.plan.long_delay_us;
        let mut held = 0u64;
        for std::cmp::Reverse(mut ev) in events {
            if let Action::Message(m) = &ev.action
                && m.from == id
                && m.to != self.index.get(&id).copied().unwrap_or(usize::MAX)
                && self.rng.chance_ppm(self.plan.last_words_ppm)
            {
                ev.at_us = ev.at_us.saturating_add(self.rng.between(lo, hi));
                held += 1;
            }
            self.queue.push(std::cmp::Reverse(ev));
        }
        if held > 0 {
            self.report.messages_held_long += held;
            self.trace.record(
                self.now_us,
                TraceEvent::Note(format!(
                    "{held} messages {id} sent before it crashed are held 0.5-5 s"
                )),
            );
        }
    }

    pub(super) fn crash(&mut self, i: usize, machine: bool) {
        self.crash_with(i, machine, false);
    }

    /// [`World::crash`]; with `keep_new`, a machine crash keeps every file whose name was
    /// never made durable, torn (`torn_unsynced`; else the disk plan's odds decide).
    pub(super) fn crash_with(&mut self, i: usize, machine: bool, keep_new: bool) {
        // A disk failure armed under this process is gone with it (the next life finds a
        // working disk), and so is a crash still waiting for a new file.
        self.disks[i].clear_injection();
        self.nodes[i].disk_error = None;
        self.nodes[i].new_file_crash = None;
        // The process dies with its sync in flight (never run) and what gathered behind it.
        self.pipes[i] = Pipe::default();
        let s = &mut self.nodes[i];
        s.proto = None;
        s.epoch += 1;
        s.crash_in_commit = None;
        s.partial = None;
        s.paused_until_us = 0;
        let (id, incarnation) = (s.id, s.incarnation);
        self.checker.crash(id, incarnation);
        self.report.crashes += 1;
        // A node that held the configuration in effect may have held the previous one's
        // end for good (`reconfig.rs`, `previous_needed`).
        self.refresh_roles();
        self.node_session(i, false);
        self.hold_last_words(id);
        self.trace.record(
            self.now_us,
            TraceEvent::Crash {
                node: id,
                incarnation,
            },
        );
        if !machine {
            self.disks[i].crash_process();
            self.nodes[i].last_crash = format!("a process crash at t={}us", self.now_us);
            return;
        }
        self.report.machine_crashes += 1;
        let plan = &self.plan.disk;
        let rng = &mut self.disk_rng;
        let fault_rng = &mut self.disk_fault_rng;
        let disk = &self.disks[i];
        let unsynced = disk.unsynced_bytes();
        let mut kept = 0usize;
        let (mut torn, mut flips, mut kept_new) = (0u64, 0u64, 0u64);
        let mut files = Vec::new();
        disk.crash_machine_fate(|name, n, named| {
            if !named {
                // `torn_unsynced`: the name reached the disk's journal, the data only in
                // part (the simulator's older model took every such file away).
                if !(keep_new || fault_rng.chance_ppm(plan.torn_unsynced_ppm)) {
                    return None;
                }
                let keep = fault_rng.below(n as u64 + 1) as usize;
                kept_new += 1;
                kept += keep;
                files.push(format!(
                    "{name}: never synced, kept with {keep} of its {n} unsynced bytes"
                ));
                return Some(Tear { keep, flip: None });
            }
            if n == 0 {
                return Some(Tear {
                    keep: 0,
                    flip: None,
                });
            }
            let keep = if rng.chance_ppm(plan.torn_ppm) {
                torn += 1;
                rng.below(n as u64) as usize
            } else if rng.chance_ppm(500_000) {
                0
            } else {
                n
            };
            let flip = (keep > 0 && rng.chance_ppm(plan.flip_ppm))
                .then(|| rng.below(keep as u64) as usize);
            flips += u64::from(flip.is_some());
            kept += keep;
            files.push(match flip {
                Some(f) => {
                    format!("{name}: kept {keep} of {n} unsynced bytes, byte {f} of them flipped")
                }
                None => format!("{name}: kept {keep} of {n} unsynced bytes"),
            });
            Some(Tear { keep, flip })
        });
        self.report.faults.add(FaultKind::TornUnsynced, kept_new);
        self.report.unsynced_bytes_lost += unsynced.saturating_sub(kept) as u64;
        self.report.torn_files += torn;
        self.report.flipped_bytes += flips;
        let what = format!(
            "a machine crash at t={}us ({}; {} unsynced bytes before)",
            self.now_us,
            if files.is_empty() {
                "no file had unsynced bytes".to_string()
            } else {
                files.join("; ")
            },
            unsynced
        );
        self.trace
            .record(self.now_us, TraceEvent::Note(format!("{id}: {what}")));
        self.nodes[i].last_crash = what;
    }

    /// Node `i` was chosen for a crash in its next group commit and has one to do now: the
    /// write reaches the OS, the fdatasync never completes, the node crashes. The outbox
    /// dies with the process. False (and the crash is called off) if it would take more
    /// than f acceptors down.
    pub(super) fn crash_in_commit(&mut self, i: usize) -> bool {
        let Some((down_us, machine)) = self.nodes[i].crash_in_commit.take() else {
            return false;
        };
        let f = self.max_faulty();
        let id = self.nodes[i].id;
        if self.now_us >= self.fault_end_us
            || (self.nodes[i].acceptor && self.faulty_acceptors(i) + 1 > f)
        {
            self.trace.record(
                self.now_us,
                TraceEvent::Note(format!(
                    "crash of {id} in its group commit called off: healed, or f = {f} acceptors down or amnesic"
                )),
            );
            return false;
        }
        self.disks[i].begin_power_loss();
        if let Some(p) = self.nodes[i].proto.as_mut()
            && let Err(e) = p.sync_storage()
        {
            self.trace.record(
                self.now_us,
                TraceEvent::Note(format!("{id}: the interrupted group commit failed: {e}")),
            );
        }
        let incarnation = self.nodes[i].incarnation;
        self.report.commit_crashes += 1;
        self.trace.record(
            self.now_us,
            TraceEvent::Note(format!(
                "{id}: {} in the middle of a group commit",
                if machine {
                    "power lost"
                } else {
                    "process killed"
                }
            )),
        );
        self.crash(i, machine);
        self.restart_after(i, down_us, incarnation);
        true
    }

    /// A fault that recurs every `every` (uniform between its bounds) during the fault
    /// phase: schedules its next occurrence and says whether this one happens.
    fn again_later(&mut self, every: Option<(Micros, Micros)>, action: Action) -> bool {
        if self.now_us >= self.fault_end_us {
            return false;
        }
        let Some((lo, hi)) = every else {
            return false;
        };
        let next = self.now_us + self.rng.between(lo, hi);
        self.schedule(next, action);
        true
    }

    pub(super) fn on_partition(&mut self) {
        if !self.again_later(self.plan.partition_every_us, Action::Partition) {
            return;
        }
        let ids: Vec<NodeId> = self.cfg.nodes.clone();
        let mut blocked = BTreeSet::new();
        let roll = self.rng.below(100);
        let pick = |rng: &mut SimRng| rng.pick(&ids).copied().unwrap_or_default();
        if roll < 30 {
            // All links up for a while.
        } else if roll < 55 {
            let a = pick(&mut self.rng);
            for &b in &ids {
                if b != a {
                    blocked.insert((a, b));
                    blocked.insert((b, a));
                }
            }
        } else if roll < 75 {
            // One-way: `a` can no longer send, or no longer receive.
            let a = pick(&mut self.rng);
            let outgoing = self.rng.chance_ppm(500_000);
            for &b in &ids {
                if b != a {
                    blocked.insert(if outgoing { (a, b) } else { (b, a) });
                }
            }
        } else if roll < 90 {
            let side: Vec<bool> = ids.iter().map(|_| self.rng.chance_ppm(500_000)).collect();
            for (x, &a) in ids.iter().enumerate() {
                for (y, &b) in ids.iter().enumerate() {
                    if side[x] != side[y] {
                        blocked.insert((a, b));
                    }
                }
            }
        } else {
            let links = self.rng.between(1, ids.len() as u64);
            for _ in 0..links {
                let (a, b) = (pick(&mut self.rng), pick(&mut self.rng));
                if a != b {
                    blocked.insert((a, b));
                }
            }
        }
        let before = std::mem::replace(&mut self.blocked, blocked);
        self.links_changed(&before);
        self.report.partition_changes += 1;
        self.trace.record(
            self.now_us,
            TraceEvent::Partition {
                blocked: self.blocked.iter().copied().collect(),
            },
        );
    }

    /// The coordinator most live nodes believe in (ties: the lowest id).
    pub(super) fn believed_coordinator(&self) -> Option<NodeId> {
        let mut votes: BTreeMap<NodeId, usize> = BTreeMap::new();
        for s in &self.nodes {
            if let Some(c) = s.proto.as_ref().and_then(|p| p.status().coordinator) {
                *votes.entry(c).or_insert(0) += 1;
            }
        }
        let mut best: Option<(NodeId, usize)> = None;
        for (c, n) in votes {
            if best.is_none_or(|(_, m)| n > m) {
                best = Some((c, n));
            }
        }
        best.map(|(c, _)| c)
    }

    /// Acceptors down (crashed or not started) or amnesic, other than `except`.
    pub(super) fn faulty_acceptors(&self, except: usize) -> usize {
        (0..self.nodes.len())
            .filter(|&k| k != except && self.nodes[k].acceptor)
            .filter(|&k| match self.nodes[k].proto.as_ref() {
                None => true,
                Some(p) => {
                    p.status().amnesic
                        || self.ghost_crash == Some(k)
                        || self.nodes[k].disk_error.is_some()
                        || self.nodes[k].new_file_crash.is_some()
                }
            })
            .count()
    }

    pub(super) fn on_crash(&mut self) -> SimResult<()> {
        if !self.again_later(self.plan.crash_every_us, Action::Crash) {
            return Ok(());
        }
        let candidates: Vec<usize> = (0..self.nodes.len())
            .filter(|&i| self.nodes[i].proto.is_some() && !self.nodes[i].crash_exempt)
            .collect();
        let coordinator = if self.rng.chance_ppm(self.plan.coordinator_bias_ppm) {
            self.believed_coordinator()
                .and_then(|c| self.index.get(&c).copied())
                .filter(|i| candidates.contains(i))
        } else {
            None
        };
        let target = match coordinator {
            Some(i) => i,
            None => match self.rng.pick(&candidates) {
                Some(&i) => i,
                None => return Ok(()),
            },
        };
        let f = self.max_faulty();
        if self.nodes[target].acceptor && self.faulty_acceptors(target) + 1 > f {
            let id = self.nodes[target].id;
            self.trace.record(
                self.now_us,
                TraceEvent::Note(format!(
                    "crash of {id} skipped: f = {f} acceptors already down or amnesic"
                )),
            );
            return Ok(());
        }
        let incarnation = self.nodes[target].incarnation;
        let (lo, hi) = self.plan.downtime_us;
        let down_us = self.rng.between(lo, hi);
        if self.rng.chance_ppm(self.plan.partial_fanout_ppm) {
            if coordinator == Some(target) {
                // The coordinator goes now; its successor is caught in the takeover.
                if let Some(next) = self.next_acceptor_after(target) {
                    let mode = self.takeover_mode();
                    self.arm_partial(next, mode, down_us);
                }
            } else {
                // This node goes half-way through its next outbox with several sends.
                self.arm_partial(target, PartialMode::Any, down_us);
                return Ok(());
            }
        }
        if self.cfg.disk_faults && self.arm_disk_fault(target, down_us) {
            return Ok(());
        }
        let machine = self.disk_rng.chance_ppm(self.plan.disk.machine_crash_ppm);
        if self.disk_rng.chance_ppm(self.plan.disk.in_commit_ppm) {
            let id = self.nodes[target].id;
            self.trace.record(
                self.now_us,
                TraceEvent::Note(format!(
                    "{id} will crash ({}) in its next group commit, then stay down {down_us}us",
                    if machine { "machine" } else { "process" }
                )),
            );
            self.nodes[target].crash_in_commit = Some((down_us, machine));
            return Ok(());
        }
        self.crash(target, machine);
        if self.cfg.disk_faults && self.disk_fault_rng.chance_ppm(self.plan.disk.wiped_dir_ppm) {
            self.nodes[target].wipe_on_restart = true;
        }
        let at = self.now_us + down_us;
        self.schedule(
            at,
            Action::Restart {
                node: target,
                incarnation,
            },
        );
        Ok(())
    }

    // ---- the disk faults of issue 33 -------------------------------------------------

    /// Instead of crashing node `i` now, maybe arm a disk fault under it (the plan's odds,
    /// from the disk faults' own stream): a failure of its disk after a few more writes or
    /// syncs (`disk_error`), or a machine crash at its next group commit that leaves a new
    /// file's name not durable (`torn_unsynced`). Either way it then stays down `down_us`.
    fn arm_disk_fault(&mut self, i: usize, down_us: Micros) -> bool {
        let id = self.nodes[i].id;
        let plan = &self.plan.disk;
        if self.disk_fault_rng.chance_ppm(plan.disk_error_ppm) {
            let fault =
                DiskFault::ALL[self.disk_fault_rng.below(DiskFault::ALL.len() as u64) as usize];
            let after = self.disk_fault_rng.below(41) as u32;
            self.disks[i].inject(after, fault);
            self.nodes[i].disk_error = Some(down_us);
            self.trace.record(
                self.now_us,
                TraceEvent::Note(format!(
                    "{id}'s disk will fail ({fault:?}) after {after} more operations of its kind; \
                     the node stops then and stays down {down_us}us"
                )),
            );
            return true;
        }
        if self.disk_fault_rng.chance_ppm(plan.new_file_crash_ppm) {
            let until = self.now_us.saturating_add(PARTIAL_ARM_US);
            self.nodes[i].new_file_crash = Some((down_us, until));
            self.trace.record(
                self.now_us,
                TraceEvent::Note(format!(
                    "{id} will crash (machine) at a group commit that leaves a new file's name \
                     not durable, then stay down {down_us}us"
                )),
            );
            return true;
        }
        false
    }

    /// Node `i`'s store failed (`e`). A failure its disk was made to answer (`disk_error`)
    /// stops the node, which never acts on what it could not make durable: its outbox dies
    /// with it, and it restarts later on what the disk kept (a failed fdatasync took that
    /// file's unsynced writes). Any other failure is a violation.
    pub(super) fn storage_failed(&mut self, i: usize, e: &StorageError) -> SimResult<()> {
        let Some(fault) = self.disks[i].injected_fired() else {
            return Err(self.commit_failed(i, e));
        };
        let (id, incarnation) = (self.nodes[i].id, self.nodes[i].incarnation);
        let (lo, hi) = self.plan.downtime_us;
        let down_us = match self.nodes[i].disk_error {
            Some(d) => d,
            None => self.rng.between(lo, hi),
        };
        self.report.faults.add(FaultKind::DiskError, 1);
        self.trace.record(
            self.now_us,
            TraceEvent::Note(format!(
                "{id}: the disk failed ({fault:?}): the node stops ({e}), down {down_us}us"
            )),
        );
        self.crash(i, false);
        self.nodes[i].last_crash = format!("a disk failure ({fault:?}) at t={}us", self.now_us);
        self.restart_after(i, down_us, incarnation);
        Ok(())
    }

    /// A group commit just began on node `i` (its writes reached the disk, the fdatasync
    /// and directory fsync not yet): if a crash waits for a new file and one's name is not
    /// durable, the machine crashes now, keeping that file torn (`torn_unsynced`). False
    /// if nothing happened.
    pub(super) fn new_file_crash_due(&mut self, i: usize) -> bool {
        let Some((down_us, until)) = self.nodes[i].new_file_crash else {
            return false;
        };
        if self.now_us >= until.min(self.fault_end_us) {
            self.nodes[i].new_file_crash = None;
            return false;
        }
        if self.disks[i].unsynced_names() == 0 {
            return false;
        }
        let incarnation = self.nodes[i].incarnation;
        let id = self.nodes[i].id;
        self.trace.record(
            self.now_us,
            TraceEvent::Note(format!(
                "{id}: power lost with a new file's name not yet durable"
            )),
        );
        self.crash_with(i, true, true);
        self.restart_after(i, down_us, incarnation);
        true
    }

    /// Schedules node `i`'s restart as life `incarnation` after `down_us` from now.
    pub(super) fn restart_after(&mut self, i: usize, down_us: Micros, incarnation: u64) {
        self.schedule(
            self.now_us.saturating_add(down_us),
            Action::Restart {
                node: i,
                incarnation,
            },
        );
    }

    /// Before node `i` restarts: its disk is wiped if the crash said so and no more than
    /// f - 1 other acceptors are down or amnesic (the node restarts amnesic, one of f).
    pub(super) fn maybe_wipe(&mut self, i: usize) {
        if !std::mem::take(&mut self.nodes[i].wipe_on_restart) {
            return;
        }
        let f = self.max_faulty();
        if self.nodes[i].acceptor && self.faulty_acceptors(i) + 1 > f {
            return;
        }
        self.disks[i].wipe();
        self.report.faults.add(FaultKind::WipedDir, 1);
        let id = self.nodes[i].id;
        self.trace.record(
            self.now_us,
            TraceEvent::Note(format!("{id} restarts on an empty directory (wiped)")),
        );
        self.nodes[i].last_crash = format!("its directory wiped at t={}us", self.now_us);
    }

    /// The full heal: every link up, no loss, every node up and running.
    pub(super) fn on_heal(&mut self) -> SimResult<()> {
        let before = std::mem::take(&mut self.blocked);
        self.links_changed(&before);
        self.ghost = None;
        self.partial_check = None;
        self.partial_pending = None;
        self.loss_ppm = 0;
        self.dup_ppm = 0;
        self.power_loss_pending = false;
        self.heal_at_us = self.now_us;
        self.phase = Phase::Healed;
        self.trace.record(self.now_us, TraceEvent::Heal);
        for s in &mut self.nodes {
            s.crash_in_commit = None;
            s.partial = None;
            s.paused_until_us = 0;
            s.stay_down = false;
            s.disk_error = None;
            s.new_file_crash = None;
        }
        // No disk fails from now on; one that failed already keeps failing until its node
        // stops on the error and restarts (`storage_failed`): the error may still be on its
        // way up (multiring power_loss seed 1947 of the long run: a trim failed before the
        // heal, the next group commit reported it after, and the failure, forgotten, read
        // as a violation).
        for d in &self.disks {
            d.disarm_injection();
        }
        for i in 0..self.nodes.len() {
            if !self.nodes[i].started {
                self.report.late_join_at_us = Some(self.now_us);
                self.start_node(i, StartInfo::FRESH)?;
            } else if self.nodes[i].proto.is_none() {
                self.restart(i)?;
            }
        }
        Ok(())
    }

    // ---- partial fan-out ---------------------------------------------------------------

    fn takeover_mode(&mut self) -> PartialMode {
        if self.rng.chance_ppm(500_000) {
            PartialMode::Phase1
        } else {
            PartialMode::Leading
        }
    }

    /// The next live acceptor after node `i` in the configured order (cyclic).
    fn next_acceptor_after(&self, i: usize) -> Option<usize> {
        let n = self.nodes.len();
        (1..n)
            .map(|k| (i + k) % n)
            .find(|&j| self.nodes[j].acceptor && self.nodes[j].proto.is_some())
    }

    pub(super) fn arm_partial(&mut self, i: usize, mode: PartialMode, down_us: Micros) {
        if self.nodes[i].crash_exempt || self.now_us >= self.fault_end_us {
            return;
        }
        let Some(st) = self.nodes[i].proto.as_ref().map(|p| p.status()) else {
            return;
        };
        let until_us = self
            .now_us
            .saturating_add(PARTIAL_ARM_US)
            .min(self.fault_end_us);
        self.nodes[i].partial = Some(PartialArm {
            mode,
            ballot: st.ballot,
            leading: st.leading,
            until_us,
            down_us,
        });
        let id = self.nodes[i].id;
        self.trace.record(
            self.now_us,
            TraceEvent::Note(format!(
                "{id} armed to crash half-way through an outbox ({mode:?})"
            )),
        );
    }

    /// A late joiner (the lowest id: the next coordinator) may crash in its first takeover.
    pub(super) fn maybe_arm_late_joiner(&mut self, i: usize) {
        if self.nodes[i].acceptor && self.rng.chance_ppm(self.plan.partial_fanout_ppm) {
            let mode = self.takeover_mode();
            let (lo, hi) = self.plan.downtime_us;
            let down_us = self.rng.between(lo.max(50_000), hi.max(200_000));
            self.arm_partial(i, mode, down_us);
        }
    }

    /// Whether node `i`'s armed crash strikes in this outbox (called with its sends ready).
    /// Disarms it once its time is over.
    pub(super) fn partial_due(&mut self, i: usize, out: &Outbox<P::Message>) -> bool {
        let Some(arm) = self.nodes[i].partial else {
            return false;
        };
        if self.now_us > arm.until_us || self.now_us >= self.fault_end_us {
            self.nodes[i].partial = None;
            return false;
        }
        if out.sends.len() < 2 {
            return false;
        }
        let Some(st) = self.nodes[i].proto.as_ref().map(|p| p.status()) else {
            return false;
        };
        let me = self.nodes[i].id;
        match arm.mode {
            PartialMode::Any => true,
            PartialMode::Phase1 => st.ballot > arm.ballot && st.ballot.node == me && !st.leading,
            PartialMode::Leading => st.leading && (!arm.leading || st.ballot > arm.ballot),
        }
    }

    /// Node `i` crashes after a prefix of `out.sends` left. False (the crash called off,
    /// the outbox carried out whole) if it would take more than f acceptors down.
    pub(super) fn partial_crash(&mut self, i: usize, out: &mut Outbox<P::Message>) -> bool {
        let Some(arm) = self.nodes[i].partial.take() else {
            return false;
        };
        let f = self.max_faulty();
        let id = self.nodes[i].id;
        if self.nodes[i].acceptor && self.faulty_acceptors(i) + 1 > f {
            self.trace.record(
                self.now_us,
                TraceEvent::Note(format!(
                    "partial fan-out crash of {id} called off: f = {f} acceptors down or amnesic"
                )),
            );
            return false;
        }
        let total = out.sends.len();
        let min = if arm.mode == PartialMode::Leading {
            0
        } else {
            1
        };
        let k = self.rng.between(min, total as u64 - 1) as usize;
        let sends: Vec<_> = out.sends.drain(..).take(k).collect();
        self.trace.record(
            self.now_us,
            TraceEvent::Note(format!(
                "{id} crashes half-way through an outbox ({:?}): {k} of its {total} sends leave",
                arm.mode
            )),
        );
        for (to, msg) in sends {
            let (kind, body) = super::encode(&msg);
            self.send(id, to, kind, body);
        }
        out.clear();
        let incarnation = self.nodes[i].incarnation;
        let machine = self.disk_rng.chance_ppm(self.plan.disk.machine_crash_ppm);
        self.report.faults.add(FaultKind::PartialFanout, 1);
        self.crash(i, machine);
        self.restart_after(i, arm.down_us, incarnation);
        true
    }

    // ---- ghost coordinator -------------------------------------------------------------

    /// Whether the link `from -> to` is down: a partition, or a ghost cut off.
    pub(super) fn cut(&self, from: NodeId, to: NodeId) -> bool {
        self.blocked.contains(&(from, to))
            || self
                .ghost
                .is_some_and(|(g, _)| from != to && (g == from || g == to))
    }

    /// The ghost-coordinator story (`FaultKind::Ghost`): the coordinator most nodes believe
    /// in is cut off both ways for 0.8-2 s; the others elect a successor, which crashes once
    /// it leads (a process crash, restarting amnesic where its store is not durable) and
    /// restarts while the ghost is still cut off; then the ghost's links come back. The
    /// ghost never heard of the takeover or the restart: what it sends first after the heal
    /// (Phase 2s of its old ballot, resent) meets an acceptor that forgot its promise. This
    /// is the fault the epoch check in voting exists for, and random partitions and crashes
    /// line it up too rarely to catch its removal.
    pub(super) fn on_ghost(&mut self) {
        if self.now_us >= self.fault_end_us || self.ghost.is_some() {
            return;
        }
        let Some(c) = self.believed_coordinator() else {
            return;
        };
        let Some(&i) = self.index.get(&c) else { return };
        if self.nodes[i].proto.is_none() || !self.nodes[i].acceptor {
            return;
        }
        let until = self
            .now_us
            .saturating_add(self.rng.between(800_000, 2_000_000))
            .min(self.fault_end_us);
        if until < self.now_us + 500_000 {
            return;
        }
        self.ghost = Some((c, until));
        self.trace.record(
            self.now_us,
            TraceEvent::Note(format!(
                "ghost: coordinator {c} is cut off both ways until {until}us; its successor crashes once it leads"
            )),
        );
        self.schedule(until, Action::GhostHeal);
        self.schedule(self.now_us + 20_000, Action::GhostWatch);
    }

    pub(super) fn on_ghost_watch(&mut self) {
        let Some((g, until)) = self.ghost else { return };
        // Time left to crash, stay down a while and restart before the heal.
        if self.now_us + 300_000 >= until {
            return;
        }
        let leader = (0..self.nodes.len()).find(|&k| {
            let s = &self.nodes[k];
            s.id != g
                && s.acceptor
                && !s.crash_exempt
                && s.proto.as_ref().is_some_and(|p| p.status().leading)
        });
        let Some(k) = leader else {
            self.schedule(self.now_us + 20_000, Action::GhostWatch);
            return;
        };
        let id = self.nodes[k].id;
        let f = self.max_faulty();
        if self.faulty_acceptors(k) + 1 > f {
            self.trace.record(
                self.now_us,
                TraceEvent::Note(format!(
                    "ghost: crash of successor {id} skipped: f = {f} acceptors already down or amnesic"
                )),
            );
            return;
        }
        // It decides a little first; it is back up before the heal.
        let at = self.now_us + self.rng.between(20_000, 150_000);
        let down_us = self.rng.between(50_000, until - at - 100_000);
        self.trace.record(
            self.now_us,
            TraceEvent::Note(format!(
                "ghost: successor {id} leads; it crashes at {at}us for {down_us}us"
            )),
        );
        self.ghost_crash = Some(k);
        self.schedule(at, Action::GhostCrash { node: k, down_us });
    }

    /// The planned crash of the ghost's successor. Its slot was reserved when it was planned
    /// (`faulty_acceptors` counts it); the f rule is checked once more all the same, since a
    /// restart may have left another acceptor amnesic meanwhile.
    pub(super) fn on_ghost_crash(&mut self, node: usize, down_us: Micros) {
        self.ghost_crash = None;
        if self.nodes[node].proto.is_none() {
            return;
        }
        let f = self.max_faulty();
        if self.faulty_acceptors(node) + 1 > f {
            let id = self.nodes[node].id;
            self.trace.record(
                self.now_us,
                TraceEvent::Note(format!(
                    "ghost: crash of successor {id} skipped: f = {f} acceptors already down or amnesic"
                )),
            );
            return;
        }
        self.report.faults.add(FaultKind::Ghost, 1);
        self.crash_for(node, down_us);
    }

    /// Crashes node `i` (a machine crash by the disk model's odds) and restarts it
    /// `down_us` later.
    pub(super) fn crash_for(&mut self, i: usize, down_us: Micros) {
        let incarnation = self.nodes[i].incarnation;
        let machine = self.disk_rng.chance_ppm(self.plan.disk.machine_crash_ppm);
        self.crash(i, machine);
        self.restart_after(i, down_us, incarnation);
    }

    pub(super) fn on_ghost_heal(&mut self) {
        if let Some((g, _)) = self.ghost.take() {
            self.trace.record(
                self.now_us,
                TraceEvent::Note(format!("ghost: {g}'s links are back")),
            );
        }
    }

    // ---- pauses ------------------------------------------------------------------------

    pub(super) fn on_pause(&mut self) {
        if !self.again_later(self.plan.pause_every_us, Action::Pause) {
            return;
        }
        let candidates: Vec<usize> = (0..self.nodes.len())
            .filter(|&i| {
                let s = &self.nodes[i];
                s.proto.is_some() && self.now_us >= s.paused_until_us
            })
            .collect();
        let coordinator = if self.rng.chance_ppm(500_000) {
            self.believed_coordinator()
                .and_then(|c| self.index.get(&c).copied())
                .filter(|i| candidates.contains(i))
        } else {
            None
        };
        let Some(i) = coordinator.or_else(|| self.rng.pick(&candidates).copied()) else {
            return;
        };
        let (lo, hi) = self.plan.pause_us;
        let until = self
            .now_us
            .saturating_add(self.rng.between(lo, hi))
            .min(self.fault_end_us);
        if until <= self.now_us {
            return;
        }
        self.nodes[i].paused_until_us = until;
        self.report.faults.add(FaultKind::Pause, 1);
        let id = self.nodes[i].id;
        let stall = self.rng.chance_ppm(self.plan.stall_ppm);
        self.trace.record(
            self.now_us,
            TraceEvent::Note(format!(
                "{id} is frozen for {}us{}",
                until - self.now_us,
                if stall { " (its machine stalls)" } else { "" }
            )),
        );
        if stall {
            self.hold_until_resume(i, until);
        }
    }

    /// A machine stalls until `until`: every message node `i` sent that is still in the
    /// network leaves when it resumes (its remaining delay counted from then). A
    /// simplification: a real stall holds what the machine had not put on the wire yet,
    /// here everything not delivered yet.
    fn hold_until_resume(&mut self, i: usize, until: Micros) {
        let id = self.nodes[i].id;
        let now = self.now_us;
        let events = std::mem::take(&mut self.queue).into_vec();
        let mut held = 0u64;
        for std::cmp::Reverse(mut ev) in events {
            if let Action::Message(m) = &ev.action
                && m.from == id
                && m.to != i
                && ev.at_us < until
            {
                ev.at_us = until.saturating_add(ev.at_us.saturating_sub(now));
                held += 1;
            }
            self.queue.push(std::cmp::Reverse(ev));
        }
        if held > 0 {
            self.report.messages_held_long += held;
        }
    }

    // ---- power loss --------------------------------------------------------------------

    /// Every acceptor's machine loses power now; `mid_commit` is the acceptor whose group
    /// commit is interrupted (its write reaches the OS, its fdatasync never completes).
    pub(super) fn power_loss(&mut self, mid_commit: Option<usize>) {
        self.power_loss_pending = false;
        if let Some(i) = mid_commit {
            self.disks[i].begin_power_loss();
            if let Some(p) = self.nodes[i].proto.as_mut()
                && let Err(e) = p.sync_storage()
            {
                let id = self.nodes[i].id;
                self.trace.record(
                    self.now_us,
                    TraceEvent::Note(format!("{id}: the interrupted group commit failed: {e}")),
                );
            }
            self.report.commit_crashes += 1;
        }
        let victims: Vec<usize> = (0..self.nodes.len())
            .filter(|&j| self.nodes[j].acceptor && self.nodes[j].proto.is_some())
            .collect();
        self.trace.record(
            self.now_us,
            TraceEvent::Note(format!(
                "power loss: the machines of {} acceptors go down at once{}",
                victims.len(),
                match mid_commit {
                    Some(i) => format!(", {} in the middle of a group commit", self.nodes[i].id),
                    None => String::new(),
                }
            )),
        );
        self.report.faults.add(FaultKind::PowerLoss, 1);
        let (lo, hi) = self.plan.downtime_us;
        for j in victims {
            let incarnation = self.nodes[j].incarnation;
            self.crash(j, true);
            let down_us = self.rng.between(lo.max(50_000), hi.max(200_000));
            self.restart_after(j, down_us, incarnation);
        }
    }

    // ---- the end of the fault phase ----------------------------------------------------

    /// The fault phase ends: the faults-remain phase if the plan has one (and f allows a
    /// faulty acceptor), the full heal otherwise.
    pub(super) fn on_faults_end(&mut self) -> SimResult<()> {
        self.power_loss_pending = false;
        let f = self.max_faulty();
        if !self.plan.faults_remain || f == 0 {
            return self.on_heal();
        }
        // Acceptors down now stay down; amnesic ones count in the f too.
        let down: Vec<usize> = (0..self.nodes.len())
            .filter(|&i| self.nodes[i].acceptor && self.nodes[i].proto.is_none())
            .collect();
        let amnesic = (0..self.nodes.len())
            .filter(|&i| {
                self.nodes[i].acceptor
                    && self.nodes[i]
                        .proto
                        .as_ref()
                        .is_some_and(|p| p.status().amnesic)
            })
            .count();
        if down.len() + amnesic > f || down.iter().any(|&i| self.nodes[i].crash_exempt) {
            return self.on_heal();
        }
        let target = (self.rng.between(1, f as u64) as usize).max(down.len());
        let mut faulty: Vec<usize> = down.clone();
        let mut cut: Vec<usize> = Vec::new();
        let coordinator = self
            .believed_coordinator()
            .and_then(|c| self.index.get(&c).copied());
        while faulty.len() < target && faulty.len() + amnesic < f {
            let candidates: Vec<usize> = (0..self.nodes.len())
                .filter(|&i| {
                    let s = &self.nodes[i];
                    s.acceptor
                        && !s.crash_exempt
                        && !faulty.contains(&i)
                        && s.proto.as_ref().is_some_and(|p| !p.status().amnesic)
                })
                .collect();
            let pick = match coordinator {
                Some(c) if candidates.contains(&c) && self.rng.chance_ppm(500_000) => Some(c),
                _ => self.rng.pick(&candidates).copied(),
            };
            let Some(i) = pick else { break };
            faulty.push(i);
            if self.rng.chance_ppm(500_000) {
                cut.push(i);
            } else {
                let machine = self.disk_rng.chance_ppm(self.plan.disk.machine_crash_ppm);
                self.crash(i, machine);
            }
        }
        if faulty.is_empty() {
            return self.on_heal();
        }
        // Everything else heals.
        self.loss_ppm = 0;
        self.dup_ppm = 0;
        let exempt: Vec<NodeId> = faulty.iter().map(|&i| self.nodes[i].id).collect();
        let mut blocked = BTreeSet::new();
        for &c in &cut {
            let a = self.nodes[c].id;
            for s in &self.nodes {
                if s.id != a {
                    blocked.insert((a, s.id));
                    blocked.insert((s.id, a));
                }
            }
        }
        self.blocked = blocked;
        for s in &mut self.nodes {
            s.crash_in_commit = None;
            s.partial = None;
            s.paused_until_us = 0;
        }
        for &i in &faulty {
            self.nodes[i].stay_down = !cut.contains(&i);
        }
        self.phase = Phase::FaultsRemain {
            exempt: exempt.clone(),
            deadline_us: self
                .load_end_us
                .saturating_add(self.cfg.faults_remain_bound_us),
        };
        self.report.faults_remain_nodes = exempt.clone();
        self.trace.record(
            self.now_us,
            TraceEvent::Note(format!(
                "faults remain: {} stay down, {} cut off; the others heal and must converge within {}us of the \
                 last proposal",
                faulty
                    .iter()
                    .filter(|i| !cut.contains(i))
                    .map(|&i| self.nodes[i].id.to_string())
                    .collect::<Vec<_>>()
                    .join(" "),
                cut.iter()
                    .map(|&i| self.nodes[i].id.to_string())
                    .collect::<Vec<_>>()
                    .join(" "),
                self.cfg.faults_remain_bound_us
            )),
        );
        for i in 0..self.nodes.len() {
            if faulty.contains(&i) {
                continue;
            }
            if !self.nodes[i].started {
                self.report.late_join_at_us = Some(self.now_us);
                self.start_node(i, StartInfo::FRESH)?;
            } else if self.nodes[i].proto.is_none() {
                self.restart(i)?;
            }
        }
        Ok(())
    }

    /// In the faults-remain phase, after the last proposal: once the connected learners
    /// converged, the full heal (and another round of client load).
    pub(super) fn check_faults_remain(&mut self) -> SimResult<()> {
        let Phase::FaultsRemain { exempt, .. } = &self.phase else {
            return Ok(());
        };
        let connected: Vec<_> = self
            .nodes
            .iter()
            .filter(|s| s.learner && s.proto.is_some() && !exempt.contains(&s.id))
            .map(|s| (s.id, s.incarnation))
            .collect();
        if !self.checker.converged_among(&connected, exempt) {
            return Ok(());
        }
        let took = self.now_us.saturating_sub(self.load_end_us);
        self.report.faults_remain_converge_us = Some(took);
        self.report.faults.add(FaultKind::FaultsRemain, 1);
        self.trace.record(
            self.now_us,
            TraceEvent::Note(format!(
                "the connected learners converged {took}us after the last proposal, with {} still faulty",
                exempt.len()
            )),
        );
        self.on_heal()?;
        self.load_end_us = self.now_us.saturating_add(self.cfg.heal_load_us);
        let gap = self.proposal_gap_us();
        self.schedule(self.now_us + gap, Action::Propose { retry: None });
        self.schedule_next_read();
        Ok(())
    }

    /// The liveness failure of the faults-remain phase (the connected learners only).
    pub(super) fn faults_remain_failure(&self) -> Option<Failure> {
        let Phase::FaultsRemain { exempt, .. } = &self.phase else {
            return None;
        };
        let connected: Vec<_> = self
            .nodes
            .iter()
            .filter(|s| s.learner && s.proto.is_some() && !exempt.contains(&s.id))
            .map(|s| (s.id, s.incarnation))
            .collect();
        Some(
            self.checker
                .liveness_failure_among(&connected, exempt)
                .unwrap_or_else(|| {
                    Failure::new(
                        ViolationKind::NotConverged,
                        "the connected learners did not converge, yet the checkers found nothing missing",
                    )
                }),
        )
    }
}

// ---- partial connectivity ---------------------------------------------------------------

/// The shapes of the partial-connectivity mix ([`crate::FaultMix::PartialConnectivity`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum PartialShape {
    /// OmniPaxos EuroSys'23 figure 1a: every link is down except those of one hub node
    /// (not the leader): the leader can reach only the hub, and so can everybody else.
    QuorumLoss,
    /// Figure 1b: the quorum-loss shape with the old leader cut off from the hub too (so it
    /// is isolated), and the hub's log behind (it was cut off inbound for a while first):
    /// a protocol that elects only an up-to-date node cannot elect the one node that a
    /// majority reaches.
    ConstrainedElection,
    /// Figure 1c: the link between the leader and one other node is down both ways; both
    /// still reach a majority through the others.
    Chained,
    /// openraft issue 2080: the old leader reaches only a bridge node; the bridge and two
    /// others reach each other (a majority of five); the rest is isolated.
    OpenRaft2080,
    /// Every directed link down with a drawn chance, and in half the episodes the leader
    /// deaf (it sends, hears nothing) or mute (it hears, nothing it sends arrives).
    OneWay,
}

impl PartialShape {
    pub const ALL: [PartialShape; 5] = [
        PartialShape::QuorumLoss,
        PartialShape::ConstrainedElection,
        PartialShape::Chained,
        PartialShape::OpenRaft2080,
        PartialShape::OneWay,
    ];

    pub fn name(self) -> &'static str {
        match self {
            PartialShape::QuorumLoss => "quorum_loss",
            PartialShape::ConstrainedElection => "constrained_election",
            PartialShape::Chained => "chained",
            PartialShape::OpenRaft2080 => "openraft_2080",
            PartialShape::OneWay => "one_way",
        }
    }

    pub fn index(self) -> usize {
        self as usize
    }
}

/// The liveness check of one window of a partial-connectivity episode (for a protocol
/// that claims it): by `deadline_us`, a node of `connected` leads and a value whose client
/// number is at least `first_value` is delivered at `majority` nodes.
#[derive(Debug)]
pub(super) struct PartialCheck {
    pub shape: PartialShape,
    pub episode_start_us: Micros,
    pub since_us: Micros,
    pub deadline_us: Micros,
    pub first_value: u64,
    /// The nodes reachable both ways by a majority (themselves included).
    pub connected: Vec<usize>,
    pub majority: usize,
    /// Values of this window (client number) and the nodes that delivered them.
    pub delivered: BTreeMap<u64, BTreeSet<NodeId>>,
    pub decided: bool,
    /// Windows passed in this episode.
    pub windows: u32,
}

impl<P, F> World<'_, P, F>
where
    P: Protocol,
    F: Fn(NodeId, StartInfo, MemDir) -> Result<P, StorageError>,
{
    /// The node a partial-connectivity episode calls the leader: the one leading now (the
    /// lowest id if several think so), else the one most nodes believe in, else none.
    fn partial_leader(&self) -> Option<usize> {
        (0..self.nodes.len())
            .find(|&i| {
                self.nodes[i]
                    .proto
                    .as_ref()
                    .is_some_and(|p| p.status().leading)
            })
            .or_else(|| {
                self.believed_coordinator()
                    .and_then(|c| self.index.get(&c).copied())
            })
    }

    /// Every directed link between two nodes, except those `keep` says (both ways).
    fn all_links_but(&self, keep: impl Fn(NodeId, NodeId) -> bool) -> BTreeSet<(NodeId, NodeId)> {
        let mut out = BTreeSet::new();
        for a in &self.nodes {
            for b in &self.nodes {
                if a.id != b.id && !keep(a.id, b.id) && !keep(b.id, a.id) {
                    out.insert((a.id, b.id));
                }
            }
        }
        out
    }

    /// Draws `count` distinct node indexes other than those of `not`.
    fn partial_pick(&mut self, count: usize, not: &[usize]) -> Vec<usize> {
        let mut pool: Vec<usize> = (0..self.nodes.len()).filter(|i| !not.contains(i)).collect();
        let mut out = Vec::new();
        while out.len() < count && !pool.is_empty() {
            let k = self.rng.below(pool.len() as u64) as usize;
            out.push(pool.swap_remove(k));
        }
        out
    }

    /// Episode `k` of the partial-connectivity mix starts: a shape and roles are drawn, the
    /// links go down as the shape says (a constrained election first cuts the hub off
    /// inbound and takes its shape `lag_us` later), and the next episode is scheduled.
    pub(super) fn on_partial_episode(&mut self, k: u32) {
        let Some(plan) = self.plan.partial.clone() else {
            return;
        };
        if self.now_us >= self.fault_end_us || self.nodes.len() < 3 {
            return;
        }
        let ends_us = self
            .now_us
            .saturating_add(plan.hold_us)
            .min(self.fault_end_us);
        if k + 1 < plan.episodes {
            self.schedule(ends_us, Action::PartialEpisode { k: k + 1 });
        }
        let n = self.nodes.len();
        let roll = self.rng.below(100);
        let mut shape = match roll {
            0..25 => PartialShape::QuorumLoss,
            25..45 => PartialShape::ConstrainedElection,
            45..65 => PartialShape::Chained,
            65..80 => PartialShape::OpenRaft2080,
            _ => PartialShape::OneWay,
        };
        if shape == PartialShape::OpenRaft2080 && n < 5 {
            shape = PartialShape::Chained;
        }
        let current = self.partial_leader();
        let leader = match current {
            Some(l) if self.rng.chance_ppm(750_000) => l,
            _ => self.rng.below(n as u64) as usize,
        };
        self.report.faults.add(FaultKind::PartialConnectivity, 1);
        self.report.partial_shapes[shape.index()] += 1;
        let id = |w: &Self, i: usize| w.nodes[i].id;
        let l = id(self, leader);
        let (blocked, roles) = match shape {
            PartialShape::QuorumLoss | PartialShape::ConstrainedElection => {
                let hub = self.partial_pick(1, &[leader])[0];
                let h = id(self, hub);
                let mut cut = self.all_links_but(|a, _| a == h);
                if shape == PartialShape::ConstrainedElection {
                    // The old leader isolated: it cannot bring the hub's log up to date.
                    cut.insert((l, h));
                    cut.insert((h, l));
                    // First the hub hears nothing for `lag_us`: its log falls behind.
                    let lag: BTreeSet<(NodeId, NodeId)> = self
                        .nodes
                        .iter()
                        .filter(|s| s.id != h)
                        .map(|s| (s.id, h))
                        .collect();
                    self.schedule(
                        self.now_us.saturating_add(plan.lag_us).min(ends_us),
                        Action::PartialCut { shape },
                    );
                    self.partial_pending = Some(cut);
                    (
                        lag,
                        format!(
                            "leader {l} isolated, hub {h} (cut off inbound for {}us first)",
                            plan.lag_us
                        ),
                    )
                } else {
                    (cut, format!("leader {l}, hub {h}"))
                }
            }
            PartialShape::Chained => {
                let other = self.partial_pick(1, &[leader])[0];
                let o = id(self, other);
                let cut: BTreeSet<(NodeId, NodeId)> = [(l, o), (o, l)].into_iter().collect();
                (cut, format!("leader {l}, cut from {o}"))
            }
            PartialShape::OpenRaft2080 => {
                let r = self.partial_pick(3, &[leader]);
                let (b, a, c) = (id(self, r[0]), id(self, r[1]), id(self, r[2]));
                let keep = |x: NodeId, y: NodeId| {
                    (x == l && y == b) || (x == b && (y == a || y == c)) || (x == a && y == c)
                };
                let cut = self.all_links_but(keep);
                (
                    cut,
                    format!(
                        "old leader {l}, bridge {b}, {a} and {c} with the bridge, the rest isolated"
                    ),
                )
            }
            PartialShape::OneWay => {
                let ppm = self.rng.between(100_000, 400_000) as u32;
                let mut cut = BTreeSet::new();
                for a in 0..n {
                    for b in 0..n {
                        if a != b && self.rng.chance_ppm(ppm) {
                            cut.insert((id(self, a), id(self, b)));
                        }
                    }
                }
                let mut what = format!("each link down one way with {}%", ppm / 10_000);
                if self.rng.chance_ppm(500_000) {
                    let deaf = self.rng.chance_ppm(500_000);
                    for s in &self.nodes {
                        if s.id != l {
                            cut.insert(if deaf { (s.id, l) } else { (l, s.id) });
                        }
                    }
                    what.push_str(&format!(
                        ", and leader {l} {}",
                        if deaf { "deaf" } else { "mute" }
                    ));
                }
                (cut, what)
            }
        };
        self.trace.record(
            self.now_us,
            TraceEvent::Note(format!(
                "partial connectivity, episode {} of {}: {} ({roles}) until {ends_us}us",
                k + 1,
                plan.episodes,
                shape.name()
            )),
        );
        self.set_blocked(blocked);
        self.partial_check = None;
        if shape != PartialShape::ConstrainedElection {
            self.arm_partial_check(shape, self.now_us);
        }
    }

    /// A constrained election's hub has fallen behind: the quorum-loss shape now.
    pub(super) fn on_partial_cut(&mut self, shape: PartialShape) {
        let Some(cut) = self.partial_pending.take() else {
            return;
        };
        if self.now_us >= self.fault_end_us {
            return;
        }
        self.trace.record(
            self.now_us,
            TraceEvent::Note(format!("partial connectivity: {} shape now", shape.name())),
        );
        self.set_blocked(cut);
        self.arm_partial_check(shape, self.now_us);
    }

    fn set_blocked(&mut self, blocked: BTreeSet<(NodeId, NodeId)>) {
        let before = std::mem::replace(&mut self.blocked, blocked);
        self.links_changed(&before);
        self.report.partition_changes += 1;
        self.trace.record(
            self.now_us,
            TraceEvent::Partition {
                blocked: self.blocked.iter().copied().collect(),
            },
        );
    }

    /// The nodes reachable both ways by a majority of the acceptors (themselves included).
    fn majority_connected(&self) -> (Vec<usize>, usize) {
        let members: Vec<usize> = (0..self.nodes.len())
            .filter(|&i| self.nodes[i].acceptor)
            .collect();
        let majority = members.len() / 2 + 1;
        let connected = members
            .iter()
            .copied()
            .filter(|&x| {
                let a = self.nodes[x].id;
                let both = members
                    .iter()
                    .filter(|&&y| {
                        let b = self.nodes[y].id;
                        y == x
                            || (!self.blocked.contains(&(a, b)) && !self.blocked.contains(&(b, a)))
                    })
                    .count();
                both >= majority
            })
            .collect();
        (connected, majority)
    }

    /// Arms the check of an episode (or of its next window) from `since`, if the protocol
    /// claims it and some node is reachable both ways by a majority.
    fn arm_partial_check(&mut self, shape: PartialShape, episode_start_us: Micros) {
        let Some(bound) = self.cfg.partial_bound_us else {
            return;
        };
        let (connected, majority) = self.majority_connected();
        if connected.is_empty() {
            self.trace.record(
                self.now_us,
                TraceEvent::Note(
                    "partial connectivity: no node reaches a majority; no bound".into(),
                ),
            );
            return;
        }
        let windows = self.partial_check.as_ref().map_or(0, |c| c.windows);
        if windows == 0 {
            self.report.partial_checked += 1;
        }
        self.partial_check = Some(PartialCheck {
            shape,
            episode_start_us,
            since_us: self.now_us,
            deadline_us: self.now_us.saturating_add(bound),
            first_value: self.next_client_value + 1,
            connected,
            majority,
            delivered: BTreeMap::new(),
            decided: false,
            windows,
        });
    }

    /// A delivery during a checked window: counts the values proposed since it began.
    pub(super) fn partial_delivered(&mut self, node: NodeId, d: &abcast_core::Delivery) {
        let Some(c) = self.partial_check.as_mut() else {
            return;
        };
        if c.decided {
            return;
        }
        for v in d.batch.values() {
            let Some(head) = v.payload.get(..8) else {
                continue;
            };
            let mut b = [0u8; 8];
            b.copy_from_slice(head);
            let number = u64::from_le_bytes(b);
            if number < c.first_value {
                continue;
            }
            let at = c.delivered.entry(number).or_default();
            at.insert(node);
            if at.len() >= c.majority {
                c.decided = true;
                break;
            }
        }
    }

    /// After every event of a checked window: once a value of the window is delivered at a
    /// majority while a node reachable by a majority leads, the window passed; the next
    /// one starts.
    pub(super) fn check_partial(&mut self) {
        let Some(c) = self.partial_check.as_ref() else {
            return;
        };
        if !c.decided {
            return;
        }
        let leads = c.connected.iter().any(|&i| {
            self.nodes[i]
                .proto
                .as_ref()
                .is_some_and(|p| p.status().leading)
        });
        if !leads {
            return;
        }
        let took = self.now_us.saturating_sub(c.since_us);
        let (shape, start, first) = (c.shape, c.episode_start_us, c.windows == 0);
        if first {
            let recovered = self.now_us.saturating_sub(start);
            self.report.partial_recover_us_max = self.report.partial_recover_us_max.max(recovered);
            self.trace.record(
                self.now_us,
                TraceEvent::Note(format!(
                    "partial connectivity ({}): a node a majority reaches leads and a new value is decided at a majority, {recovered}us after the episode began",
                    shape.name()
                )),
            );
        }
        self.report.partial_window_us_max = self.report.partial_window_us_max.max(took);
        if let Some(c) = self.partial_check.as_mut() {
            c.windows += 1;
        }
        self.arm_partial_check(shape, start);
    }

    /// The check's deadline passed: the liveness violation, with who leads and who is
    /// reachable.
    pub(super) fn partial_failure(&mut self) -> Box<Violation> {
        let Some(c) = self.partial_check.as_ref() else {
            return self.liveness_violation("partial connectivity");
        };
        let connected: Vec<String> = c
            .connected
            .iter()
            .map(|&i| self.nodes[i].id.to_string())
            .collect();
        let best = c.delivered.values().map(|s| s.len()).max().unwrap_or(0);
        let mut detail = format!(
            "partial connectivity ({}), episode since {}us, window {} since {}us: within {}us, {} [nodes a majority reaches both ways: {}; a value of the window reached at most {} of the {} deliveries needed; node status:",
            c.shape.name(),
            c.episode_start_us,
            c.windows + 1,
            c.since_us,
            c.deadline_us - c.since_us,
            if c.decided {
                "values were decided, but no node a majority reaches leads"
            } else {
                "no value proposed since was delivered at a majority"
            },
            connected.join(" "),
            best,
            c.majority
        );
        for s in &self.nodes {
            match s.proto.as_ref() {
                Some(p) => {
                    let st = p.status();
                    detail.push_str(&format!(
                        " {}: coordinator {:?} leading {} ballot {} delivered_upto {};",
                        s.id,
                        st.coordinator.map(|c| c.0),
                        st.leading,
                        st.ballot,
                        st.delivered_upto
                    ));
                }
                None => detail.push_str(&format!(" {}: down;", s.id)),
            }
        }
        detail.push(']');
        self.violation(Failure::new(
            ViolationKind::PartialConnectivityStall,
            detail,
        ))
    }
}
