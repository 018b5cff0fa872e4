//! A toy total-order broadcast for developing and testing the simulator: a fixed sequencer
//! that numbers batches, with retransmission everywhere so it survives loss, duplication,
//! reordering and partitions (it does not survive a crash of the sequencer, which keeps the
//! only copy of the order in memory).
//!
//! Why it exists: the simulator must be tested on something simpler than the protocols it
//! tests, and its checkers must be seen to fail. [`Flaw`] breaks the toy on purpose in ways
//! that the checkers must name: a learner that skips a gap, a sequencer that orders one
//! batch twice, a sequencer that gives one instance to two batches.
//!
//! Roles: every member proposes and learns; `ToyConfig::sequencer` orders.
//! - Proposer: collects values into a batch (consecutive sequence numbers), sends it to the
//!   sequencer as `Submit`, re-sends it every `resend_us` until its own learner delivers
//!   it, then acknowledges it.
//! - Sequencer: gives each new batch the next instance and sends `Order` to every member;
//!   answers a repeated `Submit` with the `Order` it already made; answers `Sync` with the
//!   orders a learner misses; multicasts `Heartbeat` with its highest instance.
//! - Learner: delivers instances in order from its buffer; when behind, asks with `Sync`.

use abcast_core::codec::{Decoder, Encoder, WireMessage};
use abcast_core::config::{Configuration, Member, Roles, StartInfo};
use abcast_core::protocol::{Ack, ConfigChange, ConfigKind};
use abcast_core::types::BatchBuilder;
use abcast_core::{
    Batch, BatchKey, DecodeError, Delivery, Instance, Micros, NodeId, Outbox, ProposeError,
    Protocol, Status, ValueId,
};
use bytes::Bytes;
use std::collections::BTreeMap;

/// A deliberate bug, for testing that the checkers catch it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Flaw {
    /// Learners deliver whatever they have buffered, jumping over a missing instance
    /// (an agreement bug: [`crate::ViolationKind::SkippedInstance`]).
    SkipGaps,
    /// The sequencer orders every 10th new batch twice, in two instances
    /// (an integrity bug: [`crate::ViolationKind::DuplicateDelivery`]).
    OrderTwice,
    /// The sequencer gives every 10th new batch the instance of the batch before
    /// (an agreement bug: [`crate::ViolationKind::ConflictingDecision`] once two learners
    /// see different orders first).
    ReuseInstance,
}

/// The toy's parameters.
#[derive(Clone, Debug)]
pub struct ToyConfig {
    pub members: Vec<NodeId>,
    /// The node that orders. Default: the highest id, so that the `late_join` mix (which
    /// delays the lowest id) makes a learner join late rather than the sequencer.
    pub sequencer: NodeId,
    pub tick_interval_us: Micros,
    /// A batch leaves once its first value waited this long, or when it is full.
    pub batch_linger_us: Micros,
    pub batch_max_values: usize,
    /// A batch not yet delivered at its proposer is re-submitted after this long.
    pub resend_us: Micros,
    /// At most this many batches re-submitted per tick (bounds a burst after a partition).
    pub resend_max_batches: usize,
    /// A learner behind asks again after this long.
    pub sync_interval_us: Micros,
    pub sync_max_instances: u64,
    pub heartbeat_us: Micros,
    /// Values proposed and not yet delivered at their proposer; `propose` says `Busy` beyond.
    pub window_values: usize,
    pub flaw: Option<Flaw>,
    /// Learners report a configuration change (`Outbox::config_changes`, regular, the same
    /// members) before every instance `k * config_every + 1`: a positioned output for the
    /// test that drives one protocol through the simulator's and the runtime's carry-out.
    /// 0: never.
    pub config_every: u64,
}

impl ToyConfig {
    pub fn new(members: &[NodeId]) -> ToyConfig {
        ToyConfig {
            members: members.to_vec(),
            sequencer: members.iter().max().copied().unwrap_or_default(),
            tick_interval_us: 1_000,
            batch_linger_us: 2_000,
            batch_max_values: 64,
            resend_us: 20_000,
            resend_max_batches: 32,
            sync_interval_us: 10_000,
            sync_max_instances: 64,
            heartbeat_us: 30_000,
            window_values: 512,
            flaw: None,
            config_every: 0,
        }
    }

    pub fn with_flaw(mut self, flaw: Flaw) -> ToyConfig {
        self.flaw = Some(flaw);
        self
    }
}

/// The toy's messages.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum ToyMsg {
    Submit(Batch),
    Order { instance: Instance, batch: Batch },
    Sync { next_instance: Instance },
    Heartbeat { max_instance: Instance },
}

const KIND_SUBMIT: u8 = 1;
const KIND_ORDER: u8 = 2;
const KIND_SYNC: u8 = 3;
const KIND_HEARTBEAT: u8 = 4;
const MAX_BATCH_VALUES: usize = 1 << 20;

fn put_batch(enc: &mut Encoder, b: &Batch) {
    enc.put_u32(b.origin().0);
    enc.put_u64(b.first_seq());
    enc.put_u32(b.len() as u32);
    enc.put_slice(b.lens_raw());
    enc.put_u32(b.data_raw().len() as u32);
    enc.put_bytes(b.data_raw());
}

fn get_batch(d: &mut Decoder) -> Result<Batch, DecodeError> {
    let origin = NodeId(d.u32("batch origin")?);
    let first_seq = d.u64("batch first_seq")?;
    let count = d.count("batch count", MAX_BATCH_VALUES, 4)?;
    let lens = d.bytes(count * 4, "batch lengths")?;
    let data_len = d.u32("batch data length")? as usize;
    let data = d.bytes(data_len, "batch data")?;
    Batch::from_parts(origin, first_seq, lens, data)
}

impl WireMessage for ToyMsg {
    fn kind(&self) -> u8 {
        match self {
            ToyMsg::Submit(_) => KIND_SUBMIT,
            ToyMsg::Order { .. } => KIND_ORDER,
            ToyMsg::Sync { .. } => KIND_SYNC,
            ToyMsg::Heartbeat { .. } => KIND_HEARTBEAT,
        }
    }

    fn encode(&self, enc: &mut Encoder) {
        match self {
            ToyMsg::Submit(b) => put_batch(enc, b),
            ToyMsg::Order { instance, batch } => {
                enc.put_u64(*instance);
                put_batch(enc, batch);
            }
            ToyMsg::Sync { next_instance } => enc.put_u64(*next_instance),
            ToyMsg::Heartbeat { max_instance } => enc.put_u64(*max_instance),
        }
    }

    fn decode(kind: u8, body: Bytes) -> Result<ToyMsg, DecodeError> {
        let mut d = Decoder::new(body);
        let msg = match kind {
            KIND_SUBMIT => ToyMsg::Submit(get_batch(&mut d)?),
            KIND_ORDER => {
                let instance = d.u64("order instance")?;
                ToyMsg::Order {
                    instance,
                    batch: get_batch(&mut d)?,
                }
            }
            KIND_SYNC => ToyMsg::Sync {
                next_instance: d.u64("sync next_instance")?,
            },
            KIND_HEARTBEAT => ToyMsg::Heartbeat {
                max_instance: d.u64("heartbeat max_instance")?,
            },
            k => return Err(DecodeError::UnknownKind(k)),
        };
        d.finish()?;
        Ok(msg)
    }
}

/// One toy node: proposer, learner, and the sequencer if it is `cfg.sequencer`.
#[derive(Debug)]
pub struct Toy {
    cfg: ToyConfig,
    me: NodeId,
    // Proposer.
    next_seq: u64,
    open: Option<(BatchBuilder, Micros)>,
    in_flight: BTreeMap<BatchKey, (Batch, Micros)>,
    in_flight_values: usize,
    // Sequencer.
    log: Vec<Batch>,
    ordered: BTreeMap<BatchKey, Instance>,
    new_batches: u64,
    last_heartbeat_us: Option<Micros>,
    // Learner.
    next_instance: Instance,
    buffer: BTreeMap<Instance, Batch>,
    known_max: Instance,
    last_sync_us: Option<Micros>,
}

impl Toy {
    pub fn new(cfg: ToyConfig, me: NodeId, start: StartInfo) -> Toy {
        Toy {
            cfg,
            me,
            next_seq: start.start_seq,
            open: None,
            in_flight: BTreeMap::new(),
            in_flight_values: 0,
            log: Vec::new(),
            ordered: BTreeMap::new(),
            new_batches: 0,
            last_heartbeat_us: None,
            next_instance: 1,
            buffer: BTreeMap::new(),
            known_max: 0,
            last_sync_us: None,
        }
    }

    fn is_sequencer(&self) -> bool {
        self.me == self.cfg.sequencer
    }

    fn open_values(&self) -> usize {
        self.open.as_ref().map_or(0, |(b, _)| b.len())
    }

    fn close_batch(&mut self, now: Micros, out: &mut Outbox<ToyMsg>) {
        let Some((builder, _)) = self.open.take() else {
            return;
        };
        if builder.is_empty() {
            return;
        }
        let batch = builder.finish();
        self.in_flight_values += batch.len();
        self.in_flight.insert(batch.key(), (batch.clone(), now));
        self.submit(batch, out);
    }

    fn submit(&mut self, batch: Batch, out: &mut Outbox<ToyMsg>) {
        if self.is_sequencer() {
            self.sequence(batch, out);
        } else {
            out.send(self.cfg.sequencer, ToyMsg::Submit(batch));
        }
    }

    fn sequence(&mut self, batch: Batch, out: &mut Outbox<ToyMsg>) {
        let key = batch.key();
        if let Some(&i) = self.ordered.get(&key) {
            // A re-submission: the proposer missed the order; tell it again.
            if key.origin != self.me
                && let Some(b) = self.log.get((i - 1) as usize)
            {
                out.send(
                    key.origin,
                    ToyMsg::Order {
                        instance: i,
                        batch: b.clone(),
                    },
                );
            }
            return;
        }
        self.new_batches += 1;
        let tenth = self.new_batches.is_multiple_of(10);
        let instance =
            if self.cfg.flaw == Some(Flaw::ReuseInstance) && tenth && !self.log.is_empty() {
                let i = self.log.len() as Instance;
                if let Some(slot) = self.log.last_mut() {
                    *slot = batch.clone();
                }
                i
            } else {
                self.log.push(batch.clone());
                self.log.len() as Instance
            };
        self.ordered.insert(key, instance);
        self.broadcast_order(instance, &batch, out);
        if self.cfg.flaw == Some(Flaw::OrderTwice) && tenth {
            self.log.push(batch.clone());
            let again = self.log.len() as Instance;
            self.broadcast_order(again, &batch, out);
        }
    }

    fn broadcast_order(&mut self, instance: Instance, batch: &Batch, out: &mut Outbox<ToyMsg>) {
        for k in 0..self.cfg.members.len() {
            let m = self.cfg.members[k];
            if m == self.me {
                self.learn(instance, batch.clone(), out);
            } else {
                out.send(
                    m,
                    ToyMsg::Order {
                        instance,
                        batch: batch.clone(),
                    },
                );
            }
        }
    }

    fn learn(&mut self, instance: Instance, batch: Batch, out: &mut Outbox<ToyMsg>) {
        self.known_max = self.known_max.max(instance);
        if instance < self.next_instance {
            return;
        }
        self.buffer.entry(instance).or_insert(batch);
        loop {
            while let Some(b) = self.buffer.remove(&self.next_instance) {
                self.deliver(self.next_instance, b, out);
                self.next_instance += 1;
            }
            match self.buffer.keys().next() {
                Some(&first) if self.cfg.flaw == Some(Flaw::SkipGaps) => self.next_instance = first,
                _ => break,
            }
        }
    }

    fn deliver(&mut self, instance: Instance, batch: Batch, out: &mut Outbox<ToyMsg>) {
        let key = batch.key();
        if key.origin == self.me
            && let Some((b, _)) = self.in_flight.remove(&key)
        {
            self.in_flight_values -= b.len();
            out.acks.push(Ack {
                key,
                count: b.len() as u32,
            });
        }
        let every = self.cfg.config_every;
        if every > 0 && instance > 1 && (instance - 1).is_multiple_of(every) {
            let members = self
                .cfg
                .members
                .iter()
                .map(|&id| Member {
                    id,
                    roles: Roles::PAL,
                })
                .collect();
            out.config_changes.push(ConfigChange {
                kind: ConfigKind::Regular,
                config: Configuration {
                    id: (instance - 1) / every,
                    members,
                },
                position: out.deliveries.len(),
            });
        }
        out.deliveries.push(Delivery::new(instance, batch));
    }
}

impl Protocol for Toy {
    type Message = ToyMsg;

    fn node(&self) -> NodeId {
        self.me
    }

    fn propose(
        &mut self,
        now: Micros,
        payload: Bytes,
        out: &mut Outbox<ToyMsg>,
    ) -> Result<ValueId, ProposeError> {
        if self.in_flight_values + self.open_values() >= self.cfg.window_values {
            return Err(ProposeError::Busy);
        }
        let (me, seq) = (self.me, self.next_seq);
        let (builder, _) = self
            .open
            .get_or_insert_with(|| (BatchBuilder::new(me, seq, 1024), now));
        let id = builder.push(&payload);
        self.next_seq += 1;
        if builder.len() >= self.cfg.batch_max_values {
            self.close_batch(now, out);
        }
        Ok(id)
    }

    fn receive(&mut self, _now: Micros, from: NodeId, msg: ToyMsg, out: &mut Outbox<ToyMsg>) {
        match msg {
            ToyMsg::Submit(b) => {
                if self.is_sequencer() {
                    self.sequence(b, out);
                }
            }
            ToyMsg::Order { instance, batch } => {
                if instance > 0 {
                    self.learn(instance, batch, out);
                }
            }
            ToyMsg::Sync { next_instance } => {
                if !self.is_sequencer() {
                    return;
                }
                let first = next_instance.max(1);
                let last = (self.log.len() as Instance)
                    .min(first.saturating_add(self.cfg.sync_max_instances) - 1);
                for i in first..=last {
                    if let Some(b) = self.log.get((i - 1) as usize) {
                        out.send(
                            from,
                            ToyMsg::Order {
                                instance: i,
                                batch: b.clone(),
                            },
                        );
                    }
                }
            }
            ToyMsg::Heartbeat { max_instance } => self.known_max = self.known_max.max(max_instance),
        }
    }

    fn tick(&mut self, now: Micros, out: &mut Outbox<ToyMsg>) {
        if let Some((_, since)) = &self.open
            && now.saturating_sub(*since) >= self.cfg.batch_linger_us
        {
            self.close_batch(now, out);
        }
        let due: Vec<BatchKey> = self
            .in_flight
            .iter()
            .filter(|(_, (_, sent))| now.saturating_sub(*sent) >= self.cfg.resend_us)
            .map(|(k, _)| *k)
            .take(self.cfg.resend_max_batches)
            .collect();
        for key in due {
            if let Some((b, sent)) = self.in_flight.get_mut(&key) {
                *sent = now;
                let b = b.clone();
                self.submit(b, out);
            }
        }
        if self.is_sequencer() {
            if self
                .last_heartbeat_us
                .is_none_or(|t| now.saturating_sub(t) >= self.cfg.heartbeat_us)
            {
                self.last_heartbeat_us = Some(now);
                out.multicasts.push(ToyMsg::Heartbeat {
                    max_instance: self.log.len() as Instance,
                });
            }
        } else if self.next_instance <= self.known_max
            && self
                .last_sync_us
                .is_none_or(|t| now.saturating_sub(t) >= self.cfg.sync_interval_us)
        {
            self.last_sync_us = Some(now);
            out.send(
                self.cfg.sequencer,
                ToyMsg::Sync {
                    next_instance: self.next_instance,
                },
            );
        }
    }

    fn tick_interval_us(&self) -> Micros {
        self.cfg.tick_interval_us
    }

    fn can_propose(&self) -> bool {
        self.in_flight_values + self.open_values() < self.cfg.window_values
    }

    fn status(&self) -> Status {
        Status {
            node: self.me,
            coordinator: Some(self.cfg.sequencer),
            ballot: abcast_core::Ballot::ZERO,
            leading: self.is_sequencer(),
            delivered_upto: self.next_instance - 1,
            decided_max: self.known_max.max(self.log.len() as Instance),
            values_in_flight: self.in_flight_values + self.open_values(),
            amnesic: false,
            view: self.cfg.members.clone(),
            groups: Vec::new(),
            log_bytes: 0,
            log_appended_bytes: 0,
            ..Status::default()
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn batch(n: usize, big: bool) -> Batch {
        let mut b = BatchBuilder::new(NodeId(3), 77, 64);
        for i in 0..n {
            let len = if big && i == 1 { 5000 } else { 3 + i };
            b.push(&vec![i as u8; len]);
        }
        b.finish()
    }

    #[test]
    fn codec_round_trips_every_message() {
        let msgs = [
            ToyMsg::Submit(batch(3, false)),
            ToyMsg::Order {
                instance: 9,
                batch: batch(2, true),
            },
            ToyMsg::Sync { next_instance: 4 },
            ToyMsg::Heartbeat {
                max_instance: u64::MAX,
            },
        ];
        for m in msgs {
            let (kind, body) = crate::encode(&m);
            let back: ToyMsg = crate::decode(kind, &body).expect("decodes");
            assert_eq!(back, m);
        }
    }

    #[test]
    fn decode_rejects_garbage_without_panicking() {
        let (kind, framed) = crate::encode(&ToyMsg::Order {
            instance: 1,
            batch: batch(2, false),
        });
        let body = framed.slice(2..);
        for cut in 0..body.len() {
            assert!(
                ToyMsg::decode(kind, body.slice(..cut)).is_err(),
                "prefix of {cut} bytes"
            );
        }
        assert_eq!(ToyMsg::decode(99, body), Err(DecodeError::UnknownKind(99)));
    }
}
