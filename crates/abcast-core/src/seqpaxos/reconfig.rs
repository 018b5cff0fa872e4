//! Stop-sign reconfiguration (seed 001 §2.4.3, §4.4, §4.4.3) over one continuous log.
//!
//! - **Proposing `SS_i`** (§2.4.3, appendix B `STOPPED()`): `reconfigure` at the leader of
//!   `c_i` appends the stop-sign naming `c_{i+1}` (id `i + 1`); from then on the leader
//!   appends nothing more in `c_i` (`leader.rs::leader_propose`, `try_adopt`), and a
//!   follower accepts nothing past a stop-sign (`follower.rs::extend`). What is proposed
//!   meanwhile is *held* (`SeqPaxos::held`) and goes to `c_{i+1}`'s leader once it is known.
//! - **One continuous log** (beyond OmniPaxos, issue 151): `c_{i+1}`'s log continues right
//!   after `SS_i`'s index (`SeqPaxos::base`), indices keep counting, and the learner keeps
//!   delivering one sequence; the `ConfigChange` is positioned right after the stop-sign's
//!   delivery (`mod.rs::deliver`). Ballots, `n_prom` and `n_a` start again in each
//!   configuration (appendix B line 8: `n_L ← (i, 0)`): messages carry the configuration
//!   id, so two configurations' ballots never meet.
//! - **Entering `c_{i+1}`** ([`SeqPaxos::enter_next`]) happens when the learner delivers
//!   `SS_i`, i.e. once `σ_i` is decided *and held* here. The new configuration and the new
//!   configuration's empty promise are persisted (`ConfigRecord` in the store's stop-sign
//!   slot) before any message of `c_{i+1}` leaves (`needs_sync`).
//! - **The final sequence to those who lack it** (§2.4.3 "fetch σ_i from the other
//!   processes in c_i", §4.4 pull and eager): a node that learns `SS_i` is decided
//!   (`StopSigned`) without holding `σ_i` stops taking part in `c_i` and *fetches* the
//!   decided entries up to `SS_i` ([`Fetch`]): segments of the range from several nodes in
//!   parallel, asked again of another node after `resend_us` (pull); or waits for the
//!   pushes of the leader that decided `SS_i`, one message in flight paced by `FetchAck`,
//!   and pulls when they stop (eager). Any node answers a `FetchReq` from its decided
//!   prefix, whatever its configuration: an old replica keeps serving `σ_i` (§2.4.3 "a
//!   process can not terminate its replica in the previous configuration").
//! - **Learning of `SS_i`**: a node that receives a message of a configuration above its
//!   own asks its sender (`StopSignQuery`); a node that receives one of a configuration
//!   below its own tells the sender (`StopSigned`, what started its configuration, which
//!   covers every earlier stop-sign in the continuous log). The leader that decides `SS_i`
//!   tells every member of `c_i` and `c_{i+1}` at once, and every member of `c_i` that
//!   enters `c_{i+1}` tells the new members every `resend_us` until they say they hold it
//!   (a complete replacement has nobody in `c_{i+1}` to start the exchange).
//! - **Head start** (§4.4.3, §5.4.3): the seed gives `c_{i-1}`'s leader an initial BLE round
//!   of 1 instead of 0, so the continued processes, which start first, keep it and a later
//!   new process with a higher id does not take over. Here `c_i`'s leader is the node whose
//!   round accepted `SS_i` (the entry's ballot: every holder of `σ_i` agrees on it) if it is
//!   a member of `c_{i+1}`, else the first member of highest priority; it starts with
//!   ballot number 1 *and* takes leadership at once (prepare without waiting one BLE round;
//!   its BLE is told it leads, so its next round does not raise). Safety never rests on
//!   BLE.
//! - **Crash at any step**: the log and the `ConfigRecord` say everything: a node that
//!   restarts from a durable store with `SS_i` decided but `c_{i+1}` not yet recorded
//!   enters `c_{i+1}` again at its first input (the re-delivery hits `SS_i`); one recorded
//!   in `c_{i+1}` starts there; a fetch under way is recorded with its target and resumes.
//!   Writes at the entry are ordered so that every prefix a crash keeps is safe: the
//!   decided index, then the reset promise, then the record. A node restarted without its
//!   store (amnesic) is amnesic under today's rule (`follower.rs::recover_promise`) in the
//!   configuration it restarted in, and, until it is repaired, in each configuration it
//!   enters (its previous life may have promised there). Once repaired it is not amnesic
//!   in later configurations: being amnesic in each of them would leave a configuration
//!   whose members all restarted once without a majority able to answer. Except when
//!   the log it was repaired with in `c_i` already held `SS_i` (`follower.rs`,
//!   `on_accept_sync`): `SS_i` may then have been decided before the restart, and the
//!   previous life may have entered `c_{i+1}` and promised there, so it is amnesic in
//!   `c_{i+1}` too. (Before issue 33 this case was left open: a previous life in `c_{i+1}`,
//!   a restart, and a repair in `c_i` by a majority of `c_i` that never learned `SS_i` was
//!   decided.) Liveness: a majority of `c_{i+1}` restarted between the append of `SS_i`
//!   and its entry into `c_{i+1}` stays amnesic there, and `c_{i+1}` waits.

use super::messages::{FetchReq, FetchResp, Message, StopSigned};
use super::{Out, Phase, Role, SeqPaxos};
use crate::ProposeError;
use crate::codec::{Decoder, Encoder};
use crate::config::Configuration;
use crate::error::DecodeError;
use crate::event::Event;
use crate::protocol::ReconfigureError;
use crate::replog::{EntryBody, get_configuration, get_nodes, put_configuration, put_nodes};
use crate::storage::Entry;
use crate::types::{Ballot, Batch, Micros, NodeId};
use bytes::Bytes;
use std::collections::{BTreeMap, BTreeSet};

/// `"SPC1"`: a Sequence Paxos configuration record in the log store's stop-sign slot.
const RECORD_MAGIC: u32 = u32::from_le_bytes(*b"SPC1");

/// A member fetching its own configuration's stop-sign takes part again after this many
/// `resend_us` without an entry.
const FETCH_GIVE_UP_RESENDS: u64 = 8;

/// Peers remembered for rate-limiting notices and queries, at most (then forgotten).
const TOLD_MAX: usize = 1024;

/// What a node persists of its configuration (the log holds the rest).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ConfigRecord {
    /// The configuration this node is in (a member or not).
    pub config: Configuration,
    /// The index of the stop-sign that ended the previous configuration (0: none known).
    pub base: u64,
    /// New members to tell of that stop-sign until they hold it.
    pub notify: Vec<NodeId>,
    /// A fetch under way: the stop-sign's index and the configuration it names.
    pub fetch: Option<(u64, Configuration)>,
}

impl ConfigRecord {
    pub fn encode(&self) -> Bytes {
        let mut e = Encoder::new();
        e.put_u32(RECORD_MAGIC);
        put_configuration(&mut e, &self.config);
        e.put_u64(self.base);
        put_nodes(&mut e, &self.notify);
        match &self.fetch {
            None => e.put_u8(0),
            Some((target, next)) => {
                e.put_u8(1);
                e.put_u64(*target);
                put_configuration(&mut e, next);
            }
        }
        e.to_bytes()
    }

    pub fn decode(b: &Bytes) -> Result<ConfigRecord, DecodeError> {
        let mut d = Decoder::new(b.clone());
        if d.u32("config_record.magic")? != RECORD_MAGIC {
            return Err(DecodeError::Invalid {
                what: "config_record.magic",
                detail: "not a Sequence Paxos configuration record".into(),
            });
        }
        let config = get_configuration(&mut d)?;
        let base = d.u64("config_record.base")?;
        let notify = get_nodes(&mut d, "config_record.notify")?;
        let fetch = match d.u8("config_record.fetch")? {
            0 => None,
            1 => Some((d.u64("config_record.target")?, get_configuration(&mut d)?)),
            t => {
                return Err(DecodeError::Invalid {
                    what: "config_record.fetch",
                    detail: format!("{t} is no flag"),
                });
            }
        };
        d.finish()?;
        Ok(ConfigRecord {
            config,
            base,
            notify,
            fetch,
        })
    }
}

/// A fetch of the decided log up to a stop-sign (§4.4).
#[derive(Clone, Debug)]
pub struct Fetch {
    /// The configuration the stop-sign ends, and the one it names.
    pub config: u64,
    pub next: Configuration,
    /// The stop-sign's index: the fetch ends when the decided log reaches it.
    pub target: u64,
    /// Whom to ask, in order of preference (the notifier first).
    pub sources: Vec<NodeId>,
    /// Entries received above the decided log, not yet contiguous with it.
    pub buffer: BTreeMap<u64, Entry>,
    /// Segment number -> (asked whom, when).
    pub asked: BTreeMap<u64, (NodeId, Micros)>,
    /// Rotates the sources: bumped by each re-ask.
    pub tries: u64,
    /// When an entry last arrived.
    pub progress_us: Micros,
    /// Whom to tell when done (those that sent entries or notices).
    pub tell: BTreeSet<NodeId>,
}

/// An eager transfer of the final sequence to one new member (§4.4).
#[derive(Clone, Debug)]
pub struct Push {
    pub config: u64,
    pub target: u64,
    pub next: Configuration,
    /// The member holds the decided log up to here.
    pub acked: u64,
    /// The next entry not yet sent, and when the last message left.
    pub sent_next: u64,
    pub sent_us: Option<Micros>,
}

impl SeqPaxos {
    /// `Protocol::reconfigure`: the leader of `c_i` proposes `SS_i` naming `config` as
    /// `c_{i+1}` (its `id` is ignored: it becomes `i + 1`).
    pub(crate) fn propose_stop_sign(
        &mut self,
        config: Configuration,
        out: &mut Out,
    ) -> Result<(), ReconfigureError> {
        config.validate().map_err(ReconfigureError::Invalid)?;
        let invalid = |reason: String| {
            ReconfigureError::Invalid(crate::config::ConfigError {
                field: "members",
                reason,
            })
        };
        if config.members.len() > super::config::MAX_MEMBERS {
            return Err(invalid(format!(
                "{} members; at most {}",
                config.members.len(),
                super::config::MAX_MEMBERS
            )));
        }
        if let Some(m) = config.members.iter().find(|m| !m.roles.acceptor) {
            return Err(invalid(format!(
                "{} is not an acceptor; every Sequence Paxos member is a replica",
                m.id
            )));
        }
        if !self.participates() || self.role != Role::Leader || self.amnesic {
            return Err(ReconfigureError::Refused(ProposeError::NotLeader {
                hint: self.leader().filter(|&l| l != self.me),
            }));
        }
        if self.phase != Phase::Accept || self.stopped() || self.pending_ss.is_some() {
            return Err(ReconfigureError::Refused(ProposeError::Busy));
        }
        let Some(id) = self.cfg.config_id.checked_add(1) else {
            return Err(invalid("configuration ids are exhausted".into()));
        };
        let ss = Configuration {
            id,
            members: config.members,
        };
        let e = EntryBody::StopSign(ss).entry(self.log_len() + 1, self.ld.n_l);
        if let Err(err) = self.store.append(&[e]) {
            self.store_failed("appending the stop-sign", err);
        }
        out.needs_sync = true;
        self.ld.las.insert(self.me, self.log_len());
        Ok(())
    }

    /// Whether this node takes part in its configuration's Sequence Paxos: a member that is
    /// not fetching a later stop-sign.
    pub(crate) fn participates(&self) -> bool {
        self.member && self.fetch.is_none()
    }

    /// The notice of the stop-sign that started this node's configuration, if it knows it.
    pub(crate) fn start_notice(&self) -> Option<StopSigned> {
        if self.base == 0 || self.cfg.config_id == 0 {
            return None;
        }
        Some(StopSigned {
            config: self.cfg.config_id - 1,
            index: self.base,
            next: self.cfg.configuration(),
        })
    }

    fn rate_ok(&mut self, to: NodeId, kind: u8) -> bool {
        if self.told.len() > TOLD_MAX {
            self.told.clear();
        }
        let now = self.now;
        let due = self
            .told
            .get(&(to, kind))
            .is_none_or(|&t| now >= t + self.cfg.resend_us);
        if due {
            self.told.insert((to, kind), now);
        }
        due
    }

    /// `to` sent a message of an earlier configuration: tell it what started this one.
    pub(crate) fn tell_stop_signed(&mut self, to: NodeId, out: &mut Out) {
        if let Some(n) = self.start_notice()
            && self.rate_ok(to, 0)
        {
            out.send(to, Message::StopSigned(n));
        }
    }

    /// `to` sent a message of a later configuration: ask it what ended this one.
    pub(crate) fn ask_stop_sign(&mut self, to: NodeId, out: &mut Out) {
        if self.rate_ok(to, 1) {
            out.send(
                to,
                Message::StopSignQuery {
                    config: self.cfg.config_id,
                },
            );
        }
    }

    pub(crate) fn on_stop_sign_query(&mut self, from: NodeId, config: u64, out: &mut Out) {
        if config < self.cfg.config_id
            && let Some(n) = self.start_notice()
        {
            out.send(from, Message::StopSigned(n));
        }
    }

    /// `SS_{m.config}` is decided at `m.index`: fetch what is missing of the log up to it.
    pub(crate) fn on_stop_signed(&mut self, from: NodeId, m: StopSigned, out: &mut Out) {
        let valid = m.index > 0
            && m.config.checked_add(1) == Some(m.next.id)
            && m.next.validate().is_ok()
            && m.next.members.len() <= super::config::MAX_MEMBERS
            && m.next.members.iter().all(|x| x.roles.acceptor);
        if !valid {
            return;
        }
        let decided = self.store.decided_idx();
        if m.config < self.cfg.config_id || decided >= m.index {
            // Passed already: say so, so that a notifier stops.
            out.send(
                from,
                Message::FetchAck {
                    config: m.config,
                    upto: decided,
                },
            );
            return;
        }
        self.start_fetch(m.config, m.index, m.next, from, out);
    }

    /// This node's configuration ended (a stop-sign at `target` or before is decided):
    /// it stops taking part and fetches the decided log up to `target`.
    pub(crate) fn start_fetch(
        &mut self,
        config: u64,
        target: u64,
        next: Configuration,
        from: NodeId,
        out: &mut Out,
    ) {
        if let Some(f) = self.fetch.as_mut() {
            if !f.sources.contains(&from) && from != self.me {
                f.sources.insert(0, from);
            }
            f.tell.insert(from);
            if target > f.target {
                f.target = target;
                f.config = config;
                f.next = next;
                self.write_record(out);
            }
            self.fetch_tick(out);
            return;
        }
        if self.role == Role::Leader {
            let to = self.ld.n_l;
            self.hold_all_pending();
            self.step_down(to, out);
        }
        self.role = Role::Follower;
        self.phase = Phase::None;
        let mut sources = vec![from];
        for m in self.cfg.members.iter().chain(&next.members) {
            if m.id != self.me && !sources.contains(&m.id) {
                sources.push(m.id);
            }
        }
        sources.retain(|&s| s != self.me);
        let mut tell = BTreeSet::new();
        tell.insert(from);
        out.events.push(Event::RepairNeeded { upto: target });
        self.fetch = Some(Fetch {
            config,
            next,
            target,
            sources,
            buffer: BTreeMap::new(),
            asked: BTreeMap::new(),
            tries: 0,
            progress_us: self.now,
            tell,
        });
        self.write_record(out);
        self.fetch_tick(out);
    }

    /// Persists the configuration record (the driver syncs before the outbox's sends).
    pub(crate) fn write_record(&mut self, out: &mut Out) {
        let rec = ConfigRecord {
            config: self.cfg.configuration(),
            base: self.base,
            notify: self.notify.keys().copied().collect(),
            fetch: self.fetch.as_ref().map(|f| (f.target, f.next.clone())),
        };
        if let Err(e) = self.store.set_stop_sign(Some(rec.encode())) {
            self.store_failed("recording the configuration", e);
        }
        out.needs_sync = true;
    }

    /// Asks for the segments of the missing range that are not in flight (§4.4 pull): the
    /// range from the decided log on is cut into segments of `fetch_segment_entries`, at
    /// most `fetch_parallel` ahead, each asked of one source, another one after
    /// `resend_us`. In eager mode, only once the pushes stopped for `resend_us`.
    pub(crate) fn fetch_tick(&mut self, out: &mut Out) {
        // Fetched entries that wait for the decided log to reach them: a snapshot installed
        // meanwhile may have brought it there, and no answer will come to move them
        // (reconfig seed 1034 of the long run: the whole rest of the range sat in the
        // buffer, asked for by nobody, for good).
        if self
            .fetch
            .as_ref()
            .is_some_and(|f| f.buffer.contains_key(&(self.store.decided_idx() + 1)))
        {
            self.drain_fetched(out);
        }
        let next = self.store.decided_idx() + 1;
        let (now, resend_us, seg) = (self.now, self.cfg.resend_us, self.cfg.fetch_segment_entries);
        let eager = self.cfg.transfer == super::config::Transfer::Eager;
        let parallel = self.cfg.fetch_parallel as u64;
        let Some(f) = self.fetch.as_mut() else {
            return;
        };
        if next > f.target || f.sources.is_empty() {
            return;
        }
        if self.member
            && f.config == self.cfg.config_id
            && now >= f.progress_us + FETCH_GIVE_UP_RESENDS * resend_us
        {
            // Nobody serves the decided log (those that decided it lost it: amnesic
            // restarts): take part in this configuration again, whose next leader decides
            // the stop-sign anew (it is chosen, so every later leader adopts it).
            self.fetch = None;
            self.write_record(out);
            return;
        }
        if eager && now < f.progress_us + resend_us {
            return;
        }
        let k0 = (next - 1) / seg;
        let k1 = ((f.target - 1) / seg).min(k0 + parallel - 1);
        f.asked.retain(|&k, _| k >= k0);
        for k in k0..=k1 {
            let lo = (k * seg + 1).max(next);
            let hi = ((k + 1) * seg).min(f.target);
            let missing = (lo..=hi).find(|i| !f.buffer.contains_key(i));
            let Some(m) = missing else {
                continue;
            };
            if let Some(&(_, at)) = f.asked.get(&k) {
                if now < at + resend_us {
                    continue;
                }
                f.tries += 1;
            }
            let src = f.sources[((k + f.tries) % f.sources.len() as u64) as usize];
            f.asked.insert(k, (src, now));
            out.send(
                src,
                Message::FetchReq(FetchReq {
                    config: f.config,
                    from: m,
                    to: hi + 1,
                }),
            );
        }
    }

    /// Any node serves its decided prefix (§2.4.3: an old replica keeps helping).
    pub(crate) fn on_fetch_req(&mut self, from: NodeId, r: FetchReq, out: &mut Out) {
        if r.from == 0 || r.to <= r.from {
            return;
        }
        if self.offer_snapshot(from, r.from, out) {
            // Compacted here: the snapshot replaces the entries asked for.
            return;
        }
        let decided = self.store.decided_idx();
        let to = r.to.min(decided + 1);
        let start = r.from.max(self.store.first_index());
        let entries = if start < to {
            self.read_entries(start, to)
        } else {
            Vec::new()
        };
        let first = entries.first().map_or(r.from, |e| e.index);
        out.send(
            from,
            Message::FetchResp(FetchResp {
                config: r.config,
                from: first,
                entries,
                decided,
            }),
        );
    }

    pub(crate) fn on_fetch_resp(&mut self, from: NodeId, r: FetchResp, out: &mut Out) {
        if r.from == 0
            || r.entries.first().is_some_and(|e| e.index != r.from)
            || r.entries.last().is_some_and(|e| e.index > r.decided)
            || r.entries.windows(2).any(|w| w[0].index + 1 != w[1].index)
        {
            return;
        }
        let next = self.store.decided_idx() + 1;
        let (now, seg) = (self.now, self.cfg.fetch_segment_entries);
        // A member behind in its own configuration (`leader.rs`, `on_catch_up`).
        if self.participates() && self.on_catch_up(from, &r, out) {
            let upto = self.store.decided_idx();
            if self.recovering.is_some() && r.decided > upto {
                // An amnesic member following as a learner (`reconfig_tick`): behind, so the
                // next part at once.
                self.follow_asked_us = Some(self.now);
                out.send(
                    from,
                    Message::FetchReq(FetchReq {
                        config: self.cfg.config_id,
                        from: upto + 1,
                        to: (upto + 1).saturating_add(self.cfg.fetch_segment_entries),
                    }),
                );
            }
            return;
        }
        let Some(f) = self.fetch.as_mut() else {
            if !self.member && r.from == next && !r.entries.is_empty() {
                // A node outside the configuration follows the decided log, as a learner
                // (its own proposals' acknowledgements, and a later stop-sign that may
                // name it).
                self.store_decided(next, &r.entries, out);
                let last = next + r.entries.len() as u64 - 1;
                if r.decided > last {
                    // Behind: the next part at once.
                    self.follow_asked_us = Some(self.now);
                    out.send(
                        from,
                        Message::FetchReq(FetchReq {
                            config: self.cfg.config_id,
                            from: last + 1,
                            to: (last + 1).saturating_add(self.cfg.fetch_segment_entries),
                        }),
                    );
                }
                self.deliver(out);
            } else if !r.entries.is_empty() {
                // A push to a node that holds it already: stop the pusher.
                out.send(
                    from,
                    Message::FetchAck {
                        config: r.config,
                        upto: next - 1,
                    },
                );
            }
            return;
        };
        let k = (r.from - 1) / seg;
        if f.asked.get(&k).is_some_and(|(s, _)| *s == from) {
            f.asked.remove(&k);
            if r.entries.is_empty() {
                // It does not hold them (yet): the next ask goes elsewhere.
                f.tries += 1;
            }
        }
        let mut got = false;
        for e in r.entries {
            if e.index >= next && e.index <= f.target {
                f.buffer.insert(e.index, e);
                got = true;
            }
        }
        if got {
            f.progress_us = now;
            f.tell.insert(from);
        }
        self.drain_fetched(out);
        let upto = self.store.decided_idx();
        if got || upto >= r.from {
            out.send(
                from,
                Message::FetchAck {
                    config: r.config,
                    upto,
                },
            );
        }
        self.fetch_tick(out);
    }

    /// Moves the contiguous run of fetched entries into the log as decided; ends the fetch
    /// at its target.
    fn drain_fetched(&mut self, out: &mut Out) {
        let next = self.store.decided_idx() + 1;
        let Some(f) = self.fetch.as_mut() else {
            return;
        };
        // What the decided log reached meanwhile (a snapshot) is not needed any more.
        f.buffer = f.buffer.split_off(&next);
        let mut run = Vec::new();
        let mut i = next;
        while let Some(e) = f.buffer.remove(&i) {
            run.push(e);
            i += 1;
        }
        if !run.is_empty() {
            self.store_decided(next, &run, out);
        }
        let done = self
            .fetch
            .as_ref()
            .is_some_and(|f| self.store.decided_idx() >= f.target);
        if done && let Some(f) = self.fetch.take() {
            let upto = self.store.decided_idx();
            for t in f.tell {
                out.send(
                    t,
                    Message::FetchAck {
                        config: f.config,
                        upto,
                    },
                );
            }
            out.events.push(Event::Repaired { upto });
            self.write_record(out);
        }
        self.deliver(out);
    }

    /// Stores decided entries `run` (from `next`, the decided log's next entry) and
    /// decides them. What the log holds of them already stays, and what it holds after
    /// them too: an accepted entry may count toward a choice (the node may take part in
    /// its configuration again, `fetch_tick`). From the first entry that differs on, the
    /// log is replaced: an entry that differs from the chosen one was accepted in a round
    /// below the choosing one, and nothing after it in the same log can be chosen.
    pub(crate) fn store_decided(&mut self, next: u64, run: &[Entry], out: &mut Out) {
        let Some(end) = run.last().map(|e| e.index) else {
            return;
        };
        let held_to = self.log_len().min(end);
        let held = if next <= held_to {
            match self.store.entries(next, held_to + 1, usize::MAX) {
                Ok(v) => v,
                Err(e) => self.store_failed("reading the log to compare", e),
            }
        } else {
            Vec::new()
        };
        let same = held
            .iter()
            .zip(run)
            .take_while(|(a, b)| a.index == b.index && a.payload == b.payload)
            .count();
        if same < run.len()
            && let Err(e) = self
                .store
                .append_on_prefix(next + same as u64, &run[same..])
        {
            self.store_failed("storing fetched entries", e);
        }
        if let Err(e) = self.store.set_decided_idx(end) {
            self.store_failed("deciding fetched entries", e);
        }
        out.needs_sync = true;
    }

    pub(crate) fn on_fetch_ack(&mut self, from: NodeId, config: u64, upto: u64, out: &mut Out) {
        // A follower of this configuration caught up by its leader (`leader.rs`).
        if config == self.config_id() && self.participates() && self.is_member(from) {
            self.on_push_ack(from, upto, out);
        }
        if let Some(p) = self.pushes.get_mut(&from) {
            if upto > p.acked {
                p.acked = upto;
                if p.sent_next <= upto + 1 {
                    p.sent_us = None;
                }
            }
            if p.acked >= p.target {
                self.pushes.remove(&from);
            } else {
                self.push_one(from, out);
            }
        }
        if upto >= self.base && self.notify.remove(&from).is_some() {
            self.write_record(out);
        }
    }

    /// One message of an eager transfer to `to`, if none is in flight.
    fn push_one(&mut self, to: NodeId, out: &mut Out) {
        let decided = self.store.decided_idx();
        let (now, resend_us) = (self.now, self.cfg.resend_us);
        let Some(p) = self.pushes.get(&to).cloned() else {
            return;
        };
        if p.sent_us.is_some_and(|t| now < t + resend_us) {
            return;
        }
        let from = p.acked + 1;
        let end = p.target.min(decided);
        if p.acked == 0 || p.sent_us.is_some() {
            // First message, or a re-send: the notice goes first (it may have been lost).
            out.send(
                to,
                Message::StopSigned(StopSigned {
                    config: p.config,
                    index: p.target,
                    next: p.next.clone(),
                }),
            );
        }
        if from <= end && self.offer_snapshot(to, from, out) {
            // Compacted here: the newcomer pulls the snapshot, then the rest.
            if let Some(p) = self.pushes.get_mut(&to) {
                p.sent_us = Some(now);
            }
            return;
        }
        let entries = if from <= end {
            self.read_entries(from.max(self.store.first_index()), end + 1)
        } else {
            Vec::new()
        };
        let Some(last) = entries.last().map(|e| e.index) else {
            return;
        };
        out.send(
            to,
            Message::FetchResp(FetchResp {
                config: p.config,
                from: entries[0].index,
                entries,
                decided,
            }),
        );
        if let Some(p) = self.pushes.get_mut(&to) {
            p.sent_next = last + 1;
            p.sent_us = Some(now);
        }
    }

    /// Fetch, eager pushes, and the notices to new members, once per tick. A node outside
    /// its configuration with proposals of its own in flight follows the decided log
    /// (asking a member every `resend_us`, at once again while behind) to learn their
    /// fate; an idle spare waits (§2.4.3: it fetches `σ_i` once `SS_i` names it, which
    /// is what the pull and eager transfers of §4.4 measure). An amnesic member that has
    /// not recovered a promise yet (it waits for every other member's answer,
    /// `follower.rs`) follows the decided log the same way, as a learner: its
    /// application and its proposers must not wait for a member that is down.
    pub(crate) fn reconfig_tick(&mut self, out: &mut Out) {
        self.fetch_tick(out);
        let follows = (!self.member && self.batcher.values_in_flight() > 0)
            || (self.member && self.recovering.is_some());
        if follows
            && self.fetch.is_none()
            && self
                .follow_asked_us
                .is_none_or(|t| self.now >= t + self.cfg.resend_us)
        {
            self.follow_asked_us = Some(self.now);
            let n = self.cfg.members.len();
            if n > 0 {
                self.forward_turn = self.forward_turn.wrapping_add(1);
                let to = self.cfg.members[self.forward_turn % n].id;
                let from = self.store.decided_idx() + 1;
                out.send(
                    to,
                    Message::FetchReq(FetchReq {
                        config: self.cfg.config_id,
                        from,
                        to: from.saturating_add(self.cfg.fetch_segment_entries),
                    }),
                );
            }
        }
        let pushing: Vec<NodeId> = self.pushes.keys().copied().collect();
        for p in pushing {
            self.push_one(p, out);
        }
        if let Some(n) = self.start_notice() {
            let due: Vec<NodeId> = self
                .notify
                .iter()
                .filter(|(_, t)| t.is_none_or(|t| self.now >= t + self.cfg.resend_us))
                .map(|(&m, _)| m)
                .collect();
            for m in due {
                self.notify.insert(m, Some(self.now));
                out.send(m, Message::StopSigned(n.clone()));
            }
        }
    }

    /// Keeps a proposal for a later leader (bounded: beyond it, the proposer re-sends).
    pub(crate) fn hold(&mut self, b: Batch) {
        if self.held.len() < self.cfg.pending_batches_max {
            self.held.push(b);
        }
    }

    /// The leader's proposals not yet in the log go to the held ones.
    pub(crate) fn hold_all_pending(&mut self) {
        self.ld.prop_bytes = 0;
        for b in std::mem::take(&mut self.ld.prop_cmds) {
            self.hold(b);
        }
    }

    /// Held proposals go to the leader once one is known (or into the log here).
    pub(crate) fn flush_held(&mut self, out: &mut Out) {
        if self.held.is_empty() {
            return;
        }
        if !self.member && self.fetch.is_none() {
            // Removed: what it held goes to the members of the configuration it knows.
            for b in std::mem::take(&mut self.held) {
                self.forward_to_member(b, out);
            }
            return;
        }
        if !self.participates() {
            return;
        }
        if self.role == Role::Leader {
            if self.phase == Phase::Accept && !self.stopped() {
                for b in std::mem::take(&mut self.held) {
                    self.leader_propose(b, out);
                }
            }
            return;
        }
        if let Some(l) = self.leader().filter(|&l| l != self.me) {
            for b in std::mem::take(&mut self.held) {
                out.send(l, Message::Forward(b));
            }
        }
    }

    /// Applies every stop-sign the learner delivered (`pending_ss`), then delivers on.
    pub(crate) fn after_input(&mut self, out: &mut Out) {
        if self.snapshot_unsynced {
            // A snapshot written outside an input (`take_snapshot`): this outbox syncs it.
            self.snapshot_unsynced = false;
            out.needs_sync = true;
        }
        // Bounded: each round consumes one stop-sign of the decided log.
        for _ in 0..4096 {
            let Some((index, next, ballot)) = self.pending_ss.take() else {
                return;
            };
            self.enter_next(index, next, ballot, out);
            self.deliver(out);
        }
    }

    /// `SS_i` at `index` (accepted in `ss_ballot`) is decided and delivered here: enter
    /// `c_{i+1}` (§2.4.3 "once a process decides SS_i and has the final sequence σ_i, it can
    /// start its replica in c_{i+1}").
    pub(crate) fn enter_next(
        &mut self,
        index: u64,
        next: Configuration,
        ss_ballot: Ballot,
        out: &mut Out,
    ) {
        let was_leader = self.participates() && self.role == Role::Leader;
        let was_member = self.member;
        let old: Vec<NodeId> = self.cfg.members.iter().map(|m| m.id).collect();
        let newcomers: Vec<NodeId> = next
            .members
            .iter()
            .map(|m| m.id)
            .filter(|&n| n != self.me && !old.contains(&n))
            .collect();
        if was_leader {
            // The final Decide to `c_i` (the followers enter `c_{i+1}` on it), and the
            // stop-sign to everyone concerned.
            self.leader_flush(out);
            let notice = StopSigned {
                config: self.cfg.config_id,
                index,
                next: next.clone(),
            };
            let mut all: Vec<NodeId> = old.clone();
            all.extend(next.members.iter().map(|m| m.id));
            all.sort_unstable();
            all.dedup();
            for n in all.into_iter().filter(|&n| n != self.me) {
                out.send(n, Message::StopSigned(notice.clone()));
            }
            if self.cfg.transfer == super::config::Transfer::Eager {
                for &n in &newcomers {
                    self.pushes.insert(
                        n,
                        Push {
                            config: self.cfg.config_id,
                            target: index,
                            next: next.clone(),
                            acked: 0,
                            sent_next: 1,
                            sent_us: None,
                        },
                    );
                }
            }
        }
        self.hold_all_pending();
        // Entries past the stop-sign were appended in `c_i` by a leader that had not
        // learned of it (a stale leader's own stop-sign among them): `c_i` ends at `index`,
        // so none of them is chosen, and none may enter `c_{i+1}`'s log, where, with the
        // accepted round reset below, the longest log would carry them into the first
        // adoption (reconfig seed 1170 of the long run: a stale stop-sign decided there
        // gave configuration 7 two member sets).
        let keep = index.max(self.store.decided_idx());
        if self.log_len() > keep
            && let Err(e) = self.store.truncate(keep + 1)
        {
            self.store_failed("dropping the entries past the stop-sign", e);
        }
        // Persist, in this order (see the module comment): the new configuration's empty
        // promise and accepted round (appendix B lines 14-15), then the record.
        if let Err(e) = self.store.set_promised(Ballot::ZERO) {
            self.store_failed("resetting the promise", e);
        }
        if let Err(e) = self.store.set_accepted_round(Ballot::ZERO) {
            self.store_failed("resetting the accepted round", e);
        }
        let first_member_by_priority = next
            .members
            .iter()
            .map(|m| m.id)
            .rev()
            .max_by_key(|&n| self.cfg.priority(n));
        self.cfg.config_id = next.id;
        self.cfg.members = next.members.clone();
        self.base = index;
        self.member = next.contains(self.me);
        self.notify = if was_member {
            newcomers.iter().map(|&n| (n, None)).collect()
        } else {
            BTreeMap::new()
        };
        self.fetch = None;
        self.write_record(out);
        self.role = Role::Follower;
        self.phase = Phase::None;
        self.leader_hint = None;
        self.last_leader_node = None;
        self.ld = super::leader::LeaderState::default();
        self.accepted_owed = false;
        self.prepare_req_us = None;
        self.read_acks.clear();
        self.amnesic = self.member && self.amnesic_life;
        self.recovering = self.amnesic.then(BTreeMap::new);
        self.recover_asked_us = None;
        // §4.4.3 head start (see the module comment).
        let head = if next.contains(ss_ballot.node) {
            Some(ss_ballot.node)
        } else {
            first_member_by_priority
        };
        let start_n = u32::from(head == Some(self.me));
        self.ble = super::ble::Ble::new(&self.cfg, self.me, self.incarnation, start_n);
        self.ble.set_candidate(!self.amnesic);
        if self.member {
            self.ble.start(self.now, &mut self.ble_out);
            self.drain_ble(out);
            if head == Some(self.me) && !self.amnesic {
                let b = self.ble.ballot();
                self.ble.observe_leader(b);
                self.on_leader(b, out);
            }
        }
    }
}
