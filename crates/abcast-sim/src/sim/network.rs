//! The simulated network: every message really goes through its wire codec, the fault
//! phase loses, duplicates, delays and partitions messages, and two patterns of real
//! networks that a plain "drop what was addressed to a dead process" model never produces:
//!
//! - **The heavy tail** (`FaultPlan::long_delay_ppm`): a few messages are held 0.5-5 s,
//!   longer than any failure timeout, so a Phase 1b, a vote or a decision of an old ballot
//!   can arrive after two takeovers ([`FaultKind::OutlivesTakeover`] counts those that did).
//! - **Messages across process lives** (`FaultPlan::stale_delivery_ppm`): a message
//!   addressed to a node that crashed since it was sent, or that is down when it arrives,
//!   is sometimes delivered to the node's next life instead of being dropped: kept while
//!   the node is down and flushed when it restarts, as the runtime flushes the queue it
//!   kept for a peer it could not reach. Together with the heavy tail, which delivers a
//!   message after its sender restarted, that is [`FaultKind::CrossIncarnation`].

use super::{Action, Msg, Phase, SimResult, World, decode, encode};
use crate::checker::{Failure, ViolationKind};
use crate::faults::FaultKind;
use crate::plan::PARKED_PER_NODE_MAX;
use crate::trace::{DropReason, TraceEvent};
use abcast_core::config::StartInfo;
use abcast_core::storage::{MemDir, StorageError};
use abcast_core::{NodeId, Protocol};
use bytes::Bytes;

impl<P, F> World<'_, P, F>
where
    P: Protocol,
    F: Fn(NodeId, StartInfo, MemDir) -> Result<P, StorageError>,
{
    pub(super) fn send(&mut self, from: NodeId, to_id: NodeId, kind: u8, body: Bytes) {
        self.report.messages_sent += 1;
        self.report.bytes_sent += body.len() as u64;
        self.trace.record(
            self.now_us,
            TraceEvent::Send {
                from,
                to: to_id,
                kind,
                bytes: body.len(),
            },
        );
        let Some(&to) = self.index.get(&to_id) else {
            self.drop_msg(from, to_id, kind, DropReason::UnknownDestination);
            return;
        };
        if self
            .cfg
            .max_message_bytes
            .is_some_and(|max| body.len() > max)
        {
            self.drop_msg(from, to_id, kind, DropReason::TooLarge);
            return;
        }
        let from_incarnation = self
            .index
            .get(&from)
            .map_or(0, |&f| self.nodes[f].incarnation);
        let sent_ballot_changes = self.ballot_changes;
        let msg = move |body: Bytes, to_epoch| {
            Box::new(Msg {
                from,
                from_incarnation,
                to,
                to_epoch,
                kind,
                body,
                sent_ballot_changes,
                crossed: false,
            })
        };
        let to_epoch = self.nodes[to].epoch;
        if to_id == from {
            // Local delivery: no network, no loss, right after the current event.
            self.schedule(self.now_us, Action::Message(msg(body, to_epoch)));
            return;
        }
        if self.cut(from, to_id) {
            self.drop_msg(from, to_id, kind, DropReason::Partition);
            return;
        }
        if self.rng.chance_ppm(self.loss_ppm) {
            self.drop_msg(from, to_id, kind, DropReason::Loss);
            return;
        }
        let copies = if self.rng.chance_ppm(self.dup_ppm) {
            self.report.messages_duplicated += 1;
            self.trace.record(
                self.now_us,
                TraceEvent::Duplicate {
                    from,
                    to: to_id,
                    kind,
                },
            );
            2
        } else {
            1
        };
        for _ in 0..copies {
            let in_faults = self.phase == Phase::Faults;
            let delay_us = if in_faults && self.rng.chance_ppm(self.plan.long_delay_ppm) {
                self.report.messages_held_long += 1;
                let (lo, hi) = self.plan.long_delay_us;
                self.rng.between(lo, hi)
            } else {
                self.rng
                    .between(self.plan.delay_us_min, self.plan.delay_us_max)
            };
            let mut at_us = self.now_us + delay_us;
            if self.cfg.fifo_links {
                let clock = self.link_clock_us.entry((from, to)).or_insert(0);
                at_us = at_us.max(*clock);
                *clock = at_us;
            }
            self.schedule(at_us, Action::Message(msg(body.clone(), to_epoch)));
        }
    }

    pub(super) fn drop_msg(&mut self, from: NodeId, to: NodeId, kind: u8, why: DropReason) {
        self.report.messages_dropped += 1;
        self.trace.record(
            self.now_us,
            TraceEvent::Drop {
                from,
                to,
                kind,
                why,
            },
        );
    }

    pub(super) fn on_message(&mut self, mut m: Msg) -> SimResult<()> {
        let to = m.to;
        let to_id = self.nodes[to].id;
        let (from, kind) = (m.from, m.kind);
        if self.nodes[to].proto.is_none() || self.nodes[to].epoch != m.to_epoch {
            // Addressed to a life that is over: dropped, or kept for the next one.
            if !self.rng.chance_ppm(self.plan.stale_delivery_ppm) {
                self.drop_msg(from, to_id, kind, DropReason::DestinationDown);
                return Ok(());
            }
            if self.nodes[to].proto.is_none() {
                if self.nodes[to].parked.len() >= PARKED_PER_NODE_MAX {
                    self.drop_msg(from, to_id, kind, DropReason::DestinationDown);
                } else {
                    self.report.messages_parked += 1;
                    self.nodes[to].parked.push(m);
                }
                return Ok(());
            }
            m.to_epoch = self.nodes[to].epoch;
            m.crossed = true;
        }
        let until = self.nodes[to].paused_until_us;
        if self.now_us < until {
            // Frozen: it waits in the inbox, in arrival order, until the process resumes.
            self.schedule(until, Action::Message(Box::new(m)));
            return Ok(());
        }
        if from != to_id && self.cut(from, to_id) {
            self.drop_msg(from, to_id, kind, DropReason::Partition);
            return Ok(());
        }
        let body = m.body;
        let msg = match decode::<P::Message>(kind, &body) {
            Ok(msg) => msg,
            Err(e) => {
                return Err(self.violation(
                    Failure::new(
                        ViolationKind::Decode,
                        format!(
                            "message {from}->{to_id} kind {kind} of {} bytes does not decode: {e}; body starts {:02x?}",
                            body.len(),
                            &body[..body.len().min(32)]
                        ),
                    )
                    .at(to_id, self.nodes[to].incarnation),
                ));
            }
        };
        let (kind_again, body_again) = encode(&msg);
        if kind_again != kind || body_again != body {
            return Err(self.violation(
                Failure::new(
                    ViolationKind::CodecMismatch,
                    format!(
                        "message {from}->{to_id} kind {kind} ({} bytes) decodes to {msg:?}, which encodes to kind \
                         {kind_again} ({} bytes)",
                        body.len(),
                        body_again.len()
                    ),
                )
                .at(to_id, self.nodes[to].incarnation),
            ));
        }
        let sender_restarted = self
            .index
            .get(&from)
            .is_some_and(|&f| self.nodes[f].incarnation > m.from_incarnation);
        if m.crossed || sender_restarted {
            self.report.faults.add(FaultKind::CrossIncarnation, 1);
            self.trace.record(
                self.now_us,
                TraceEvent::Note(format!(
                    "{from}#{} -> {to_id}#{}: kind {kind} crosses a process life ({})",
                    m.from_incarnation,
                    self.nodes[to].incarnation,
                    if m.crossed {
                        "addressed to the destination's earlier life"
                    } else {
                        "its sender restarted since"
                    }
                )),
            );
        }
        if self.ballot_changes >= m.sent_ballot_changes + 2 {
            self.report.faults.add(FaultKind::OutlivesTakeover, 1);
        }
        self.report.messages_delivered += 1;
        self.trace.record(
            self.now_us,
            TraceEvent::Receive {
                from,
                to: to_id,
                kind,
                bytes: body.len(),
            },
        );
        self.trace.detail(|| format!("{msg:?}"));
        self.call(to, |p, now, out| p.receive(now, from, msg, out))?;
        self.call(to, |p, now, out| p.tick(now, out))
    }

    /// A node (re)started: what its peers kept for it while it was down reaches it now, a
    /// network delay apart, as a reconnecting peer flushes its queue.
    pub(super) fn flush_parked(&mut self, i: usize) {
        let parked = std::mem::take(&mut self.nodes[i].parked);
        let epoch = self.nodes[i].epoch;
        for mut m in parked {
            m.to_epoch = epoch;
            m.crossed = true;
            let at = self.now_us
                + self
                    .rng
                    .between(self.plan.delay_us_min, self.plan.delay_us_max);
            self.schedule(at, Action::Message(Box::new(m)));
        }
    }
}
