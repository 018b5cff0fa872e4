//! Configuration of Multi-Ring Paxos: the rings (each a ring protocol's configuration, U-Ring
//! Paxos' or Ring Paxos', with its group id), the merge's `M`, the skip period Δt and the adaptive λ rule, and which rings
//! each learner follows at start. Every field is checked by [`MultiRingConfig::validate`],
//! whose errors name the field.

use crate::config::ConfigError;
use crate::ring::RingConfigView;
use crate::types::{GroupId, Micros, NodeId};

/// One ring of the deployment.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct RingSpecOf<C> {
    /// The ring's group: the frame header's group, and the ring's place in the merge order.
    /// Below 256 (a node's value ids carry it, see `MultiRing::new`).
    pub group: GroupId,
    pub ring: C,
}

/// Where `Protocol::propose` sends a value (the ring-specific verb is
/// `MultiRing::propose_to`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ProposeTo {
    /// The first ring, in group order, where this node is a proposer.
    FirstRing,
    /// Every ring where this node is a proposer, in turn (load spreading; the simulator's
    /// way to keep every ring busy).
    RoundRobin,
    Group(GroupId),
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub struct MultiRingConfigOf<C> {
    pub rings: Vec<RingSpecOf<C>>,
    /// Slots each ring contributes per turn of the merge (seed 000's `m`).
    pub merge_m: u64,
    /// Δt: how often a ring's coordinator compares the slots it proposed with λ and tops
    /// them up with one skip (seed 000 §2.4). The seed used 100 ms; we default to 10 ms: a
    /// skip is one small instance, and a shorter period bounds how long a busy ring's
    /// values can wait for a quiet one.
    pub skip_interval_us: Micros,
    /// λ = `lambda_factor_pct`/100 × (highest value rate, in slots per second, that a
    /// learner of this ring reports for the rings it follows) × Δt. The seed found 1.5 ×
    /// the peak rate best and set it by hand; here the rate is measured (see `skip.rs`).
    pub lambda_factor_pct: u64,
    /// λ never drops below this many slots per Δt, so a ring nobody reports on still moves.
    pub lambda_min_slots: u64,
    /// A learner re-sends an undecided subscribe or unsubscribe request after this long.
    pub control_retry_us: Micros,
    /// A ring's queue in the merge holds at most this many instances / payload bytes;
    /// beyond, that ring's deliveries pause (its decisions wait, bounded, in the ring's
    /// learner), so a silent ring cannot make a learner buffer a busy one without bound.
    pub merge_queue_instances: usize,
    pub merge_queue_bytes: usize,
    /// Rings each node follows at start; a node not listed follows every ring where it is
    /// a learner.
    pub subscriptions: Vec<(NodeId, Vec<GroupId>)>,
    pub propose_to: ProposeTo,
}

impl<C> Default for MultiRingConfigOf<C> {
    fn default() -> MultiRingConfigOf<C> {
        MultiRingConfigOf {
            rings: Vec::new(),
            merge_m: 1,
            skip_interval_us: 10_000,
            lambda_factor_pct: 150,
            lambda_min_slots: 1,
            control_retry_us: 200_000,
            merge_queue_instances: 8192,
            merge_queue_bytes: 64 << 20,
            subscriptions: Vec::new(),
            propose_to: ProposeTo::FirstRing,
        }
    }
}

/// Largest group id of a ring (value ids carry it in 8 bits).
pub const MAX_GROUP: u16 = 255;

fn err(field: &'static str, reason: impl Into<String>) -> ConfigError {
    ConfigError {
        field,
        reason: reason.into(),
    }
}

impl<C: RingConfigView> MultiRingConfigOf<C> {
    pub fn validate(&self) -> Result<(), ConfigError> {
        if self.rings.is_empty() {
            return Err(err("rings", "at least one ring"));
        }
        let mut groups: Vec<u16> = self.rings.iter().map(|r| r.group.0).collect();
        groups.sort_unstable();
        if groups.windows(2).any(|w| w[0] == w[1]) {
            return Err(err("rings.group", "two rings share a group id"));
        }
        if let Some(g) = groups.iter().find(|&&g| g > MAX_GROUP) {
            return Err(err("rings.group", format!("{g} is above {MAX_GROUP}")));
        }
        for r in &self.rings {
            r.ring.validate().map_err(|e| ConfigError {
                field: e.field,
                reason: format!("ring {}: {}", r.group.0, e.reason),
            })?;
        }
        // The merge takes one snapshot for every ring (`snapshot.rs`): all rings or none.
        let snapshots = self.rings[0].ring.learner_snapshots();
        if self
            .rings
            .iter()
            .any(|r| r.ring.learner_snapshots() != snapshots)
        {
            return Err(err(
                "rings",
                "some rings' learners take snapshots and others not (learner_snapshots): \
                 the merge snapshots every ring at once",
            ));
        }
        if !(1..=1 << 20).contains(&self.merge_m) {
            return Err(err("merge_m", "between 1 and 2^20"));
        }
        if !(1_000..=10_000_000).contains(&self.skip_interval_us) {
            return Err(err("skip_interval_us", "between 1 ms and 10 s"));
        }
        if !(100..=1000).contains(&self.lambda_factor_pct) {
            return Err(err("lambda_factor_pct", "between 100 and 1000"));
        }
        if self.lambda_min_slots == 0 || self.lambda_min_slots > 1 << 24 {
            return Err(err("lambda_min_slots", "between 1 and 2^24"));
        }
        if self.control_retry_us < 1_000 {
            return Err(err("control_retry_us", "at least 1 ms"));
        }
        if self.merge_queue_instances < 16 || self.merge_queue_bytes < 1 << 16 {
            return Err(err(
                "merge_queue_instances",
                "at least 16 instances and 64 KiB",
            ));
        }
        for (node, subs) in &self.subscriptions {
            for g in subs {
                let Some(r) = self.rings.iter().find(|r| r.group == *g) else {
                    return Err(err(
                        "subscriptions",
                        format!(
                            "node {} follows ring {}, which is not configured",
                            node.0, g.0
                        ),
                    ));
                };
                let learner = r
                    .ring
                    .members()
                    .iter()
                    .any(|m| m.id == *node && m.roles.learner);
                if !learner {
                    return Err(err(
                        "subscriptions",
                        format!(
                            "node {} follows ring {} but is not a learner of it",
                            node.0, g.0
                        ),
                    ));
                }
            }
        }
        if let ProposeTo::Group(g) = self.propose_to
            && !self.rings.iter().any(|r| r.group == g)
        {
            return Err(err("propose_to", format!("ring {} is not configured", g.0)));
        }
        Ok(())
    }

    /// The rings `node` follows at start.
    pub fn initial_subscriptions(&self, node: NodeId) -> Vec<GroupId> {
        if let Some((_, subs)) = self.subscriptions.iter().find(|(n, _)| *n == node) {
            return subs.clone();
        }
        self.rings
            .iter()
            .filter(|r| {
                r.ring
                    .members()
                    .iter()
                    .any(|m| m.id == node && m.roles.learner)
            })
            .map(|r| r.group)
            .collect()
    }
}
