//! Acceptor state shared by the two ring protocols: seed 003 Algorithm 2 (`rnd`, `v-rnd`,
//! `v-val` in an [`AcceptorStore`]) and §4.2 (an acceptor "must not forget its state": the
//! amnesia and repair rule, see `uring/acceptor.rs` and `ringpaxos/mod.rs` for how each
//! protocol runs it), and the skip memory a `Decided` answer carries (bug B3).

use super::learner::LearnerState;
use crate::storage::{Accepted, AcceptorStore};
use crate::types::{Ballot, Decree, Instance};

/// Bytes of accepted payload in one phase 1 reply or retrieve answer.
pub const REPLY_MAX_BYTES: usize = 8 << 20;

pub struct AcceptorState {
    pub store: Box<dyn AcceptorStore + Send>,
    /// Lost its state in a restart and not yet repaired.
    pub amnesic: bool,
    /// The repair target, once a coordinator has named it.
    pub repair_upto: Option<Instance>,
}

impl AcceptorState {
    pub fn new(mut store: Box<dyn AcceptorStore + Send>, amnesic: bool) -> AcceptorState {
        // A durable store that kept its state is not amnesic whatever the driver says.
        let amnesic = amnesic && !store.is_durable();
        if !amnesic {
            // Its state is whole: a later restart on this store is not amnesic (issue 33,
            // suspect 2: a life that lost its state stays amnesic across crashes until its
            // repair, below).
            store.mark_whole();
        }
        AcceptorState {
            store,
            amnesic,
            repair_upto: None,
        }
    }

    /// Stores a phase 2 vote (seed 003 Task 4: `if c-rnd >= rnd then v-rnd, v-val :=
    /// c-rnd, c-val`), after the caller checked the ballot and the epoch and raised the
    /// promise. The invariants of voting are asserted in release builds too, each with a
    /// message naming what broke: a vote only under the promised ballot; one decree per
    /// instance per ballot (a coordinator proposes each instance once per ballot); never a
    /// vote that would replace a decided decree. `false`: the store had no room (not voting
    /// is always safe).
    pub fn put_vote(&mut self, instance: Instance, ballot: Ballot, decree: &Decree) -> bool {
        let promised = self.store.promised();
        assert!(
            ballot >= promised,
            "safety invariant broken: a vote in instance {instance} under ballot {ballot}, \
             below this acceptor's promise {promised}"
        );
        if let Some(a) = self.store.get(instance) {
            assert!(
                a.ballot != ballot || a.decree.same_as(decree),
                "safety invariant broken: two decrees for instance {instance} in ballot {ballot} \
                 ({} voted, then {})",
                describe(&a.decree),
                describe(decree)
            );
            assert!(
                !a.decided || a.decree.same_as(decree),
                "safety invariant broken: a vote would replace the decided decree of instance \
                 {instance} ({} decided, {} proposed in ballot {ballot})",
                describe(&a.decree),
                describe(decree)
            );
        }
        self.store.put(
            instance,
            Accepted {
                ballot,
                decree: decree.clone(),
                decided: false,
            },
        )
    }

    /// Stores a decided decree (a fact: safe to hold as a vote at any ballot). Where this
    /// acceptor voted for it, a decided mark; otherwise a learned decision
    /// ([`Self::put_learned`]). A decided decree never changes (asserted).
    pub fn record_decided(&mut self, instance: Instance, ballot: Ballot, decree: &Decree) {
        if let Some(a) = self.store.get(instance) {
            assert!(
                !a.decided || a.decree.same_as(decree),
                "safety invariant broken: instance {instance} decided {} here, now {}",
                describe(&a.decree),
                describe(decree)
            );
        }
        match self.store.get(instance) {
            Some(a) if a.decree.same_as(decree) => {
                if !a.decided {
                    self.store.mark_decided(instance);
                }
            }
            _ => {
                let ballot = self
                    .store
                    .get(instance)
                    .map_or(ballot, |a| a.ballot.max(ballot));
                self.put_learned(
                    instance,
                    Accepted {
                        ballot,
                        decree: decree.clone(),
                        decided: true,
                    },
                );
            }
        }
    }

    /// The learner delivered (or passed) `instance` with this decree, or passed it knowing
    /// only the key of its batch (a copy of one delivered before): then this acceptor's own
    /// vote for that batch, if it has one, is marked decided, and a vote for anything else
    /// there is dropped (`AcceptorStore::discard_stale`): an undecided vote left at the front
    /// of a bounded window kept it full for good (found by the simulator, durable uring
    /// crash seed 42: the coordinator could assign no instance).
    pub fn record_learned(
        &mut self,
        instance: Instance,
        decree: Option<&Decree>,
        key: Option<crate::types::BatchKey>,
    ) {
        let decree = match decree {
            Some(d) => d,
            None => {
                match self.store.get(instance) {
                    Some(a) if a.decided => {}
                    Some(a) if key.is_some() && a.decree.key() == key => {
                        self.store.mark_decided(instance)
                    }
                    Some(_) if key.is_some() => self.store.discard_stale(instance),
                    // Decided with a batch whose payload is not here: the window may still
                    // move past it (found by the learner_skip mix, multiring seed 8).
                    None => self.store.note_decided_elsewhere(instance, key),
                    _ => {}
                }
                return;
            }
        };
        if instance >= self.store.log_start()
            && !self.store.get(instance).is_some_and(|a| a.decided)
        {
            let ballot = self.store.get(instance).map_or(Ballot::ZERO, |a| a.ballot);
            self.put_learned(
                instance,
                Accepted {
                    ballot,
                    decree: decree.clone(),
                    decided: true,
                },
            );
        }
    }

    /// A decision this acceptor did not vote for (or voted otherwise at a lower ballot):
    /// the votes of the quorum that decided it are durable, so a durable store need not
    /// write it (`AcceptorStore::put_learned`), except while the acceptor is amnesic: the
    /// decisions it learns up to its repair target replace the votes it forgot (§4.2).
    fn put_learned(&mut self, instance: Instance, accepted: Accepted) {
        if self.amnesic {
            self.store.put(instance, accepted);
        } else {
            self.store.put_learned(instance, accepted);
        }
    }

    /// Ends amnesia once every decision up to the repair target is known.
    pub fn check_repaired(&mut self, delivered_upto: Instance) -> Option<crate::event::Event> {
        if self.amnesic && self.repair_upto.is_some_and(|u| delivered_upto >= u) {
            self.amnesic = false;
            // Once what it holds now is durable, a restart on its store is not amnesic.
            self.store.mark_whole();
            return Some(crate::event::Event::Repaired {
                upto: delivered_upto,
            });
        }
        None
    }
}

/// A decree in an invariant's message: the batch key, never the payload.
pub(crate) fn describe(d: &Decree) -> String {
    match d {
        Decree::Values(b) => format!("batch {:?}", b.key()),
        Decree::Noop => "no-op".into(),
        Decree::Meta { weight, data } => {
            format!("meta decree (weight {weight}, {} bytes)", data.len())
        }
    }
}

/// Every batch first decided in `[from, to')` for the largest `to' <= to` this node can vouch
/// for, as `(from, to', batches)` (an empty range when it can vouch for nothing): the batch
/// keys its acceptor store kept of instances that left it (`AcceptorStore::evicted_keys`),
/// and what its learner delivered (`Dedup`), whichever reaches further (both are the truth
/// for their ranges; together, sorted by instance). Shared by both ring protocols.
pub(crate) type SkipMemory = (Instance, Instance, Vec<(crate::types::BatchKey, Instance)>);

pub(crate) fn skip_memory_of(
    learn: &LearnerState,
    store: Option<&(dyn AcceptorStore + Send)>,
    from: Instance,
    to: Instance,
) -> SkipMemory {
    let mut reach = from;
    let mut keys = Vec::new();
    if let Some((log_start, k)) = store.and_then(|s| s.evicted_keys(from)) {
        reach = log_start.min(to);
        keys = k;
    }
    let delivered = learn.delivered_upto();
    if delivered >= from && delivered + 1 > reach {
        let mine = learn.dedup_between(from, to.min(delivered + 1));
        reach = to.min(delivered + 1);
        keys.extend(mine);
    }
    if reach <= from {
        return (0, 0, Vec::new());
    }
    keys.retain(|&(_, i)| i < reach);
    keys.sort_unstable_by_key(|&(k, i)| (i, k.origin.0, k.first_seq));
    keys.dedup();
    let excess = keys.len().saturating_sub(super::learner::SKIP_DEDUP_MAX);
    if excess > 0 {
        // Too many to send: vouch for the tail only.
        keys.drain(..excess);
        let first = keys.first().map_or(reach, |&(_, i)| i);
        return (first, reach, keys);
    }
    (from, reach, keys)
}

#[cfg(test)]
mod invariant_tests {
    //! The voting invariants fire, in every build, with a message that names what broke.
    use super::*;
    use crate::storage::MemoryStore;
    use crate::types::{Batch, NodeId, ValueId};
    use bytes::Bytes;

    fn acceptor() -> AcceptorState {
        AcceptorState::new(Box::new(MemoryStore::new(1024, 1 << 20)), false)
    }

    fn batch(seq: u64) -> Decree {
        Decree::Values(Batch::single(
            ValueId {
                node: NodeId(1),
                seq,
            },
            Bytes::from_static(b"v"),
        ))
    }

    fn ballot(round: u32) -> Ballot {
        Ballot::new(round, NodeId(0), 0)
    }

    #[test]
    fn a_vote_at_or_above_the_promise_is_stored() {
        let mut a = acceptor();
        a.store.set_promised(ballot(2));
        assert!(a.put_vote(7, ballot(2), &batch(1)));
        assert!(
            a.put_vote(7, ballot(3), &batch(2)),
            "a higher ballot may change a vote"
        );
    }

    #[test]
    #[should_panic(expected = "below this acceptor's promise")]
    fn a_vote_below_the_promise_breaks_an_invariant() {
        let mut a = acceptor();
        a.store.set_promised(ballot(3));
        a.put_vote(7, ballot(2), &batch(1));
    }

    #[test]
    #[should_panic(expected = "two decrees for instance 7 in ballot")]
    fn two_decrees_for_one_instance_in_one_ballot_break_an_invariant() {
        let mut a = acceptor();
        a.put_vote(7, ballot(2), &batch(1));
        a.put_vote(7, ballot(2), &batch(2));
    }

    #[test]
    #[should_panic(expected = "instance 7 decided")]
    fn a_decided_decree_that_changes_breaks_an_invariant() {
        let mut a = acceptor();
        a.record_decided(7, ballot(2), &batch(1));
        a.record_decided(7, ballot(3), &batch(2));
    }
}
