//! Skips and the adaptive λ: seed 000 §2.4 ("the coordinator of every ring keeps track of
//! its ring throughput ... compares its actual throughput with λ and issues enough skip
//! messages every time interval Δt to match λ") and §3.1.2.
//!
//! The seed sets λ by hand to 1.5 × the peak value rate × Δt. Here nobody tunes it. The rule,
//! exactly (Δt = `skip_interval_us`, `pct` = `lambda_factor_pct`):
//!
//! **Learners** (only those that follow two or more rings; a learner of one ring never waits
//! for another):
//!
//! 1. *Rate.* Per followed ring, the value slots decided per second (skips, no-ops and
//!    controls excluded, or rings would inflate each other's λ), over windows of Δt; the
//!    rate used is the higher of the last two complete windows. A ring's first window starts
//!    at its first decided value, so the idle time before it does not dilute the first
//!    figure. (A learner that catches up measures its catch-up, not the ring: λ is then
//!    too high for two Δt, which only makes quiet rings skip further ahead.)
//! 2. *Need.* The slot every followed ring must reach for this learner to deliver all it
//!    holds: the highest of 1 + the slot of the last instance of values waiting in a merge
//!    queue, and M × the turn of a decided subscription change not yet reached (0 if
//!    nothing waits). A ring that merely ran ahead with skips queues nothing, so it raises
//!    no need: quiet rings do not chase each other, and idle rings exchange nothing but
//!    their reports and top-ups.
//! 3. *Report* every Δt to the coordinator of every followed ring: the highest rate among
//!    the followed rings and the need (`Report`).
//! 4. *Lag report* at once to the coordinator of a followed ring whose frontier is below the
//!    need (the merge waits for it with another ring's instances queued), if the need grew
//!    since the last report to that ring and that report is at least Δt/4 old: a quiet ring
//!    learns that a burst started elsewhere within one message delay, not up to Δt later.
//!
//! **Coordinators** (per ring, on every tick and on every report received):
//!
//! 5. λ = max(`lambda_min_slots`, ⌈`pct`/100 × the highest rate reported during the
//!    current and the previous Δt × Δt⌉).
//! 6. *Top-up.* Every Δt, if the ring put fewer than λ slots in instances during the last Δt,
//!    one skip for the difference (the seed's rule).
//! 7. *Lag-skip.* With a need reported in the last 4 Δt above the ring's projected frontier
//!    (the frontier decided here, or the target of a lag-skip of the last 4 Δt that is not
//!    decided yet), the coordinator skips to need + λ/2 at once if the ring is *quiet*, or
//!    if it is behind the need by more than λ. Quiet means: the instances of values this
//!    coordinator opened, in the last complete Δt and in the current one, both number fewer
//!    than λ/4 (a coordinator that just took over has opened none, so it is quiet).
//!
//! A busy ring thus never skips because its queue happens to be empty between two batches
//! (busy rings used to chase each other there); it follows the seed's top-up, and skips to
//! the need only when it is far behind (more than λ slots, 1.5 Δt of the busiest traffic),
//! which is how a ring whose coordinator failed catches up after the takeover. A quiet ring
//! runs ahead of the busy one by about λ/2 to λ, so the busy ring's values meet slots already
//! decided when they arrive at the merge, and a burst elsewhere costs one lag report and one
//! skip. Cost: one report per followed ring per Δt per learner, plus lag reports (at most 4
//! per ring per Δt, only while the merge waits); one skip instance per ring per Δt when
//! quiet, plus a lag-skip per burst.

use super::merge::Follow;
use super::messages::{Body, Control, MessageOf, Report};
use super::{Msg, MultiRingConfigOf, MultiRingOf, skip_decree};
use crate::protocol::Outbox;
use crate::ring::ComposableRing;
use crate::types::{Micros, NodeId};

/// Largest skip proposed at once.
const SKIP_MAX_SLOTS: u64 = 1 << 30;

#[derive(Debug, Default)]
pub(crate) struct SkipState {
    // ---- coordinator side -------------------------------------------------------------
    leading: bool,
    last_tick_us: Micros,
    slots_at_tick: u64,
    /// `value_slots_assigned` at the last Δt boundary, and its growth in the Δt before.
    values_at_tick: u64,
    values_prev_dt: u64,
    /// Highest rate reported during this Δt and the previous one.
    demand_cur: u64,
    demand_prev: u64,
    need_slot: u64,
    need_at_us: Micros,
    /// The slot the last lag-skip makes the ring reach, and when it was proposed.
    lag_target: u64,
    lag_at_us: Micros,
    last_control: Option<(NodeId, u64, Micros)>,
    // ---- learner side -----------------------------------------------------------------
    window_start_us: Micros,
    value_slots_at_window: u64,
    rate_prev: u64,
    rate_cur: u64,
    /// The last report sent to this ring's coordinator: when, and the need it carried.
    report_sent_us: Option<Micros>,
    report_need: u64,
}

impl SkipState {
    pub(crate) fn on_report(&mut self, now: Micros, r: &Report) {
        if !self.leading {
            return;
        }
        self.demand_cur = self.demand_cur.max(r.value_slots_per_s);
        if r.need_slot > 0 {
            self.need_slot = self.need_slot.max(r.need_slot);
            self.need_at_us = now;
        }
    }

    /// Whether to propose a learner's control request now: not again while an identical
    /// request proposed a moment ago is still on its way.
    pub(crate) fn should_propose_control<C>(
        &mut self,
        now: Micros,
        c: &Control,
        cfg: &MultiRingConfigOf<C>,
    ) -> bool {
        if let Some((l, n, at)) = self.last_control
            && l == c.learner
            && n == c.nonce
            && now < at + cfg.control_retry_us / 2
        {
            return false;
        }
        self.last_control = Some((c.learner, c.nonce, now));
        true
    }

    /// The first value of the ring was decided here: its rate is measured from now.
    pub(crate) fn on_first_value(&mut self, now: Micros) {
        self.window_start_us = now;
        self.value_slots_at_window = 0;
        self.rate_prev = 0;
        self.rate_cur = 0;
    }

    /// Rule 1 of the module comment.
    fn measured_rate(&self) -> u64 {
        self.rate_prev.max(self.rate_cur)
    }
}

impl<R: ComposableRing> MultiRingOf<R> {
    /// Rings this learner follows now or later (in group order), if it follows two or more:
    /// only such a learner reports.
    fn followed_for_reports(&self) -> Vec<usize> {
        let followed: Vec<usize> = (0..self.slots.len())
            .filter(|&i| matches!(self.merger.rings[i].follow, Follow::On { .. }))
            .collect();
        if followed.len() >= 2 {
            followed
        } else {
            Vec::new()
        }
    }

    /// Rule 2: the slot every followed ring must reach for this learner to deliver all the
    /// values it holds and to apply the subscription changes decided for later turns, or 0.
    fn need_slot(&self) -> u64 {
        let m = self.merger.m;
        let turn = self.merger.turn;
        self.merger
            .rings
            .iter()
            .map(|r| {
                let values = r.queue.back().map_or(0, |e| e.slot + 1);
                let change = match r.follow {
                    Follow::On { from, until } => {
                        let from = if from > turn { from } else { 0 };
                        let until = until.filter(|&u| u > turn).unwrap_or(0);
                        from.max(until).saturating_mul(m)
                    }
                    Follow::Off => 0,
                };
                values.max(change)
            })
            .max()
            .unwrap_or(0)
    }

    fn report(&self, followed: &[usize]) -> Report {
        Report {
            value_slots_per_s: followed
                .iter()
                .map(|&i| self.slots[i].skip.measured_rate())
                .max()
                .unwrap_or(0),
            need_slot: self.need_slot(),
        }
    }

    /// Sends `report` to ring `i`'s coordinator (or hands it to this node's coordinator).
    fn send_report(&mut self, i: usize, report: Report, out: &mut Outbox<Msg<R>>) {
        let now = self.now;
        let s = &mut self.slots[i];
        s.skip.report_sent_us = Some(now);
        s.skip.report_need = report.need_slot;
        if s.ring.is_leading() {
            s.skip.on_report(now, &report);
        } else if let Some(c) = s.ring.coordinator()
            && c != self.me
        {
            out.send(
                c,
                MessageOf {
                    group: s.group,
                    body: Body::Report(report),
                },
            );
        }
    }

    /// Learner reports (rules 1, 3), then each coordinator's skip rule.
    pub(super) fn skip_tick(&mut self, out: &mut Outbox<Msg<R>>) {
        let now = self.now;
        let dt = self.cfg.skip_interval_us;
        for (i, s) in self.slots.iter_mut().enumerate() {
            let st = &mut s.skip;
            if now >= st.window_start_us + dt {
                let v = self.merger.rings[i].value_slots;
                let elapsed = (now - st.window_start_us).max(1);
                st.rate_prev = st.rate_cur;
                st.rate_cur = (v - st.value_slots_at_window).saturating_mul(1_000_000) / elapsed;
                st.value_slots_at_window = v;
                st.window_start_us = now;
            }
        }
        let report_due = now >= self.next_report_us;
        if report_due {
            self.next_report_us = now + dt;
            let followed = self.followed_for_reports();
            if !followed.is_empty() {
                let report = self.report(&followed);
                for &i in &followed {
                    self.send_report(i, report, out);
                }
            }
        }
        for i in 0..self.slots.len() {
            self.coordinator_skip(i, out);
        }
    }

    /// Rule 4, after every input: a lag report to each followed ring the merge waits for.
    pub(super) fn lag_reports(&mut self, out: &mut Outbox<Msg<R>>) {
        let need = self.need_slot();
        if need == 0 {
            return;
        }
        let now = self.now;
        let quarter = self.cfg.skip_interval_us / 4;
        let mut report = None;
        for i in 0..self.slots.len() {
            let q = &self.merger.rings[i];
            let st = &self.slots[i].skip;
            if !matches!(q.follow, Follow::On { .. })
                || q.frontier >= need
                || need <= st.report_need
                || st.report_sent_us.is_some_and(|at| now < at + quarter)
            {
                continue;
            }
            let r = match report {
                Some(r) => r,
                None => {
                    let followed = self.followed_for_reports();
                    if followed.is_empty() {
                        return;
                    }
                    let r = self.report(&followed);
                    report = Some(r);
                    r
                }
            };
            self.send_report(i, r, out);
            self.coordinator_skip(i, out);
        }
    }

    /// Proposes the skip ring `i`'s coordinator owes now, if any.
    pub(super) fn coordinator_skip(&mut self, i: usize, out: &mut Outbox<Msg<R>>) {
        let Some(k) = self.skip_due(i) else {
            return;
        };
        let now = self.now;
        let mut scratch = std::mem::take(&mut self.scratch);
        // Refused only when the ring's meta queue is full: the next Δt tries again.
        let (weight, data) = skip_decree(k.skip);
        let taken = self.slots[i]
            .ring
            .propose_meta(now, weight, data, &mut scratch);
        let assigned = self.slots[i].ring.slots_assigned();
        let st = &mut self.slots[i].skip;
        if taken {
            if k.top_up {
                // The top-up belongs to the Δt that just ended, not to the next one.
                st.slots_at_tick = assigned;
            }
            if let Some(target) = k.lag_target {
                st.lag_target = target;
                st.lag_at_us = now;
            }
        }
        self.absorb(i, &mut scratch, out);
        self.scratch = scratch;
    }

    /// Rules 5 to 7: the skip ring `i`'s coordinator should propose now, if any.
    fn skip_due(&mut self, i: usize) -> Option<SkipDue> {
        let now = self.now;
        let dt = self.cfg.skip_interval_us;
        let frontier = self.merger.rings[i].frontier;
        let s = &mut self.slots[i];
        let st = &mut s.skip;
        if !s.ring.is_leading() {
            st.leading = false;
            return None;
        }
        let assigned = s.ring.slots_assigned();
        let values = s.ring.value_slots_assigned();
        if !st.leading {
            st.leading = true;
            st.last_tick_us = now;
            st.slots_at_tick = assigned;
            st.values_at_tick = values;
            st.values_prev_dt = 0;
            st.demand_cur = 0;
            st.demand_prev = 0;
            st.need_slot = 0;
            st.lag_target = 0;
            return None;
        }
        let demand = st.demand_cur.max(st.demand_prev);
        let lambda = (demand.saturating_mul(self.cfg.lambda_factor_pct) / 100)
            .saturating_mul(dt)
            .div_ceil(1_000_000)
            .max(self.cfg.lambda_min_slots);
        let mut k = 0u64;
        let boundary = now >= st.last_tick_us + dt;
        if boundary {
            let delta = assigned - st.slots_at_tick;
            if delta < lambda {
                k = lambda - delta;
            }
            st.values_prev_dt = values - st.values_at_tick;
            st.values_at_tick = values;
            st.last_tick_us = now;
            st.slots_at_tick = assigned;
            st.demand_prev = st.demand_cur;
            st.demand_cur = 0;
        }
        let values_now = values - st.values_at_tick;
        let quiet = st.values_prev_dt.max(values_now).saturating_mul(4) < lambda;
        let lag_in_flight = st.lag_target > frontier && now < st.lag_at_us + 4 * dt;
        let projected = if lag_in_flight {
            st.lag_target
        } else {
            frontier
        };
        let need_fresh = now <= st.need_at_us + 4 * dt;
        let mut lag_target = None;
        if need_fresh && st.need_slot > projected && (quiet || st.need_slot - projected > lambda) {
            let target = st.need_slot + lambda / 2;
            k = k.max(target - projected);
            lag_target = Some(projected + k);
        }
        if k == 0 || s.ring.meta_queued() > 0 {
            return None;
        }
        let skip = k.min(SKIP_MAX_SLOTS);
        Some(SkipDue {
            skip: skip as u32,
            top_up: boundary,
            lag_target: lag_target.map(|_| projected + skip),
        })
    }
}

/// A skip to propose, and the slot it takes the ring to if it answers a need (rule 7).
struct SkipDue {
    skip: u32,
    /// Proposed at a Δt boundary (it may include the top-up of rule 6).
    top_up: bool,
    lag_target: Option<u64>,
}
