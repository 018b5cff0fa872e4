//! Mutation tests: each ring protocol with one safety rule removed (`abcast_core::mutation`,
//! built only with the `mutations` feature, which this crate's tests turn on) must be caught
//! by its simulation suite. A test fails if the sweep of its mix stays quiet over its seed
//! budget: a checker that never fails proves nothing.
//!
//! Each test names the mix that catches the mutation first (measured with `sweep --mutation
//! NAME --stop`; the budgets leave room over the seed where it was first caught, about three
//! times; a run is deterministic, so a change that moves the catch past its budget fails here
//! and asks for a new measurement) and stops at the first violation, so the file costs little
//! when the simulator bites. The measured first catches and rates are in docs/testing.md.
//!
//! Replay a catch with the line the test prints (its scenario names the mutation), e.g.
//! `ABCAST_SIM_SEED=4 ABCAST_SIM_MIX=pause ABCAST_SIM_NODES=3 ... ABCAST_SIM_SCENARIO=
//! vote_ignores_epoch cargo test -p abcast-sim --test uring replay -- --exact --nocapture`.

use abcast_core::mutation::Mutation;
use abcast_sim::FaultMix;
use abcast_sim::suites::{self, Proto, Variant};

/// Runs `proto` with `m` under `mix` for up to `budget` seeds and asserts a violation.
fn caught(proto: Proto, m: Mutation, mix: FaultMix, budget: u64) {
    const { assert!(abcast_core::mutation::AVAILABLE, "built without mutations") };
    let r = suites::sweep(proto, mix, 0..budget, Variant::broken(m), true);
    match r.violations.first() {
        Some(v) => eprintln!(
            "{proto} with {m}: caught by the {mix} mix at seed {} ({} seeds): {:?} ({})\n  replay: {}",
            v.seed,
            r.seeds,
            v.kind,
            v.kind.property(),
            v.replay
        ),
        None => panic!(
            "{proto} with the mutation {m}: {} seeds of the {mix} mix found nothing ({:?})",
            r.seeds, r.totals.faults
        ),
    }
}

// ---- U-Ring Paxos ------------------------------------------------------------------------

#[test]
fn uring_voting_outside_its_epoch_is_caught() {
    caught(
        Proto::URing,
        Mutation::VoteIgnoresEpoch,
        FaultMix::Pause,
        150,
    );
}

#[test]
fn uring_counting_amnesic_promises_is_caught() {
    caught(
        Proto::URing,
        Mutation::AmnesicPromisesCount,
        FaultMix::Pause,
        100,
    );
}

#[test]
fn uring_ignoring_the_repair_target_is_caught() {
    caught(Proto::URing, Mutation::RepairIgnored, FaultMix::Mixed, 300);
}

#[test]
fn uring_dropping_decided_entries_at_takeover_is_caught() {
    caught(
        Proto::URing,
        Mutation::DecidedDroppedAtTakeover,
        FaultMix::Crash,
        100,
    );
}

#[test]
fn uring_trimming_past_a_quorum_of_snapshots_is_caught() {
    caught(
        Proto::URing,
        Mutation::TrimPastQuorum,
        FaultMix::PowerLoss,
        100,
    );
}

#[test]
fn uring_voting_before_the_vote_is_durable_is_caught() {
    caught(
        Proto::URing,
        Mutation::NoSyncBeforeVote,
        FaultMix::PowerLoss,
        100,
    );
}

// ---- Ring Paxos --------------------------------------------------------------------------

// Ring Paxos' `VoteIgnoresEpoch` has no sweep here: the random sweeps do not meet it (none
// in 12,000 seeds of every mix, nor in 600 per mix with the ghost story), because a Ring
// Paxos decision is taken by the coordinator, which restarts phase 1 the moment any
// heartbeat tells it of the restart. Its catch is the scenario story
// `testdata/scenarios/ringpaxos/ringpaxos_voting_outside_its_epoch_is_caught_by_the_ghost_story.txt`
// (run by `tests/scenarios.rs`; docs/testing.md, "What the mutations showed").

#[test]
fn ringpaxos_counting_amnesic_promises_is_caught() {
    caught(
        Proto::RingPaxos,
        Mutation::AmnesicPromisesCount,
        FaultMix::Crash,
        100,
    );
}

/// The rarest catch of the file: the mixed preset meets it first at seed 186 (5 in 1,000).
#[test]
fn ringpaxos_ignoring_the_repair_target_is_caught() {
    caught(
        Proto::RingPaxos,
        Mutation::RepairIgnored,
        FaultMix::Mixed,
        600,
    );
}

#[test]
fn ringpaxos_dropping_decided_entries_at_takeover_is_caught() {
    caught(
        Proto::RingPaxos,
        Mutation::DecidedDroppedAtTakeover,
        FaultMix::Mixed,
        100,
    );
}

#[test]
fn ringpaxos_trimming_past_a_quorum_of_snapshots_is_caught() {
    caught(
        Proto::RingPaxos,
        Mutation::TrimPastQuorum,
        FaultMix::PowerLoss,
        100,
    );
}

#[test]
fn ringpaxos_voting_before_the_vote_is_durable_is_caught() {
    caught(
        Proto::RingPaxos,
        Mutation::NoSyncBeforeVote,
        FaultMix::PowerLoss,
        100,
    );
}

// ---- Multi-Ring Paxos (its rings are U-Ring Paxos rings with the mutation) --------------

#[test]
fn multiring_voting_outside_its_epoch_is_caught() {
    caught(
        Proto::MultiRing,
        Mutation::VoteIgnoresEpoch,
        FaultMix::Pause,
        400,
    );
}

#[test]
fn multiring_counting_amnesic_promises_is_caught() {
    caught(
        Proto::MultiRing,
        Mutation::AmnesicPromisesCount,
        FaultMix::Pause,
        100,
    );
}

#[test]
fn multiring_ignoring_the_repair_target_is_caught() {
    caught(
        Proto::MultiRing,
        Mutation::RepairIgnored,
        FaultMix::Pause,
        100,
    );
}

#[test]
fn multiring_dropping_decided_entries_at_takeover_is_caught() {
    caught(
        Proto::MultiRing,
        Mutation::DecidedDroppedAtTakeover,
        FaultMix::Crash,
        100,
    );
}

#[test]
fn multiring_voting_before_the_vote_is_durable_is_caught() {
    caught(
        Proto::MultiRing,
        Mutation::NoSyncBeforeVote,
        FaultMix::PowerLoss,
        100,
    );
}

/// Multi-Ring Paxos snapshots the merge and trims each ring below its learners' snapshots
/// in the `power_loss` mix (issue 33): trimming one instance more than they cover leaves a
/// learner that restarts from its own snapshot, or installs a peer's, without the instance
/// after it.
#[test]
fn multiring_trimming_past_a_quorum_of_snapshots_is_caught() {
    caught(
        Proto::MultiRing,
        Mutation::TrimPastQuorum,
        FaultMix::PowerLoss,
        100,
    );
}

// ---- Multi-Ring Paxos over Ring Paxos rings (issue 16) ----------------------------------
//
// The rings are Ring Paxos rings with the mutation. First catches with `sweep --protocol
// multiring-ringpaxos --mix all --seeds 200 --mutation NAME --stop`: amnesic promises at
// mixed seed 6, the repair target at mixed seed 84 (a release-build invariant panics),
// decided entries at partition seed 40 (likewise), unsynced votes at power-loss seed 0. As
// with plain Ring Paxos, `vote_ignores_epoch` is not caught by the sweeps (200 seeds of every
// mix): the coordinator restarts phase 1 as soon as a heartbeat tells it of the restart.
// `trim_past_quorum` as for Multi-Ring Paxos over U-Ring rings (the rings' trim rule is
// the same function): caught at power-loss seed 0.

#[test]
fn multiring_ringpaxos_counting_amnesic_promises_is_caught() {
    caught(
        Proto::MultiRingPaxos,
        Mutation::AmnesicPromisesCount,
        FaultMix::Mixed,
        30,
    );
}

#[test]
fn multiring_ringpaxos_ignoring_the_repair_target_is_caught() {
    caught(
        Proto::MultiRingPaxos,
        Mutation::RepairIgnored,
        FaultMix::Mixed,
        250,
    );
}

#[test]
fn multiring_ringpaxos_dropping_decided_entries_at_takeover_is_caught() {
    caught(
        Proto::MultiRingPaxos,
        Mutation::DecidedDroppedAtTakeover,
        FaultMix::Partition,
        125,
    );
}

#[test]
fn multiring_ringpaxos_trimming_past_a_quorum_of_snapshots_is_caught() {
    caught(
        Proto::MultiRingPaxos,
        Mutation::TrimPastQuorum,
        FaultMix::PowerLoss,
        100,
    );
}

#[test]
fn multiring_ringpaxos_voting_before_the_vote_is_durable_is_caught() {
    caught(
        Proto::MultiRingPaxos,
        Mutation::NoSyncBeforeVote,
        FaultMix::PowerLoss,
        10,
    );
}

// Sequence Paxos (seed 001 appendix B): each broken variant removes one rule.

#[test]
fn seqpaxos_promising_below_the_promise_is_caught() {
    caught(
        Proto::SeqPaxos,
        Mutation::SeqPaxosPromiseBelow,
        FaultMix::Crash,
        50,
    );
}

#[test]
fn seqpaxos_keeping_its_own_log_at_takeover_is_caught() {
    caught(
        Proto::SeqPaxos,
        Mutation::SeqPaxosAdoptOwnLog,
        FaultMix::Crash,
        50,
    );
}

#[test]
fn seqpaxos_counting_amnesic_promises_is_caught() {
    caught(
        Proto::SeqPaxos,
        Mutation::SeqPaxosAmnesicCounts,
        FaultMix::Crash,
        100,
    );
}

#[test]
fn seqpaxos_replying_before_the_write_is_durable_is_caught() {
    caught(
        Proto::SeqPaxos,
        Mutation::SeqPaxosNoSyncBeforeReply,
        FaultMix::PowerLoss,
        50,
    );
}

#[test]
fn seqpaxos_deciding_before_the_log_is_the_leaders_is_caught() {
    caught(
        Proto::SeqPaxos,
        Mutation::SeqPaxosDecideInPrepare,
        FaultMix::Crash,
        100,
    );
}

/// Ballot Leader Election without OmniPaxos' quorum-connectivity rule (appendix A as
/// written): in a quorum-loss episode the hub keeps electing the cut-off leader, whose
/// ballot is the highest it hears, and nobody a majority reaches ever leads. Caught by
/// the partial-connectivity mix's bound (first at seed 0; 94 of 200 seeds), and shown by
/// `testdata/scenarios/seqpaxos/seqpaxos_ble_ignores_quorum_connectivity_is_caught_by_quorum_loss.txt`.
#[test]
fn seqpaxos_ble_ignoring_quorum_connectivity_is_caught_by_the_partial_mix() {
    caught(
        Proto::SeqPaxos,
        Mutation::SeqPaxosBleIgnoresQuorumConnectivity,
        FaultMix::PartialConnectivity,
        10,
    );
}

/// A snapshot that compacts undecided entries and takes them as decided (OmniPaxos
/// compacts only up to the decided index): the node passes over entries that were never
/// chosen, or are chosen with other values, and its learner misses what everyone delivers.
#[test]
fn seqpaxos_compacting_undecided_entries_is_caught() {
    caught(
        Proto::SeqPaxos,
        Mutation::SeqPaxosTrimUndecided,
        FaultMix::Crash,
        10,
    );
}

// The learners' de-duplication (`abcast_core::dedup`), shared by the families.

/// A de-duplication memory that keeps only the latest few batch keys per origin (the
/// memory before the delivered ranges, which let 884,745 values through twice in one
/// `bench concurrency --batch-bytes 16` run): a re-sent batch decided behind more batches
/// than it remembers is delivered twice. The simulator's proposers re-send on their
/// adaptive timer even without faults, so the quiet mix catches it (first at seed 1 for
/// Sequence Paxos, seed 2 for Raft).
#[test]
fn seqpaxos_forgetting_old_batches_in_dedup_is_caught() {
    caught(
        Proto::SeqPaxos,
        Mutation::DedupForgetsOldBatches,
        FaultMix::None,
        10,
    );
}

#[test]
fn raft_forgetting_old_batches_in_dedup_is_caught() {
    caught(
        Proto::Raft,
        Mutation::DedupForgetsOldBatches,
        FaultMix::None,
        10,
    );
}

// Raft (seed 001 §2.5, §2.5.1): each broken variant removes one rule.

#[test]
fn raft_voting_for_a_candidate_whose_log_is_behind_is_caught() {
    caught(
        Proto::Raft,
        Mutation::RaftVoteWithoutLogCheck,
        FaultMix::PowerLoss,
        10,
    );
}

/// First caught at seed 57 since Raft snapshots in power_loss (at seed 0 before: a
/// restart from a snapshot re-reads less of the log the mutation left unsynced).
#[test]
fn raft_replying_before_the_write_is_durable_is_caught() {
    caught(
        Proto::Raft,
        Mutation::RaftNoSyncBeforeReply,
        FaultMix::PowerLoss,
        180,
    );
}

/// A follower that installs a (late or duplicated) snapshot below its commit index, and
/// forgets the committed entries after it (Raft §7 keeps them): the application moves
/// back, which the checkers see as soon as it happens.
#[test]
fn raft_installing_a_snapshot_below_the_commit_index_is_caught() {
    caught(
        Proto::Raft,
        Mutation::RaftInstallBelowCommit,
        FaultMix::Crash,
        10,
    );
}

/// Committing an entry of an earlier term by counting replicas is only unsafe in Raft's
/// figure 8, where three leaders in a row (the first two deposed before their entries
/// spread, the first back in a later term) line up with a follower's answer that covers
/// the old entries but not the new leader's no-op. No sweep produced it (1,000 power_loss
/// seeds, the only mix whose restarts keep their logs, with 2 KiB appends too), so a
/// scenario story plays it: `testdata/scenarios/raft/raft_commit_old_term_by_count_is_caught_by_figure_8.txt`
/// ends in a DISAGREEMENT with the mutation, and in agreement without it. This test runs
/// that story and checks that it still shows the disagreement.
#[test]
fn raft_committing_an_old_term_entry_by_counting_replicas_is_caught_by_figure_8() {
    story_disagrees(
        "raft_commit_old_term_by_count_is_caught_by_figure_8.txt",
        "DISAGREEMENT in instance 4",
    );
}

/// Runs the Raft scenario story `file` (it must play as written) and checks that its
/// broken half still ends in `disagreement` (at two learners).
fn story_disagrees(file: &str, disagreement: &str) {
    let path = std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("testdata/scenarios/raft")
        .join(file);
    let r = abcast_sim::scenario::run_file(&path, false).unwrap_or_else(|e| panic!("{e}"));
    assert!(r.skipped.is_none(), "skipped: {:?}", r.skipped);
    assert!(r.failure.is_none(), "{}", r.failure.unwrap_or_default());
    let text = std::fs::read_to_string(&path).expect("the story");
    assert_eq!(
        text.matches(disagreement).count(),
        2,
        "{file}: the broken variant must end in {disagreement} at two learners"
    );
}

/// Counting only the new voters' majority in a joint configuration: no mix of the suite
/// reconfigures a Raft cluster, so a scenario story replaces voters 1 and 2 by 3 and 4
/// while 1 and 2 are cut off (`testdata/scenarios/raft/raft_joint_single_majority_is_caught.txt`):
/// with the mutation the leader commits C_old,new and C_new with {0, 3, 4} alone while 1
/// and 2, a majority of C_old, elect one of themselves: v and x both at 6.
#[test]
fn raft_counting_only_the_new_majority_in_a_joint_configuration_is_caught() {
    story_disagrees(
        "raft_joint_single_majority_is_caught.txt",
        "DISAGREEMENT in instance 6",
    );
}

// ---- Token ring (the EVS world) -------------------------------------------------------------

/// Runs the token ring with `m` under `mix` for up to `budget` seeds (`abcast_sim::evs`) and
/// asserts a violation.
fn token_caught(m: Mutation, mix: FaultMix, budget: u64) {
    const { assert!(abcast_core::mutation::AVAILABLE, "built without mutations") };
    let mut first = None;
    for seed in 0..budget {
        let mut cfg = abcast_sim::evs::EvsConfig::new(mix);
        cfg.seed = seed;
        if let Err(v) = abcast_sim::evs::token::run_token(&cfg, Some(m)) {
            first = Some(v);
            break;
        }
    }
    match first {
        Some(v) => eprintln!(
            "token with {m}: caught by the {mix} mix at seed {}: {:?} ({})\n  replay: {}",
            v.seed,
            v.kind,
            v.kind.property(),
            v.replay
        ),
        None => {
            panic!("token with the mutation {m}: {budget} seeds of the {mix} mix found nothing")
        }
    }
}

#[test]
fn token_safe_delivery_without_the_two_round_aru_is_caught() {
    token_caught(Mutation::TokenSafeAtOnce, FaultMix::Partition, 10);
}

#[test]
fn token_aru_raised_by_anyone_is_caught() {
    token_caught(Mutation::TokenAruRaisedByAnyone, FaultMix::Partition, 10);
}

#[test]
fn token_recovery_without_old_messages_is_caught() {
    token_caught(Mutation::TokenSkipRecovery, FaultMix::Partition, 10);
}

#[test]
fn token_taking_duplicate_tokens_is_caught() {
    token_caught(Mutation::TokenTakesDuplicateTokens, FaultMix::Partition, 10);
}

#[test]
fn token_membership_without_flap_damping_is_caught() {
    token_caught(
        Mutation::TokenNoFlapDamping,
        FaultMix::PartialConnectivity,
        20,
    );
}

// ---- Process groups over the token ring (the EVS world's group layer) ---------------------

#[test]
fn groups_without_the_state_exchange_are_caught() {
    token_caught(Mutation::GroupsNoStateExchange, FaultMix::Partition, 10);
}

#[test]
fn groups_delivering_during_the_state_exchange_are_caught() {
    token_caught(Mutation::GroupsDeliverDuringExchange, FaultMix::Crash, 10);
}

/// Runs the token ring with `m` under `mix` for up to `budget` seeds, asserts that the
/// first violation is of `kind` (the one the removed rule causes), and that the correct
/// ring passes that same seed.
fn token_caught_as(m: Mutation, mix: FaultMix, budget: u64, kind: abcast_sim::ViolationKind) {
    const { assert!(abcast_core::mutation::AVAILABLE, "built without mutations") };
    let run = |seed: u64, m: Option<Mutation>| {
        let mut cfg = abcast_sim::evs::EvsConfig::new(mix);
        cfg.seed = seed;
        abcast_sim::evs::token::run_token(&cfg, m)
    };
    let Some(v) = (0..budget).find_map(|seed| run(seed, Some(m)).err()) else {
        panic!("token with the mutation {m}: {budget} seeds of the {mix} mix found nothing")
    };
    eprintln!(
        "token with {m}: caught by the {mix} mix at seed {}: {:?} ({})\n  replay: {}",
        v.seed,
        v.kind,
        v.kind.property(),
        v.replay
    );
    assert_eq!(
        v.kind,
        kind,
        "token with {m}: caught, but as {}",
        v.headline()
    );
    if let Err(c) = run(v.seed, None) {
        panic!(
            "the correct token ring fails seed {} of the {mix} mix too: {}",
            v.seed,
            c.headline()
        );
    }
}

/// Without Totem's "failed to receive" rule, a member whose data lane stays cut (it gets
/// the token, none of the data) holds the aru, and every member's discard point, down for
/// the whole remain phase: nothing is acknowledged in its last window. (First caught at
/// seed 6.)
#[test]
fn token_without_the_failed_to_receive_rule_is_caught() {
    token_caught_as(
        Mutation::TokenNoFailToRecv,
        FaultMix::PartialConnectivity,
        20,
        abcast_sim::ViolationKind::AcksStalled,
    );
}
