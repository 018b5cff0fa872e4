//! The leader's side of Sequence Paxos: appendix B, "State & General" lines 18-27 (taking
//! leadership) and "Leader (1)", "Leader (2)"; the §4.4.3 optimisations (one batched
//! `Accept` per follower per flush, the latest `Decide` only, the max `AcceptSync`); and the
//! read-index barrier.

use super::messages::{
    Accept, Accepted, Decide, FetchReq, FetchResp, Message, Nack, Prepare, Promise,
};
use super::{Out, Phase, Role, SeqPaxos};
use crate::ProposeError;
use crate::event::Event;
use crate::mutation::Mutation;
use crate::protocol::ReadState;
use crate::replog::EntryBody;
use crate::storage::Entry;
use crate::types::{Ballot, Batch, Micros, NodeId};
use std::collections::{BTreeMap, BTreeSet, VecDeque};

/// What a promise reported (General line 21, Leader (1) line 9).
#[derive(Clone, Debug)]
pub struct PromiseInfo {
    pub n_a: Ballot,
    pub ld: u64,
    pub log_len: u64,
    pub suffix: Vec<Entry>,
    pub amnesic: bool,
}

/// A read waiting for its barrier (see [`SeqPaxos::leader_read_index`]).
#[derive(Clone, Copy, Debug)]
pub struct PendingRead {
    pub id: u64,
    pub upto: u64,
    /// The confirmation round that must complete; 0 until one is started for it.
    pub round: u64,
}

/// One follower's replication state at the leader.
#[derive(Clone, Debug, Default)]
pub struct Progress {
    /// The next entry to send it.
    pub next: u64,
    /// Accepts in flight: `(last entry, payload bytes)`, oldest first.
    pub inflight: VecDeque<(u64, usize)>,
    pub inflight_bytes: usize,
    /// When its `las` last moved, or entries were first outstanding.
    pub progress_us: Micros,
    pub decided_sent: u64,
}

impl Progress {
    /// `entries` (from `from` on) left for the follower at `now`.
    fn sent(&mut self, from: u64, entries: &[Entry], now: Micros) {
        let Some(last) = entries.last() else {
            return;
        };
        debug_assert_eq!(
            entries[0].index, from,
            "entries start where they are said to"
        );
        if self.inflight.is_empty() {
            self.progress_us = now;
        }
        let bytes: usize = entries.iter().map(|e| e.payload.len()).sum();
        self.next = last.index + 1;
        self.inflight.push_back((last.index, bytes));
        self.inflight_bytes += bytes;
    }
}

/// The proposer state of Algorithm 4 (lines 8-13), and the leader's bookkeeping.
#[derive(Debug, Default)]
pub struct LeaderState {
    /// `n_L`.
    pub n_l: Ballot,
    pub promises: BTreeMap<NodeId, PromiseInfo>,
    /// `las`: the longest accepted length per acceptor, in round `n_L`.
    pub las: BTreeMap<NodeId, u64>,
    /// `lds`: `⊥` is absent; a follower with an entry promised and is synchronised.
    pub lds: BTreeMap<NodeId, u64>,
    pub prop_cmds: Vec<Batch>,
    /// `l_c`.
    pub l_c: u64,
    /// The leader's `l_d` when it sent `Prepare` (suffixes in promises start after it).
    pub prepare_ld: u64,
    /// The highest promised `(n_a, log_len)` adopted (§4.4.3 max AcceptSync), and the log
    /// length right after adoption: every entry chosen before this leader is at or below it.
    pub max_n_a: Ballot,
    pub max_log_len: u64,
    pub sync_len: u64,
    pub progress: BTreeMap<NodeId, Progress>,
    pub prepare_sent_us: BTreeMap<NodeId, Micros>,
    pub reads: Vec<PendingRead>,
    /// The current read-confirmation round and who confirmed it.
    pub read_round: u64,
    pub read_acks: BTreeSet<NodeId>,
    pub read_round_done: u64,
    /// The entries this leader appended that are not chosen yet, `(index, payload bytes)`,
    /// and their sum (bounded by `uncommitted_bytes_max`).
    pub tail: VecDeque<(u64, usize)>,
    pub tail_bytes: usize,
    /// Payload bytes of `prop_cmds`.
    pub prop_bytes: usize,
    /// The decided entries this leader must pull before it can adopt a suffix.
    pub catch_up: Option<CatchUp>,
    /// Followers too far behind for one `AcceptSync`, and the decided entries pushed to
    /// each (see [`CatchUpPush`]).
    pub pushes: BTreeMap<NodeId, CatchUpPush>,
}

/// Decided entries a leader pushes to a follower that promised its round but is too far
/// behind for one `AcceptSync` (not in the thesis, which has no message size limit). A
/// window of [`PUSH_WINDOW_MESSAGES`] `FetchResp`s of up to `max_message_bytes` each is in
/// flight; the follower stores each as decided and answers `FetchAck` with its decided
/// length, which moves the window; once what it lacks of the chosen sequence fits in one
/// message, it gets its `AcceptSync` under the promise it gave (`on_push_ack`). Before,
/// every message of decided entries took a `PrepareReq`, `Prepare`, `Promise` round of its
/// own: two round trips per 4 MiB, slower than a loaded leader decides, so a follower
/// restarted on a memory store was never repaired under load (`abcast demo --protocol
/// seqpaxos --kill`, issue 33).
#[derive(Clone, Debug)]
pub struct CatchUpPush {
    /// The next decided entry to send.
    pub next: u64,
    /// The follower's decided length, by its last `FetchAck`.
    pub acked: u64,
    /// The last entry of each message in flight, oldest first.
    pub inflight: VecDeque<u64>,
}

/// A leader whose decided log ends below where the adopted promise's suffix starts pulls
/// the decided entries in between, one message at a time (`FetchReq` / `FetchResp`, the
/// messages of the final-sequence transfer). Not in the thesis: there a `Promise` carries
/// `SUFFIX(v_a, ld)` from the *leader's* decided length, which is unbounded when the
/// leader restarted far behind; here it starts at the promiser's own decided length too
/// (`follower.rs`, Acceptor line 5), and what lies between is chosen, so any node that
/// decided it can serve it.
#[derive(Clone, Debug)]
pub struct CatchUp {
    /// The decided log must reach this index.
    pub target: u64,
    /// When the last `FetchReq` left, and how many were asked (the source rotates).
    pub asked_us: Option<Micros>,
    pub asked: usize,
    /// The decided length when a `FetchReq` last left, and how many left since without it
    /// growing.
    pub progress_decided: u64,
    pub stalled_asks: u32,
}

/// Accepts in flight to one follower, in bytes, at most this many messages' worth.
const INFLIGHT_MESSAGES_MAX: usize = 4;

/// Messages of decided entries in flight to one follower being caught up ([`CatchUpPush`]):
/// 4 of 4 MiB, more than a loaded loopback link carries in a round trip.
const PUSH_WINDOW_MESSAGES: usize = 4;

/// `FetchReq`s of a leader's pull that may go unanswered in a row before the promises of
/// the nodes it asked are set aside (see `ask_catch_up`).
const CATCH_UP_STALLED_ASKS_MAX: u32 = 4;

impl SeqPaxos {
    /// General lines 18-27: `⟨LEADER | L, b⟩` from BLE.
    pub(crate) fn on_leader(&mut self, top: Ballot, out: &mut Out) {
        out.events.push(Event::LeaderElected {
            node: self.me,
            leader: top.node,
            ballot: top,
        });
        if top.node != self.me {
            // Line 27: follow; the new leader's `Prepare` will say the rest.
            if self.role == Role::Leader {
                self.step_down(top, out);
            }
            self.set_leader_hint(top);
            return;
        }
        if self.amnesic {
            return;
        }
        let n_prom = self.store.promised();
        // Line 19.
        if !(top > self.ld.n_l && top > n_prom) {
            // BLE elected this node with a ballot not above what it promised: nothing could
            // start with it. Raise the BLE ballot; the next round elects it again, higher.
            self.ble.raise_above(n_prom.max(self.ld.n_l));
            return;
        }
        // Line 20.
        if let Err(e) = self.store.set_promised(top) {
            self.store_failed("promising its own ballot", e);
        }
        out.needs_sync = true;
        let ld = self.store.decided_idx();
        self.ld = super::leader::LeaderState {
            n_l: top,
            prepare_ld: ld,
            l_c: ld,
            ..Default::default()
        };
        // Lines 21-24 (own promise: the suffix is the log itself).
        self.ld.promises.insert(
            self.me,
            PromiseInfo {
                n_a: self.store.accepted_round(),
                ld,
                log_len: self.log_len(),
                suffix: Vec::new(),
                amnesic: false,
            },
        );
        self.ld.lds.insert(self.me, ld);
        // Line 25.
        self.role = Role::Leader;
        self.phase = Phase::Prepare;
        self.phase_since_us = self.now;
        self.set_leader_hint(top);
        out.events.push(Event::PhaseOne {
            node: self.me,
            ballot: top,
            from: ld + 1,
            why: "elected by ballot leader election".into(),
        });
        // Line 26.
        let others: Vec<NodeId> = self.others().collect();
        for r in others {
            self.prepare_one(r, out);
        }
        self.try_adopt(out);
    }

    /// Sends `r` a `Prepare` of the current ballot (line 26; again for a follower that must
    /// be re-synchronised).
    pub(crate) fn prepare_one(&mut self, r: NodeId, out: &mut Out) {
        if self.role != Role::Leader {
            return;
        }
        self.ld.lds.remove(&r);
        self.ld.progress.remove(&r);
        self.ld.pushes.remove(&r);
        self.ld.prepare_sent_us.insert(r, self.now);
        // In the accept phase (Leader (2), a follower re-synchronised) the suffix is not
        // used: the decided length the follower's promise starts after is the chosen one,
        // so its suffix is at most its undecided tail.
        let ld = match self.phase {
            Phase::Accept => self.store.decided_idx(),
            _ => self.ld.prepare_ld,
        };
        out.send(
            r,
            Message::Prepare(Prepare {
                config: self.config_id(),
                n: self.ld.n_l,
                ld,
                n_a: self.store.accepted_round(),
            }),
        );
    }

    pub(crate) fn step_down(&mut self, to: Ballot, out: &mut Out) {
        if self.role != Role::Leader {
            return;
        }
        self.role = Role::Follower;
        self.ld.prop_cmds.clear();
        self.ld.prop_bytes = 0;
        self.ld.reads.clear();
        self.set_leader_hint(to);
        out.events.push(Event::SteppedDown { node: self.me });
    }

    /// Leader (1) lines 1-7: a batch to order.
    pub(crate) fn leader_propose(&mut self, batch: Batch, out: &mut Out) {
        match self.phase {
            Phase::Prepare => {
                // Line 2 (bounded: beyond it the proposer re-sends later).
                let bytes = batch.payload_bytes();
                if self.ld.prop_cmds.len() < self.cfg.pending_batches_max
                    && (self.ld.prop_bytes + bytes <= self.cfg.uncommitted_bytes_max
                        || self.ld.prop_cmds.is_empty())
                {
                    self.ld.prop_bytes += bytes;
                    self.ld.prop_cmds.push(batch);
                }
            }
            Phase::Accept => {
                // Line 3: `¬STOPPED()`. After the stop-sign nothing is appended in this
                // configuration; the batch is held for the next one's leader (§2.4.3,
                // §5.5.2 "it can be held back until the new configuration start").
                if self.stopped() && !self.mutation(Mutation::SeqPaxosExtendAfterStopSign) {
                    self.hold(batch);
                    return;
                }
                // The undecided tail is bounded (`uncommitted_bytes_max`): beyond it the
                // batch is dropped and its proposer re-sends it.
                if self.ld.tail_bytes + batch.payload_bytes() > self.cfg.uncommitted_bytes_max
                    && !self.ld.tail.is_empty()
                {
                    return;
                }
                // Lines 3-5; the send (lines 6-7) is the next flush's `Accept`.
                let e = EntryBody::Values(batch).entry(self.log_len() + 1, self.ld.n_l);
                self.ld.tail.push_back((e.index, e.payload.len()));
                self.ld.tail_bytes += e.payload.len();
                if let Err(err) = self.store.append(&[e]) {
                    self.store_failed("appending a proposal", err);
                }
                out.needs_sync = true;
                self.ld.las.insert(self.me, self.log_len());
            }
            Phase::None => {}
        }
    }

    /// `STOPPED()` (appendix B General line 17): the log ends with this configuration's
    /// stop-sign.
    pub(crate) fn stopped(&self) -> bool {
        let last = self.log_len();
        if last <= self.base {
            return false;
        }
        match self.store.entries(last, last + 1, 0) {
            Ok(v) => v.first().is_some_and(|e| self.ends_config(e)),
            Err(e) => self.store_failed("reading the last entry", e),
        }
    }

    /// Whether `e` is the stop-sign of this configuration (one naming a later one; the
    /// stop-signs of earlier configurations are in the log too).
    pub(crate) fn ends_config(&self, e: &Entry) -> bool {
        EntryBody::is_stop_sign(&e.payload)
            && matches!(
                EntryBody::decode(&e.payload),
                Ok(EntryBody::StopSign(c)) if c.id > self.cfg.config_id
            )
    }

    /// Leader (1) lines 8-27 and Leader (2) lines 1-5.
    pub(crate) fn on_promise(&mut self, from: NodeId, m: Promise, out: &mut Out) {
        if self.role != Role::Leader || m.n != self.ld.n_l {
            return;
        }
        if self.phase == Phase::Prepare
            && let Some(first) = m.suffix.first()
            && first.index != self.ld.prepare_ld.max(m.ld) + 1
        {
            // Acceptor line 5 cuts the suffix at the leader's `ld` (or the promiser's own,
            // when higher); anything else is not a promise to this prepare.
            return;
        }
        if m.ld > m.log_len || m.suffix.last().is_some_and(|e| e.index != m.log_len) {
            return;
        }
        let info = PromiseInfo {
            n_a: m.n_a,
            ld: m.ld,
            log_len: m.log_len,
            // Leader (2) does not use it.
            suffix: if self.phase == Phase::Prepare {
                m.suffix
            } else {
                Vec::new()
            },
            amnesic: m.amnesic,
        };
        match self.phase {
            Phase::Prepare => {
                // Leader (1) lines 9-10.
                self.ld.lds.insert(from, info.ld);
                self.ld.promises.insert(from, info);
                self.try_adopt(out);
            }
            Phase::Accept => {
                // Leader (2) lines 2-5.
                self.ld.lds.insert(from, info.ld);
                self.ld.promises.insert(from, info);
                self.send_accept_sync(from, out);
            }
            Phase::None => {}
        }
    }

    /// Leader (1) lines 11-27, once a majority promised.
    fn try_adopt(&mut self, out: &mut Out) {
        if self.phase != Phase::Prepare {
            return;
        }
        let counts = |p: &PromiseInfo| !p.amnesic || self.mutation(Mutation::SeqPaxosAmnesicCounts);
        let counted = self.ld.promises.values().filter(|p| counts(p)).count();
        if counted < self.cfg.majority() {
            return;
        }
        // Line 12: the suffix with the highest `n_a`, the longest if equal (the longest log:
        // all suffixes start at `prepare_ld + 1`).
        let Some((&max_node, max)) = self
            .ld
            .promises
            .iter()
            .filter(|(_, p)| counts(p))
            .max_by_key(|(_, p)| (p.n_a, p.log_len))
        else {
            return;
        };
        let (max_n_a, max_log_len, max_ld) = (max.n_a, max.log_len, max.ld);
        let adopt_other = max_node != self.me && !self.mutation(Mutation::SeqPaxosAdoptOwnLog);
        // Where the adopted suffix starts (Acceptor line 5 cuts it at the higher of the two
        // decided lengths). What lies below it and above this leader's decided log is
        // chosen: pull it first (`CatchUp`), then adopt.
        let s = self.ld.prepare_ld.max(max_ld) + 1;
        if adopt_other && self.store.decided_idx() + 1 < s {
            self.start_catch_up(s - 1, out);
            return;
        }
        self.ld.catch_up = None;
        let n_l = self.ld.n_l;
        // The leader accepts its own sequence in its round, and says so *before* it writes
        // a single entry of it: a crash may keep a prefix of the records written, and a log
        // must never hold an entry of round `n_L` under an older `n_a` (a later max
        // AcceptSync would take it for the older round's sequence and keep it).
        if let Err(e) = self.store.set_accepted_round(n_l) {
            self.store_failed("accepting its round", e);
        }
        // Line 14: `v_a ← PREFIX(v_a, ld) ++ suffix`, from `s` on, never below the decided
        // log (the entries there are the chosen ones, which the adopted log holds too).
        //
        // The adopted log may be shorter than the decided one: the promises came before
        // this node learned more (a snapshot installed, a catch-up) while it was still
        // preparing (sweep seed 1018 of the reconfig mix, found by the 10,000-seed long run,
        // where an assertion here stopped the node). Nothing beyond the decided log is then
        // adopted, which is safe: what lies up to it is chosen; the promise adopted (the
        // highest `n_a`) holds no entry past it; and anything chosen after these
        // promises was chosen in a higher ballot, whose acceptors refuse this leader's
        // round, so it learns of that ballot at its first `AcceptSync`.
        if adopt_other {
            let decided = self.store.decided_idx();
            let start = s.max(decided + 1);
            let skip = (start - s) as usize;
            let suffix: Vec<Entry> = self
                .ld
                .promises
                .get(&max_node)
                .and_then(|p| p.suffix.get(skip..))
                .unwrap_or(&[])
                .to_vec();
            if let Err(e) = self.store.append_on_prefix(start, &suffix) {
                self.store_failed("adopting the promised suffix", e);
            }
        }
        // Lines 15-23: a stop-sign adopted stays last; the held commands wait for the next
        // configuration (line 16 drops them; here they are forwarded once it has a leader).
        if self.stopped() && !self.mutation(Mutation::SeqPaxosExtendAfterStopSign) {
            self.hold_all_pending();
        }
        let mut next = self.log_len() + 1;
        self.ld.prop_bytes = 0;
        let entries: Vec<Entry> = std::mem::take(&mut self.ld.prop_cmds)
            .into_iter()
            .map(|b| {
                let e = EntryBody::Values(b).entry(next, n_l);
                next += 1;
                e
            })
            .collect();
        for e in &entries {
            self.ld.tail.push_back((e.index, e.payload.len()));
            self.ld.tail_bytes += e.payload.len();
        }
        if let Err(e) = self.store.append(&entries) {
            self.store_failed("appending held proposals", e);
        }
        out.needs_sync = true;
        // Lines 24-25.
        self.ld.las.insert(self.me, self.log_len());
        self.ld.max_n_a = max_n_a;
        self.ld.max_log_len = max_log_len;
        self.ld.sync_len = self.log_len().min(self.ld.prepare_ld.max(max_log_len));
        self.phase = Phase::Accept;
        self.phase_since_us = self.now;
        out.events.push(Event::Leading {
            node: self.me,
            ballot: n_l,
            ring: Vec::new(),
            decided_upto: self.store.decided_idx(),
            reproposed: (self.ld.prepare_ld + 1, self.ld.sync_len),
        });
        // Lines 26-27.
        let synced: Vec<NodeId> = self
            .ld
            .lds
            .keys()
            .copied()
            .filter(|&r| r != self.me)
            .collect();
        for r in synced {
            self.send_accept_sync(r, out);
        }
        self.advance_chosen(out);
    }

    /// `⟨ACCEPTSYNC | n_L, SUFFIX(v_a, lds[r]), lds[r]⟩` to `r`, or less (§4.4.3 max
    /// AcceptSync): a follower whose log is known to be a prefix of the leader's gets only
    /// what follows it. Known: it promised with the round the leader adopted (its log is a
    /// prefix of that round's sequence, which the leader's log holds up to the adopted
    /// length) or with the leader's own round. The thesis compares suffix lengths and must
    /// treat an empty maximal suffix apart (its "concern 1"); comparing whole log lengths
    /// (`Promise::log_len`) has no such corner, and the clamp to the adopted length keeps a
    /// follower whose promise came after adoption, with more entries of the adopted round
    /// than the majority reported, from keeping them.
    fn send_accept_sync(&mut self, r: NodeId, out: &mut Out) {
        let Some(p) = self.ld.promises.get(&r) else {
            return;
        };
        let len = self.log_len();
        let from = if p.n_a == self.ld.n_l {
            p.log_len + 1
        } else if p.n_a == self.ld.max_n_a && !p.amnesic {
            p.log_len.min(self.ld.max_log_len) + 1
        } else {
            p.ld + 1
        };
        // Never below the follower's own decided log: what it decided is the chosen
        // sequence already (and may lie in this node's compacted prefix).
        let from = from.min(len + 1).max(p.ld + 1).max(1);
        if self.compacted(from) {
            // What it needs begins in this node's compacted prefix: its snapshot goes
            // instead (OmniPaxos' AcceptSync with a snapshot), and the follower, once it
            // installed it, asks to be prepared again.
            let since = self.now;
            self.ld.lds.remove(&r);
            self.ld.progress.remove(&r);
            self.ld.prepare_sent_us.insert(r, since);
            self.offer_snapshot(r, from, out);
            return;
        }
        // The sync reaches at least the adopted length, whatever `max_message_bytes` says.
        // A follower that takes `n_a = n_L` must hold every entry that may have been chosen
        // before this round (appendix B line 9 replaces its log wholesale): a later leader
        // adopts the log of the highest `n_a` it hears of, and a follower that took this
        // round with only the first part of the sync would hand it a log without chosen
        // entries (the simulator found it with messages over a size limit dropped, as the
        // runtime drops a frame over its limit; `abcast demo --kill` hit it too). Entries
        // this leader appended after adoption may follow in later `Accept`s: any prefix of
        // them is one this leader could have sent.
        // An amnesic follower gets the whole log: the votes it forgot may have counted for
        // entries chosen in this very round, after adoption (`follower.rs`: it is repaired
        // by "the whole sequence of a leader").
        let must_reach = if p.amnesic { len } else { self.ld.sync_len };
        let mut entries = self.read_entries(from, len + 1);
        let reached = from + entries.len() as u64 - 1;
        let (p_ld, l_c) = (p.ld, self.ld.l_c);
        if reached < must_reach && p_ld < l_c && !self.chosen_part_fits(from) {
            // Too far behind for one message, and more of the way is chosen than one
            // message holds: push the decided entries first ([`CatchUpPush`]); the
            // follower stores them, and the `AcceptSync` follows once the rest of the
            // chosen sequence fits in one message. Not in the thesis (no message size
            // limit there); it keeps an `AcceptSync` within one message of chosen entries
            // and the undecided tail, which `uncommitted_bytes_max` bounds (the node
            // checks that the two fit in half a frame).
            self.start_push(r, p_ld, out);
            return;
        }
        if reached < must_reach {
            entries = match self.store.entries(from, must_reach + 1, usize::MAX) {
                Ok(e) => e,
                Err(e) => self.store_failed("reading the entries to synchronise", e),
            };
        }
        assert!(
            from + entries.len() as u64 > must_reach,
            "{}: an AcceptSync from {from} must reach {must_reach}",
            self.me,
        );
        let mut prog = Progress {
            next: from,
            progress_us: self.now,
            decided_sent: self.ld.l_c,
            ..Progress::default()
        };
        prog.sent(from, &entries, self.now);
        self.ld.progress.insert(r, prog);
        out.send(
            r,
            Message::AcceptSync(Accept {
                config: self.config_id(),
                n: self.ld.n_l,
                from,
                entries,
                decided: self.ld.l_c,
            }),
        );
    }

    /// Whether the chosen entries from `from` on fit in one message: an `AcceptSync` may
    /// carry them besides the undecided tail.
    fn chosen_part_fits(&self, from: u64) -> bool {
        let l_c = self.ld.l_c;
        from > l_c
            || self
                .read_entries(from, l_c + 1)
                .last()
                .is_some_and(|e| e.index >= l_c)
    }

    /// Starts pushing decided entries to `r`, whose decided log ends at `acked`; its
    /// snapshot instead if this node compacted them.
    fn start_push(&mut self, r: NodeId, acked: u64, out: &mut Out) {
        self.ld.lds.remove(&r);
        self.ld.progress.remove(&r);
        self.ld.prepare_sent_us.insert(r, self.now);
        self.ld.pushes.remove(&r);
        if self.offer_snapshot(r, acked + 1, out) {
            // It installs it, and asks to be prepared again.
            return;
        }
        self.ld.pushes.insert(
            r,
            CatchUpPush {
                next: acked + 1,
                acked,
                inflight: VecDeque::new(),
            },
        );
        self.push_more(r, out);
    }

    /// Fills `r`'s push window with decided entries.
    fn push_more(&mut self, r: NodeId, out: &mut Out) {
        let (l_c, config) = (self.ld.l_c, self.config_id());
        for _ in 0..PUSH_WINDOW_MESSAGES {
            let Some(p) = self.ld.pushes.get(&r) else {
                return;
            };
            let next = p.next;
            if p.inflight.len() >= PUSH_WINDOW_MESSAGES || next > l_c {
                return;
            }
            if self.compacted(next) {
                self.ld.pushes.remove(&r);
                self.offer_snapshot(r, next, out);
                return;
            }
            let chunk = self.read_entries(next, l_c + 1);
            let Some(last) = chunk.last().map(|e| e.index) else {
                return;
            };
            let Some(p) = self.ld.pushes.get_mut(&r) else {
                return;
            };
            p.next = last + 1;
            p.inflight.push_back(last);
            out.send(
                r,
                Message::FetchResp(FetchResp {
                    config,
                    from: next,
                    entries: chunk,
                    decided: l_c,
                }),
            );
        }
    }

    /// A `FetchAck` of a follower being caught up: it holds the decided log up to `upto`.
    /// Its promise still stands (a higher one would have been a `Nack`), so once the rest
    /// of the chosen sequence fits in one message its `AcceptSync` goes, from `upto` on;
    /// else the window moves. False when no push to `from` is under way.
    pub(crate) fn on_push_ack(&mut self, from: NodeId, upto: u64, out: &mut Out) -> bool {
        if self.role != Role::Leader || self.phase != Phase::Accept {
            self.ld.pushes.remove(&from);
            return false;
        }
        let now = self.now;
        let Some(p) = self.ld.pushes.get_mut(&from) else {
            return false;
        };
        if upto > p.acked {
            p.acked = upto;
            p.inflight.retain(|&last| last > upto);
            // Progress: no `Prepare` again while it lasts (`leader_flush`).
            self.ld.prepare_sent_us.insert(from, now);
        }
        let acked = p.acked;
        if let Some(info) = self.ld.promises.get_mut(&from) {
            info.ld = info.ld.max(acked);
            info.log_len = info.log_len.max(acked);
        }
        if self.chosen_part_fits(acked + 1) {
            self.ld.pushes.remove(&from);
            self.ld.lds.insert(from, acked);
            self.send_accept_sync(from, out);
        } else {
            self.push_more(from, out);
        }
        true
    }

    pub(crate) fn read_entries(&self, from: u64, to: u64) -> Vec<Entry> {
        if from >= to {
            return Vec::new();
        }
        match self.store.entries(from, to, self.cfg.max_message_bytes) {
            Ok(e) => e,
            Err(e) => self.store_failed("reading entries to send", e),
        }
    }

    /// Leader (2) lines 6-11.
    pub(crate) fn on_accepted(&mut self, from: NodeId, m: Accepted, out: &mut Out) {
        if self.role != Role::Leader || self.phase != Phase::Accept || m.n != self.ld.n_l {
            return;
        }
        // An amnesic follower's `Accepted` counts: it comes after the `AcceptSync` that
        // repaired it (only its promise could not count).
        if !self.ld.promises.contains_key(&from) {
            return;
        }
        if m.la > self.log_len() {
            return;
        }
        let las = self.ld.las.entry(from).or_insert(0);
        if m.la > *las {
            *las = m.la;
            if let Some(p) = self.ld.progress.get_mut(&from) {
                p.progress_us = self.now;
                while p.inflight.front().is_some_and(|&(end, _)| end <= m.la) {
                    if let Some((_, b)) = p.inflight.pop_front() {
                        p.inflight_bytes -= b;
                    }
                }
            }
        }
        self.advance_chosen(out);
    }

    /// Lines 8-10: the longest length a majority accepted is chosen. (The pseudo code tests
    /// the support of the `l_a` just reported; taking the majority-th largest `las` is the
    /// same rule applied to every length at once.)
    fn advance_chosen(&mut self, out: &mut Out) {
        let mut v: Vec<u64> = self.ld.las.values().copied().collect();
        let majority = self.cfg.majority();
        if v.len() < majority {
            return;
        }
        v.sort_unstable_by(|a, b| b.cmp(a));
        let chosen = v[majority - 1];
        if chosen > self.ld.l_c {
            assert!(
                chosen <= self.log_len(),
                "{}: chosen length {chosen} past the leader's log {}",
                self.me,
                self.log_len()
            );
            self.ld.l_c = chosen;
            while self.ld.tail.front().is_some_and(|&(i, _)| i <= chosen) {
                if let Some((_, b)) = self.ld.tail.pop_front() {
                    self.ld.tail_bytes -= b;
                }
            }
            self.decide(chosen, out);
            self.answer_reads(out);
        }
    }

    /// One flush of the leader: per follower one `Accept` with everything not yet sent (or
    /// the latest `Decide`), re-sends after `resend_us`, prepares for members that have not
    /// promised, and the read barrier's round.
    pub(crate) fn leader_flush(&mut self, out: &mut Out) {
        if self.phase == Phase::Accept {
            // A cluster of one: nothing comes back, the leader's own length is chosen.
            self.advance_chosen(out);
        } else if self.phase == Phase::Prepare {
            self.ask_catch_up(out, false);
        }
        let others: Vec<NodeId> = self.others().collect();
        for r in others {
            if self.phase == Phase::Accept && self.ld.lds.contains_key(&r) {
                self.flush_follower(r, out);
            } else if self
                .ld
                .prepare_sent_us
                .get(&r)
                .is_none_or(|&t| self.now >= t + self.cfg.resend_us)
            {
                self.prepare_one(r, out);
            }
        }
        self.start_read_round(out);
    }

    fn flush_follower(&mut self, r: NodeId, out: &mut Out) {
        let len = self.log_len();
        let las = self.ld.las.get(&r).copied().unwrap_or(0);
        let (n_l, l_c, now, resend_us) = (self.ld.n_l, self.ld.l_c, self.now, self.cfg.resend_us);
        let window = self.cfg.max_message_bytes * INFLIGHT_MESSAGES_MAX;
        let compacted_upto = self.snapshot_index();
        let Some(p) = self.ld.progress.get_mut(&r) else {
            return;
        };
        // Go back: entries sent and not accepted for `resend_us` (a lost `Accept`; the
        // follower also asks when it sees the gap).
        if p.next > las + 1 && now >= p.progress_us + resend_us {
            p.next = las + 1;
            p.inflight.clear();
            p.inflight_bytes = 0;
            p.progress_us = now;
        }
        let (next, room) = (p.next, p.inflight_bytes < window);
        if next <= len && room && next <= compacted_upto {
            // This node compacted what the follower lacks: it gets the snapshot, and asks
            // to be prepared again once it installed it.
            self.ld.lds.remove(&r);
            self.ld.progress.remove(&r);
            self.ld.prepare_sent_us.insert(r, now);
            self.offer_snapshot(r, next, out);
        } else if next <= len && room {
            let from = next;
            let entries = self.read_entries(from, len + 1);
            let Some(p) = self.ld.progress.get_mut(&r) else {
                return;
            };
            p.sent(from, &entries, now);
            p.decided_sent = l_c;
            out.send(
                r,
                Message::Accept(Accept {
                    config: self.cfg.config_id,
                    n: n_l,
                    from,
                    entries,
                    decided: l_c,
                }),
            );
        } else if p.decided_sent < l_c {
            // §4.4.3: only the latest Decide.
            p.decided_sent = l_c;
            out.send(
                r,
                Message::Decide(Decide {
                    config: self.cfg.config_id,
                    n: n_l,
                    ld: l_c,
                }),
            );
        }
    }

    /// Starts (or raises the target of) the leader's pull of decided entries.
    fn start_catch_up(&mut self, target: u64, out: &mut Out) {
        let decided = self.store.decided_idx();
        let c = self.ld.catch_up.get_or_insert(CatchUp {
            target,
            asked_us: None,
            asked: 0,
            progress_decided: decided,
            stalled_asks: 0,
        });
        if target > c.target {
            c.target = target;
        }
        self.ask_catch_up(out, true);
    }

    /// The next `FetchReq` of the leader's pull, to a promiser that decided the target (at
    /// once, or when the last one went unanswered for `resend_us`).
    fn ask_catch_up(&mut self, out: &mut Out, now: bool) {
        let (decided, t, resend_us) = (self.store.decided_idx(), self.now, self.cfg.resend_us);
        let config = self.config_id();
        let Some(c) = self.ld.catch_up.as_mut() else {
            return;
        };
        if !now && c.asked_us.is_some_and(|at| t < at + resend_us) {
            return;
        }
        let sources: Vec<NodeId> = self
            .ld
            .promises
            .iter()
            .filter(|(n, p)| **n != self.me && p.ld >= c.target)
            .map(|(n, _)| *n)
            .collect();
        if sources.is_empty() || decided >= c.target {
            return;
        }
        if decided > c.progress_decided {
            c.progress_decided = decided;
            c.stalled_asks = 0;
        } else {
            c.stalled_asks += 1;
        }
        if c.stalled_asks > CATCH_UP_STALLED_ASKS_MAX {
            // Every node that decided the target went silent (cut off, crashed): set their
            // promises aside. Any majority's promises serve (Leader (1) line 11), and the
            // rest may need no pull; if they are no majority, the next promises decide
            // (mixed seed 1740 of the long run: the leader waited for good on the one node
            // that had decided furthest, cut off for the rest of the run).
            for n in &sources {
                self.ld.promises.remove(n);
            }
            self.ld.catch_up = None;
            self.try_adopt(out);
            return;
        }
        let src = sources[c.asked % sources.len()];
        c.asked += 1;
        c.asked_us = Some(t);
        out.send(
            src,
            Message::FetchReq(FetchReq {
                config,
                from: decided + 1,
                to: c.target + 1,
            }),
        );
    }

    /// Decided entries for a member of this configuration that is behind (not a final-
    /// sequence transfer, which `reconfig.rs` handles): the leader's pull while it
    /// prepares, or a follower's push from its leader (`send_accept_sync`). Stored as
    /// decided (`store_decided`: a chosen entry is the same in every log that holds it
    /// in a round at or above the choosing one, so nothing accepted and still needed is
    /// lost); then the pull goes on or the leader adopts, and a follower asks its leader
    /// to prepare it again. False when the entries do not continue the decided log.
    pub(crate) fn on_catch_up(&mut self, from: NodeId, r: &FetchResp, out: &mut Out) -> bool {
        let next = self.store.decided_idx() + 1;
        if r.config != self.config_id()
            || r.from > next
            || r.entries.last().is_none_or(|e| e.index < next)
        {
            return false;
        }
        let skip = (next - r.from) as usize;
        if let Some(run) = r.entries.get(skip..) {
            self.store_decided(next, run, out);
        }
        self.deliver(out);
        match self.role {
            Role::Leader if self.phase == Phase::Prepare && self.ld.catch_up.is_some() => {
                self.after_catch_up(out)
            }
            Role::Follower if self.leader() == Some(from) => {
                // Its leader's push ([`CatchUpPush`]): say how far the decided log reaches;
                // the leader sends more, or the `AcceptSync` under the promise given. The
                // wait for that sync starts again (`follower_flush`).
                self.phase_since_us = self.now;
                out.send(
                    from,
                    Message::FetchAck {
                        config: self.config_id(),
                        upto: self.store.decided_idx(),
                    },
                );
            }
            _ => {}
        }
        true
    }

    /// The leader's pull moved its decided log (entries, or a snapshot installed): adopt
    /// once it reaches the target, else ask for more.
    pub(crate) fn after_catch_up(&mut self, out: &mut Out) {
        if self.phase != Phase::Prepare {
            return;
        }
        let done = self
            .ld
            .catch_up
            .as_ref()
            .is_some_and(|c| self.store.decided_idx() >= c.target);
        if done {
            self.try_adopt(out);
        } else {
            self.ask_catch_up(out, true);
        }
    }

    pub(crate) fn on_prepare_req(&mut self, from: NodeId, out: &mut Out) {
        if self.role == Role::Leader {
            self.prepare_one(from, out);
        }
    }

    /// A follower promised a higher ballot than this leader's: step down.
    pub(crate) fn on_nack(&mut self, _from: NodeId, m: Nack, out: &mut Out) {
        self.set_leader_hint(m.promised);
        if self.role == Role::Leader && m.promised > self.ld.n_l {
            self.ble.raise_above(m.promised);
            self.step_down(m.promised, out);
        }
    }

    /// A proposer's batch, forwarded (§4.4.1). A node that does not lead passes it on once,
    /// to the leader it knows; the proposer re-sends what is lost. Between configurations
    /// (no leader known to a member, or a member still fetching), it is held and goes to
    /// the next leader (§2.4.3); a node outside the configuration passes its own
    /// proposer's batches to a member.
    pub(crate) fn on_forward(&mut self, from: NodeId, batch: Batch, out: &mut Out) {
        if self.participates() && self.role == Role::Leader {
            self.leader_propose(batch, out);
        } else if let Some(l) = self.leader().filter(|&l| l != self.me) {
            if l != from && from == batch.origin() {
                out.send(l, Message::Forward(batch));
            }
        } else if self.member {
            self.hold(batch);
        } else if from == batch.origin() {
            self.forward_to_member(batch, out);
        }
    }

    /// A read barrier (etcd-io/raft's ReadIndex): the read may see every value acknowledged
    /// before it began once this node delivered up to `upto`; `upto` is the chosen length
    /// now, but at least the length the leader adopted (everything chosen by earlier leaders
    /// lies below it, chosen again or not). It is answered once a round of probes started
    /// after the request is confirmed by a majority under this ballot: no other leader can
    /// have chosen anything then.
    pub(crate) fn leader_read_index(&mut self, id: u64, out: &mut Out) -> Result<(), ProposeError> {
        if self.role != Role::Leader || self.amnesic {
            return Err(ProposeError::NotLeader {
                hint: self.leader().filter(|&l| l != self.me),
            });
        }
        let upto = self.ld.l_c.max(self.ld.sync_len);
        self.ld.reads.push(PendingRead { id, upto, round: 0 });
        if self.cfg.majority() == 1 && self.phase == Phase::Accept {
            self.ld.read_round += 1;
            self.ld.read_round_done = self.ld.read_round;
            for r in &mut self.ld.reads {
                r.round = self.ld.read_round;
            }
            self.answer_reads(out);
        }
        Ok(())
    }

    fn start_read_round(&mut self, out: &mut Out) {
        if self.phase != Phase::Accept || !self.ld.reads.iter().any(|r| r.round == 0) {
            return;
        }
        if self.ld.read_round > self.ld.read_round_done {
            return; // one round at a time; the waiting reads take the next
        }
        self.ld.read_round += 1;
        self.ld.read_acks.clear();
        self.ld.read_acks.insert(self.me);
        let round = self.ld.read_round;
        let adopted = self.ld.sync_len;
        for r in &mut self.ld.reads {
            if r.round == 0 {
                r.round = round;
                // A read that arrived in the prepare phase took `upto` before this leader
                // adopted a log: values chosen (and acknowledged) under the previous leader
                // may lie above it. Its round starts in the accept phase, where the
                // adopted length is known (the simulator's read checker, seed 89 of the
                // none mix: a read answered at 43 missed a value acknowledged in 44).
                r.upto = r.upto.max(adopted);
            }
        }
        let others: Vec<NodeId> = self.others().collect();
        for o in others {
            out.send(
                o,
                Message::ReadProbe {
                    config: self.config_id(),
                    n: self.ld.n_l,
                    round,
                },
            );
        }
    }

    pub(crate) fn on_read_ack(&mut self, from: NodeId, n: Ballot, round: u64, out: &mut Out) {
        if self.role != Role::Leader || n != self.ld.n_l || round != self.ld.read_round {
            return;
        }
        self.ld.read_acks.insert(from);
        if self.ld.read_acks.len() >= self.cfg.majority() && self.ld.read_round_done < round {
            self.ld.read_round_done = round;
            self.answer_reads(out);
        }
    }

    /// Reads whose round is confirmed and whose `upto` is chosen.
    fn answer_reads(&mut self, out: &mut Out) {
        let (done, l_c) = (self.ld.read_round_done, self.ld.l_c);
        self.ld.reads.retain(|r| {
            if r.round != 0 && r.round <= done && r.upto <= l_c {
                out.reads.push(ReadState {
                    id: r.id,
                    upto: r.upto,
                });
                false
            } else {
                true
            }
        });
    }
}
