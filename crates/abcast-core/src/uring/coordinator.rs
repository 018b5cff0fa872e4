//! Coordinator: seed 000 §3.1.2, seed 003 Algorithm 2 Tasks 1, 3 and §4.2-4.3.
//!
//! The coordinator is the first live acceptor in ring order (seed 000 §3.2.2). On taking
//! over it picks a ballot above every round it has seen (ballots are unique per process
//! life: `(round, node, incarnation)`, see `Ballot`) and runs phase 1 from the first
//! instance it does not know to be decided.
//! Phase 1 goes straight to every acceptor and back (seed 003 Task 1/3), not around the ring
//! as seed 000 does: it is control plane, run once per takeover, and a direct exchange does
//! not depend on every node agreeing on the ring.
//!
//! With a quorum of promises from non-amnesic acceptors (Task 3):
//! * every instance up to the highest `decided_upto` reported is decided, and some acceptor
//!   of the quorum knows its decree: nothing to propose there;
//! * every instance above it and up to the highest instance any acceptor reported gets the
//!   decree with the highest ballot among the replies, or a no-op if none (this closes the
//!   holes a failed coordinator left; seed 000 §3.1.4's "null value");
//! * new batches get instances after that.
//!
//! Phase 1 is then kept ahead of use for `p1_preexecution_number` instances, re-run under the
//! same ballot for the next range when half is used (seed 000 §3.1.2). A refusal (`Nack`)
//! carries the higher promise and makes the coordinator start over with a higher ballot —
//! our form of the seed's "fall back to standard phase 1": since promises cover all instances,
//! one phase 1 at a higher ballot replaces a phase 1 per instance.
//!
//! An open instance circulates again after `p2_resend_us`, or sooner when the coordinator
//! learns its circulation failed: the ring changed under it (a member was found failed, and
//! what it held is lost), or the circulation came back around without a quorum (the last node
//! says so with a `Nack` at the coordinator's own ballot). Seed 000 §3.1.4 has a new ballot
//! and ring after any failure; here the ring is the live acceptors in id order, so a change
//! needs no phase 1, but phase 2 messages in flight through the failed member are gone and
//! nothing else would re-send them before the timer (found by the faults-remain phase: two
//! such 1 s stalls in a row outlast its 1.5 s bound).

use super::messages::{Nack, Phase1a, Phase1b, Phase2, Repair, Retrieve, WireDecree};
use super::{Message, Out, URing};
use crate::event::Event;
use crate::mutation::Mutation;
use crate::nodeset::NodeSet;
use crate::ring::bit;
use crate::types::{Ballot, Batch, BatchKey, Decree, Instance, Micros};
use std::collections::{BTreeMap, HashSet, VecDeque};

/// Open instances re-circulated per tick at most (bounds a burst after a long stall).
const RESEND_PER_TICK: usize = 64;

#[derive(Debug)]
pub(crate) struct Open {
    decree: Decree,
    /// Nodes known to hold the payload (the batch's path to the coordinator).
    path: NodeSet,
    /// When it circulates again unless decided before.
    due_us: Micros,
    /// Early re-circulations after a failed one (backs the early retry off).
    retries: u32,
}

/// A phase 1 in progress (a takeover, or an extension to the next range while leading).
#[derive(Debug)]
pub(crate) struct Prepare {
    from: Instance,
    to: Instance,
    sent_us: Micros,
    /// Positions whose promise counts (ok, same epoch, not amnesic).
    oks: u64,
    /// Positions that promised while amnesic: repaired after phase 1.
    amnesic_oks: u64,
    /// Highest `decided_upto` reported.
    floor: Instance,
    /// Highest `log_start` among counted replies: below it some counted acceptor trimmed
    /// its log and reported nothing, so a vote found there may be a stale one; from it on,
    /// every counted reply is complete and the highest vote found is safe to re-propose
    /// (seed 003 Task 3), even at or below `floor`.
    trimmed_below: Instance,
    /// Highest instance any acceptor accepted in.
    hi: Instance,
    /// Lowest `covered_to` among counted replies.
    covered: Instance,
    /// Per instance, the vote with the highest ballot, or the decided decree.
    votes: BTreeMap<Instance, (Ballot, Decree, bool)>,
    /// A backfill only: the instances of its range open when it started. This ballot
    /// proposed them already, and a reply may predate their votes (a 1b is no barrier to
    /// this ballot's own phase 2), so a hole found there is no hole: proposing a no-op
    /// would give one instance two decrees in one ballot (found by the long run, uring
    /// `learner_skip` seed 1022: an instance opened at the takeover, decided and closed
    /// while the backfill's replies, sent before the votes, came in).
    proposed: Vec<Instance>,
}

impl Prepare {
    fn new(from: Instance, to: Instance, now: Micros) -> Prepare {
        Prepare {
            from,
            to,
            sent_us: now,
            oks: 0,
            amnesic_oks: 0,
            floor: from.saturating_sub(1),
            trimmed_below: 0,
            hi: 0,
            covered: to,
            votes: BTreeMap::new(),
            proposed: Vec::new(),
        }
    }
}

#[derive(Debug, PartialEq, Eq)]
pub(crate) enum Phase {
    Follower,
    Preparing,
    Leading,
}

#[derive(Debug)]
pub struct CoordinatorState {
    pub(crate) phase: Phase,
    pub(crate) ballot: Ballot,
    /// Epoch fingerprint the current ballot's phase 1 runs in.
    epoch_fp: u64,
    prepare: Option<Prepare>,
    /// Phase 1 under the current ballot over instances below `p1_lo` (see `start_backfill`).
    backfill: Option<Prepare>,
    /// The first instance and start time of the last backfill: the same range again waits
    /// `p1_resend_us` (see `start_backfill`).
    last_backfill: (Instance, Micros),
    /// Phase 1 of the current ballot began here; below it, instances are decided by hearsay.
    p1_lo: Instance,
    /// Phase 1 holds for every instance below this.
    p1_hi: Instance,
    next_instance: Instance,
    open: BTreeMap<Instance, Open>,
    /// At most the earliest `due_us` of `open` (0 when unknown): the tick looks for open
    /// instances due again only from then on, instead of scanning them all every tick.
    open_due_min_us: Micros,
    /// Decrees phase 1 found for instances not yet reached by `next_instance`.
    preset: BTreeMap<Instance, Decree>,
    pub(crate) queue: VecDeque<(Batch, NodeSet)>,
    queue_bytes: usize,
    /// Keys queued, so a re-sent batch is not queued twice.
    known: HashSet<BatchKey>,
    /// Keys of open instances (phase 1 re-proposals included): a re-sent batch that is open
    /// already must not get a second instance, or it would be decided twice.
    open_keys: HashSet<BatchKey>,
    /// What the takeover's phase 1 told amnesic acceptors (see `acceptor.rs`, repair); kept
    /// for an amnesic acceptor whose reply came after the quorum.
    repair: Option<Repair>,
    /// Skips and controls to propose (Multi-Ring), served before queued batches: they are
    /// tiny and a late skip holds every learner of the merge back.
    pub(crate) meta: VecDeque<Decree>,
    /// Merge slots put in instances by this coordinator (see `URing::slots_assigned`).
    pub(crate) slots_assigned: u64,
    /// Of these, the instances of values (see `URing::value_slots_assigned`).
    pub(crate) value_slots_assigned: u64,
    /// The live ring as last seen by the coordinator (bit per position): a member gone from
    /// it re-circulates every open instance.
    ring_mask: u64,
}

impl CoordinatorState {
    pub fn new() -> CoordinatorState {
        CoordinatorState {
            phase: Phase::Follower,
            ballot: Ballot::ZERO,
            epoch_fp: 0,
            prepare: None,
            backfill: None,
            last_backfill: (0, 0),
            p1_lo: 1,
            p1_hi: 1,
            next_instance: 1,
            open: BTreeMap::new(),
            open_due_min_us: 0,
            preset: BTreeMap::new(),
            queue: VecDeque::new(),
            queue_bytes: 0,
            known: HashSet::new(),
            open_keys: HashSet::new(),
            repair: None,
            meta: VecDeque::new(),
            slots_assigned: 0,
            value_slots_assigned: 0,
            ring_mask: 0,
        }
    }
    pub fn is_leading(&self) -> bool {
        self.phase == Phase::Leading
    }
    /// Preparing or leading: batches for the coordinator stop here.
    pub fn is_active(&self) -> bool {
        self.phase != Phase::Follower
    }
}

impl Default for CoordinatorState {
    fn default() -> Self {
        Self::new()
    }
}

impl URing {
    pub(crate) fn coordinator_enqueue(&mut self, batch: Batch, path: NodeSet, out: &mut Out) {
        let key = batch.key();
        if self.coord.open_keys.contains(&key) {
            return; // in an open instance already
        }
        if let Some(instance) = self.node.learn.decided_at(key) {
            // Decided already: the proposer missed the decision. Tell it instead of deciding
            // the batch a second time.
            if key.origin == self.node.me {
                if let Some(ack) = self
                    .node
                    .prop
                    .as_mut()
                    .and_then(|p| p.on_decided(key, self.node.now))
                {
                    out.acks.push(ack);
                }
            } else {
                let entries = vec![(instance, Decree::Values(batch))];
                out.send(
                    key.origin,
                    Message::Decided(super::messages::Decided {
                        log_start: 0,
                        scanned_to: 0,
                        dedup_from: 0,
                        dedup_to: 0,
                        dedup: Vec::new(),
                        entries,
                    }),
                );
            }
            return;
        }
        let c = &mut self.coord;
        if !c.known.insert(key) {
            return;
        }
        if c.queue_bytes + batch.wire_bytes() > self.cfg.coordinator_queue_bytes {
            // Full: drop; the proposer re-sends after `value_resend_us`.
            c.known.remove(&batch.key());
            return;
        }
        c.queue_bytes += batch.wire_bytes();
        c.queue.push_back((batch, path));
        self.assign(out);
    }

    /// Starts (or restarts) phase 1 with a ballot above every round seen.
    fn start_phase1(&mut self, out: &mut Out, why: &str) {
        // Above every round seen, and this life's incarnation: a ballot no other process
        // life made or will make (see `Ballot`).
        let round = self.node.max_ballot_seen.round.max(self.coord.ballot.round) + 1;
        let ballot = Ballot::new(round, self.node.me, self.node.ballot_incarnation);
        self.node.note_ballot(ballot);
        // Open proposals go back to the queue: they are re-proposed in new instances if
        // phase 1 does not find them (learners skip a batch decided twice).
        let open = std::mem::take(&mut self.coord.open);
        self.coord.open_keys.clear();
        for (_, o) in open.into_iter().rev() {
            if let Decree::Values(b) = o.decree {
                self.coord.queue_bytes += b.wire_bytes();
                self.coord.queue.push_front((b, o.path));
            }
        }
        self.coord.preset.clear();
        let from = self.node.learn.next.max(self.cluster_delivered_max + 1);
        let to = from + self.cfg.p1_preexecution_number;
        self.coord.phase = Phase::Preparing;
        self.coord.ballot = ballot;
        // Phase 1 of the old ballot says nothing for the new one: every instance from `from`
        // on must be prepared again (an old `p1_hi` would let phase 2 run unprepared), and
        // holes the old ballot left between the new phase 1's highest instance and the old
        // `next_instance` must be filled, so numbering restarts at `from`.
        self.coord.p1_hi = from;
        self.coord.p1_lo = from;
        self.coord.next_instance = from;
        self.coord.backfill = None;
        self.coord.repair = None;
        self.coord.epoch_fp = self.node.view.epoch_fp();
        self.coord.ring_mask = self.live_ring_mask();
        self.coord.prepare = Some(Prepare::new(from, to, self.node.now));
        out.events.push(Event::PhaseOne {
            node: self.node.me,
            ballot,
            from,
            why: why.to_string(),
        });
        self.send_phase1a(from, to, out);
    }

    fn send_phase1a(&mut self, from: Instance, to: Instance, out: &mut Out) {
        let m = Phase1a {
            ballot: self.coord.ballot,
            from,
            to,
            epoch: self.node.view.epoch().clone(),
        };
        for (p, member) in self.cfg.members.iter().enumerate() {
            // Sent to self too: the driver loops it back, one code path for every acceptor.
            if self.node.is_acceptor_pos(p) {
                out.send(member.id, Message::Phase1a(m.clone()));
            }
        }
    }

    /// The first message from an acceptor since this node started. If a phase 1 of ours
    /// waits for its promise, our phase 1a most likely reached a process that was not
    /// running yet (nodes of a cluster start one by one), so it goes again to that acceptor
    /// now instead of after `p1_resend_us`: without this, the first coordinator of a ring
    /// that starts before its acceptors waits 500 ms before it can decide anything, and its
    /// proposers then flush that backlog in one burst (which a Multi-Ring learner has to
    /// buffer). Once per acceptor per process lifetime, so it costs nothing.
    ///
    /// Restarted nodes too. A restarted node starts its rounds at 1 again, below rounds its
    /// earlier life may have used, so a quick phase 1 can get promises before refusals and
    /// heartbeats have lifted it; but its ballots carry its new incarnation, so none of them
    /// is a ballot its earlier life used, and a quick phase 1 is as safe as a slow one (see
    /// `Ballot`). Before ballots carried the incarnation this re-send was limited to a
    /// node's first life: with it, the uring mixed sweep (5 nodes, seed 24) had a restarted
    /// coordinator win phase 1 under `1.0`, the ballot its first life had led with, and then
    /// "a decided instance changed its decree"; it passes now.
    pub(crate) fn coordinator_on_first_contact(&mut self, from_pos: usize, out: &mut Out) {
        if !self.node.is_acceptor_pos(from_pos) {
            return;
        }
        let Some(p) = self.coord.prepare.as_ref() else {
            return;
        };
        if (p.oks | p.amnesic_oks) & bit(from_pos) != 0 {
            return;
        }
        let m = Phase1a {
            ballot: self.coord.ballot,
            from: p.from,
            to: p.to,
            epoch: self.node.view.epoch().clone(),
        };
        out.send(self.node_at(from_pos), Message::Phase1a(m));
    }

    pub(crate) fn on_phase1b(&mut self, from_pos: usize, m: Phase1b, out: &mut Out) {
        self.node.note_ballot(m.promised);
        let epoch_changed = self.node.view.merge_epoch(&m.epoch);
        if self.coord.phase == Phase::Follower || m.ballot != self.coord.ballot {
            return;
        }
        if !m.ok {
            if m.promised > self.coord.ballot {
                self.start_phase1(out, "phase 1 refused by a higher promise");
            } else if epoch_changed {
                self.start_phase1(out, "a restarted acceptor changed the epoch");
            }
            return;
        }
        if m.epoch.fingerprint() != self.coord.epoch_fp {
            return;
        }
        let quorum = self.quorum;
        let amnesic_counts = self.mutated(Mutation::AmnesicPromisesCount);
        let is_backfill = self
            .coord
            .backfill
            .as_ref()
            .is_some_and(|b| b.from == m.from && b.to == m.to);
        let slot = if is_backfill {
            self.coord.backfill.as_mut()
        } else {
            self.coord.prepare.as_mut()
        };
        let Some(p) = slot else {
            return;
        };
        if m.from != p.from || m.to != p.to {
            return; // a reply to an earlier range
        }
        if m.amnesic && !amnesic_counts {
            p.amnesic_oks |= bit(from_pos);
            return;
        }
        if p.oks & bit(from_pos) != 0 {
            return;
        }
        p.oks |= bit(from_pos);
        p.floor = p.floor.max(m.decided_upto);
        p.trimmed_below = p.trimmed_below.max(m.log_start);
        p.hi = p.hi.max(m.max_instance);
        p.covered = p.covered.min(m.covered_to);
        for e in m.accepted {
            let slot = p
                .votes
                .entry(e.instance)
                .or_insert((e.ballot, e.decree.clone(), e.decided));
            if !slot.2 && (e.decided || e.ballot > slot.0) {
                *slot = (e.ballot, e.decree, e.decided);
            }
        }
        if (p.oks.count_ones() as usize) < quorum {
            return;
        }
        if is_backfill {
            if let Some(p) = self.coord.backfill.take() {
                self.backfill_done(p, out);
            }
            return;
        }
        let Some(p) = self.coord.prepare.take() else {
            return;
        };
        self.phase1_done(p, out);
    }

    /// Phase 1 again for instances this coordinator cannot serve. A ballot begins its phase 1
    /// at an instance some node reported delivered; if that node then failed, nobody alive
    /// may know those decisions, and acceptors that voted without seeing the decision cannot
    /// answer a retrieve. The same holds above `p1_lo`: a durable acceptor keeps decisions
    /// it did not vote for in memory only, so after crashes the only trace of a decided
    /// instance may be an undecided vote (found by the faults-remain phase, durable uring
    /// seed 86: a restarted learner stuck while the coordinator had delivered the instance
    /// but could not serve it). So a learner stuck on an instance the coordinator cannot
    /// serve makes the coordinator run phase 1 there, under its ballot (the promise covers
    /// every instance), and re-propose what it finds.
    fn start_backfill(&mut self, from: Instance, out: &mut Out) {
        if self.coord.phase != Phase::Leading
            || self.coord.backfill.is_some()
            || from >= self.coord.next_instance
        {
            return;
        }
        // A backfill that moved nothing (every acceptor trimmed those instances: the learner
        // needs a snapshot, not a phase 1) is not repeated at once. Without this bound the
        // coordinator restarted it on every tick and retrieve, and duplicated 1bs of the
        // previous round completed each new one at the same instant: a storm with no time
        // passing (found by the simulator, durable `uring-snapshots` 5-node mixed seed 11).
        let (last_from, last_us) = self.coord.last_backfill;
        if from == last_from && self.node.now < last_us.saturating_add(self.cfg.p1_resend_us) {
            return;
        }
        self.coord.last_backfill = (from, self.node.now);
        let to = self
            .coord
            .next_instance
            .min(from + self.cfg.retrieve_max_instances);
        let mut p = Prepare::new(from, to, self.node.now);
        p.proposed = self.coord.open.range(from..to).map(|(&i, _)| i).collect();
        self.coord.backfill = Some(p);
        out.events.push(Event::Backfill {
            node: self.node.me,
            ballot: self.coord.ballot,
            from,
            to,
        });
        self.send_phase1a(from, to, out);
    }

    /// Whether this node's acceptor can answer a retrieve for `instance` (it holds it
    /// decided, in its cache or on disk).
    fn serves(&self, instance: Instance) -> bool {
        self.node.acc.as_ref().is_some_and(|a| {
            a.store
                .range(instance, instance + 1)
                .first()
                .is_some_and(|(i, e)| *i == instance && e.decided)
        })
    }

    fn backfill_done(&mut self, p: Prepare, out: &mut Out) {
        let ballot = self.coord.ballot;
        for i in p.from..p.covered {
            if self.coord.open.contains_key(&i)
                || p.proposed.binary_search(&i).is_ok()
                || self.serves(i)
            {
                continue;
            }
            let known = self.node.learn.knows(i);
            match p.votes.get(&i) {
                Some((_, decree, true)) => {
                    let key = decree.key();
                    self.record_decision(i, ballot, Some(decree.clone()), key, out);
                }
                // Trimmed at a counted acceptor: decided, and covered by a quorum of
                // learners' snapshots; a learner that needs it installs one. Never
                // re-propose a vote found there: acceptors that trimmed it report no vote,
                // so the vote found may be a stale one of a lower ballot, and proposing it
                // could decide a second decree (found by the simulator, durable
                // `uring-snapshots` 5-node mixed seed 12, as a stall: a restarted acceptor's
                // own stale vote re-opened an instance trimmed everywhere else). Above every
                // counted log start the replies are complete and the highest vote is safe,
                // decided by some learner or not: a durable acceptor keeps decisions it
                // did not vote for in memory only, so after a crash the voters' undecided
                // votes may be all the connected majority has (found by the faults-remain
                // phase: durable uring crash seed 8, learners stuck while the voter that
                // had marked it decided stayed down).
                _ if i < p.trimmed_below => {}
                Some((_, decree, false)) => {
                    self.open_instance(i, decree.clone(), NodeSet::new(), out)
                }
                // Decided here, yet no counted acceptor has a vote: nothing to re-propose.
                None if known => {}
                None => self.open_instance(i, Decree::Noop, NodeSet::new(), out),
            }
        }
    }

    /// Phase 1 holds for `[p.from, p.covered)` (seed 003 Task 3).
    fn phase1_done(&mut self, p: Prepare, out: &mut Out) {
        let ballot = self.coord.ballot;
        let takeover = self.coord.phase == Phase::Preparing;
        if takeover {
            // Decided instances below the floor are known to some acceptor; learners fetch them.
            self.node.learn.decided_max = self.node.learn.decided_max.max(p.floor);
            self.coord.next_instance = self.coord.next_instance.max(p.floor + 1).max(p.from);
        }
        let drop_decided = takeover && self.mutated(Mutation::DecidedDroppedAtTakeover);
        for (instance, (_, decree, decided)) in &p.votes {
            if *instance >= p.covered || (*instance <= p.floor && !*decided) {
                continue;
            }
            if *decided && drop_decided {
                continue;
            }
            if *decided {
                // Decided entries at or below the floor are recorded too: the acceptor that
                // reported them may be cut off next, and then nobody connected would know
                // them (bug B2; Ring Paxos always recorded them).
                let key = decree.key();
                self.record_decision(*instance, ballot, Some(decree.clone()), key, out);
            } else {
                self.coord.preset.insert(*instance, decree.clone());
            }
        }
        if takeover {
            // At or below the floor, what no counted acceptor reported decided is re-proposed
            // where every counted reply is complete (above every counted log start): the
            // highest vote found, a no-op for a hole. Some learner delivered these
            // instances, but the acceptors that knew it may be gone (bug B2: the backfill
            // only ever covered instances below `p1_lo`, and these are above it).
            let lo = p.from.max(p.trimmed_below);
            let hi = p.floor.min(p.covered.saturating_sub(1));
            for i in lo..=hi {
                if self.node.learn.knows(i) || self.coord.open.contains_key(&i) {
                    continue;
                }
                let decree = match p.votes.get(&i) {
                    Some((_, d, false)) => d.clone(),
                    Some((_, _, true)) => continue,
                    None => Decree::Noop,
                };
                self.open_instance(i, decree, NodeSet::new(), out);
            }
        }
        if takeover {
            // Every instance between the floor and the highest one reported gets a decree:
            // the reported vote, or a no-op for a hole.
            let start = p.floor + 1;
            let end = p.hi.min(p.covered.saturating_sub(1));
            for i in start..=end {
                if self.node.learn.knows(i) {
                    continue;
                }
                let decree = self.coord.preset.remove(&i).unwrap_or(Decree::Noop);
                self.open_instance(i, decree, NodeSet::new(), out);
            }
            self.coord.next_instance = self.coord.next_instance.max(end + 1).max(start);
            self.coord.phase = Phase::Leading;
            out.events.push(Event::Leading {
                node: self.node.me,
                ballot,
                ring: Vec::new(),
                decided_upto: p.floor,
                reproposed: (start, end),
            });
            let repair = Repair {
                ballot,
                epoch: self.node.view.epoch().clone(),
                decided_floor: p.floor,
                upto: p.hi.max(p.floor),
            };
            self.coord.repair = Some(repair.clone());
            for pos in 0..self.cfg.members.len() {
                if p.amnesic_oks & bit(pos) != 0 {
                    out.send(self.node_at(pos), Message::Repair(repair.clone()));
                }
            }
        }
        debug_assert!(p.from <= self.coord.p1_hi, "phase 1 ranges are contiguous");
        self.coord.p1_hi = self.coord.p1_hi.max(p.covered);
        if p.hi >= p.covered {
            // Votes beyond the range: run phase 1 over them too before going further.
            let to = p.hi + 1 + self.cfg.p1_preexecution_number;
            self.coord.prepare = Some(Prepare::new(p.covered, to, self.node.now));
            self.send_phase1a(p.covered, to, out);
        }
        self.assign(out);
    }

    /// Proposes `decree` in `instance` (seed 003 Task 3, last line; seed 000 §2.3): the
    /// coordinator votes first, then phase 2 starts around the ring.
    fn open_instance(
        &mut self,
        instance: Instance,
        decree: Decree,
        mut path: NodeSet,
        out: &mut Out,
    ) {
        debug_assert!(self.coord.phase != Phase::Follower);
        if matches!(decree, Decree::Values(_)) {
            self.coord.value_slots_assigned += 1;
        }
        self.coord.slots_assigned += match &decree {
            Decree::Meta { weight, .. } => u64::from((*weight).max(1)),
            _ => 1,
        };
        if let Some(k) = decree.key() {
            self.coord.open_keys.insert(k);
        }
        path.insert(self.node.me);
        self.coord.open.insert(
            instance,
            Open {
                decree,
                path,
                // Set (and `open_due_min_us` lowered to it) by `send_phase2` below.
                due_us: 0,
                retries: 0,
            },
        );
        self.send_phase2(instance, false, out);
    }

    fn send_phase2(&mut self, instance: Instance, resend: bool, out: &mut Out) {
        let Some(o) = self.coord.open.get_mut(&instance) else {
            return;
        };
        o.due_us = self.node.now.saturating_add(self.cfg.p2_resend_us);
        self.coord.open_due_min_us = self.coord.open_due_min_us.min(o.due_us);
        let decree = o.decree.clone();
        // A first circulation trusts the path the batch took; a resend sends the payload
        // to whoever lacks it for sure.
        let has_payload = if resend {
            NodeSet::one(self.node.me)
        } else {
            o.path.clone()
        };
        let m = Phase2 {
            ballot: self.coord.ballot,
            instance,
            epoch_fp: self.coord.epoch_fp,
            votes: NodeSet::new(),
            visited: NodeSet::new(),
            has_payload,
            decree: WireDecree::full(&decree),
        };
        // The coordinator is an acceptor: it votes by the same rules as any acceptor, and
        // the message leaves from here.
        self.on_phase2(m, out);
    }

    /// Fills free instances from the preset decrees and the queue.
    pub(crate) fn assign(&mut self, out: &mut Out) {
        if self.coord.phase != Phase::Leading {
            return;
        }
        loop {
            let c = &self.coord;
            if c.open.len() >= self.cfg.max_open_instances || c.next_instance >= c.p1_hi {
                break;
            }
            if self.node.acc.as_ref().is_some_and(|a| !a.store.has_room()) {
                break;
            }
            let instance = c.next_instance;
            if self.node.learn.knows(instance) {
                // Decided already (a later phase 1 range of a takeover reported it decided,
                // or a learner did): a new decree there would be refused by every acceptor
                // that knows the decision, and the value would wait for its proposer's
                // re-send, once per decided instance (found by the SIGKILL-all restart test).
                self.coord.preset.remove(&instance);
                self.coord.next_instance += 1;
                continue;
            }
            let (decree, path) = if let Some(d) = self.coord.preset.remove(&instance) {
                (d, NodeSet::new())
            } else if let Some(d) = self.coord.meta.pop_front() {
                (d, NodeSet::new())
            } else if let Some((b, path)) = self.coord.queue.pop_front() {
                self.coord.queue_bytes -= b.wire_bytes();
                let k = b.key();
                self.coord.known.remove(&k);
                if self.coord.open_keys.contains(&k) || self.node.learn.decided_at(k).is_some() {
                    // Open or decided meanwhile (phase 1 re-proposed it, or its first copy
                    // was decided): a second instance would decide it twice.
                    continue;
                }
                (Decree::Values(b), path)
            } else {
                break;
            };
            self.coord.next_instance += 1;
            self.open_instance(instance, decree, path, out);
        }
        self.extend_phase1(out);
    }

    /// Keeps phase 1 `p1_preexecution_number` instances ahead (seed 000 §3.1.2: "at any time
    /// the Promises in the queue are more than half of the p1_preexecution_number").
    fn extend_phase1(&mut self, out: &mut Out) {
        let c = &self.coord;
        if c.phase != Phase::Leading || c.prepare.is_some() {
            return;
        }
        if c.p1_hi.saturating_sub(c.next_instance) > self.cfg.p1_preexecution_number / 2 {
            return;
        }
        let from = c.p1_hi;
        let to = from + self.cfg.p1_preexecution_number;
        self.coord.prepare = Some(Prepare::new(from, to, self.node.now));
        self.send_phase1a(from, to, out);
    }

    /// A decision seen at this node closes the instance if it is open here.
    pub(crate) fn coordinator_on_decided(&mut self, instance: Instance, key: Option<BatchKey>) {
        if let Some(k) = key {
            self.coord.known.remove(&k);
            self.coord.open_keys.remove(&k);
        }
        let Some(o) = self.coord.open.remove(&instance) else {
            return;
        };
        if let Some(k) = o.decree.key() {
            self.coord.open_keys.remove(&k);
        }
        if let Decree::Values(b) = o.decree
            && Some(b.key()) != key
        {
            // Another decree won this instance (a higher ballot): propose ours again.
            self.coord.known.insert(b.key());
            self.coord.queue_bytes += b.wire_bytes();
            self.coord.queue.push_front((b, o.path));
        }
    }

    pub(crate) fn on_nack(&mut self, _from_pos: usize, m: Nack, out: &mut Out) {
        self.node.note_ballot(m.promised);
        let epoch_changed = self.node.view.merge_epoch(&m.epoch);
        if self.coord.phase == Phase::Follower {
            return;
        }
        if m.promised > self.coord.ballot {
            self.start_phase1(out, "phase 2 refused by a higher promise");
        } else if epoch_changed || self.node.view.epoch_fp() != self.coord.epoch_fp {
            self.start_phase1(out, "epoch changed");
        } else if self.coord.phase == Phase::Leading {
            // Refused or not counted in this ballot and epoch: the circulation failed.
            self.retry_soon(m.instance);
        }
    }

    /// A learner is missing `m.from..m.to`: open instances there are re-circulated now.
    pub(crate) fn coordinator_on_retrieve(&mut self, m: &Retrieve, out: &mut Out) {
        if self.coord.phase != Phase::Leading {
            return;
        }
        if m.from < self.coord.next_instance
            && !self.coord.open.contains_key(&m.from)
            && !self.serves(m.from)
        {
            self.start_backfill(m.from, out);
        }
        let to =
            m.to.min(m.from.saturating_add(self.cfg.retrieve_max_instances));
        for (_, o) in self.coord.open.range_mut(m.from..to) {
            o.due_us = 0;
            self.coord.open_due_min_us = 0;
        }
    }

    /// The circulation of `instance` came back without a quorum (see the module comment):
    /// circulate it again soon, backing off from `retrieve_timeout_us` to `p2_resend_us`
    /// while it keeps failing (an acceptor whose window is full until a decision reaches it
    /// refuses to vote for a while).
    pub(crate) fn retry_soon(&mut self, instance: Instance) {
        let (p2_resend_us, first_us) = (self.cfg.p2_resend_us, self.cfg.retrieve_timeout_us);
        let now = self.node.now;
        let Some(o) = self.coord.open.get_mut(&instance) else {
            return;
        };
        let delay_us = first_us
            .checked_shl(o.retries.min(20))
            .unwrap_or(p2_resend_us)
            .min(p2_resend_us);
        o.retries = o.retries.saturating_add(1);
        o.due_us = o.due_us.min(now.saturating_add(delay_us));
        self.coord.open_due_min_us = self.coord.open_due_min_us.min(o.due_us);
    }

    pub(crate) fn coordinator_tick(&mut self, out: &mut Out) {
        let me_coordinator = self.node.coordinator_pos() == Some(self.node.pos);
        match (me_coordinator, self.coord.is_active()) {
            (true, false) => {
                self.start_phase1(out, "first live acceptor in ring order");
                return;
            }
            (false, true) => {
                out.events.push(Event::SteppedDown { node: self.node.me });
                self.step_down();
                return;
            }
            (false, false) => return,
            (true, true) => {}
        }
        if self.node.view.epoch_fp() != self.coord.epoch_fp {
            self.start_phase1(out, "epoch changed");
            return;
        }
        let ring = self.live_ring_mask();
        let lost = self.coord.ring_mask & !ring;
        self.coord.ring_mask = ring;
        if lost != 0 {
            // Phase 2 and decisions in flight through the lost member are gone.
            for o in self.coord.open.values_mut() {
                o.due_us = 0;
            }
            self.coord.open_due_min_us = 0;
        }
        // Phase 1 not answered in time: send it again (same ballot; a refusal raises it).
        if let Some(p) = self.coord.prepare.as_mut()
            && self.node.now >= p.sent_us + self.cfg.p1_resend_us
        {
            p.sent_us = self.node.now;
            let (from, to) = (p.from, p.to);
            self.send_phase1a(from, to, out);
        }
        if self.coord.phase != Phase::Leading {
            return;
        }
        if let Some(b) = self.coord.backfill.as_mut()
            && self.node.now >= b.sent_us + self.cfg.p1_resend_us
        {
            b.sent_us = self.node.now;
            let (from, to) = (b.from, b.to);
            self.send_phase1a(from, to, out);
        }
        // This node's own learner is stuck on an instance nobody re-circulates: backfill it.
        if self.node.learn.next < self.coord.next_instance
            && !self.coord.open.contains_key(&self.node.learn.next)
            && self.node.now >= self.node.learn.last_progress_us + 4 * self.cfg.retrieve_timeout_us
        {
            let from = self.node.learn.next;
            self.start_backfill(from, out);
        }
        // The first `RESEND_PER_TICK` open instances due, in instance order; the earliest
        // `due_us` of the others bounds when the next look is needed (those re-sent now get
        // theirs in `send_phase2`).
        let now = self.node.now;
        let mut due: Vec<Instance> = Vec::new();
        if now >= self.coord.open_due_min_us {
            let mut rest_min_us = Micros::MAX;
            for (&i, o) in &self.coord.open {
                if now >= o.due_us && due.len() < RESEND_PER_TICK {
                    due.push(i);
                } else {
                    rest_min_us = rest_min_us.min(o.due_us);
                }
            }
            self.coord.open_due_min_us = rest_min_us;
        }
        for i in due {
            self.send_phase2(i, true, out);
        }
        self.assign(out);
    }

    fn live_ring_mask(&self) -> u64 {
        self.node
            .view
            .alive_positions(self.node.now)
            .into_iter()
            .fold(0, |m, p| m | bit(p))
    }

    fn step_down(&mut self) {
        let c = &mut self.coord;
        c.phase = Phase::Follower;
        c.prepare = None;
        c.backfill = None;
        c.repair = None;
        c.open.clear();
        c.preset.clear();
        c.queue.clear();
        c.queue_bytes = 0;
        c.known.clear();
        c.open_keys.clear();
        c.meta.clear();
    }

    /// An amnesic acceptor in this ballot's epoch that missed the takeover's `Repair` (its
    /// phase 1 reply came after the quorum) asks again through its heartbeats. The target is
    /// still valid: the phase 1 that found it ran in an epoch that includes the acceptor's
    /// restart, so every reply it counted was given after that restart.
    pub(crate) fn coordinator_on_amnesic_heartbeat(
        &mut self,
        from_pos: usize,
        epoch_fp: u64,
        out: &mut Out,
    ) {
        if self.coord.phase != Phase::Leading || epoch_fp != self.coord.epoch_fp {
            return;
        }
        if let Some(r) = self.coord.repair.clone() {
            out.send(self.node_at(from_pos), Message::Repair(r));
        }
    }
}
