//! The proposer's side of every protocol (seed 000 §3.1.1, seed 003 §4.3: "Phase 2 is
//! executed for a batch of proposed values"): values are batched into one instance, bounded
//! by `batch_max_bytes` and `batch_linger_us` (a batch leaves at once while fewer than two are
//! in flight, so low load sees no batching delay and batches fill up under load); a bounded
//! window of values is in flight (`window_values`, `window_bytes`; when it is full `propose`
//! answers `Busy`); a batch not decided in time, or in flight when the coordinator
//! changes, is offered again under the same ids. Each protocol only decides
//! where a ready batch goes (U-Ring: along the ring; Ring Paxos: to the coordinator).
//!
//! Value ids (`ValueId = (node, seq)`) must never repeat across the lives of a node: learners
//! tell batches apart by `(origin, first_seq)`, so a reused id is acknowledged and never
//! delivered. Each process life owns one range of seqs, `[k << LIFE_SEQ_BITS, (k + 1) <<
//! LIFE_SEQ_BITS)` for incarnation `k` (`config::StartInfo::start_seq_for`), and the batcher
//! refuses a value past its range's end (`ProposeError::IdsExhausted`) rather than step into
//! the next life's ids.

use crate::ProposeError;
use crate::protocol::Ack;
use crate::types::{Batch, BatchBuilder, BatchKey, Micros, NodeId, UniformRun, ValueId, Values};
use bytes::Bytes;
use std::collections::BTreeMap;

/// A batch leaves at once while fewer than this many batches are in flight.
const EAGER_BATCHES_IN_FLIGHT: usize = 2;

/// Bits of a seq that number the values of one process life; the bits above name the life
/// (its incarnation, see `config::StartInfo::start_seq_for`). One life may propose 2^40 ≈
/// 1.1e12 values.
pub const LIFE_SEQ_BITS: u32 = 40;

/// The end (exclusive) of the id range of the life that owns `start_seq`: the next multiple
/// of 2^40 above it, or `u64::MAX` for the last range of the `u64` space (whose last seq is
/// then never used).
pub const fn life_seq_end(start_seq: u64) -> u64 {
    match ((start_seq >> LIFE_SEQ_BITS) + 1).checked_mul(1 << LIFE_SEQ_BITS) {
        Some(end) => end,
        None => u64::MAX,
    }
}

/// The proposer's limits, taken from a protocol's configuration.
#[derive(Clone, Copy, Debug)]
pub struct BatchLimits {
    pub batch_max_bytes: usize,
    pub batch_linger_us: Micros,
    pub window_values: usize,
    pub window_bytes: usize,
    pub max_value_bytes: usize,
    pub value_resend_us: Micros,
}

#[derive(Debug)]
struct InFlight {
    batch: Batch,
    sent_us: Micros,
    /// When it first left, and how often it was re-sent (its timeout doubles each time).
    first_sent_us: Micros,
    resends: u32,
}

/// The re-send timeout, adapted to the measured decision latency as TCP adapts its
/// retransmission timeout to the round-trip time (RFC 6298, Karn's rule: only batches sent
/// once are sampled): `srtt + 4 rttvar`, between `value_resend_us / 16` and
/// `value_resend_us`, doubled after each scan that had to re-send and reset by the next
/// decision of one of ours (TCP backs off per connection, not per segment: a batch that was
/// unlucky before must not wait longer than the others once the path works again).
///
/// Why: a batch lost on its way to the coordinator (a partition, a connection that broke
/// with frames queued, a successor that died with it) used to wait the full
/// `value_resend_us` (2 s; URingPaxos waits 20 s) before anyone noticed; the simulator's
/// faults-remain phase, which bounds recovery by a few failure timeouts, found those values
/// stuck. With decisions taking milliseconds, the timeout now is 125 ms at the defaults,
/// and it grows by itself when the cluster is loaded and decisions take longer. A re-sent
/// batch the coordinator already holds is not proposed twice (it keeps the keys it queued
/// or opened), and one decided meanwhile is answered with its decision.
#[derive(Clone, Copy, Debug, Default)]
struct ResendTimer {
    srtt_us: Micros,
    rttvar_us: Micros,
    sampled: bool,
    /// Re-sending scans since the last decision of one of ours (at most `BACKOFF_MAX`).
    backoff: u32,
}

/// The timeout doubles at most this many times while nothing of ours is decided.
const BACKOFF_MAX: u32 = 4;

impl ResendTimer {
    fn sample(&mut self, rtt_us: Micros) {
        if !self.sampled {
            self.sampled = true;
            self.srtt_us = rtt_us;
            self.rttvar_us = rtt_us / 2;
            return;
        }
        let err = self.srtt_us.abs_diff(rtt_us);
        self.rttvar_us = (3 * self.rttvar_us + err) / 4;
        self.srtt_us = (7 * self.srtt_us + rtt_us) / 8;
    }

    /// The timeout now.
    fn timeout_us(&self, max_us: Micros) -> Micros {
        let min_us = (max_us / 16).max(1);
        let base = if self.sampled {
            self.srtt_us.saturating_add(4 * self.rttvar_us)
        } else {
            max_us
        };
        base.clamp(min_us, max_us)
            .saturating_mul(1 << self.backoff.min(BACKOFF_MAX))
            .min(max_us)
    }
}

/// Batches ready to leave after one `propose`: the open batch closed early, then the value's
/// own batch (at most two, so the per-value path allocates nothing here).
pub type Ready = [Option<Batch>; 2];

#[derive(Debug)]
pub struct Batcher {
    me: NodeId,
    next_seq: u64,
    /// First seq this life must not use: it belongs to the next life (`life_seq_end`).
    seq_end: u64,
    open: Option<BatchBuilder>,
    open_since_us: Micros,
    in_flight: BTreeMap<u64, InFlight>,
    values_in_flight: usize,
    bytes_in_flight: usize,
    /// Last scan of `in_flight` for re-sends (every `value_resend_us / 32`).
    last_resend_scan_us: Micros,
    resend: ResendTimer,
}

impl Batcher {
    /// A proposer whose ids start at `start_seq` and end where its life's range ends
    /// (`life_seq_end`).
    pub fn new(me: NodeId, start_seq: u64) -> Batcher {
        Batcher::with_seq_end(me, start_seq, life_seq_end(start_seq))
    }

    /// A proposer that hands out seqs from `start_seq` (at least 1) up to, not including,
    /// `seq_end`; past it `propose` answers `IdsExhausted`.
    pub fn with_seq_end(me: NodeId, start_seq: u64, seq_end: u64) -> Batcher {
        let next_seq = start_seq.max(1);
        debug_assert!(
            next_seq <= seq_end,
            "an id range that ends before it starts"
        );
        Batcher {
            me,
            next_seq,
            seq_end,
            open: None,
            open_since_us: 0,
            in_flight: BTreeMap::new(),
            values_in_flight: 0,
            bytes_in_flight: 0,
            last_resend_scan_us: 0,
            resend: ResendTimer::default(),
        }
    }

    /// Values proposed and not yet decided, including the open batch.
    pub fn values_in_flight(&self) -> usize {
        self.values_in_flight + self.open.as_ref().map_or(0, |b| b.len())
    }

    fn bytes_total(&self) -> usize {
        self.bytes_in_flight + self.open.as_ref().map_or(0, |b| b.payload_bytes())
    }

    pub fn has_room(&self, l: &BatchLimits) -> bool {
        self.values_in_flight() < l.window_values && self.bytes_total() < l.window_bytes
    }

    /// The keys of the batches in flight (sent, not yet decided), oldest first: a learner
    /// that installs a snapshot acknowledges those the snapshot decided.
    pub fn in_flight_keys(&self) -> Vec<BatchKey> {
        self.in_flight
            .keys()
            .map(|&first_seq| BatchKey {
                origin: self.me,
                first_seq,
            })
            .collect()
    }

    /// The decision of a batch key, learned at `now`: acknowledges it if it is ours and
    /// still in flight.
    pub fn on_decided(&mut self, key: BatchKey, now: Micros) -> Option<Ack> {
        if key.origin != self.me {
            return None;
        }
        let f = self.in_flight.remove(&key.first_seq)?;
        if f.resends == 0 {
            self.resend.sample(now.saturating_sub(f.first_sent_us));
        }
        self.resend.backoff = 0;
        self.values_in_flight -= f.batch.len();
        self.bytes_in_flight -= f.batch.payload_bytes();
        Some(Ack {
            key,
            count: f.batch.len() as u32,
        })
    }

    fn track(&mut self, b: &Batch, now: Micros) {
        self.values_in_flight += b.len();
        self.bytes_in_flight += b.payload_bytes();
        self.in_flight.insert(
            b.first_seq(),
            InFlight {
                batch: b.clone(),
                sent_us: now,
                first_sent_us: now,
                resends: 0,
            },
        );
    }

    fn close_open(&mut self, now: Micros) -> Option<Batch> {
        let b = self.open.take()?.finish();
        self.track(&b, now);
        Some(b)
    }

    /// The open batch, started at `next_seq` if there is none.
    fn open_batch(&mut self, now: Micros, l: &BatchLimits) -> &mut BatchBuilder {
        if self.open.is_none() {
            self.open_since_us = now;
        }
        let (me, first) = (self.me, self.next_seq);
        self.open
            .get_or_insert_with(|| BatchBuilder::new(me, first, l.batch_max_bytes.min(1 << 20)))
    }

    /// Seqs this life can still hand out.
    pub fn seqs_left(&self) -> u64 {
        self.seq_end.saturating_sub(self.next_seq)
    }

    /// Takes one value: its id, and the batches that must leave now, in order.
    pub fn propose(
        &mut self,
        now: Micros,
        payload: Bytes,
        l: &BatchLimits,
    ) -> Result<(ValueId, Ready), ProposeError> {
        if payload.len() > l.max_value_bytes {
            return Err(ProposeError::TooLarge {
                bytes: payload.len(),
                max_bytes: l.max_value_bytes,
            });
        }
        if self.next_seq >= self.seq_end {
            // Permanent for this life: checked before `Busy`, which asks for a retry.
            return Err(ProposeError::IdsExhausted {
                seq_end: self.seq_end,
            });
        }
        if !self.has_room(l) {
            return Err(ProposeError::Busy);
        }
        let id = ValueId {
            node: self.me,
            seq: self.next_seq,
        };
        if payload.len() >= l.batch_max_bytes / 2 {
            // A value that fills a batch on its own travels without being copied.
            let before = self.close_open(now);
            self.next_seq += 1;
            debug_assert!(self.next_seq <= self.seq_end, "a seq past the life's range");
            let b = Batch::single(id, payload);
            self.track(&b, now);
            return Ok((id, [before, Some(b)]));
        }
        let open = self.open_batch(now, l);
        let pushed = open.push(&payload);
        let full = open.payload_bytes() >= l.batch_max_bytes;
        debug_assert_eq!(pushed, id, "the open batch numbers values from next_seq");
        self.next_seq += 1;
        debug_assert!(self.next_seq <= self.seq_end, "a seq past the life's range");
        let ready = if full { self.close_open(now) } else { None };
        Ok((id, [ready, None]))
    }

    /// Takes `values` in order, as [`Batcher::propose`] on each would (the same checks,
    /// the same batches), in one call: the driver's load generator and a client's frame of
    /// values pay the per-call costs of the layers above once per run instead of once per
    /// value. Returns the first id and how many were taken; their ids are consecutive. It
    /// stops at the first value refused, which is returned as the error only when it is the
    /// first. Batches that must leave now are appended to `ready`, in order.
    pub fn propose_many(
        &mut self,
        now: Micros,
        values: Values<'_>,
        l: &BatchLimits,
        ready: &mut Vec<Batch>,
    ) -> Result<(ValueId, usize), ProposeError> {
        match values {
            Values::Uniform(run)
                if run.value_bytes() <= l.max_value_bytes
                    && run.value_bytes() < l.batch_max_bytes / 2 =>
            {
                self.propose_uniform(now, run, l, ready)
            }
            // Values that travel alone or are refused as too large, and a client's values:
            // one by one.
            _ => {
                let first = ValueId {
                    node: self.me,
                    seq: self.next_seq,
                };
                let mut taken = 0;
                for i in 0..values.len() {
                    let Some(payload) = values.get(i) else {
                        break;
                    };
                    match self.propose(now, payload, l) {
                        Ok((id, r)) => {
                            debug_assert_eq!(id.seq, first.seq + taken as u64, "consecutive ids");
                            ready.extend(r.into_iter().flatten());
                            taken += 1;
                        }
                        Err(e) if taken == 0 => return Err(e),
                        Err(_) => break,
                    }
                }
                Ok((first, taken))
            }
        }
    }

    /// [`Batcher::propose_many`] for small values of one size: instead of checking the
    /// window and the open batch before each value, it works out how many values `propose`
    /// would take before one of its checks changes (the window's values and bytes, the
    /// life's ids, the open batch filling up) and appends them in one copy.
    fn propose_uniform(
        &mut self,
        now: Micros,
        run: &UniformRun,
        l: &BatchLimits,
        ready: &mut Vec<Batch>,
    ) -> Result<(ValueId, usize), ProposeError> {
        let vb = run.value_bytes();
        debug_assert!(vb < l.batch_max_bytes / 2 && vb <= l.max_value_bytes);
        let first = ValueId {
            node: self.me,
            seq: self.next_seq,
        };
        let mut taken = 0;
        // Bounded: every round takes at least one value, or stops.
        while taken < run.count() {
            let refusal = if self.next_seq >= self.seq_end {
                Some(ProposeError::IdsExhausted {
                    seq_end: self.seq_end,
                })
            } else if !self.has_room(l) {
                Some(ProposeError::Busy)
            } else {
                None
            };
            if let Some(e) = refusal {
                if taken == 0 {
                    return Err(e);
                }
                break;
            }
            // `propose` takes value j of this round while `values_in_flight + j <
            // window_values`, `bytes_total + j * vb < window_bytes`, ids last, and closes
            // the open batch after the value that brings it to `batch_max_bytes`.
            let room_values = l.window_values - self.values_in_flight();
            let room_bytes = match vb {
                0 => usize::MAX,
                _ => (l.window_bytes - self.bytes_total()).div_ceil(vb),
            };
            let ids = usize::try_from(self.seq_end - self.next_seq).unwrap_or(usize::MAX);
            let open_bytes = self.open.as_ref().map_or(0, BatchBuilder::payload_bytes);
            let to_full = match vb {
                0 => usize::MAX,
                _ => l
                    .batch_max_bytes
                    .saturating_sub(open_bytes)
                    .div_ceil(vb)
                    .max(1),
            };
            let k = (run.count() - taken)
                .min(room_values)
                .min(room_bytes)
                .min(ids)
                .min(to_full);
            assert!(k >= 1, "a round with room takes a value");
            let next_seq = self.next_seq;
            let open = self.open_batch(now, l);
            debug_assert_eq!(
                open.first_seq() + open.len() as u64,
                next_seq,
                "the open batch numbers values from next_seq"
            );
            let data = &run.data()[taken * vb..(taken + k) * vb];
            open.push_uniform(data, vb, k);
            let full = open.payload_bytes() >= l.batch_max_bytes;
            self.next_seq += k as u64;
            assert!(self.next_seq <= self.seq_end, "a seq past the life's range");
            taken += k;
            if full {
                ready.extend(self.close_open(now));
            }
        }
        Ok((first, taken))
    }

    /// Time passes: batches to (re-)send, in order. Everything in flight is re-sent when the
    /// coordinator changed, the rest when their re-send timeout ran out ([`ResendTimer`]); the open batch closes when few
    /// batches are in flight or it lingered `batch_linger_us`.
    pub fn tick(
        &mut self,
        now: Micros,
        coordinator_changed: bool,
        l: &BatchLimits,
        to_send: &mut Vec<Batch>,
    ) {
        if coordinator_changed || now >= self.last_resend_scan_us + l.value_resend_us / 32 {
            self.last_resend_scan_us = now;
            let timeout_us = self.resend.timeout_us(l.value_resend_us);
            let mut timed_out = false;
            for f in self.in_flight.values_mut() {
                let due = now >= f.sent_us + timeout_us;
                timed_out |= due;
                if coordinator_changed || due {
                    f.sent_us = now;
                    f.resends = f.resends.saturating_add(1);
                    to_send.push(f.batch.clone());
                }
            }
            if timed_out {
                self.resend.backoff = (self.resend.backoff + 1).min(BACKOFF_MAX);
            }
        }
        if let Some(open) = self.open.as_ref()
            && !open.is_empty()
            && (self.in_flight.len() < EAGER_BATCHES_IN_FLIGHT
                || now >= self.open_since_us + l.batch_linger_us)
        {
            to_send.extend(self.close_open(now));
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_value_larger_than_the_byte_window_goes_alone_then_the_window_is_full() {
        let l = BatchLimits {
            batch_max_bytes: 32 << 10,
            batch_linger_us: 200,
            window_values: 1000,
            window_bytes: 64 << 10,
            max_value_bytes: 1 << 20,
            value_resend_us: 1_000_000,
        };
        let mut b = Batcher::new(NodeId(0), 1);
        let big = Bytes::from(vec![1u8; 512 << 10]);
        let (id, ready) = b.propose(0, big, &l).expect("an empty window admits it");
        assert_eq!(id.seq, 1);
        assert!(
            ready.iter().flatten().count() == 1,
            "it fills its batch at once"
        );
        assert_eq!(
            b.propose(0, Bytes::from_static(b"x"), &l).unwrap_err(),
            ProposeError::Busy,
            "nothing more until it is decided"
        );
        let over = Bytes::from(vec![0u8; (1 << 20) + 1]);
        assert!(matches!(
            Batcher::new(NodeId(0), 1).propose(0, over, &l),
            Err(ProposeError::TooLarge { .. })
        ));
    }

    fn limits() -> BatchLimits {
        BatchLimits {
            batch_max_bytes: 32 << 10,
            batch_linger_us: 200,
            window_values: 1000,
            window_bytes: 64 << 10,
            max_value_bytes: 1 << 20,
            value_resend_us: 1_000_000,
        }
    }

    #[test]
    fn a_run_of_values_makes_the_batches_one_by_one_proposals_make() {
        let l = BatchLimits {
            batch_max_bytes: 1000,
            window_values: 5000,
            ..limits()
        };
        let payloads: Vec<Bytes> = (0..3000u32)
            .map(|i| Bytes::from(vec![i as u8; (i % 60) as usize]))
            .collect();
        let mut one = Batcher::new(NodeId(2), 7);
        let mut one_ready = Vec::new();
        let mut taken_one = 0;
        for p in &payloads {
            match one.propose(0, p.clone(), &l) {
                Ok((_, r)) => {
                    one_ready.extend(r.into_iter().flatten());
                    taken_one += 1;
                }
                Err(e) => {
                    assert_eq!(e, ProposeError::Busy);
                    break;
                }
            }
        }
        let mut many = Batcher::new(NodeId(2), 7);
        let mut many_ready = Vec::new();
        let mut taken_many = 0;
        for run in payloads.chunks(333) {
            match many.propose_many(0, Values::Each(run), &l, &mut many_ready) {
                Ok((first, n)) => {
                    assert_eq!(first.seq, 7 + taken_many as u64, "consecutive ids");
                    taken_many += n;
                    if n < run.len() {
                        break;
                    }
                }
                Err(e) => {
                    assert_eq!(e, ProposeError::Busy, "the first value refused");
                    break;
                }
            }
        }
        assert!(taken_one < payloads.len(), "the byte window stops both");
        assert_eq!(taken_many, taken_one);
        assert_eq!(many_ready, one_ready, "the same batches");
        assert_eq!(
            many.propose_many(0, Values::Each(&payloads[..1]), &l, &mut many_ready),
            Err(ProposeError::Busy),
            "a refusal of the first value is the error"
        );
    }

    #[test]
    fn a_uniform_run_makes_the_batches_and_refusals_one_by_one_proposals_make() {
        // Sizes on both sides of every check: empty values, values that fill a batch
        // exactly, the largest that still share one, one that travels alone, one too big.
        for vb in [0, 1, 16, 100, 250, 499, 500, 2000] {
            for (window_values, window_bytes, start) in [
                (5000, 64 << 10, 7),
                (37, 64 << 10, 7),
                (5000, 3333, 7),
                (5000, 64 << 10, (2 << 40) - 50),
            ] {
                let l = BatchLimits {
                    batch_max_bytes: 1000,
                    window_values,
                    window_bytes,
                    max_value_bytes: 1500,
                    ..limits()
                };
                let count = 3000;
                let data: Vec<u8> = (0..vb * count).map(|i| (i % 251) as u8).collect();
                let run = UniformRun::new(Bytes::from(data), vb, count).expect("sizes add up");
                let mut one = Batcher::new(NodeId(1), start);
                let mut one_ready = Vec::new();
                let mut one_refusal = None;
                for i in 0..count {
                    match one.propose(0, run.get(i).expect("in the run"), &l) {
                        Ok((_, r)) => one_ready.extend(r.into_iter().flatten()),
                        Err(e) => {
                            one_refusal = Some(e);
                            break;
                        }
                    }
                }
                let mut many = Batcher::new(NodeId(1), start);
                let mut many_ready = Vec::new();
                let what = format!("vb {vb} window {window_values}/{window_bytes} start {start}");
                match many.propose_many(0, Values::Uniform(&run), &l, &mut many_ready) {
                    Ok((first, n)) => {
                        assert_eq!(first.seq, start, "{what}");
                        assert_eq!(n as u64, one.next_seq - start, "{what}: taken");
                    }
                    Err(e) => {
                        assert_eq!(one.next_seq, start, "{what}: refused the first");
                        assert_eq!(Some(e), one_refusal, "{what}");
                    }
                }
                assert_eq!(many_ready, one_ready, "{what}: the same batches");
                assert_eq!(many.next_seq, one.next_seq, "{what}");
                assert_eq!(many.values_in_flight(), one.values_in_flight(), "{what}");
                assert_eq!(many.bytes_total(), one.bytes_total(), "{what}");
                // The open batches hold the same values: closing them gives equal batches.
                assert_eq!(many.close_open(0), one.close_open(0), "{what}: open batch");
            }
        }
        assert!(UniformRun::new(Bytes::from_static(b"abc"), 2, 2).is_none());
    }

    #[test]
    fn a_life_range_ends_where_the_next_life_starts() {
        assert_eq!(life_seq_end(1), 1 << 40, "life 0 starts at 1");
        assert_eq!(life_seq_end((1 << 40) - 1), 1 << 40);
        assert_eq!(life_seq_end(1 << 40), 2 << 40);
        assert_eq!(life_seq_end(7 << 40), 8 << 40);
        // A Multi-Ring ring keeps its group in the top byte: its range ends in it too.
        assert_eq!(life_seq_end((3 << 56) | (5 << 40)), (3 << 56) | (6 << 40));
        // The last range of the u64 space ends at u64::MAX, never wraps to 0.
        assert_eq!(life_seq_end(u64::MAX), u64::MAX);
        assert_eq!(life_seq_end(((1 << 24) - 1) << 40), u64::MAX);
        assert_eq!(Batcher::new(NodeId(0), 1 << 40).seqs_left(), 1 << 40);
    }

    #[test]
    fn the_last_seq_of_a_life_is_handed_out_and_the_next_is_refused() {
        let l = limits();
        let end = 2 << 40;
        let mut b = Batcher::new(NodeId(3), end - 2);
        assert_eq!(b.seqs_left(), 2);
        let small = || Bytes::from_static(b"v");
        let (first, _) = b.propose(0, small(), &l).expect("seq end - 2");
        let (last, _) = b.propose(0, small(), &l).expect("seq end - 1");
        assert_eq!((first.seq, last.seq), (end - 2, end - 1));
        assert_eq!(b.seqs_left(), 0);
        let e = b
            .propose(0, small(), &l)
            .expect_err("seq end is the next life's");
        assert_eq!(e, ProposeError::IdsExhausted { seq_end: end });
        assert!(e.to_string().contains("restart"), "{e}");
        // Refused before Busy and for a value that would travel alone too: no path
        // hands out `end`.
        let big = Bytes::from(vec![0u8; 20 << 10]);
        assert_eq!(
            b.propose(0, big, &l).err(),
            Some(ProposeError::IdsExhausted { seq_end: end })
        );
        // The batch holding the last ids still leaves and is acknowledged.
        let mut out = Vec::new();
        b.tick(1_000, false, &l, &mut out);
        assert_eq!(out.len(), 1);
        assert_eq!(out[0].first_seq(), end - 2);
        assert_eq!(out[0].len(), 2);
        let ack = b
            .on_decided(out[0].key(), 1_500)
            .expect("ours and in flight");
        assert_eq!(ack.count, 2);
        assert_eq!(b.values_in_flight(), 0);
        assert_eq!(
            b.propose(2_000, small(), &l).err(),
            Some(ProposeError::IdsExhausted { seq_end: end }),
            "an empty window does not give the range back"
        );
    }

    #[test]
    fn an_explicit_range_end_is_kept() {
        let l = limits();
        let mut b = Batcher::with_seq_end(NodeId(0), 1, 2);
        assert_eq!(
            b.propose(0, Bytes::from_static(b"a"), &l).map(|r| r.0.seq),
            Ok(1)
        );
        assert_eq!(
            b.propose(0, Bytes::from_static(b"b"), &l).map(|r| r.0.seq),
            Err(ProposeError::IdsExhausted { seq_end: 2 })
        );
    }

    #[test]
    fn the_resend_timeout_follows_the_decision_latency_within_its_bounds() {
        let max = 2_000_000;
        let mut t = ResendTimer::default();
        assert_eq!(
            t.timeout_us(max),
            max,
            "no sample yet: the configured timeout"
        );
        for _ in 0..20 {
            t.sample(2_000);
        }
        assert_eq!(t.timeout_us(max), max / 16, "fast decisions: the floor");
        t.backoff = 1;
        assert_eq!(t.timeout_us(max), max / 8, "a re-sending scan doubles it");
        t.backoff = BACKOFF_MAX;
        assert_eq!(t.timeout_us(max), max, "never past the configured timeout");
        t.backoff = 0;
        for _ in 0..20 {
            t.sample(300_000);
        }
        let slow = t.timeout_us(max);
        assert!(slow > 300_000 && slow < max, "{slow}");
    }

    #[test]
    fn a_lost_batch_is_resent_after_the_adapted_timeout_and_sampled_only_once_sent() {
        let l = limits();
        let mut b = Batcher::new(NodeId(0), 1);
        let mut out = Vec::new();
        // Ten batches decided in 1 ms each: the timeout falls to its floor.
        for k in 0..10u64 {
            let t0 = k * 10_000;
            b.propose(t0, Bytes::from_static(b"v"), &l).expect("room");
            out.clear();
            b.tick(t0, false, &l, &mut out);
            assert_eq!(out.len(), 1);
            b.on_decided(out[0].key(), t0 + 1_000).expect("in flight");
        }
        let floor = l.value_resend_us / 16;
        b.propose(200_000, Bytes::from_static(b"lost"), &l)
            .expect("room");
        out.clear();
        b.tick(200_000, false, &l, &mut out);
        assert_eq!(out.len(), 1, "it leaves");
        out.clear();
        b.tick(200_000 + floor / 2, false, &l, &mut out);
        assert!(out.is_empty(), "not yet");
        b.tick(
            200_000 + floor + l.value_resend_us / 32,
            false,
            &l,
            &mut out,
        );
        assert_eq!(
            out.len(),
            1,
            "re-sent after the adapted timeout, not value_resend_us"
        );
    }
}
