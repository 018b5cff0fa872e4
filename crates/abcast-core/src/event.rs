//! Typed control-plane events (`Outbox::events`): what a protocol tells its driver about
//! leadership, repair, snapshots and group changes, as data a program can match on (a
//! status page, a metrics counter, a test) and as a log line (`Display`). Each protocol
//! family adds the variants it needs; none carries a payload.

use crate::types::{Ballot, GroupId, Instance, NodeId};
use std::fmt;

/// One control-plane event (see the module comment).
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Event {
    /// `node` starts phase 1 (a leader election) with `ballot`, from instance `from`;
    /// `why` names what made it.
    PhaseOne {
        node: NodeId,
        ballot: Ballot,
        from: Instance,
        why: String,
    },
    /// A leader fills holes `[from, to)` below its phase 1 with `ballot`.
    Backfill {
        node: NodeId,
        ballot: Ballot,
        from: Instance,
        to: Instance,
    },
    /// `node` leads with `ballot`: everything up to `decided_upto` is decided, and it
    /// proposed again `reproposed` (inclusive; empty when `start > end`). `ring`: the
    /// acceptors it chose for phase 2 (Ring Paxos; empty for a protocol without).
    Leading {
        node: NodeId,
        ballot: Ballot,
        ring: Vec<NodeId>,
        decided_upto: Instance,
        reproposed: (Instance, Instance),
    },
    /// An acceptor that forgot its state must learn every decision up to `upto` before its
    /// promises count (seed 003 §4.2).
    RepairNeeded { upto: Instance },
    /// The acceptor knows every decision up to `upto` again: its promises count.
    Repaired { upto: Instance },
    /// A learner behind the acceptors' trim point asks a peer which batches `[next, to)`
    /// decided before it skips them.
    SkipMemoryAsked { next: Instance, to: Instance },
    /// A learner passes over `[next, floor)`, trimmed at every acceptor; `snapshots_off`:
    /// the group's learners take no snapshots (else this node has no state to install).
    LearnerSkips {
        next: Instance,
        floor: Instance,
        snapshots_off: bool,
    },
    /// A learner behind the trim point waits for a live peer whose snapshot covers `need`.
    SnapshotAwaited { next: Instance, need: Instance },
    /// A learner behind the trim point (the log starts at `floor`) fetches `node`'s
    /// snapshot up to `upto`.
    SnapshotFetching {
        next: Instance,
        floor: Instance,
        node: NodeId,
        upto: Instance,
    },
    /// A fetched snapshot up to `upto` came too late: the learner delivered up to
    /// `delivered`.
    SnapshotStale { upto: Instance, delivered: Instance },
    /// A snapshot fetched from a peer up to `upto` was refused (`detail`).
    SnapshotRefused { upto: Instance, detail: String },
    /// A snapshot transfer stopped (`why`); the learner tries again later.
    SnapshotTransferGivenUp { why: String },
    /// `node` stops coordinating (it no longer sees itself first in its ring).
    SteppedDown { node: NodeId },
    /// The learner installed a peer's snapshot up to `upto`.
    SnapshotInstalled { upto: Instance, app_bytes: usize },
    /// `node` asks a group to decide that it starts (`join`) or stops delivering it, from
    /// merge turn `turn` (Multi-Ring subscribe / unsubscribe; process groups later).
    GroupChangeAsked {
        node: NodeId,
        group: GroupId,
        join: bool,
        turn: u64,
    },
    /// The change is decided: in effect from turn `at` (decided at merge slot `slot`).
    GroupChanged {
        node: NodeId,
        group: GroupId,
        join: bool,
        at: u64,
        slot: u64,
    },
    /// A group's instances `[from, to)` were trimmed everywhere: this learner can no longer
    /// merge the group (a snapshot would carry its slot count).
    GroupUnmergeable {
        group: GroupId,
        from: Instance,
        to: Instance,
    },
    /// A learner that does not follow a ring took the ring's position (`upto`) and slot
    /// count (`slot`, the next instance's) from `node`'s snapshot: it was behind the ring's
    /// trim point, and delivers none of the ring's values there.
    GroupRealigned {
        upto: Instance,
        slot: u64,
        node: NodeId,
    },
    /// A subscription change this learner asked for in `group` is dropped undecided: the
    /// learner installed a peer's snapshot, whose subscriptions it takes (ask again).
    GroupChangeDropped { group: GroupId },
    /// A decided control value that does not decode (`detail`).
    BadControl { group: GroupId, detail: String },
    /// An event of one group's protocol instance inside a composition (Multi-Ring).
    InGroup { group: GroupId, event: Box<Event> },
    /// Ballot leader election at `node` elected `leader` with `ballot` (seed 001 appendix A).
    LeaderElected {
        node: NodeId,
        leader: NodeId,
        ballot: Ballot,
    },
    /// A decided log entry at `index` does not decode (`detail`): every learner passes over
    /// it alike.
    BadEntry { index: Instance, detail: String },
    /// A message `from` sent was refused as one no correct peer sends (`why`: a leader
    /// message whose leader is not its sender, a second leader claimed for one term). It
    /// is dropped, never asserted on: a corrupted-but-valid or forged frame must not stop
    /// the node. The simulator, which forges nothing, counts it as a violation.
    MessageRefused { from: NodeId, why: String },
}

impl fmt::Display for Event {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Event::PhaseOne {
                node,
                ballot,
                from,
                why,
            } => write!(
                f,
                "{node} starts phase 1 with ballot {ballot} from instance {from} ({why})"
            ),
            Event::Backfill {
                node,
                ballot,
                from,
                to,
            } => write!(
                f,
                "{node} backfills instances {from}..{to} with ballot {ballot}"
            ),
            Event::Leading {
                node,
                ballot,
                ring,
                decided_upto,
                reproposed: (start, end),
            } => {
                write!(f, "{node} leads with ballot {ballot}")?;
                if !ring.is_empty() {
                    write!(f, ", ring {ring:?}")?;
                }
                write!(
                    f,
                    ": decided up to {decided_upto}, re-proposed {start}..={end}"
                )
            }
            Event::RepairNeeded { upto } => {
                write!(f, "acceptor repair: must learn every decision up to {upto}")
            }
            Event::Repaired { upto } => {
                write!(f, "acceptor repaired: knows every decision up to {upto}")
            }
            Event::SkipMemoryAsked { next, to } => write!(
                f,
                "learner behind the trim point at {next}: asks for the de-duplication memory \
                 of instances {next}..{to} before it skips them"
            ),
            Event::LearnerSkips {
                next,
                floor,
                snapshots_off,
            } => write!(
                f,
                "learner skips instances {next}..{floor}: trimmed at every acceptor, and {}",
                if *snapshots_off {
                    "this group's learners take no snapshots"
                } else {
                    "this node has no application state to install"
                }
            ),
            Event::SnapshotAwaited { next, need } => write!(
                f,
                "learner behind the trim point at {next}: waits for a live peer whose snapshot covers {need}"
            ),
            Event::SnapshotFetching {
                next,
                floor,
                node,
                upto,
            } => write!(
                f,
                "learner behind the trim point at {next} (log starts at {floor}): fetching the snapshot of node {node} (up to {upto})"
            ),
            Event::SnapshotStale { upto, delivered } => write!(
                f,
                "snapshot up to {upto} not installed: the learner already delivered up to {delivered}"
            ),
            Event::SnapshotRefused { upto, detail } => {
                write!(f, "snapshot up to {upto} refused: {detail}")
            }
            Event::SnapshotTransferGivenUp { why } => {
                write!(f, "snapshot transfer given up: {why}")
            }
            Event::SteppedDown { node } => write!(f, "{node} steps down as coordinator"),
            Event::MessageRefused { from, why } => {
                write!(f, "message from {from} refused: {why}")
            }
            Event::SnapshotInstalled { upto, app_bytes } => write!(
                f,
                "learner installed a peer's snapshot up to {upto} ({app_bytes} bytes of application state)"
            ),
            Event::GroupChangeAsked {
                node,
                group,
                join,
                turn,
            } => write!(
                f,
                "{node} asks ring {} to {} it from turn {turn}",
                group.0,
                if *join { "subscribe" } else { "unsubscribe" }
            ),
            Event::GroupChanged {
                node,
                group,
                join,
                at,
                slot,
            } => write!(
                f,
                "{node} {} ring {} from turn {at} (decided at slot {slot})",
                if *join {
                    "subscribes to"
                } else {
                    "unsubscribes from"
                },
                group.0
            ),
            Event::GroupUnmergeable { group, from, to } => write!(
                f,
                "ring {}: instances {from}..{to} were trimmed everywhere; this learner stops \
                 merging the ring (a snapshot would carry its slot count)",
                group.0
            ),
            Event::GroupRealigned { upto, slot, node } => write!(
                f,
                "learner not following the ring: position {upto} and slot {slot} taken from \
                 the snapshot of {node}"
            ),
            Event::GroupChangeDropped { group } => write!(
                f,
                "ring {}: the subscription change asked for is dropped: a peer's snapshot was \
                 installed, with its subscriptions",
                group.0
            ),
            Event::BadControl { group, detail } => {
                write!(f, "ring {}: undecodable control value: {detail}", group.0)
            }
            Event::LeaderElected {
                node,
                leader,
                ballot,
            } => write!(f, "{node} elects {leader} with ballot {ballot}"),
            Event::BadEntry { index, detail } => {
                write!(f, "decided entry {index} does not decode: {detail}")
            }
            Event::InGroup { group, event } => write!(f, "ring {}: {event}", group.0),
        }
    }
}
