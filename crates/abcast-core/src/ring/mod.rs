//! What the two ring protocols share: U-Ring Paxos (seed 000 §2.3, §3.1, §3.2) and Ring
//! Paxos with IP multicast (seed 003 §4, §6.1) are one family. Both keep the same acceptor
//! state (seed 003 Algorithm 2) with the same amnesia and repair rule (§4.2), the same
//! learner (seed 000 §3.1.4: in-order delivery, retrieval of what was missed, de-duplication
//! of batches decided twice), the same membership view with heartbeats and incarnation
//! epochs (seed 000 §3.2 without Zookeeper), the same snapshot and trim rules (issue 4), and
//! the same messages for phase 1, refusals, retrieval, heartbeats and repair. They differ in
//! phase 2 and in how decisions travel: around the ring (`uring/`), or by ip-multicast from
//! the coordinator (`ringpaxos/`).
//!
//! | file | what |
//! | --- | --- |
//! | `view.rs` | membership view, failure detector, epochs |
//! | `acceptor.rs` | acceptor state (store, amnesia, repair target), skip memory |
//! | `learner.rs` | learner state, de-duplication memory, payload cache |
//! | `snapshot.rs` | snapshot, transfer and trim rules |
//! | `messages.rs` | the messages both protocols send, with their codecs |
//! | `node.rs` | `RingNode`: the node state both protocols hold, heartbeats, sync, status |
//! | `meta.rs` | decrees for a layer above the ring (Multi-Ring Paxos), reported as passes |

pub mod acceptor;
pub mod learner;
pub mod messages;
pub mod meta;
pub(crate) mod node;
pub mod snapshot;
pub mod view;

pub use meta::{ComposableRing, Pass, PeerSnapshot, RingConfigView};
pub(crate) use node::RingNode;
pub use view::{Epoch, RingView, bit};

use crate::protocol::Outbox;
use crate::types::{Ballot, BatchKey, Decree, Instance};

/// Largest ring (the largest `NodeSet` and epoch a message carries; a node's own position
/// masks, never sent, are 64 bits).
pub const MAX_RING_MEMBERS: usize = 64;

pub use crate::mutation::Slot as MutationSlot;

/// The parts of a ring protocol node that the shared learner steps below need.
pub(crate) trait RingHost {
    type Msg;
    /// The node state the protocol holds (one field, no indirection).
    fn ring_node(&self) -> &RingNode;
    fn ring_node_mut(&mut self) -> &mut RingNode;
    fn retrieve_max_instances(&self) -> u64;
    /// Records a decision in every role of the node (learner, acceptor store, proposer's
    /// acks, and the coordinator where it tracks decisions).
    fn record_decision(
        &mut self,
        instance: Instance,
        ballot: Ballot,
        decree: Option<Decree>,
        key: Option<BatchKey>,
        out: &mut Outbox<Self::Msg>,
    );
    /// Work common to every input: deliver what is ready, end amnesia when repaired.
    fn after_input(&mut self, out: &mut Outbox<Self::Msg>);

    /// A learner behind first takes what its own acceptor holds decided: after a restart
    /// a durable store has decisions the other acceptors may no longer serve (they keep the
    /// decisions they did not vote for in memory only), and a learner only asked its peers
    /// (found by the faults-remain phase: durable uring seed 8, a restarted coordinator
    /// whose learner waited at instance 1 for a decision its own log held).
    fn learn_from_own_store(&mut self, out: &mut Outbox<Self::Msg>) {
        let max = self.retrieve_max_instances();
        let node = self.ring_node();
        let (Some(acc), learn) = (node.acc.as_ref(), &node.learn) else {
            return;
        };
        let from = learn.next;
        let to = (from + max).min(learn.decided_max.max(from) + 1);
        let entries = acc
            .store
            .range_where(from, to, &mut |i, a| a.decided && !learn.knows(i));
        if entries.is_empty() {
            return;
        }
        for (instance, a) in entries {
            if let Decree::Values(b) = &a.decree {
                let node = self.ring_node_mut();
                node.cache.insert(b);
                node.learn.offer_payload(b);
            }
            let key = a.decree.key();
            self.record_decision(instance, a.ballot, Some(a.decree), key, out);
        }
        self.after_input(out);
    }
}
