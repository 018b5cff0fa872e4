//! What both adapters share, so that the race compares protocol cores and nothing else: the
//! proposer's window and batching ([`Batcher`], the one every protocol of ours uses), the
//! encoding of a batch into one log entry ([`EntryBody::Values`], the bytes our own
//! leader-based logs keep), the learners' de-duplication ([`Dedup`]), delivery in log order
//! and the acknowledgement at the proposer; the crate's logical clock; the mapping of our
//! node ids onto the crates' (both reserve id 0).

use abcast_core::batcher::{BatchLimits, Batcher};
use abcast_core::config::{ConfigError, StartInfo};
use abcast_core::dedup::Dedup;
use abcast_core::replog::EntryBody;
use abcast_core::types::{Batch, Instance, Micros, NodeId, ValueId};
use abcast_core::{Delivery, Outbox, ProposeError};
use bytes::Bytes;

/// The proposer limits of the race: U-Ring Paxos' defaults (`uring::RingConfig`), which
/// every protocol of ours starts from, so batching is equal across the race.
pub fn default_batch_limits() -> BatchLimits {
    BatchLimits {
        batch_max_bytes: 256 << 10,
        batch_linger_us: 200,
        window_values: 20_000,
        window_bytes: 2 << 20,
        max_value_bytes: 16 << 20,
        value_resend_us: 2_000_000,
    }
}

pub(crate) fn validate_batch_limits(l: &BatchLimits) -> Result<(), ConfigError> {
    let err = |field: &'static str, reason: &str| {
        Err(ConfigError {
            field,
            reason: reason.into(),
        })
    };
    if l.batch_max_bytes == 0 {
        return err("batch.batch_max_bytes", "must be > 0");
    }
    if l.window_values == 0 || l.window_bytes == 0 {
        return err("batch.window_values", "the window must admit a value");
    }
    if l.max_value_bytes == 0 {
        return err("batch.max_value_bytes", "must be > 0");
    }
    if l.value_resend_us < 32 {
        return err(
            "batch.value_resend_us",
            "must be at least 32 us (the batcher scans every value_resend_us / 32)",
        );
    }
    Ok(())
}

/// Checks a member list: `me` in it, no node twice, more than one node (OmniPaxos refuses a
/// cluster of one; a cluster of one is not a race).
pub(crate) fn validate_nodes(nodes: &[NodeId], me: NodeId) -> Result<(), ConfigError> {
    if nodes.len() < 2 {
        return Err(ConfigError {
            field: "nodes",
            reason: format!("{} node(s); the adapters need at least 2", nodes.len()),
        });
    }
    let mut sorted: Vec<u32> = nodes.iter().map(|n| n.0).collect();
    sorted.sort_unstable();
    if let Some(w) = sorted.windows(2).find(|w| w[0] == w[1]) {
        return Err(ConfigError {
            field: "nodes",
            reason: format!("node {} appears twice", w[0]),
        });
    }
    if !nodes.contains(&me) {
        return Err(ConfigError {
            field: "nodes",
            reason: format!("this node {me} is not a member"),
        });
    }
    if nodes.iter().any(|n| n.0 == u32::MAX) {
        return Err(ConfigError {
            field: "nodes",
            reason: "node id u32::MAX has no crate id (ours + 1 must fit)".into(),
        });
    }
    Ok(())
}

/// Our node id as the crates number nodes: both reserve 0 (OmniPaxos: "pid must not be 0";
/// raft-rs: `INVALID_ID`), so ours + 1.
pub(crate) fn crate_id(n: NodeId) -> u64 {
    u64::from(n.0) + 1
}

/// The inverse of [`crate_id`]; `None` for 0 and for ids that are no `NodeId`.
pub(crate) fn node_of(id: u64) -> Option<NodeId> {
    id.checked_sub(1)
        .and_then(|x| u32::try_from(x).ok())
        .map(NodeId)
}

/// The crate's logical clock: its `tick()` is called once per `period_us` of our time, and
/// at most once per call of ours (after a pause a real timer fires once, not a burst: a
/// burst of ticks with no message handled in between would look like silence to the
/// crate's failure detector).
#[derive(Debug)]
pub(crate) struct CrateClock {
    period_us: Micros,
    next_us: Micros,
}

impl CrateClock {
    pub(crate) fn new(period_us: Micros) -> CrateClock {
        CrateClock {
            period_us: period_us.max(1),
            next_us: 0,
        }
    }

    /// Whether the crate's tick is due now (and then the next one is scheduled).
    pub(crate) fn due(&mut self, now: Micros) -> bool {
        if now < self.next_us {
            return false;
        }
        let next = self.next_us.saturating_add(self.period_us);
        self.next_us = if next > now {
            next
        } else {
            now.saturating_add(self.period_us)
        };
        true
    }
}

/// The proposer and learner around a crate: batches values, turns a batch into one entry's
/// bytes, and turns decided entries back into deliveries and acks.
#[derive(Debug)]
pub(crate) struct Front {
    pub(crate) limits: BatchLimits,
    batcher: Batcher,
    dedup: Dedup,
    /// Every instance up to this one was handed to `decided` (delivered or passed over).
    pub(crate) delivered_upto: Instance,
    /// Decided entries whose bytes are not an entry of ours (only a foreign or broken peer
    /// could have proposed one): passed over, counted.
    pub(crate) undecodable_entries: u64,
    scratch: Vec<Batch>,
}

impl Front {
    pub(crate) fn new(me: NodeId, start: StartInfo, limits: BatchLimits) -> Front {
        Front {
            limits,
            batcher: Batcher::new(me, start.start_seq),
            dedup: Dedup::default(),
            delivered_upto: 0,
            undecodable_entries: 0,
            scratch: Vec::new(),
        }
    }

    pub(crate) fn has_room(&self) -> bool {
        self.batcher.has_room(&self.limits)
    }

    pub(crate) fn values_in_flight(&self) -> usize {
        self.batcher.values_in_flight()
    }

    /// [`Batcher::propose_many`]: the batches that must leave now go to `ready`.
    pub(crate) fn propose_many(
        &mut self,
        now: Micros,
        values: abcast_core::Values<'_>,
        ready: &mut Vec<Batch>,
    ) -> Result<(ValueId, usize), ProposeError> {
        self.batcher.propose_many(now, values, &self.limits, ready)
    }

    /// Batches to (re-)propose now (see `Batcher::tick`), in order.
    pub(crate) fn tick(&mut self, now: Micros, coordinator_changed: bool) -> Vec<Batch> {
        let mut v = std::mem::take(&mut self.scratch);
        v.clear();
        self.batcher
            .tick(now, coordinator_changed, &self.limits, &mut v);
        v
    }

    /// Gives back the vector `tick` returned, to keep its capacity.
    pub(crate) fn recycle(&mut self, mut v: Vec<Batch>) {
        v.clear();
        self.scratch = v;
    }

    /// The entry of decided log position `instance` (1-based, increasing): its batch is
    /// acknowledged at its proposer and delivered at its first decided place.
    pub(crate) fn decided<M>(
        &mut self,
        now: Micros,
        instance: Instance,
        data: &Bytes,
        out: &mut Outbox<M>,
    ) {
        if instance <= self.delivered_upto {
            return;
        }
        self.delivered_upto = instance;
        if data.is_empty() {
            // raft-rs' empty entry of a new leader's term.
            return;
        }
        match EntryBody::decode(data) {
            Ok(EntryBody::Values(batch)) => {
                let key = batch.key();
                if let Some(ack) = self.batcher.on_decided(key, now) {
                    out.acks.push(ack);
                }
                if self.dedup.first_time_batch(&batch, instance) {
                    out.deliveries.push(Delivery::new(instance, batch));
                }
            }
            Ok(_) => {}
            Err(_) => self.undecodable_entries += 1,
        }
    }
}

/// The bytes of one log entry holding `batch` (what our own leader-based logs keep).
pub(crate) fn entry_bytes(batch: &Batch) -> Bytes {
    EntryBody::Values(batch.clone()).encode()
}
