//! Skips and the adaptive λ: seed 000 §2.4 ("the coordinator of every ring keeps track of
//! its ring throughput ... compares its actual throughput with λ and issues enough skip
//! messages every time interval Δt to match λ") and §3.1.2.
//!
//! The seed sets λ by hand to 1.5 × the peak value rate × Δt. Here nobody tunes it:
//!
//! 1. Every learner that follows two or more rings measures, per ring, the *value* slots
//!    decided per second (skips excluded, or rings would inflate each other's λ), and every
//!    Δt tells each followed ring's coordinator the highest of these rates and the highest
//!    slot frontier among its rings (`Report`).
//! 2. Every Δt a coordinator takes λ = `lambda_factor_pct` % × the highest rate reported in
//!    the last 4 Δt × Δt (at least `lambda_min_slots`), and if its ring put fewer than λ
//!    slots in instances during the last Δt, proposes one skip for the difference.
//! 3. A coordinator with no batch waiting, whose ring is behind the highest frontier a
//!    learner reported, skips there at once, plus λ/2 of headroom, so a learner never waits
//!    a whole Δt for a quiet ring after a burst elsewhere. Open: a busy ring's queue is
//!    often empty between batches, so busy rings can still skip after each other here; a
//!    stricter "quiet" test (no values proposed in the last Δt) broke liveness after
//!    crashes in the simulator and needs more work.
//!
//! So the quiet ring runs ahead of the busy one by about λ, and the busy ring's values meet
//! slots already decided when they arrive at the merge.

use super::messages::{Body, Control, Message, Report};
use super::{MultiRing, MultiRingConfig};
use crate::protocol::Outbox;
use crate::types::{Decree, Micros, NodeId};

/// Largest skip proposed at once.
const SKIP_MAX_SLOTS: u64 = 1 << 30;

#[derive(Debug, Default)]
pub(crate) struct SkipState {
    // ---- coordinator side -------------------------------------------------------------
    leading: bool,
    last_tick_us: Micros,
    slots_at_tick: u64,
    /// Highest rate reported during this Δt and the previous one.
    demand_cur: u64,
    demand_prev: u64,
    need_slot: u64,
    need_at_us: Micros,
    lag_target: u64,
    lag_at_us: Micros,
    last_control: Option<(NodeId, u64, Micros)>,
    // ---- learner side -----------------------------------------------------------------
    window_start_us: Micros,
    value_slots_at_window: u64,
    rate_prev: u64,
    rate_cur: u64,
}

impl SkipState {
    pub(crate) fn on_report(&mut self, now: Micros, r: &Report) {
        if !self.leading {
            return;
        }
        self.demand_cur = self.demand_cur.max(r.value_slots_per_s);
        self.need_slot = self.need_slot.max(r.need_slot);
        self.need_at_us = now;
    }

    /// Whether to propose a learner's control request now: not again while an identical
    /// request proposed a moment ago is still on its way.
    pub(crate) fn should_propose_control(
        &mut self,
        now: Micros,
        c: &Control,
        cfg: &MultiRingConfig,
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

    fn measured_rate(&self) -> u64 {
        self.rate_prev.max(self.rate_cur)
    }
}

impl MultiRing {
    /// Learner reports, then each coordinator's skip rule.
    pub(super) fn skip_tick(&mut self, out: &mut Outbox<Message>) {
        let now = self.now;
        let dt = self.cfg.skip_interval_us;
        // Learner side: measure value rates per ring.
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
        let followed: Vec<usize> = (0..self.slots.len())
            .filter(|&i| matches!(self.merger.rings[i].follow, super::merge::Follow::On { .. }))
            .collect();
        let report_due = now >= self.next_report_us;
        if report_due {
            self.next_report_us = now + dt;
        }
        if followed.len() >= 2 && report_due {
            let report = Report {
                value_slots_per_s: followed
                    .iter()
                    .map(|&i| self.slots[i].skip.measured_rate())
                    .max()
                    .unwrap_or(0),
                need_slot: followed
                    .iter()
                    .map(|&i| self.merger.rings[i].frontier)
                    .max()
                    .unwrap_or(0),
            };
            for &i in &followed {
                let s = &mut self.slots[i];
                if s.ring.is_leading() {
                    s.skip.on_report(now, &report);
                } else if let Some(c) = s.ring.coordinator()
                    && c != self.me
                {
                    out.send(
                        c,
                        Message {
                            group: s.group,
                            body: Body::Report(report),
                        },
                    );
                }
            }
        }
        // Coordinator side.
        let mut scratch = std::mem::take(&mut self.scratch);
        for i in 0..self.slots.len() {
            if let Some(k) = self.skip_due(i) {
                // Refused only when the ring's meta queue is full: the next Δt tries again.
                self.slots[i]
                    .ring
                    .propose_meta(now, Decree::Skip(k), &mut scratch);
                self.slots[i].skip.slots_at_tick = self.slots[i].ring.slots_assigned();
                self.absorb(i, &mut scratch, out);
            }
        }
        self.scratch = scratch;
    }

    /// The skip ring `i`'s coordinator should propose now, if any.
    fn skip_due(&mut self, i: usize) -> Option<u32> {
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
        if !st.leading {
            st.leading = true;
            st.last_tick_us = now;
            st.slots_at_tick = assigned;
            st.demand_cur = 0;
            st.demand_prev = 0;
            st.need_slot = 0;
            return None;
        }
        let demand = st.demand_cur.max(st.demand_prev);
        let lambda = (demand.saturating_mul(self.cfg.lambda_factor_pct) / 100)
            .saturating_mul(dt)
            .div_ceil(1_000_000)
            .max(self.cfg.lambda_min_slots);
        let mut k = 0u64;
        if now >= st.last_tick_us + dt {
            let delta = assigned - st.slots_at_tick;
            if delta < lambda {
                k = lambda - delta;
            }
            st.last_tick_us = now;
            st.slots_at_tick = assigned;
            st.demand_prev = st.demand_cur;
            st.demand_cur = 0;
        }
        let need_fresh = now <= st.need_at_us + 4 * dt;
        let lag_in_flight = st.lag_target > frontier && now < st.lag_at_us + 4 * dt;
        if need_fresh
            && st.need_slot > frontier
            && s.ring.coordinator_queue_empty()
            && !lag_in_flight
        {
            k = k.max(st.need_slot - frontier + lambda / 2);
            st.lag_target = st.need_slot;
            st.lag_at_us = now;
        }
        if k == 0 || s.ring.meta_queued() > 0 {
            return None;
        }
        Some(k.min(SKIP_MAX_SLOTS) as u32)
    }
}
