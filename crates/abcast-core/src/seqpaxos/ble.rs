//! Ballot Leader Election: seed 001 appendix A (Algorithm 3, "Gossip Leader Election"), with
//! the quorum-connectivity rule of OmniPaxos (EuroSys'23, "Omni-Paxos: Breaking the Barriers
//! of Partial Connectivity") and leader priorities. Its own component, with its own messages
//! (`HeartbeatRequest`, `HeartbeatReply`); its one output is `⟨LEADER | p, n⟩`, which
//! Sequence Paxos takes in `SeqPaxos::on_leader`.
//!
//! Every Δ (`heartbeat_interval_us`, line 16) a node ends its heartbeat round and starts the
//! next (lines 18-21): it asks every peer for its ballot; a peer answers with its ballot and
//! whether it is *quorum-connected*, i.e. whether it heard a majority in its own last round
//! (line 24, plus the flag). At the end of a round that heard a majority (line 16), the node
//! checks the leader (lines 9-15) among the candidates it heard: itself and the repliers
//! that are quorum-connected. The top candidate's ballot becomes the leader when it is new;
//! when the top is *below* the current leader's ballot — the leader was not among the
//! quorum-connected repliers — the node raises its own ballot above the leader's (line 11)
//! and forgets the leader, so the next round elects the highest quorum-connected ballot.
//!
//! Departures, each named where it is made:
//! - `n_max` (lines 6, 10, 22-23) is not gossiped: a node raises its ballot above the leader
//!   it lost, not above the largest ballot anyone saw. With `n_max`, the chained scenario
//!   (A–B–C, link A–C down) livelocks: C raises above A, A learns C's ballot through B and
//!   raises above C, and so on. OmniPaxos dropped it for the same reason.
//! - Only quorum-connected nodes are candidates (OmniPaxos EuroSys'23): in the quorum-loss
//!   scenario, a leader that can reach only one fully connected node is no candidate, and
//!   that node takes over; a node that hears no majority elects nobody.
//! - The ballot's round carries the priority in its low 8 bits (`(n << 8) | priority`), so
//!   among equal `n` the higher priority wins, then the higher node id, as OmniPaxos'
//!   `(n, priority, pid)`; the incarnation orders two lives of one node.
//! - The delay grows by Δ on a late reply (line 27) but only up to
//!   `heartbeat_delay_max_rounds` Δ, and shrinks by Δ after a round without one: a single
//!   slow reply must not slow every later election.
//! - The quorum-connected flag of a reply is as fresh as the replier can make it (issue 17):
//!   true if the replier's current round already heard a majority, or if that round is
//!   younger than half a delay (its replies may still be on their way) and its last round
//!   heard a majority. A flag taken from the last *finished* round alone is up to two
//!   rounds old, and in the quorum-loss scenario the hub waits for the cut-off leader's
//!   flag to turn before it raises its ballot (one round) and is elected (the next): with
//!   the cut just after everybody's round began, that was five rounds after the cut
//!   (partial mix, seed 272: 245 ms with Δ = 50 ms); with the fresh flag it is at most
//!   four and a half.
//! - Sequence Paxos' requests to raise the ballot (`raise_above`) take effect at once only
//!   for the election BLE just made of this node (the leader event of the round that just
//!   ended, or the head start): that ballot was refused, and the next `tick` elects this
//!   node again, above it, once a round (waiting for the round's end cost a whole round
//!   when a hub that had been cut off came back with a ballot below what the others had
//!   promised meanwhile: partial mix, seed 551, 249 ms). Any other request (a stale leader's `Nack`, an amnesic node's
//!   recovered promise) only sets a floor that this node's next election starts above. A
//!   node does not campaign because it learned that a higher ballot exists: BLE elects from
//!   what its rounds hear (lines 9-15). Raising on a `Nack` made the old leader of the
//!   chained scenario the top candidate of its next round again, with n1 promising to each
//!   in turn: the two leaders took turns for as long as proposals reached both
//!   (`testdata/scenarios/seqpaxos/chained.txt`), the livelock the `n_max` departure above
//!   avoids; and a leader rejoining after a partition deposed the one elected meanwhile.
//! - A leader deposed that way (BLE still names it, Sequence Paxos stepped down for a
//!   higher ballot it does not hear) stays deposed while a quorum-connected node it hears
//!   follows the ballot that deposed it or a higher one (the chained scenario's middle
//!   node: replies name the replier's leader, which appendix A's do not); otherwise
//!   nobody it can reach follows that leader, and it elects itself again, above the ballot
//!   that deposed it. The first version waited until it heard no other quorum-connected
//!   node at all, and the 10,000-seed long run found the stall that left (partition mix,
//!   seed 1319): the deposing leader's `Prepare` reached only the old leader before a
//!   partition cut it off; the third node, connected and following the old leader, kept it
//!   deposed, and the majority that could talk never elected anyone. Without this, BLE kept
//!   naming the deposed node, which no longer led, and no round changed that: after a
//!   chained episode left the old leader deposed, a second one that muted the new leader
//!   left the old leader the only node a majority reaches, and nobody led (partial mix,
//!   seed 376).

use super::config::SeqPaxosConfig;
use super::messages::{HeartbeatReply, HeartbeatRequest, Message};
use crate::types::{Ballot, Micros, NodeId};

/// The ballot number `n` of a BLE ballot (the round above the priority byte).
pub fn ballot_n(b: Ballot) -> u32 {
    b.round >> 8
}

/// The BLE ballot `(n, priority, node, incarnation)`.
pub fn ble_ballot(n: u32, priority: u8, node: NodeId, incarnation: u32) -> Ballot {
    // n above 2^24 - 1 would overflow the round: 16.7 million elections; saturate there
    // (ballots stay ordered, a node at the ceiling can no longer outbid, and says so in
    // its status through its ballot).
    let n = n.min((1 << 24) - 1);
    Ballot::new((n << 8) | u32::from(priority), node, incarnation)
}

#[derive(Debug)]
pub struct Ble {
    me: NodeId,
    config: u64,
    peers: Vec<NodeId>,
    majority: usize,
    priority: u8,
    incarnation: u32,
    delta_us: Micros,
    delay_max_us: Micros,
    /// Line 7: the current delay `d`.
    delay_us: Micros,
    /// Line 2.
    round: u64,
    /// Line 3: `(node, ballot, quorum_connected)` of this round's replies.
    /// This round's replies: sender, its ballot, quorum-connected, the leader it follows.
    ballots: Vec<(NodeId, Ballot, bool, Ballot)>,
    late_reply: bool,
    /// Line 4: this node's ballot `n`.
    ballot: Ballot,
    /// Whether this node heard a majority in its last finished round.
    quorum_connected: bool,
    /// Line 5: `L`.
    leader: Option<Ballot>,
    round_ends_us: Micros,
    /// Whether this node may be elected (an amnesic node may not: it must never lead).
    candidate: bool,
    /// A deliberately broken variant (tests only, `mutations` feature).
    mutation: Option<crate::mutation::Mutation>,
    /// The time of the last `tick`, what a reply's quorum-connected flag is judged at.
    now_us: Micros,
    /// This node's next election starts above this ballot (`raise_above`).
    floor: Ballot,
    /// BLE elected this node at the end of the last round (or gave it the head start).
    elected_self: bool,
    /// That election's ballot was refused and raised: the next `tick` elects this node
    /// again (once per round, see `raise_above`).
    reelect: bool,
    reelected_this_round: bool,
    /// BLE names this node the leader, but Sequence Paxos stepped down for a higher ballot
    /// (see the module comment).
    deposed: bool,
}

impl Ble {
    /// A new component at `now`; its first round ends after one delay. `start_n`: the
    /// ballot number to start from (a restarted node starts above what it promised, so its
    /// own ballot can win again; the previous configuration's leader gets a head start of 1,
    /// §4.4.3).
    pub fn new(cfg: &SeqPaxosConfig, me: NodeId, incarnation: u32, start_n: u32) -> Ble {
        let priority = cfg.priority(me);
        Ble {
            me,
            config: cfg.config_id,
            peers: cfg
                .members
                .iter()
                .map(|m| m.id)
                .filter(|&id| id != me)
                .collect(),
            majority: cfg.majority(),
            priority,
            incarnation,
            delta_us: cfg.heartbeat_interval_us,
            delay_max_us: cfg
                .heartbeat_interval_us
                .saturating_mul(u64::from(cfg.heartbeat_delay_max_rounds)),
            delay_us: cfg.heartbeat_interval_us,
            round: 0,
            ballots: Vec::new(),
            late_reply: false,
            ballot: ble_ballot(start_n, priority, me, incarnation),
            // OmniPaxos starts quorum-connected, so the first round can elect.
            quorum_connected: true,
            leader: None,
            round_ends_us: 0,
            candidate: true,
            mutation: cfg.mutation.get(),
            now_us: 0,
            floor: Ballot::ZERO,
            elected_self: false,
            reelect: false,
            reelected_this_round: false,
            deposed: false,
        }
    }

    /// A node that must never lead says it is not quorum-connected, so nobody elects it,
    /// and leaves itself out of its own candidates.
    pub fn set_candidate(&mut self, candidate: bool) {
        self.candidate = candidate;
    }

    pub fn ballot(&self) -> Ballot {
        self.ballot
    }

    pub fn leader(&self) -> Option<Ballot> {
        self.leader
    }

    pub fn quorum_connected(&self) -> bool {
        self.quorum_connected
    }

    /// When the current round ends.
    pub fn deadline_us(&self) -> Micros {
        self.round_ends_us
    }

    /// This node's ballot must be above `b` (Sequence Paxos promised `b`, so a leader event
    /// for a ballot not above it would start nothing). For the election BLE just made of
    /// this node, `n` is raised past `b` now and the next `tick` elects it again, once per
    /// round (a second refusal waits for the round's end, so two nodes elected at once
    /// cannot outbid each other more than once a round); otherwise `b` becomes a floor
    /// that this node's next election starts above (see the module comment: a node does
    /// not campaign because a higher ballot exists).
    pub fn raise_above(&mut self, b: Ballot) {
        if self.elected_self {
            self.raise_now(b);
            if !self.reelected_this_round && self.leader.is_some_and(|l| l < self.ballot) {
                self.reelect = true;
            }
        } else {
            self.floor = self.floor.max(b);
            if self.leader == Some(self.ballot) && b > self.ballot {
                self.deposed = true;
            }
        }
    }

    fn raise_now(&mut self, b: Ballot) {
        if self.ballot <= b {
            self.ballot = ble_ballot(
                ballot_n(b).saturating_add(1),
                self.priority,
                self.me,
                self.incarnation,
            );
        }
    }

    /// Sequence Paxos promised `b`'s leader: BLE takes it for the leader if it is above the
    /// one it elected. A follower promises any higher ballot, also one its own BLE did not
    /// elect (its node was not quorum-connected here when it won elsewhere); without this,
    /// that leader's failure would go unnoticed here, since BLE replaces only the leader it
    /// knows (lines 10-11). This node's own ballot is the head start (§4.4.3): an election
    /// of this node, as if BLE had made it.
    pub fn observe_leader(&mut self, b: Ballot) {
        if self.leader.is_none_or(|l| l < b) {
            self.leader = Some(b);
            self.deposed = false;
        }
        if b == self.ballot {
            self.elected_self = true;
        }
    }

    /// Whether a reply now says this node is quorum-connected (see the module comment):
    /// its current round heard a majority, or is younger than half a delay and its last
    /// round did.
    fn connected_now(&self) -> bool {
        let round_start = self.round_ends_us.saturating_sub(self.delay_us);
        let young = self.now_us < round_start.saturating_add(self.delay_us / 2);
        self.ballots.len() + 1 >= self.majority || (young && self.quorum_connected)
    }

    /// Starts the first round (call once, at `now`).
    pub fn start(&mut self, now: Micros, out: &mut Vec<(NodeId, Message)>) {
        self.now_us = self.now_us.max(now);
        self.new_round(now, out);
    }

    /// Lines 18-21: a new round of heartbeat requests.
    fn new_round(&mut self, now: Micros, out: &mut Vec<(NodeId, Message)>) {
        self.ballots.clear();
        self.round += 1;
        for &p in &self.peers {
            out.push((
                p,
                Message::HeartbeatRequest(HeartbeatRequest {
                    config: self.config,
                    round: self.round,
                }),
            ));
        }
        self.round_ends_us = now + self.delay_us;
    }

    /// Line 16: the round's timeout. Returns the leader elected, if a new one.
    pub fn tick(&mut self, now: Micros, out: &mut Vec<(NodeId, Message)>) -> Option<Ballot> {
        self.now_us = self.now_us.max(now);
        if now < self.round_ends_us {
            if std::mem::take(&mut self.reelect) {
                // The refused election, made again above what refused it.
                self.reelected_this_round = true;
                self.leader = Some(self.ballot);
                return Some(self.ballot);
            }
            return None;
        }
        self.elected_self = false;
        self.reelect = false;
        self.reelected_this_round = false;
        let heard = self.ballots.len() + 1;
        let elected = if heard >= self.majority {
            self.quorum_connected = true;
            self.check_leader()
        } else {
            // OmniPaxos: a node that heard no majority is no candidate.
            self.quorum_connected = false;
            None
        };
        // Line 27, bounded both ways (see the module comment).
        self.delay_us = if self.late_reply {
            (self.delay_us + self.delta_us).min(self.delay_max_us)
        } else {
            self.delay_us
                .saturating_sub(self.delta_us)
                .max(self.delta_us)
        };
        self.late_reply = false;
        self.new_round(now, out);
        elected
    }

    /// Lines 9-15, among quorum-connected candidates.
    fn check_leader(&mut self) -> Option<Ballot> {
        // The broken variant: appendix A as written, every ballot heard a candidate.
        let any = crate::mutation::on(
            self.mutation,
            crate::mutation::Mutation::SeqPaxosBleIgnoresQuorumConnectivity,
        );
        let top = self
            .ballots
            .iter()
            .filter(|(_, _, qc, _)| *qc || any)
            .map(|(_, b, _, _)| *b)
            .chain(self.candidate.then_some(self.ballot))
            .max();
        let Some(top) = top else {
            // Nobody to elect among what this round heard (this node is no candidate).
            return None;
        };
        match self.leader {
            Some(l) if top < l => {
                // Lines 10-11: the leader is not among the quorum-connected nodes heard.
                self.raise_now(l);
                self.leader = None;
                self.deposed = false;
                None
            }
            Some(l) if top == l => {
                let floor = self.floor;
                let deposer_followed = self
                    .ballots
                    .iter()
                    .any(|(_, _, qc, leader)| *qc && *leader >= floor);
                if !(self.deposed && self.candidate && top == self.ballot && !deposer_followed) {
                    return None;
                }
                // Deposed, and no quorum-connected node heard follows the deposer: lead
                // again.
                let floor = self.floor;
                self.raise_now(floor);
                self.deposed = false;
                self.elected_self = true;
                self.leader = Some(self.ballot);
                Some(self.ballot)
            }
            _ => {
                self.deposed = false;
                // Lines 13-15. This node's own election starts above its floor (it stays
                // the top: its ballot only grows).
                let top = if self.candidate && top == self.ballot {
                    let floor = self.floor;
                    self.raise_now(floor);
                    self.elected_self = true;
                    self.ballot
                } else {
                    top
                };
                self.leader = Some(top);
                Some(top)
            }
        }
    }

    /// Lines 22-24.
    pub fn on_request(&self, from: NodeId, m: &HeartbeatRequest, out: &mut Vec<(NodeId, Message)>) {
        if m.config != self.config {
            return;
        }
        out.push((
            from,
            Message::HeartbeatReply(HeartbeatReply {
                config: self.config,
                round: m.round,
                ballot: self.ballot,
                quorum_connected: self.connected_now() && self.candidate,
                leader: self.leader.unwrap_or_default(),
            }),
        ));
    }

    /// Lines 25-27. A reply names its sender's ballot, which must be the sender's own.
    pub fn on_reply(&mut self, from: NodeId, m: &HeartbeatReply) {
        if m.config != self.config || m.ballot.node != from || !self.peers.contains(&from) {
            return;
        }
        if m.round == self.round {
            if !self.ballots.iter().any(|(n, ..)| *n == from) {
                self.ballots
                    .push((from, m.ballot, m.quorum_connected, m.leader));
            }
        } else if m.round < self.round {
            self.late_reply = true;
        }
    }
}

impl super::SeqPaxos {
    /// This node's Ballot Leader Election, read only (for status lines and scenario
    /// stories: its ballot, the leader it elected, whether it is quorum-connected).
    pub fn ble(&self) -> &Ble {
        &self.ble
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn cfg() -> SeqPaxosConfig {
        SeqPaxosConfig::replicas(&[1, 2, 3])
    }

    #[test]
    fn ballots_order_by_number_then_priority_then_node() {
        let a = ble_ballot(1, 0, NodeId(3), 0);
        let b = ble_ballot(1, 5, NodeId(1), 0);
        let c = ble_ballot(2, 0, NodeId(1), 0);
        assert!(a < b && b < c);
        assert_eq!(ballot_n(c), 2);
        assert_eq!(
            ballot_n(ble_ballot(u32::MAX, 0, NodeId(1), 0)),
            (1 << 24) - 1
        );
    }

    /// Appendix A: with every node heard, the highest ballot is elected; once it is no
    /// longer heard, the others raise their ballots and the next highest takes over.
    #[test]
    fn the_highest_heard_ballot_leads_and_a_silent_leader_is_replaced() {
        let mut ble = Ble::new(&cfg(), NodeId(2), 0, 0);
        let mut out = Vec::new();
        ble.start(0, &mut out);
        assert_eq!(out.len(), 2, "a request to each peer");
        let b3 = ble_ballot(0, 0, NodeId(3), 0);
        let reply = |round, ballot, qc| HeartbeatReply {
            config: 0,
            round,
            ballot,
            quorum_connected: qc,
            leader: Ballot::default(),
        };
        ble.on_reply(NodeId(3), &reply(1, b3, true));
        let elected = ble.tick(50_000, &mut out);
        assert_eq!(elected, Some(b3));
        // Round 2: only node 1 answers (node 3 is silent): node 3 is gone.
        ble.on_reply(NodeId(1), &reply(2, ble_ballot(0, 0, NodeId(1), 0), true));
        assert_eq!(ble.tick(100_000, &mut out), None);
        assert!(ble.ballot() > b3, "raised above the lost leader");
        ble.on_reply(NodeId(1), &reply(3, ble_ballot(0, 0, NodeId(1), 0), true));
        assert_eq!(
            ble.tick(150_000, &mut out),
            Some(ble.ballot()),
            "itself next"
        );
    }

    /// The quorum-connectivity rule: a higher ballot whose node heard no majority is no
    /// candidate.
    #[test]
    fn a_node_that_is_not_quorum_connected_is_not_elected() {
        let mut ble = Ble::new(&cfg(), NodeId(2), 0, 0);
        let mut out = Vec::new();
        ble.start(0, &mut out);
        ble.on_reply(
            NodeId(3),
            &HeartbeatReply {
                config: 0,
                round: 1,
                ballot: ble_ballot(9, 0, NodeId(3), 0),
                quorum_connected: false,
                leader: Ballot::default(),
            },
        );
        assert_eq!(ble.tick(50_000, &mut out), Some(ble.ballot()));
    }

    #[test]
    fn a_round_without_a_majority_elects_nobody_and_late_replies_slow_the_next() {
        let mut ble = Ble::new(&cfg(), NodeId(2), 0, 0);
        let mut out = Vec::new();
        ble.start(0, &mut out);
        assert_eq!(ble.tick(50_000, &mut out), None);
        assert!(!ble.quorum_connected());
        let first = ble.deadline_us();
        ble.on_reply(
            NodeId(1),
            &HeartbeatReply {
                config: 0,
                round: 1,
                ballot: ble_ballot(0, 0, NodeId(1), 0),
                quorum_connected: true,
                leader: Ballot::default(),
            },
        );
        ble.tick(first, &mut out);
        assert_eq!(ble.deadline_us() - first, 100_000, "one more Δ");
        // Forged: a reply whose ballot is not its sender's is ignored.
        ble.on_reply(
            NodeId(1),
            &HeartbeatReply {
                config: 0,
                round: 3,
                ballot: ble_ballot(50, 0, NodeId(3), 0),
                quorum_connected: true,
                leader: Ballot::default(),
            },
        );
        assert!(ble.ballots.is_empty());
    }

    fn reply(round: u64, ballot: Ballot, quorum_connected: bool) -> HeartbeatReply {
        HeartbeatReply {
            config: 0,
            round,
            ballot,
            quorum_connected,
            leader: Ballot::default(),
        }
    }

    /// The flag `on_request` puts in the reply to a request arriving now.
    fn flag(ble: &Ble) -> bool {
        let mut out = Vec::new();
        ble.on_request(
            NodeId(1),
            &HeartbeatRequest {
                config: 0,
                round: 1,
            },
            &mut out,
        );
        match out.pop() {
            Some((_, Message::HeartbeatReply(r))) => r.quorum_connected,
            other => panic!("no reply: {other:?}"),
        }
    }

    /// A reply's quorum-connected flag is fresh: true while the current round is young and
    /// the last one heard a majority, or once the current one did; false once the current
    /// round is half a delay old without a majority (the quorum-loss hub then sees the
    /// cut-off leader drop out a round earlier).
    #[test]
    fn a_reply_says_quorum_connected_only_while_the_current_round_can_hear_a_majority() {
        let mut ble = Ble::new(&cfg(), NodeId(2), 0, 0);
        let mut out = Vec::new();
        ble.start(0, &mut out);
        ble.on_reply(NodeId(3), &reply(1, ble_ballot(0, 0, NodeId(3), 0), true));
        ble.tick(50_000, &mut out);
        assert!(ble.quorum_connected());
        ble.tick(60_000, &mut out);
        assert!(flag(&ble), "a young round: the last round's answer");
        ble.tick(76_000, &mut out);
        assert!(!flag(&ble), "half a delay without a majority");
        ble.on_reply(NodeId(1), &reply(2, ble_ballot(0, 0, NodeId(1), 0), true));
        assert!(flag(&ble), "the current round heard a majority");
    }

    /// A leader deposed by a higher ballot it does not hear (a `Nack`) does not campaign
    /// while a quorum-connected node it hears follows that ballot (the chained scenario's
    /// middle node); once none does (the one it hears follows the deposed leader: partition
    /// mix, seed 1319; or is not connected), it leads again, above the ballot that deposed
    /// it.
    #[test]
    fn a_deposed_leader_leads_again_only_when_no_connected_node_follows_the_deposer() {
        let following = |round, qc, leader| HeartbeatReply {
            leader,
            ..reply(round, ble_ballot(0, 0, NodeId(1), 0), qc)
        };
        let mut ble = Ble::new(&cfg(), NodeId(2), 0, 0);
        let mut out = Vec::new();
        ble.start(0, &mut out);
        ble.on_reply(NodeId(1), &reply(1, ble_ballot(0, 0, NodeId(1), 0), true));
        let mine = ble.tick(50_000, &mut out).expect("elected");
        assert_eq!(mine, ble.ballot());
        // Rounds go by; then a Nack names a higher ballot (node 3's, not heard here).
        ble.on_reply(NodeId(1), &following(2, true, mine));
        assert_eq!(ble.tick(100_000, &mut out), None);
        let higher = ble_ballot(4, 0, NodeId(3), 0);
        ble.raise_above(higher);
        assert_eq!(ble.ballot(), mine, "no campaign on a Nack");
        ble.on_reply(NodeId(1), &following(3, true, higher));
        assert_eq!(
            ble.tick(150_000, &mut out),
            None,
            "node 1 is connected and follows the deposer"
        );
        ble.on_reply(NodeId(1), &following(4, true, mine));
        let again = ble
            .tick(200_000, &mut out)
            .expect("nobody connected follows the deposer");
        assert!(again > higher && again == ble.ballot());
    }

    /// The same, when the only other node heard is not quorum-connected.
    #[test]
    fn a_deposed_leader_that_is_the_only_connected_node_leads_again() {
        let mut ble = Ble::new(&cfg(), NodeId(2), 0, 0);
        let mut out = Vec::new();
        ble.start(0, &mut out);
        ble.on_reply(NodeId(1), &reply(1, ble_ballot(0, 0, NodeId(1), 0), true));
        let mine = ble.tick(50_000, &mut out).expect("elected");
        ble.on_reply(NodeId(1), &reply(2, ble_ballot(0, 0, NodeId(1), 0), true));
        assert_eq!(ble.tick(100_000, &mut out), None);
        let higher = ble_ballot(4, 0, NodeId(3), 0);
        ble.raise_above(higher);
        assert_eq!(ble.ballot(), mine);
        ble.on_reply(NodeId(1), &reply(3, ble_ballot(0, 0, NodeId(1), 0), false));
        let again = ble
            .tick(150_000, &mut out)
            .expect("the only connected node");
        assert!(again > higher);
    }

    /// Sequence Paxos refusing the ballot BLE just elected this node with raises it at
    /// once, and the next tick elects the node again, higher; a second refusal in the
    /// same round waits for the round's end.
    #[test]
    fn a_refused_election_is_raised_and_made_again_once_a_round() {
        let mut ble = Ble::new(&cfg(), NodeId(2), 0, 0);
        let mut out = Vec::new();
        ble.start(0, &mut out);
        ble.on_reply(NodeId(1), &reply(1, ble_ballot(0, 0, NodeId(1), 0), true));
        let first = ble.tick(50_000, &mut out).expect("elected");
        let promised = ble_ballot(7, 0, NodeId(3), 0);
        ble.raise_above(promised);
        assert!(ble.ballot() > promised);
        let second = ble.tick(51_000, &mut out).expect("elected again at once");
        assert!(second > first && second == ble.ballot());
        ble.raise_above(ble_ballot(9, 0, NodeId(3), 0));
        assert_eq!(ble.tick(52_000, &mut out), None, "once a round");
        ble.on_reply(NodeId(1), &reply(2, ble_ballot(0, 0, NodeId(1), 0), true));
        let third = ble.tick(100_000, &mut out).expect("at the round's end");
        assert!(third > second && third == ble.ballot());
    }
}
