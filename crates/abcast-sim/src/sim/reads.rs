//! Linearizable reads (`SimConfig::reads_per_s`): the load issues `Protocol::read_index`
//! barriers at random times to random live nodes, and the checker holds every answer to
//! what was acknowledged before the read was issued.
//!
//! A read remembers how many values were acknowledged when it was first issued
//! (`Checker::acked_len`); a `NotLeader { hint }` sends it on to the hinted node (to a
//! random one without a hint), a `Busy` to a random node a little later, at most
//! `READ_ATTEMPTS_MAX` times; `Unsupported` switches reads off for the run (a protocol
//! without a barrier of its own). When its `ReadState { id, upto }` comes out of a node's
//! outbox, the read waits until that node incarnation has delivered up to `upto`
//! (`Status::delivered_upto`, with no delivery of its still held behind a group commit),
//! then every value acknowledged before the read must be in the common sequence at or
//! below `upto` ([`crate::ViolationKind::StaleRead`]). A node that crashes first takes its
//! reads with it. The reads draw from a random stream of their own, so a protocol that
//! refuses them runs exactly as it did without them.

use super::{Action, SimResult, World};
use crate::checker::{Failure, ViolationKind};
use crate::rng::SimRng;
use crate::trace::TraceEvent;
use abcast_core::config::StartInfo;
use abcast_core::storage::{MemDir, StorageError};
use abcast_core::{Instance, Micros, NodeId, ProposeError, Protocol, ReadState};
use std::collections::BTreeMap;

/// The id of the probe read (see [`World::probe_reads`]); the load's reads count from 1.
const PROBE_READ_ID: u64 = 0;

/// A read is offered this many times at most (redirections and `Busy` included).
const READ_ATTEMPTS_MAX: u32 = 50;

/// Seeds the reads' stream: another sequence than the main one of the same seed.
const READ_STREAM: u64 = 0x5EAD_1DE7_0000_0001;

/// A read on its way to a node that will take it.
#[derive(Clone, Copy, Debug)]
pub(super) struct ReadRetry {
    id: u64,
    acked_len: usize,
    to: Option<NodeId>,
    attempts: u32,
}

#[derive(Clone, Copy, Debug)]
struct Asked {
    node: usize,
    incarnation: u64,
    acked_len: usize,
}

#[derive(Clone, Copy, Debug)]
struct Answered {
    id: u64,
    node: usize,
    incarnation: u64,
    acked_len: usize,
    upto: Instance,
}

/// The reads' state in one run.
pub(super) struct Reads {
    rng: SimRng,
    /// Reads are on (`reads_per_s > 0`) and the protocol has not refused one as
    /// `Unsupported`.
    pub(super) on: bool,
    next_id: u64,
    /// Reads a node took (`read_index` returned `Ok`), not answered yet.
    asked: BTreeMap<u64, Asked>,
    /// Reads answered, waiting for their learner to deliver up to `upto`.
    answered: Vec<Answered>,
}

impl Reads {
    pub(super) fn new(seed: u64, reads_per_s: u32) -> Reads {
        Reads {
            rng: SimRng::new(seed ^ READ_STREAM),
            on: reads_per_s > 0,
            next_id: 0,
            asked: BTreeMap::new(),
            answered: Vec::new(),
        }
    }

    pub(super) fn waiting_at(&self, i: usize) -> bool {
        self.answered.iter().any(|a| a.node == i)
    }
}

impl<P, F> World<'_, P, F>
where
    P: Protocol,
    F: Fn(NodeId, StartInfo, MemDir) -> Result<P, StorageError>,
{
    /// Whether the protocol answers reads at all: one `read_index` at the first node
    /// started, right after its first tick. `Unsupported` switches reads off before a single
    /// read event is queued, so a protocol without a barrier runs exactly as it did without
    /// reads (the event queue's layout, which the heavy tail's holds iterate, included).
    /// Any other answer keeps them on; an answer to the probe itself is ignored.
    pub(super) fn probe_reads(&mut self) -> SimResult<()> {
        if !self.reads.on {
            return Ok(());
        }
        let Some(i) = (0..self.nodes.len()).find(|&i| self.nodes[i].proto.is_some()) else {
            return Ok(());
        };
        let mut result = None;
        self.call(i, |p, now, out| {
            result = Some(p.read_index(now, PROBE_READ_ID, out));
        })?;
        if let Some(Err(ProposeError::Unsupported { .. })) = result {
            self.reads.on = false;
        }
        Ok(())
    }

    /// The next read, if reads are on and it comes before the load ends (the first of the
    /// run, or of the load after the faults-remain phase).
    pub(super) fn schedule_next_read(&mut self) {
        if self.reads.on {
            let gap = self.read_gap_us();
            self.schedule_read(self.now_us + gap, None);
        }
    }

    /// A read event at `at`, only before the load ends: an event after it would move the
    /// moment the run checks its convergence (after every event from then on), and so
    /// change the run of a protocol that refuses reads.
    fn schedule_read(&mut self, at: Micros, retry: Option<ReadRetry>) {
        if at < self.load_end_us {
            self.schedule(at, Action::Read { retry });
        }
    }

    fn read_gap_us(&mut self) -> Micros {
        let mean_us = 1_000_000 / u64::from(self.cfg.reads_per_s.max(1));
        self.reads.rng.between(0, 2 * mean_us).max(1)
    }

    /// A read is issued (a new one, or one redirected or refused before).
    pub(super) fn on_read(&mut self, retry: Option<ReadRetry>) -> SimResult<()> {
        if !self.reads.on || self.now_us >= self.load_end_us {
            return Ok(());
        }
        let retry = match retry {
            Some(r) => r,
            None => {
                self.schedule_next_read();
                self.reads.next_id += 1;
                ReadRetry {
                    id: self.reads.next_id,
                    acked_len: self.checker.acked_len(),
                    to: None,
                    attempts: 0,
                }
            }
        };
        if retry.attempts >= READ_ATTEMPTS_MAX {
            return Ok(());
        }
        let live = self.live_nodes();
        let hinted = retry
            .to
            .and_then(|n| self.index.get(&n).copied())
            .filter(|i| live.contains(i));
        let Some(i) = hinted.or_else(|| self.reads.rng.pick(&live).copied()) else {
            let at = self.now_us + self.cfg.busy_retry_us.max(1);
            let again = ReadRetry {
                to: None,
                attempts: retry.attempts + 1,
                ..retry
            };
            self.schedule_read(at, Some(again));
            return Ok(());
        };
        let (id, incarnation) = (self.nodes[i].id, self.nodes[i].incarnation);
        // Taken before the call: the answer may come out of the same outbox.
        self.reads.asked.insert(
            retry.id,
            Asked {
                node: i,
                incarnation,
                acked_len: retry.acked_len,
            },
        );
        let mut result = None;
        let read_id = retry.id;
        self.call(i, |p, now, out| {
            result = Some(p.read_index(now, read_id, out));
        })?;
        let again = |to: Option<NodeId>| ReadRetry {
            to,
            attempts: retry.attempts + 1,
            ..retry
        };
        match result {
            Some(Ok(())) => {
                self.report.reads_issued += 1;
                return Ok(());
            }
            Some(Err(ProposeError::NotLeader { hint })) => {
                let at = self.now_us + if hint.is_some() { 1_000 } else { 5_000 };
                self.schedule_read(at, Some(again(hint.filter(|&h| h != id))));
            }
            Some(Err(ProposeError::Busy)) | None => {
                let at = self.now_us + self.cfg.busy_retry_us.max(1);
                self.schedule_read(at, Some(again(None)));
            }
            Some(Err(ProposeError::Unsupported { .. })) => {
                self.reads.on = false;
            }
            Some(Err(e)) => {
                self.trace.record(
                    self.now_us,
                    TraceEvent::Note(format!("read {read_id} at {id} refused: {e}")),
                );
            }
        }
        self.reads.asked.remove(&read_id);
        Ok(())
    }

    /// A `ReadState` came out of node `i`'s outbox.
    pub(super) fn read_answered(&mut self, i: usize, r: &ReadState) -> SimResult<()> {
        if r.id == PROBE_READ_ID {
            return Ok(());
        }
        let (id, incarnation) = (self.nodes[i].id, self.nodes[i].incarnation);
        self.trace.record(
            self.now_us,
            TraceEvent::Note(format!("{id}: read {} answered, upto {}", r.id, r.upto)),
        );
        let asked = match self.reads.asked.get(&r.id) {
            Some(a) if a.node == i && a.incarnation == incarnation => *a,
            other => {
                let why = match other {
                    Some(a) => format!(
                        "it was asked of {}#{}",
                        self.nodes[a.node].id, a.incarnation
                    ),
                    None => "it was never asked, or was answered before".to_string(),
                };
                return Err(self.violation(
                    Failure::new(
                        ViolationKind::StaleRead,
                        format!("answers read {} (upto {}), but {why}", r.id, r.upto),
                    )
                    .at(id, incarnation),
                ));
            }
        };
        self.reads.asked.remove(&r.id);
        self.report.reads_answered += 1;
        self.reads.answered.push(Answered {
            id: r.id,
            node: i,
            incarnation,
            acked_len: asked.acked_len,
            upto: r.upto,
        });
        Ok(())
    }

    /// The answered reads of node `i` whose learner has now delivered up to their `upto`
    /// are checked; those of an earlier life are dropped.
    pub(super) fn check_reads(&mut self, i: usize) -> SimResult<()> {
        let incarnation = self.nodes[i].incarnation;
        let Some(p) = self.nodes[i].proto.as_ref() else {
            return Ok(());
        };
        // Deliveries held behind a group commit have not reached the checker.
        let pipe = &self.pipes[i];
        if !pipe.in_flight.is_empty() || !pipe.gather.deliveries.is_empty() {
            return Ok(());
        }
        let delivered_upto = p.status().delivered_upto;
        let id = self.nodes[i].id;
        let mut k = 0;
        while k < self.reads.answered.len() {
            let a = self.reads.answered[k];
            if a.node != i || (a.incarnation == incarnation && delivered_upto < a.upto) {
                k += 1;
                continue;
            }
            self.reads.answered.swap_remove(k);
            if a.incarnation != incarnation {
                continue;
            }
            self.report.reads_checked += 1;
            self.checker
                .check_read(id, incarnation, a.id, a.acked_len, a.upto)
                .map_err(|f| self.violation(f))?;
        }
        Ok(())
    }
}
