//! Log replication (seed 001 §2.5): the leader's progress per follower, pipelined
//! AppendEntries, the conflict hint, the commit rule; the follower's log matching.
//!
//! **Leader.** Each follower (and learner) has a [`Progress`]: `match_index` (known to
//! match the leader's log) and `next_index` (the next entry to send). In `Probe` it has one
//! AppendEntries out at a time and waits for the answer (or a heartbeat interval); in
//! `Replicate` up to `max_inflight_appends` are out, `next_index` moving ahead of the
//! answers (etcd-io/raft's `tracker`). A refusal carries a conflict hint: the follower's
//! term at `prev_index` and the first index of that term in its log, or its log's end; the
//! leader jumps over the whole conflicting term (§2.5's optimisation, thesis §5.3) and
//! probes again. The commit index is the highest index a majority of voters hold (of each
//! voter set when joint, `membership.rs`), and moves only onto an entry of the current term
//! (thesis §3.6.2); it travels on every AppendEntries and heartbeat.
//!
//! **Follower.** An AppendEntries whose `prev_index` / `prev_term` the log holds is taken:
//! entries already there with the same term are skipped, the first that differs and all
//! after it are replaced (`LogStore::append_on_prefix`; never a committed one), and the
//! commit index moves to `min(leader_commit, last new entry)`. The reply leaves after the
//! entries are durable (`needs_sync`).

use super::election::Transfer;
use super::messages::{AppendEntries, AppendEntriesReply, Heartbeat, HeartbeatReply};
use super::read::Reads;
use super::{Message, Out, Raft, RaftConfig, Role};
use crate::mutation::Mutation;
use crate::replog::EntryBody;
use crate::storage::Entry;
use crate::types::{Batch, BatchKey, Micros, NodeId};
use std::collections::{BTreeMap, HashSet, VecDeque};

/// Node ids of one cluster, without a heap allocation for the usual sizes.
type Peers = smallvec::SmallVec<[NodeId; 8]>;

/// Batch keys a leader remembers having appended in its term (a re-sent batch it already
/// holds is not appended again).
const RECENT_KEYS_MAX: usize = 1 << 16;

/// Entries scanned back at most to find where a conflicting term starts (the hint is
/// still correct when cut short, only less far-reaching).
const HINT_SCAN_MAX: u64 = 1 << 12;

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ProgressState {
    Probe,
    Replicate,
}

/// What the leader knows of one follower's log.
#[derive(Clone, Debug)]
pub struct Progress {
    pub match_index: u64,
    pub next_index: u64,
    pub state: ProgressState,
    /// Probe: an AppendEntries is out since then; nothing more until it is answered or a
    /// heartbeat interval passed.
    pub probe_sent_us: Option<Micros>,
    /// Replicate: the last index of each AppendEntries out, oldest first.
    pub inflight: VecDeque<u64>,
    /// Heard from during the current check-quorum period.
    pub recent_active: bool,
    /// The highest read round (heartbeat `ctx`) it acknowledged.
    pub acked_round: u64,
    /// Its process life, from its replies (`None`: not heard yet).
    pub incarnation: Option<u32>,
    pub amnesic: bool,
    /// When `match_index` last moved (or the state was reset).
    pub last_progress_us: Micros,
    /// The leader's snapshot on its way to the follower, whose next entry the leader's
    /// log no longer holds (Raft §7; `snapshot.rs`).
    pub snapshot: Option<super::snapshot::SnapshotSend>,
}

impl Progress {
    fn new(last_index: u64, now: Micros) -> Progress {
        Progress {
            match_index: 0,
            next_index: last_index + 1,
            state: ProgressState::Probe,
            probe_sent_us: None,
            inflight: VecDeque::new(),
            recent_active: false,
            acked_round: 0,
            incarnation: None,
            amnesic: false,
            last_progress_us: now,
            snapshot: None,
        }
    }

    /// Back to one AppendEntries at a time, from `next_index` (a refusal's hint corrects
    /// it in one round trip if the follower lacks entries before it).
    pub fn become_probe(&mut self) {
        self.state = ProgressState::Probe;
        self.next_index = self.next_index.max(self.match_index + 1);
        self.inflight.clear();
        self.probe_sent_us = None;
    }

    /// The link to the follower dropped: what it acknowledged may have been lost with its
    /// process (an amnesic restart is only known from its next reply), so it counts for
    /// nothing until it answers again.
    pub fn forget(&mut self) {
        self.match_index = 0;
        self.acked_round = 0;
        // A new process of the follower holds none of a snapshot's chunks.
        self.snapshot = None;
        self.become_probe();
    }

    fn become_replicate(&mut self) {
        self.state = ProgressState::Replicate;
        self.next_index = self.match_index + 1;
        self.inflight.clear();
        self.probe_sent_us = None;
    }

    fn can_send(&self, max_inflight: usize) -> bool {
        match self.state {
            ProgressState::Probe => self.probe_sent_us.is_none(),
            ProgressState::Replicate => self.inflight.len() < max_inflight,
        }
    }
}

/// The leader's state (dropped when it steps down).
#[derive(Debug)]
pub struct Leader {
    /// Every other member of the configurations in the log (voters, outgoing voters,
    /// learners).
    pub progress: BTreeMap<NodeId, Progress>,
    pub heartbeat_due_us: Micros,
    pub check_quorum_due_us: Micros,
    /// The next time a transfer to `RaftConfig::preferred_leader` may start.
    pub preferred_try_us: Micros,
    /// The term's first entry (the no-op).
    pub noop_index: u64,
    /// An entry of this term is committed: the commit index is the leader's own (reads
    /// and configuration changes wait for it).
    pub term_committed: bool,
    /// Entries of this term above the commit index: (index, payload bytes).
    pub uncommitted: VecDeque<(u64, usize)>,
    pub uncommitted_bytes: usize,
    recent_keys: HashSet<BatchKey>,
    recent_order: VecDeque<BatchKey>,
    /// The commit index moved: followers with nothing else coming hear it in a heartbeat.
    pub commit_notice: bool,
    /// A heartbeat round (read round) leaves at the end of this input.
    pub round_wanted: bool,
    pub transfer: Option<Transfer>,
    /// A `TimeoutNow` left in this term: no lease read any more (`read.rs`).
    pub lease_revoked: bool,
    pub change: Option<super::membership::PendingChange>,
    pub reads: Reads,
    /// The number the last AppendEntries or Heartbeat sent carried (`Heartbeat::seq`).
    pub sent_seq: u64,
    /// Nodes a committed configuration dropped, told the commit index for a while
    /// ([`Retired`]).
    pub retired: BTreeMap<NodeId, Retired>,
}

/// A node that a committed configuration no longer names. A removed voter campaigns until
/// it knows its removal committed (thesis §4.2.2; `election.rs`, `can_campaign`), but its
/// leader stops replicating to it at that very commit: so for an election timeout every
/// heartbeat round also carries the commit index to it (it takes it up to what it holds
/// of this leader's log, its `match_index` here). Without it a removed voter that is still
/// running campaigned forever, deposing C_new's leader again and again where neither
/// pre-vote nor check-quorum stops it (§4.2.3). etcd's server drops a removed member's
/// messages instead (`ErrMemberRemoved`), from membership it keeps outside the log; Raft's
/// log alone cannot tell a removed candidate from one added by an entry not yet seen.
#[derive(Clone, Copy, Debug)]
pub struct Retired {
    pub match_index: u64,
    pub until_us: Micros,
}

impl Leader {
    pub(crate) fn new(peers: &[NodeId], last_index: u64, now: Micros, cfg: &RaftConfig) -> Leader {
        Leader {
            progress: peers
                .iter()
                .map(|&p| (p, Progress::new(last_index, now)))
                .collect(),
            heartbeat_due_us: now + cfg.heartbeat_interval_us,
            check_quorum_due_us: now + cfg.election_timeout_min_us,
            preferred_try_us: now,
            noop_index: 0,
            term_committed: false,
            uncommitted: VecDeque::new(),
            uncommitted_bytes: 0,
            recent_keys: HashSet::new(),
            recent_order: VecDeque::new(),
            commit_notice: false,
            round_wanted: false,
            transfer: None,
            lease_revoked: false,
            change: None,
            reads: Reads::default(),
            sent_seq: 0,
            retired: BTreeMap::new(),
        }
    }

    /// The progress set follows the configurations in the log: new members start probing
    /// with the last entry (the configuration that names them), members no configuration
    /// names any more are dropped, and told the commit index until `retire_until_us`
    /// ([`Retired`]).
    pub(crate) fn set_peers(
        &mut self,
        peers: &[NodeId],
        last_index: u64,
        now: Micros,
        retire_until_us: Micros,
    ) {
        let retired = &mut self.retired;
        self.progress.retain(|p, pr| {
            let keep = peers.contains(p);
            if !keep {
                retired.insert(
                    *p,
                    Retired {
                        match_index: pr.match_index,
                        until_us: retire_until_us,
                    },
                );
            }
            keep
        });
        for &p in peers {
            self.retired.remove(&p);
            self.progress
                .entry(p)
                .or_insert_with(|| Progress::new(last_index.saturating_sub(1), now));
        }
    }

    fn remember(&mut self, key: BatchKey) {
        if self.recent_keys.insert(key) {
            self.recent_order.push_back(key);
            if self.recent_order.len() > RECENT_KEYS_MAX
                && let Some(old) = self.recent_order.pop_front()
            {
                self.recent_keys.remove(&old);
            }
        }
    }
}

impl Raft {
    // ---- leader ------------------------------------------------------------------------

    /// A batch to append as one entry (proposed here or forwarded). Dropped, for the
    /// proposer to re-send, while a transfer is under way or the uncommitted entries
    /// exceed `max_uncommitted_bytes`; not appended twice in one term.
    pub(crate) fn append_batch(&mut self, batch: Batch, out: &mut Out) {
        let max = self.cfg.max_uncommitted_bytes;
        let Some(lead) = self.lead.as_mut() else {
            return;
        };
        let key = batch.key();
        if lead.transfer.is_some()
            || lead.recent_keys.contains(&key)
            || self.dedup.delivered(key)
            || (lead.uncommitted_bytes + batch.payload_bytes() > max
                && !lead.uncommitted.is_empty())
        {
            return;
        }
        lead.remember(key);
        let entry = EntryBody::Values(batch).entry(self.last_index() + 1, self.term_ballot());
        self.append_local(vec![entry], out);
    }

    pub(crate) fn on_forward(&mut self, batch: Batch, out: &mut Out) {
        if self.role == Role::Leader {
            self.append_batch(batch, out);
        }
    }

    /// Appends entries of this term to the leader's log; they leave at the end of the input.
    pub(crate) fn append_local(&mut self, entries: Vec<Entry>, out: &mut Out) {
        if entries.is_empty() {
            return;
        }
        debug_assert!(entries.iter().all(|e| e.ballot.round == self.term));
        if let Err(e) = self.store.append(&entries) {
            return self.fail(e, out);
        }
        out.needs_sync = true;
        let mut peers_changed = false;
        for e in &entries {
            if let Ok(EntryBody::Membership(m)) = EntryBody::decode(&e.payload) {
                self.configs.on_append(e.index, m);
                peers_changed = true;
            }
        }
        let last = self.last_index();
        let now = self.now;
        let peers = peers_changed.then(|| self.configs.peers(self.me));
        let retire_until_us = now + self.cfg.election_timeout_max_us;
        if let Some(lead) = self.lead.as_mut() {
            for e in &entries {
                lead.uncommitted.push_back((e.index, e.payload.len()));
                lead.uncommitted_bytes += e.payload.len();
            }
            if let Some(peers) = peers {
                lead.set_peers(&peers, last, now, retire_until_us);
            }
        }
        self.maybe_commit(out);
    }

    /// At the end of every input: AppendEntries to every follower with entries to take and
    /// room in its window, then a heartbeat round or commit notices.
    pub(crate) fn flush_leader(&mut self, out: &mut Out) {
        let Some(lead) = self.lead.as_ref() else {
            return;
        };
        let peers: Peers = lead.progress.keys().copied().collect();
        let mut sent = Peers::new();
        for &p in &peers {
            let mut any = false;
            for _ in 0..=self.cfg.max_inflight_appends {
                if !self.send_append(p, false, out) {
                    break;
                }
                any = true;
            }
            if any {
                sent.push(p);
            }
        }
        let Some(lead) = self.lead.as_mut() else {
            return;
        };
        if lead.round_wanted {
            lead.round_wanted = false;
            lead.commit_notice = false;
            let round = lead.reads.start_round(self.now);
            self.send_heartbeats(&peers, round, out);
        } else if lead.commit_notice {
            lead.commit_notice = false;
            let quiet: Peers = peers.into_iter().filter(|p| !sent.contains(p)).collect();
            self.send_heartbeats(&quiet, 0, out);
        }
    }

    /// Heartbeats to `to`, with read round `round` (0: a commit notice); and the commit
    /// index to the nodes retired less than an election timeout ago ([`Retired`]), which
    /// answer nothing.
    fn send_heartbeats(&mut self, to: &[NodeId], round: u64, out: &mut Out) {
        let now = self.now;
        let Some(lead) = self.lead.as_mut() else {
            return;
        };
        lead.retired.retain(|_, r| now < r.until_us);
        for (&p, r) in &lead.retired {
            lead.sent_seq += 1;
            out.send(
                p,
                Message::Heartbeat(Heartbeat {
                    term: self.term,
                    leader: self.me,
                    commit: r.match_index.min(self.commit),
                    ctx: 0,
                    seq: lead.sent_seq,
                }),
            );
        }
        for p in to {
            let Some(pr) = lead.progress.get(p) else {
                continue;
            };
            lead.sent_seq += 1;
            out.send(
                *p,
                Message::Heartbeat(Heartbeat {
                    term: self.term,
                    leader: self.me,
                    commit: pr.match_index.min(self.commit),
                    ctx: round,
                    seq: lead.sent_seq,
                }),
            );
        }
    }

    /// One AppendEntries to `to` if its window allows and it lacks entries (`force`: even
    /// an empty one, a probe). Returns whether one left.
    pub(crate) fn send_append(&mut self, to: NodeId, force: bool, out: &mut Out) -> bool {
        let last = self.last_index();
        let max_inflight = self.cfg.max_inflight_appends;
        let Some(pr) = self.lead.as_ref().and_then(|l| l.progress.get(&to)) else {
            return false;
        };
        if !force && (!pr.can_send(max_inflight) || pr.next_index > last) {
            return false;
        }
        let next = pr.next_index.min(last + 1);
        let prev = next - 1;
        let Some(prev_term) = self.term_at(prev) else {
            // Below the compacted prefix: the snapshot goes instead (Raft §7).
            return self.send_snapshot(to, force, out);
        };
        let entries = if next <= last {
            match self
                .store
                .entries(next, last + 1, self.cfg.max_append_bytes)
            {
                Ok(v) => v,
                Err(e) => {
                    self.fail(e, out);
                    return false;
                }
            }
        } else {
            Vec::new()
        };
        let end = prev + entries.len() as u64;
        let now = self.now;
        let Some(lead) = self.lead.as_mut() else {
            return false;
        };
        lead.sent_seq += 1;
        let seq = lead.sent_seq;
        let Some(pr) = lead.progress.get_mut(&to) else {
            return false;
        };
        match pr.state {
            ProgressState::Probe => pr.probe_sent_us = Some(now),
            ProgressState::Replicate => {
                if end > prev {
                    pr.next_index = end + 1;
                    pr.inflight.push_back(end);
                }
            }
        }
        out.send(
            to,
            Message::AppendEntries(AppendEntries {
                term: self.term,
                leader: self.me,
                prev_index: prev,
                prev_term,
                entries,
                leader_commit: self.commit,
                seq,
            }),
        );
        true
    }

    /// The leader's timers: heartbeat rounds, paused probes, check-quorum, an abandoned
    /// transfer, the next step of a configuration change.
    pub(crate) fn tick_leader(&mut self, out: &mut Out) {
        // A removed leader's hand-over: it goes once `TimeoutNow` left or the transfer's
        // deadline passed (before the expired transfer is forgotten below).
        self.step_down_if_removed(out);
        if self.role != Role::Leader {
            return;
        }
        let now = self.now;
        let interval = self.cfg.heartbeat_interval_us;
        let Some(lead) = self.lead.as_mut() else {
            return;
        };
        if now >= lead.heartbeat_due_us {
            lead.heartbeat_due_us = now + interval;
            lead.round_wanted = true;
        }
        for pr in lead.progress.values_mut() {
            if pr.state == ProgressState::Probe
                && pr.probe_sent_us.is_some_and(|t| now >= t + interval)
            {
                pr.probe_sent_us = None;
            }
        }
        if lead.transfer.is_some_and(|t| now >= t.deadline_us) {
            lead.transfer = None;
        }
        self.check_quorum(out);
        if self.role == Role::Leader {
            self.advance_change(out);
        }
        if self.role == Role::Leader {
            self.transfer_to_preferred(out);
        }
    }

    /// Hands the leadership over to `RaftConfig::preferred_leader` once it holds the whole
    /// committed log and remembers it (a transfer then takes one round trip), not while a
    /// transfer or a configuration change is under way, at most once per
    /// `election_timeout_max_us`.
    fn transfer_to_preferred(&mut self, out: &mut Out) {
        let Some(to) = self.cfg.preferred_leader else {
            return;
        };
        let now = self.now;
        let retry_us = self.cfg.election_timeout_max_us;
        let commit = self.commit;
        let voter = self.configs.current().voters.contains(&to);
        let Some(lead) = self.lead.as_mut() else {
            return;
        };
        if to == self.me
            || !voter
            || now < lead.preferred_try_us
            || !lead.term_committed
            || lead.transfer.is_some()
            || lead.change.is_some()
        {
            return;
        }
        let ready = lead.progress.get(&to).is_some_and(|p| {
            p.incarnation.is_some() && !p.amnesic && p.recent_active && p.match_index >= commit
        });
        if !ready {
            return;
        }
        lead.preferred_try_us = now + retry_us;
        let caught_up = lead
            .progress
            .get(&to)
            .is_some_and(|p| p.match_index == self.store.last_index());
        lead.transfer = Some(Transfer {
            to,
            deadline_us: now + self.cfg.election_timeout_min_us,
            sent: false,
        });
        if caught_up {
            self.send_timeout_now(out);
        } else {
            self.send_append(to, false, out);
        }
    }

    /// The commit rule: the highest index held by a majority of each voter set, if it is
    /// of the current term (thesis §3.6.2; the figure 8 case).
    pub(crate) fn maybe_commit(&mut self, out: &mut Out) {
        let single = self.mutated(Mutation::RaftJointSingleMajority);
        let old_by_count = self.mutated(Mutation::RaftCommitOldTermByCount);
        let me = self.me;
        let last = self.last_index();
        let Some(lead) = self.lead.as_ref() else {
            return;
        };
        let index = self.configs.current().quorum_index(
            |n| {
                if n == me {
                    last
                } else {
                    lead.progress
                        .get(&n)
                        .filter(|p| !p.amnesic)
                        .map_or(0, |p| p.match_index)
                }
            },
            single,
        );
        if index <= self.commit {
            return;
        }
        let of_term = self.term_at(index) == Some(self.term);
        if !of_term && !old_by_count {
            return;
        }
        let configs_before = self.configs.len();
        if !self.set_commit(index, true, out) {
            return;
        }
        let commit = self.commit;
        let peers = (self.configs.len() != configs_before).then(|| self.configs.peers(me));
        let now = self.now;
        let retire_until_us = now + self.cfg.election_timeout_max_us;
        let Some(lead) = self.lead.as_mut() else {
            return;
        };
        if let Some(peers) = peers {
            // A configuration committed: members only older ones named take no more
            // entries, only the commit index for a while (`Retired`).
            lead.set_peers(&peers, last, now, retire_until_us);
        }
        lead.commit_notice = true;
        while lead.uncommitted.front().is_some_and(|&(i, _)| i <= commit) {
            if let Some((_, bytes)) = lead.uncommitted.pop_front() {
                lead.uncommitted_bytes -= bytes;
            }
        }
        if of_term && !lead.term_committed {
            lead.term_committed = true;
            self.serve_waiting_reads(out);
        }
        self.after_commit(out);
    }

    pub(crate) fn on_append_reply(&mut self, from: NodeId, m: AppendEntriesReply, out: &mut Out) {
        if m.term > self.term {
            return self.become_follower(m.term, None, true, out);
        }
        if self.role != Role::Leader || m.term < self.term {
            return;
        }
        let now = self.now;
        let last = self.last_index();
        let Some(pr) = self.lead.as_mut().and_then(|l| l.progress.get_mut(&from)) else {
            return;
        };
        if !observe_life(pr, m.incarnation, m.amnesic, now) {
            return;
        }
        if m.success {
            if m.match_index > last {
                return; // Not a reply to this leader's appends.
            }
            if m.match_index > pr.match_index {
                pr.match_index = m.match_index;
                pr.last_progress_us = now;
            }
            while pr.inflight.front().is_some_and(|&i| i <= m.match_index) {
                pr.inflight.pop_front();
            }
            if pr.state == ProgressState::Probe {
                pr.become_replicate();
            } else {
                pr.next_index = pr.next_index.max(pr.match_index + 1);
            }
            self.maybe_commit(out);
            if self.role == Role::Leader {
                self.send_timeout_now(out);
                self.advance_change(out);
                self.step_down_if_removed(out);
            }
            return;
        }
        // A refusal: stale if it refused something already known to match, or (probing)
        // not the append out now.
        let rejected = m.match_index;
        if rejected <= pr.match_index
            || (pr.state == ProgressState::Probe && rejected + 1 != pr.next_index)
        {
            return;
        }
        let hinted = if m.conflict_term > 0 {
            match self.last_index_of_term(m.conflict_term, rejected.min(last)) {
                Some(j) => j + 1,
                None => m.conflict_index,
            }
        } else {
            m.conflict_index
        };
        let Some(pr) = self.lead.as_mut().and_then(|l| l.progress.get_mut(&from)) else {
            return;
        };
        pr.next_index = hinted.clamp(pr.match_index + 1, rejected.max(pr.match_index + 1));
        pr.state = ProgressState::Probe;
        pr.inflight.clear();
        pr.probe_sent_us = None;
        pr.last_progress_us = now;
        self.send_append(from, true, out);
    }

    /// The last index at or below `upto` whose entry has term `term` (terms never go down
    /// along a log: a binary search).
    fn last_index_of_term(&self, term: u32, upto: u64) -> Option<u64> {
        let first = self.store.first_index().saturating_sub(1);
        if upto < first {
            return None;
        }
        // Largest j in [first, upto] with term_at(j) <= term.
        let (mut lo, mut hi) = (first, upto);
        if self.term_at(lo)? > term {
            return None;
        }
        while lo < hi {
            let mid = lo + (hi - lo).div_ceil(2);
            if self.term_at(mid)? <= term {
                lo = mid;
            } else {
                hi = mid - 1;
            }
        }
        (self.term_at(lo)? == term && lo > 0).then_some(lo)
    }

    pub(crate) fn on_heartbeat_reply(&mut self, from: NodeId, m: HeartbeatReply, out: &mut Out) {
        if m.term > self.term {
            return self.become_follower(m.term, None, true, out);
        }
        if self.role != Role::Leader || m.term < self.term {
            return;
        }
        let now = self.now;
        let last = self.last_index();
        let stall_us = 2 * self.cfg.heartbeat_interval_us;
        let Some(pr) = self.lead.as_mut().and_then(|l| l.progress.get_mut(&from)) else {
            return;
        };
        if !observe_life(pr, m.incarnation, m.amnesic, now) {
            return;
        }
        if !pr.amnesic {
            pr.acked_round = pr.acked_round.max(m.ctx);
        }
        let mut probe = false;
        if pr.match_index < last {
            match pr.state {
                ProgressState::Probe => {
                    pr.probe_sent_us = None;
                    probe = true;
                }
                ProgressState::Replicate => {
                    // Alive but not progressing: an append or its answer was lost.
                    if !pr.inflight.is_empty() && now >= pr.last_progress_us + stall_us {
                        pr.become_probe();
                        pr.last_progress_us = now;
                        probe = true;
                    }
                }
            }
        }
        if probe {
            // Even with nothing new to send: the refusal's hint says where to go on.
            self.send_append(from, true, out);
        }
        self.on_round_acked(out);
    }

    // ---- follower ----------------------------------------------------------------------

    fn append_reply(&self, success: bool, match_index: u64, hint: (u32, u64)) -> Message {
        Message::AppendEntriesReply(AppendEntriesReply {
            term: self.term,
            success,
            match_index,
            conflict_term: hint.0,
            conflict_index: hint.1,
            incarnation: self.incarnation,
            amnesic: self.amnesic,
        })
    }

    pub(crate) fn on_append_entries(&mut self, from: NodeId, m: AppendEntries, out: &mut Out) {
        if m.term < self.term {
            // A deposed leader: the reply's term tells it.
            out.send(from, self.append_reply(false, m.prev_index, (0, 0)));
            return;
        }
        let sync = !self.mutated(Mutation::RaftNoSyncBeforeReply);
        if !self.follow(from, m.term, m.leader, m.seq, sync, out) || self.failed.is_some() {
            return;
        }
        self.note_repair_target(m.term, m.leader_commit);
        let mut prev_index = m.prev_index;
        let mut prev_term = m.prev_term;
        let mut entries = m.entries;
        let end = prev_index + entries.len() as u64;
        if prev_index < self.commit {
            // The committed prefix is the leader's too: skip it.
            let skip = (self.commit - prev_index).min(entries.len() as u64) as usize;
            if skip == entries.len() {
                self.leader_match = self.leader_match.max(self.commit);
                out.send(from, self.append_reply(true, self.commit.max(end), (0, 0)));
                self.check_log_repaired(m.term, m.leader_commit, out);
                return;
            }
            prev_index += skip as u64;
            prev_term = entries[skip - 1].ballot.round;
            entries.drain(..skip);
        }
        match self.term_at(prev_index) {
            None => {
                let last = self.last_index();
                let hint = (0, last + 1);
                out.send(from, self.append_reply(false, prev_index, hint));
                return;
            }
            Some(t) if t != prev_term => {
                let hint = (t, self.conflict_hint(prev_index, t));
                out.send(from, self.append_reply(false, prev_index, hint));
                return;
            }
            Some(_) => {}
        }
        let mut wrote = false;
        let first_new = entries
            .iter()
            .position(|e| self.term_at(e.index) != Some(e.ballot.round));
        if let Some(k) = first_new {
            let from_index = entries[k].index;
            if from_index <= self.commit {
                // A correct leader's log holds every committed entry (Leader Completeness):
                // this one would replace one. Refused, not asserted: it is what a peer sent.
                let why = format!(
                    "its AppendEntries of term {} would replace committed entry {from_index} \
                     (committed up to {})",
                    m.term, self.commit
                );
                return self.refuse(from, why, out);
            }
            if let Err(e) = self.store.append_on_prefix(from_index, &entries[k..]) {
                return self.fail(e, out);
            }
            self.configs.truncate_from(from_index);
            for e in &entries[k..] {
                if let Ok(EntryBody::Membership(mb)) = EntryBody::decode(&e.payload) {
                    self.configs.on_append(e.index, mb);
                }
            }
            wrote = true;
        }
        self.leader_match = self.leader_match.max(end);
        let new_commit = m.leader_commit.min(end);
        if new_commit > self.commit {
            wrote |= self.set_commit(new_commit, sync, out);
        }
        if self.failed.is_some() {
            return;
        }
        if wrote && sync {
            out.needs_sync = true;
        }
        out.send(from, self.append_reply(true, end, (0, 0)));
        self.check_log_repaired(m.term, m.leader_commit, out);
    }

    /// The first index of term `term` in this log, scanning back from `index` (not below
    /// the commit index, whose entries match the leader's anyway).
    fn conflict_hint(&self, index: u64, term: u32) -> u64 {
        let floor = (self.commit + 1).max(self.store.first_index());
        let mut i = index;
        let mut steps = 0;
        while i > floor && steps < HINT_SCAN_MAX && self.term_at(i - 1) == Some(term) {
            i -= 1;
            steps += 1;
        }
        i
    }

    pub(crate) fn on_heartbeat(&mut self, from: NodeId, m: Heartbeat, out: &mut Out) {
        let reply = |r: &Raft| {
            Message::HeartbeatReply(HeartbeatReply {
                term: r.term,
                ctx: m.ctx,
                incarnation: r.incarnation,
                amnesic: r.amnesic,
            })
        };
        if m.term < self.term {
            out.send(from, reply(self)); // A deposed leader: the term tells it.
            return;
        }
        if !self.follow(from, m.term, m.leader, m.seq, true, out) {
            return;
        }
        // Only what an AppendEntries of this leader checked matches its log (the leader's
        // cap, what it believes this node holds, may be from an earlier life of it).
        let commit = m.commit.min(self.leader_match).min(self.last_index());
        if commit > self.commit {
            self.set_commit(commit, true, out);
        }
        // An amnesic node's repair (`repair.rs`): the leader's commit index counts as an
        // `AppendEntries`' does, checked against what an `AppendEntries` matched. An idle
        // leader sends nothing else, and a node whose appends named only a commit index of
        // an earlier term would stay amnesic until the next value.
        if self.failed.is_none() {
            self.check_log_repaired(m.term, m.commit, out);
        }
        if m.ctx != 0 && self.failed.is_none() {
            out.send(from, reply(self));
        }
    }
}

/// A reply from a follower's process life: `false` if from an earlier one (ignore it); a
/// later one means the follower restarted, and nothing known of its log holds any more.
pub(crate) fn observe_life(
    pr: &mut Progress,
    incarnation: u32,
    amnesic: bool,
    now: Micros,
) -> bool {
    match pr.incarnation {
        Some(known) if incarnation < known => return false,
        Some(known) if incarnation > known => {
            pr.forget();
            pr.last_progress_us = now;
        }
        _ => {}
    }
    pr.incarnation = Some(incarnation);
    pr.amnesic = amnesic;
    pr.recent_active = true;
    true
}
