//! Scenario tests of Sequence Paxos reconfiguration (seed 001 §2.4.3, §4.4) over a tiny
//! deterministic network: every message crosses the wire codec; a seeded RNG drops,
//! duplicates and delays (reorders) messages and picks crashes; nodes restart over their
//! durable stores (`DurableLogStore` over `MemDir`) or amnesic; time moves in 1 ms steps.
//! The network acts as the driver: it syncs the store before an outbox's sends leave.
//!
//! Every delivery of every life is checked as it happens against one sequence (agreement),
//! and within one life no value twice (integrity); violations are collected, not panicked,
//! so that a test can also assert that a broken variant is caught.

use super::*;
use crate::codec::{Encoder, WireMessage};
use crate::config::{Member, Roles};
use crate::protocol::{Ack, ConfigChange, ReconfigureError};
use crate::storage::{DurableLogStore, DurableOptions, Entry, MemDir, MemoryLogStore};
use crate::types::{BatchKey, ValueId};
use std::collections::{BTreeMap, BTreeSet, VecDeque};

const STEP_US: Micros = 1_000;

fn splitmix64(state: &mut u64) -> u64 {
    *state = state.wrapping_add(0x9e37_79b9_7f4a_7c15);
    let mut z = *state;
    z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    z ^ (z >> 31)
}

struct Node {
    sp: Option<SeqPaxos>,
    incarnation: u64,
    disk: Option<MemDir>,
    /// This life's deliveries: (instance, batch key, value ids).
    delivered: Vec<(u64, BatchKey, Vec<ValueId>)>,
    /// This life's configuration changes, with the instance of the delivery before each.
    changes: Vec<(ConfigChange, Option<u64>)>,
    acks: Vec<Ack>,
    /// Snapshots installed in this life (their `upto`), in order.
    installs: Vec<u64>,
    /// The application's position: every instance up to here is in its state.
    app_upto: u64,
    /// The node's latest snapshot (taken or installed), restored at a restart.
    saved: Option<crate::protocol::Snapshot>,
}

struct Chaos {
    rng: u64,
    loss_per_mille: u64,
    delay_max_steps: u64,
    delayed: Vec<(Micros, NodeId, NodeId, Message)>,
}

impl Chaos {
    fn roll(&mut self, n: u64) -> u64 {
        splitmix64(&mut self.rng) % n.max(1)
    }
}

struct Net {
    cfg: SeqPaxosConfig,
    nodes: Vec<Node>,
    now: Micros,
    queue: VecDeque<(NodeId, NodeId, Message)>,
    cut: BTreeSet<(u32, u32)>,
    decided: BTreeMap<u64, BatchKey>,
    violations: Vec<String>,
    next_payload: u64,
    chaos: Option<Chaos>,
    /// Messages of each kind sent (by `WireMessage::kind`).
    sent: BTreeMap<u8, usize>,
    /// The largest message sent, encoded, in bytes.
    max_message: usize,
    restarts: usize,
    /// The values of each instance delivered somewhere.
    decided_values: BTreeMap<u64, Vec<ValueId>>,
    /// Snapshots installed, over every node and life.
    installs_total: usize,
}

fn durable_options() -> DurableOptions {
    DurableOptions {
        sync: true,
        segment_bytes: 256 << 10,
        cache_instances: 1024,
        cache_bytes: 64 << 20,
    }
}

fn open_store(disk: &Option<MemDir>) -> Box<dyn LogStore + Send> {
    match disk {
        Some(d) => Box::new(
            DurableLogStore::open(d.clone(), durable_options())
                .expect("open the durable log")
                .0,
        ),
        None => Box::new(MemoryLogStore::new()),
    }
}

fn members(ids: &[u32]) -> Configuration {
    Configuration {
        id: 0,
        members: ids
            .iter()
            .map(|&i| Member {
                id: NodeId(i),
                roles: Roles::PAL,
            })
            .collect(),
    }
}

fn base_config(first: &[u32]) -> SeqPaxosConfig {
    let mut c = SeqPaxosConfig::replicas(first);
    c.batch_linger_us = 1000;
    c
}

impl Net {
    /// Nodes `0..n`, each built with `cfg` (its members are the first configuration; the
    /// other nodes are spares, built with the same `cfg`: the construction contract).
    fn new(n: u32, cfg: SeqPaxosConfig, durable: bool) -> Net {
        let nodes = (0..n)
            .map(|i| {
                let disk = durable.then(|| MemDir::new(format!("n{i}")));
                let sp = SeqPaxos::new(cfg.clone(), NodeId(i), StartInfo::FRESH, open_store(&disk))
                    .expect("a valid configuration");
                Node {
                    sp: Some(sp),
                    incarnation: 0,
                    disk,
                    delivered: Vec::new(),
                    changes: Vec::new(),
                    acks: Vec::new(),
                    installs: Vec::new(),
                    app_upto: 0,
                    saved: None,
                }
            })
            .collect();
        Net {
            cfg,
            nodes,
            now: 0,
            queue: VecDeque::new(),
            cut: BTreeSet::new(),
            decided: BTreeMap::new(),
            violations: Vec::new(),
            next_payload: 0,
            chaos: None,
            sent: BTreeMap::new(),
            max_message: 0,
            restarts: 0,
            decided_values: BTreeMap::new(),
            installs_total: 0,
        }
    }

    fn sp(&self, i: u32) -> &SeqPaxos {
        self.nodes[i as usize].sp.as_ref().expect("node is up")
    }

    fn sp_mut(&mut self, i: u32) -> &mut SeqPaxos {
        self.nodes[i as usize].sp.as_mut().expect("node is up")
    }

    fn up(&self, i: u32) -> bool {
        self.nodes[i as usize].sp.is_some()
    }

    fn carry(&mut self, i: u32, mut out: Out) {
        if out.needs_sync {
            self.sp_mut(i).sync_storage().expect("sync");
        }
        for (to, m) in out.sends.drain(..) {
            let mut e = Encoder::new();
            m.encode(&mut e);
            let kind = m.kind();
            *self.sent.entry(kind).or_default() += 1;
            let bytes = e.to_bytes();
            self.max_message = self.max_message.max(bytes.len());
            let m = Message::decode(kind, bytes).expect("decodes");
            if self.cut.contains(&(i, to.0)) || to.0 as usize >= self.nodes.len() {
                continue;
            }
            let now = self.now;
            match self.chaos.as_mut() {
                None => self.queue.push_back((NodeId(i), to, m)),
                Some(c) => {
                    if c.roll(1000) < c.loss_per_mille {
                        continue;
                    }
                    let copies = if c.roll(100) == 0 { 2 } else { 1 };
                    for _ in 0..copies {
                        let steps = c.roll(c.delay_max_steps + 1);
                        c.delayed
                            .push((now + steps * STEP_US, NodeId(i), to, m.clone()));
                    }
                }
            }
        }
        let mut changes = std::mem::take(&mut out.config_changes);
        changes.sort_by_key(|c| c.position);
        let mut changes = changes.into_iter().peekable();
        let deliveries: Vec<Delivery> = out.deliveries.drain(..).collect();
        let mut installs = std::mem::take(&mut out.installs).into_iter().peekable();
        for (k, d) in deliveries.into_iter().enumerate() {
            while let Some(ins) = installs.next_if(|x| x.position <= k) {
                self.installed(i, ins.snapshot);
            }
            while changes.peek().is_some_and(|c| c.position <= k) {
                let c = changes.next().expect("peeked");
                let before = self.nodes[i as usize].delivered.last().map(|x| x.0);
                self.nodes[i as usize].changes.push((c, before));
            }
            let key = d.batch.key();
            let node = &mut self.nodes[i as usize];
            if let Some(&(last, _, _)) = node.delivered.last()
                && d.instance <= last
            {
                self.violations
                    .push(format!("n{i}: delivery {} after {last}", d.instance));
            }
            let first = *self.decided.entry(d.instance).or_insert(key);
            if first != key {
                self.violations.push(format!(
                    "n{i} delivered {key:?} at {} where {first:?} was delivered",
                    d.instance
                ));
            }
            for v in d.batch.ids() {
                if node.delivered.iter().any(|(_, _, ids)| ids.contains(&v)) {
                    self.violations
                        .push(format!("n{i} delivered {v:?} twice in one life"));
                }
            }
            if d.instance <= node.app_upto {
                self.violations.push(format!(
                    "n{i}: delivery {} not after the application's position {}",
                    d.instance, node.app_upto
                ));
            }
            node.app_upto = d.instance;
            self.decided_values
                .entry(d.instance)
                .or_insert_with(|| d.batch.ids().collect());
            node.delivered
                .push((d.instance, key, d.batch.ids().collect()));
        }
        for ins in installs {
            self.installed(i, ins.snapshot);
        }
        for c in changes {
            let before = self.nodes[i as usize].delivered.last().map(|x| x.0);
            self.nodes[i as usize].changes.push((c, before));
        }
        self.nodes[i as usize].acks.append(&mut out.acks);
    }

    /// Node `i` installed `snap`: the application's state never moves back, and travels
    /// with the snapshot.
    fn installed(&mut self, i: u32, snap: crate::protocol::Snapshot) {
        let node = &mut self.nodes[i as usize];
        if snap.upto < node.app_upto {
            self.violations.push(format!(
                "n{i}: an install up to {} moves the application back from {}",
                snap.upto, node.app_upto
            ));
        }
        let app: Option<u64> = std::str::from_utf8(&snap.app)
            .ok()
            .and_then(|t| t.parse().ok());
        if app.is_none_or(|a| a > snap.upto) {
            self.violations.push(format!(
                "n{i}: a snapshot up to {} with state {app:?}",
                snap.upto
            ));
        }
        node.app_upto = snap.upto;
        node.installs.push(snap.upto);
        node.saved = Some(snap);
        self.installs_total += 1;
    }

    /// Every live node snapshots its application (whose state is its position).
    fn snapshot_all(&mut self) {
        for i in 0..self.nodes.len() {
            let node = &mut self.nodes[i];
            let app = Bytes::from(node.app_upto.to_string());
            if let Some(sp) = node.sp.as_mut()
                && let Ok(snap) = sp.take_snapshot(app)
            {
                assert!(
                    snap.upto <= sp.store.decided_idx(),
                    "a snapshot covers only decided entries"
                );
                node.saved = Some(snap);
            }
        }
    }

    fn deliver_all(&mut self) {
        for _ in 0..1_000_000 {
            let Some((from, to, m)) = self.queue.pop_front() else {
                return;
            };
            if self.cut.contains(&(from.0, to.0)) {
                continue;
            }
            let now = self.now;
            let Some(sp) = self.nodes[to.0 as usize].sp.as_mut() else {
                continue;
            };
            let mut out = Out::new();
            sp.receive(now, from, m, &mut out);
            self.carry(to.0, out);
        }
        panic!("the network never went quiet");
    }

    fn step(&mut self) {
        if let Some(c) = self.chaos.as_mut() {
            let now = self.now;
            let (due, later): (Vec<_>, Vec<_>) =
                c.delayed.drain(..).partition(|(at, ..)| *at <= now);
            c.delayed = later;
            for (_, from, to, m) in due {
                self.queue.push_back((from, to, m));
            }
        }
        self.deliver_all();
        self.now += STEP_US;
        for i in 0..self.nodes.len() as u32 {
            let now = self.now;
            if let Some(sp) = self.nodes[i as usize].sp.as_mut() {
                let mut out = Out::new();
                sp.tick(now, &mut out);
                self.carry(i, out);
            }
        }
        self.deliver_all();
    }

    fn run(&mut self, us: Micros) {
        for _ in 0..us / STEP_US {
            self.step();
        }
    }

    fn run_until(&mut self, max_us: Micros, cond: impl Fn(&Net) -> bool) -> bool {
        for _ in 0..max_us / STEP_US {
            if cond(self) {
                return true;
            }
            self.step();
        }
        cond(self)
    }

    /// The leader in the accept phase of the highest configuration among the live nodes.
    fn leader(&self) -> Option<u32> {
        (0..self.nodes.len() as u32)
            .filter(|&i| self.up(i) && self.sp(i).status().leading)
            .max_by_key(|&i| self.sp(i).config_id())
    }

    fn stable_leader(&mut self) -> u32 {
        assert!(
            self.run_until(5_000_000, |n| n.leader().is_some()),
            "no leader elected"
        );
        self.leader().expect("a leader")
    }

    fn propose(&mut self, i: u32) -> Option<ValueId> {
        self.next_payload += 1;
        let payload = Bytes::from(format!("value {} from n{i}", self.next_payload));
        let now = self.now;
        let mut out = Out::new();
        let r = self.sp_mut(i).propose(now, payload, &mut out);
        self.carry(i, out);
        r.ok()
    }

    fn reconfigure(&mut self, i: u32, ids: &[u32]) -> Result<(), ReconfigureError> {
        let now = self.now;
        let mut out = Out::new();
        let r = self.sp_mut(i).reconfigure(now, members(ids), &mut out);
        self.carry(i, out);
        r
    }

    /// Node `i`'s next life over what its store kept (a process crash: every write that
    /// reached the OS stays; an in-memory store forgets everything).
    fn restart(&mut self, i: u32) {
        self.restart_with(i, |d| d.crash_process());
    }

    fn power_cut(&mut self, i: u32) {
        let mut rng = self.chaos.as_mut().map_or(7, |c| splitmix64(&mut c.rng));
        self.restart_with(i, move |d| {
            d.crash_machine(|_, unsynced| crate::storage::Tear {
                keep: (splitmix64(&mut rng) % (unsynced as u64 + 1)) as usize,
                flip: None,
            })
        });
    }

    fn restart_with(&mut self, i: u32, crash: impl FnOnce(&MemDir)) {
        self.restarts += 1;
        let node = &mut self.nodes[i as usize];
        node.sp = None;
        node.incarnation += 1;
        node.delivered.clear();
        node.changes.clear();
        if let Some(d) = &node.disk {
            crash(d);
        }
        node.installs.clear();
        node.app_upto = 0;
        let start = StartInfo::restart(node.incarnation, node.disk.is_none()).expect("start");
        let mut sp = SeqPaxos::new(self.cfg.clone(), NodeId(i), start, open_store(&node.disk))
            .expect("restart");
        // The application restarts from the node's snapshot, as `abcast node` does.
        if let Some(snap) = &node.saved {
            sp.restore_snapshot(snap).expect("the snapshot is restored");
            node.app_upto = snap.upto;
        }
        node.sp = Some(sp);
    }

    /// The values in this node's application: delivered in this life, or in the snapshot
    /// it started from or installed.
    fn delivered_ids(&self, i: u32) -> BTreeSet<ValueId> {
        let node = &self.nodes[i as usize];
        let from_snapshot = node.saved.as_ref().map_or(0, |s| s.upto);
        self.decided_values
            .range(..=from_snapshot)
            .flat_map(|(_, v)| v.iter().copied())
            .chain(
                node.delivered
                    .iter()
                    .flat_map(|(_, _, v)| v.iter().copied()),
            )
            .collect()
    }

    fn has_all(&self, i: u32, want: &[ValueId]) -> bool {
        let got = self.delivered_ids(i);
        want.iter().all(|v| got.contains(v))
    }

    /// The decided log of node `i`.
    fn decided_log(&self, i: u32) -> Vec<Entry> {
        let sp = self.sp(i);
        let d = sp.store.decided_idx();
        if d == 0 {
            return Vec::new();
        }
        let mut v = Vec::new();
        let mut next = sp.store.first_index();
        while next <= d {
            let e = sp.store.entries(next, d + 1, usize::MAX).expect("read");
            let Some(last) = e.last().map(|x| x.index) else {
                break;
            };
            v.extend(e);
            next = last + 1;
        }
        v
    }

    /// The nodes of `ids` hold one decided log, numbered from 1 without a gap, each a
    /// prefix of the longest; returns its length and the stop-signs in it (index, id).
    fn same_log(&self, ids: &[u32]) -> (u64, Vec<(u64, u64)>) {
        let logs: Vec<Vec<Entry>> = ids.iter().map(|&i| self.decided_log(i)).collect();
        // A compacted log holds a suffix: entries compare by index.
        let mut by_index: BTreeMap<u64, Bytes> = BTreeMap::new();
        for (k, l) in logs.iter().enumerate() {
            let first = l.first().map_or(1, |e| e.index);
            for (j, e) in l.iter().enumerate() {
                assert_eq!(e.index, first + j as u64, "n{}: a gap in the log", ids[k]);
                let held = by_index.entry(e.index).or_insert_with(|| e.payload.clone());
                assert_eq!(*held, e.payload, "n{} differs at entry {}", ids[k], e.index);
            }
        }
        let ss = by_index
            .iter()
            .filter_map(|(&i, p)| match EntryBody::decode(p) {
                Ok(EntryBody::StopSign(c)) => Some((i, c.id)),
                _ => None,
            })
            .collect();
        let len = by_index.keys().next_back().copied().unwrap_or(0);
        (len, ss)
    }

    fn member_ids(&self, i: u32) -> Vec<u32> {
        self.sp(i).cfg.members.iter().map(|m| m.id.0).collect()
    }

    fn in_config(&self, ids: &[u32], config: u64) -> bool {
        ids.iter()
            .all(|&i| self.up(i) && self.sp(i).config_id() >= config)
    }

    fn acked(&self, proposed: &[(u32, u64, ValueId)]) -> Vec<ValueId> {
        proposed
            .iter()
            .filter(|(i, _, v)| {
                self.nodes[*i as usize].acks.iter().any(|a| {
                    a.key.origin == v.node
                        && (a.key.first_seq..a.key.first_seq + u64::from(a.count)).contains(&v.seq)
                })
            })
            .map(|(_, _, v)| *v)
            .collect()
    }

    fn dump(&self) -> String {
        let mut s = String::new();
        for i in 0..self.nodes.len() as u32 {
            let sp = self.sp(i);
            s += &format!(
                "n{i}: config {} member {} base {} fetch {:?} decided {} log {} role {:?} \
                 phase {:?} amnesic {} recovering {} leader {:?} promised {:?} delivered {}\n",
                sp.config_id(),
                sp.member,
                sp.base,
                sp.fetch.as_ref().map(|f| (f.target, f.sources.clone())),
                sp.store.decided_idx(),
                sp.log_len(),
                sp.role,
                sp.phase,
                sp.amnesic,
                sp.recovering.is_some(),
                sp.leader(),
                sp.store.promised(),
                self.nodes[i as usize].delivered.len(),
            );
        }
        s
    }

    fn assert_no_violation(&self) {
        assert!(self.violations.is_empty(), "{:?}", self.violations);
    }
}

// ---- the scenarios ----------------------------------------------------------------------

/// Proposals at `at` every step until `cond` (at most `max_steps`); returns them.
fn propose_while(
    net: &mut Net,
    at: &[u32],
    max_steps: u64,
    cond: impl Fn(&Net) -> bool,
) -> Vec<ValueId> {
    let mut v = Vec::new();
    for _ in 0..max_steps {
        if cond(net) {
            break;
        }
        for &i in at {
            if net.up(i)
                && net.sp(i).can_propose()
                && let Some(id) = net.propose(i)
            {
                v.push(id);
            }
        }
        net.step();
    }
    v
}

/// One reconfiguration of `from` to `to` under continuous proposals at every node of
/// `proposers`: every proposal is delivered exactly once at every node of `to`, all of
/// them hold one log (continuous indices, the stop-sign where `c_0` ends), and the
/// `ConfigChange` sits right after the stop-sign's delivery.
fn reconfigure_under_load(from: &[u32], to: &[u32], n: u32, transfer: Transfer) -> Net {
    let mut cfg = base_config(from);
    cfg.transfer = transfer;
    let mut net = Net::new(n, cfg, false);
    let leader = net.stable_leader();
    let proposers: Vec<u32> = (0..n).collect();
    let mut proposed = propose_while(&mut net, &proposers, 50, |_| false);
    net.reconfigure(leader, to)
        .expect("the leader proposes the stop-sign");
    assert_eq!(
        net.reconfigure(leader, to),
        Err(ReconfigureError::Refused(crate::ProposeError::Busy)),
        "one change at a time"
    );
    let to_v = to.to_vec();
    proposed.extend(propose_while(&mut net, &proposers, 5_000, |net| {
        net.in_config(&to_v, 1) && net.leader().is_some_and(|l| net.sp(l).config_id() == 1)
    }));
    assert!(net.in_config(to, 1), "every new member entered c_1");
    proposed.extend(propose_while(&mut net, &proposers, 100, |_| false));
    assert!(
        net.run_until(5_000_000, |net| to
            .iter()
            .all(|&i| net.has_all(i, &proposed))),
        "every proposal delivered at every member of c_1"
    );
    net.assert_no_violation();
    let (_, ss) = net.same_log(to);
    assert_eq!(ss.len(), 1, "one stop-sign: {ss:?}");
    let (ss_index, ss_id) = ss[0];
    assert_eq!(ss_id, 1);
    for &i in to {
        assert_eq!(net.member_ids(i), to.to_vec());
        let node = &net.nodes[i as usize];
        let change = node
            .changes
            .iter()
            .find(|(c, _)| c.config.id == 1)
            .expect("a ConfigChange to c_1");
        assert_eq!(
            change
                .0
                .config
                .members
                .iter()
                .map(|m| m.id.0)
                .collect::<Vec<_>>(),
            to.to_vec()
        );
        // Right after the stop-sign: every delivery before it is below the stop-sign's
        // index, every one after it above.
        assert!(change.1.is_none_or(|b| b < ss_index));
        let after: Vec<u64> = node
            .delivered
            .iter()
            .map(|d| d.0)
            .filter(|&x| change.1.is_none_or(|b| x > b))
            .collect();
        assert!(after.iter().all(|&x| x > ss_index), "n{i}: {after:?}");
        assert!(!after.is_empty(), "n{i} delivered in c_1 too");
    }
    net
}

#[test]
fn a_node_is_added_and_delivers_the_whole_sequence_from_its_start() {
    let net = reconfigure_under_load(&[0, 1, 2], &[0, 1, 2, 3], 4, Transfer::Pull);
    assert_eq!(
        net.nodes[3].delivered.first().map(|d| d.0),
        net.nodes[0].delivered.first().map(|d| d.0),
        "the new node delivered from the first entry"
    );
}

#[test]
fn a_follower_is_removed_and_still_forwards_proposals() {
    let mut cfg = base_config(&[0, 1, 2]);
    cfg.transfer = Transfer::Pull;
    let mut net = Net::new(3, cfg, false);
    let leader = net.stable_leader();
    let removed = (leader + 1) % 3;
    let keep: Vec<u32> = (0..3).filter(|&i| i != removed).collect();
    net.reconfigure(leader, &keep).expect("starts");
    assert!(net.run_until(2_000_000, |n| n.in_config(&[0, 1, 2], 1)
        && n.leader().is_some_and(|l| n.sp(l).config_id() == 1)));
    assert!(!net.sp(removed).member, "n{removed} is out");
    let mut proposed = Vec::new();
    for _ in 0..20 {
        proposed.extend(net.propose(removed));
        net.step();
    }
    assert!(
        net.run_until(3_000_000, |n| keep.iter().all(|&i| n.has_all(i, &proposed))
            && n.has_all(removed, &proposed)),
        "the removed node's proposals are ordered by c_1, and it still learns them"
    );
    assert!(
        matches!(
            net.reconfigure(removed, &[0, 1, 2]),
            Err(ReconfigureError::Refused(
                crate::ProposeError::NotLeader { .. }
            ))
        ),
        "a node outside the configuration is no leader"
    );
    net.assert_no_violation();
}

#[test]
fn the_leader_is_replaced_under_continuous_proposals_pull() {
    let mut net = Net::new(4, base_config(&[0, 1, 2]), false);
    let leader = net.stable_leader();
    drop(net);
    let to: Vec<u32> = [0, 1, 2, 3].into_iter().filter(|&i| i != leader).collect();
    let net = reconfigure_under_load(&[0, 1, 2], &to, 4, Transfer::Pull);
    assert!(
        net.sent.get(&18).copied().unwrap_or(0) > 0,
        "fetch requests"
    );
}

#[test]
fn the_leader_is_replaced_under_continuous_proposals_eager() {
    let mut net = Net::new(4, base_config(&[0, 1, 2]), false);
    let leader = net.stable_leader();
    drop(net);
    let to: Vec<u32> = [0, 1, 2, 3].into_iter().filter(|&i| i != leader).collect();
    let net = reconfigure_under_load(&[0, 1, 2], &to, 4, Transfer::Eager);
    assert!(net.sent.get(&19).copied().unwrap_or(0) > 0, "pushes");
}

#[test]
fn every_member_is_replaced_pull_and_eager() {
    for t in [Transfer::Pull, Transfer::Eager] {
        reconfigure_under_load(&[0, 1, 2], &[3, 4, 5], 6, t);
    }
}

#[test]
fn the_old_leader_takes_the_head_start_in_the_next_configuration() {
    let mut net = Net::new(4, base_config(&[0, 1, 2]), false);
    let leader = net.stable_leader();
    net.reconfigure(leader, &[0, 1, 2, 3]).expect("starts");
    assert!(net.run_until(2_000_000, |n| n.in_config(&[0, 1, 2, 3], 1)
        && n.leader().is_some_and(|l| n.sp(l).config_id() == 1)));
    assert_eq!(net.leader(), Some(leader), "c_0's leader leads c_1");
    net.run(1_000_000);
    assert_eq!(net.leader(), Some(leader), "and is not overtaken");
}

#[test]
fn non_leaders_are_refused_and_a_bad_configuration_is_invalid() {
    let mut net = Net::new(3, base_config(&[0, 1, 2]), false);
    let leader = net.stable_leader();
    let f = (leader + 1) % 3;
    assert_eq!(
        net.reconfigure(f, &[0, 1]),
        Err(ReconfigureError::Refused(crate::ProposeError::NotLeader {
            hint: Some(NodeId(leader))
        }))
    );
    let mut bad = members(&[0, 1]);
    bad.members[1].roles.acceptor = false;
    let now = net.now;
    let mut out = Out::new();
    assert!(matches!(
        net.sp_mut(leader).reconfigure(now, bad, &mut out),
        Err(ReconfigureError::Invalid(_))
    ));
    assert!(matches!(
        net.reconfigure(leader, &[]),
        Err(ReconfigureError::Invalid(_))
    ));
}

/// The old leader crashes right after proposing the stop-sign (its write durable, the
/// Accepts maybe not sent): the reconfiguration completes all the same, under a new leader
/// of `c_0` that adopts the stop-sign, or by the old one after its restart.
#[test]
fn the_old_leader_crashes_right_after_proposing_the_stop_sign() {
    for lose_accepts in [false, true] {
        let mut net = Net::new(4, base_config(&[0, 1, 2]), true);
        let leader = net.stable_leader();
        let mut proposed = propose_while(&mut net, &[0, 1, 2, 3], 30, |_| false);
        let to: Vec<u32> = [0, 1, 2, 3].into_iter().filter(|&i| i != leader).collect();
        net.reconfigure(leader, &to).expect("starts");
        if lose_accepts {
            net.queue.clear();
        }
        net.restart(leader);
        proposed.extend(propose_while(&mut net, &to, 6_000, |n| {
            n.in_config(&to, 1) && n.leader().is_some_and(|l| n.sp(l).config_id() == 1)
        }));
        // Whether c_1 exists depends on whether the stop-sign survived: with the Accepts
        // lost, the new leader of c_0 may hold it (the old one wrote it durably and is a
        // member of c_0 again) or not; either way every value is delivered once.
        proposed.extend(propose_while(&mut net, &to, 100, |_| false));
        let all: Vec<u32> = (0..4).collect();
        let live_members = if net.sp(to[0]).config_id() == 1 {
            to.clone()
        } else {
            vec![0, 1, 2]
        };
        assert!(
            net.run_until(5_000_000, |n| live_members
                .iter()
                .all(|&i| n.has_all(i, &proposed))),
            "lose_accepts {lose_accepts}: every value delivered"
        );
        net.assert_no_violation();
        net.same_log(&all);
    }
}

/// A new node crashes half-way through fetching a long final sequence, from small
/// segments; it resumes from what it stored.
#[test]
fn a_new_node_crashes_mid_fetch_and_resumes() {
    for transfer in [Transfer::Pull, Transfer::Eager] {
        let mut cfg = base_config(&[0, 1, 2]);
        cfg.transfer = transfer;
        cfg.fetch_segment_entries = 4;
        cfg.max_message_bytes = 1024;
        let mut net = Net::new(4, cfg, true);
        // The spare hears nothing until c_1 exists (it would follow the log otherwise).
        for j in 0..3 {
            net.cut.insert((3, j));
            net.cut.insert((j, 3));
        }
        let leader = net.stable_leader();
        let mut proposed = propose_while(&mut net, &[0, 1, 2], 300, |_| false);
        let to = [0, 1, 2, 3];
        // Messages take 0 to 2 steps: the fetch takes many.
        net.chaos = Some(Chaos {
            rng: 3,
            loss_per_mille: 0,
            delay_max_steps: 2,
            delayed: Vec::new(),
        });
        net.reconfigure(leader, &to).expect("starts");
        assert!(net.run_until(2_000_000, |n| n.in_config(&[0, 1, 2], 1)));
        net.cut.clear();
        // Until node 3 fetched some but not all.
        assert!(net.run_until(2_000_000, |n| n.sp(3).store.decided_idx() > 20));
        let had = net.sp(3).store.decided_idx();
        assert!(
            net.sp(3).fetch.is_some(),
            "{transfer:?}: mid-fetch at {had}"
        );
        net.restart(3);
        assert!(net.sp(3).store.decided_idx() >= had, "what it stored stays");
        assert!(
            net.sp(3).fetch.is_some(),
            "the fetch resumes from its record"
        );
        proposed.extend(propose_while(&mut net, &[0, 1, 2, 3], 3_000, |n| {
            n.in_config(&to, 1)
        }));
        assert!(
            net.run_until(5_000_000, |n| to.iter().all(|&i| n.has_all(i, &proposed))),
            "{transfer:?}"
        );
        net.assert_no_violation();
        net.same_log(&to);
    }
}

/// Random loss, duplication, reordering, process crashes and power cuts over durable
/// stores, and three reconfigurations (add, replace the leader, remove) under load; then
/// the faults stop. Every delivery of every life agrees; after the heal every acknowledged
/// value and every value of a proposer still in the same life is delivered at every member
/// of the last configuration, which holds one log.
#[test]
fn reconfigurations_under_chaos_keep_one_order_over_many_seeds() {
    let seeds: u64 = std::env::var("SEQPAXOS_CHAOS_SEEDS")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(12);
    let mut changes = 0;
    for seed in 0..seeds {
        changes += chaos_run(
            seed,
            if seed % 2 == 0 {
                Transfer::Pull
            } else {
                Transfer::Eager
            },
            true,
        )
        .0;
    }
    assert!(
        changes >= 2 * seeds,
        "the runs reconfigured ({changes} changes in {seeds} seeds)"
    );
}

/// The same over in-memory stores: every restart is amnesic (in every configuration it
/// enters in that life).
#[test]
fn reconfigurations_with_amnesic_restarts_keep_one_order() {
    let seeds: u64 = std::env::var("SEQPAXOS_CHAOS_SEEDS")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(8);
    let (mut changes, mut restarts) = (0, 0);
    for seed in 0..seeds {
        let transfer = if seed % 2 == 0 {
            Transfer::Eager
        } else {
            Transfer::Pull
        };
        let (c, r) = chaos_run(1000 + seed, transfer, false);
        changes += c;
        restarts += r;
    }
    assert!(
        changes >= 2 * seeds && restarts as u64 >= 2 * seeds,
        "{changes} {restarts}"
    );
}

/// Returns the configuration reached and the restarts made.
fn chaos_run(seed: u64, transfer: Transfer, durable: bool) -> (u64, usize) {
    let (reached, restarts, _) = chaos_run_with(seed, transfer, durable, None);
    (reached, restarts)
}

/// [`chaos_run`], with every node snapshotting every `snapshot_every_steps` steps; also
/// returns the snapshots installed.
fn chaos_run_with(
    seed: u64,
    transfer: Transfer,
    durable: bool,
    snapshot_every_steps: Option<u64>,
) -> (u64, usize, usize) {
    let mut cfg = base_config(&[0, 1, 2]);
    cfg.transfer = transfer;
    cfg.fetch_segment_entries = 16;
    let n = 6u32;
    let mut net = Net::new(n, cfg, durable);
    net.chaos = Some(Chaos {
        rng: seed.wrapping_mul(0x9e37_79b9_7f4a_7c15) ^ 0x5eed,
        loss_per_mille: 30,
        delay_max_steps: 3,
        delayed: Vec::new(),
    });
    let roll = |net: &mut Net, k: u64| net.chaos.as_mut().map_or(0, |c| c.roll(k));
    let mut proposed: Vec<(u32, u64, ValueId)> = Vec::new();
    let mut target = 0u64;
    for step in 0..8_000u64 {
        if roll(&mut net, 2) == 0 {
            let i = roll(&mut net, n as u64) as u32;
            if net.up(i) && net.sp(i).can_propose() {
                let life = net.nodes[i as usize].incarnation;
                if let Some(v) = net.propose(i) {
                    proposed.push((i, life, v));
                }
            }
        }
        if step % 1_000 == 500 && target < 3 {
            // The next reconfiguration, at whoever leads the newest configuration.
            if let Some(l) = net.leader()
                && net.sp(l).config_id() == target
            {
                let cur = net.member_ids(l);
                let next: Vec<u32> = match target {
                    0 => vec![0, 1, 2, 3],
                    1 => cur.iter().copied().filter(|&x| x != l).chain([4]).collect(),
                    _ => {
                        let mut v = cur.clone();
                        v.retain(|&x| x != 5);
                        v.truncate(3);
                        v
                    }
                };
                if net.reconfigure(l, &next).is_ok() {
                    target += 1;
                }
            }
        }
        // Amnesic restarts one at a time, each once the previous one is repaired: a
        // majority of members amnesic at once cannot recover a promise (nobody may answer
        // for them), with or without reconfiguration.
        let newest = (0..n)
            .max_by_key(|&j| net.sp(j).config_id())
            .map(|j| net.member_ids(j))
            .unwrap_or_default();
        let repaired = (0..n).all(|j| {
            let sp = net.sp(j);
            !((sp.member || newest.contains(&j)) && (sp.amnesic || sp.amnesic_life))
        });
        if step % 400 == 200 && step < 7_000 && (durable || repaired) {
            let i = roll(&mut net, n as u64) as u32;
            if !durable && !newest.contains(&i) {
                // (A spare or removed node restarted amnesic could become a member
                // unrepaired at once with another: only members restart here.)
                net.step();
                continue;
            }
            match roll(&mut net, 3) {
                0 => net.restart(i),
                1 => net.power_cut(i),
                _ => {}
            }
        }
        if snapshot_every_steps.is_some_and(|k| step % k == k - 1) {
            net.snapshot_all();
        }
        net.step();
    }
    if let Some(c) = net.chaos.as_mut() {
        c.loss_per_mille = 0;
    }
    // Converge: the newest configuration's members.
    let mut last: Vec<u32> = Vec::new();
    let mut ok = false;
    for _ in 0..100 {
        let newest = (0..n).map(|i| net.sp(i).config_id()).max().unwrap_or(0);
        let holder = (0..n)
            .find(|&i| net.sp(i).config_id() == newest)
            .expect("a node");
        last = net.member_ids(holder);
        let acked = net.acked(&proposed);
        let alive: Vec<ValueId> = proposed
            .iter()
            .filter(|(i, life, _)| net.nodes[*i as usize].incarnation == *life)
            .map(|(_, _, v)| *v)
            .collect();
        if last.iter().all(|&i| {
            net.sp(i).config_id() == newest && net.has_all(i, &acked) && net.has_all(i, &alive)
        }) {
            ok = true;
            break;
        }
        net.run(100_000);
    }
    assert!(
        ok,
        "seed {seed} ({transfer:?}): after the heal the members {last:?} of the newest \
         configuration deliver every acknowledged value and every value of a live proposer\n{}{}",
        net.dump(),
        (0..n)
            .map(|i| format!(
                "n{i}: snapshot {} fetching {:?} app_upto {}\n",
                net.sp(i).snapshot_index(),
                net.sp(i)
                    .snap_fetcher
                    .transfer
                    .as_ref()
                    .map(|t| (t.peer, t.upto, t.min_upto)),
                net.nodes[i as usize].app_upto
            ))
            .collect::<String>()
    );
    net.assert_no_violation();
    net.same_log(&(0..n).collect::<Vec<_>>());
    let reached = (0..n).map(|i| net.sp(i).config_id()).max().unwrap_or(0);
    (reached, net.restarts, net.installs_total)
}

/// A leader that goes on appending after its stop-sign (`STOPPED()` removed) decides
/// entries in `c_0` where `c_1` starts: with every member replaced, the new members know
/// nothing of them and decide other values there.
fn total_replacement_violations(m: Option<crate::mutation::Mutation>) -> usize {
    let mut cfg = base_config(&[0, 1, 2]);
    cfg.set_mutation(m).expect("mutations available");
    let mut net = Net::new(6, cfg, false);
    let leader = net.stable_leader();
    let _ = propose_while(&mut net, &[0, 1, 2], 20, |_| false);
    // Proposals pile up at the leader in the same input as the stop-sign.
    let now = net.now;
    let mut out = Out::new();
    let sp = net.sp_mut(leader);
    sp.reconfigure(now, members(&[3, 4, 5]), &mut out)
        .expect("starts");
    for k in 0..5 {
        let _ = sp.propose(now, Bytes::from(format!("after ss {k}")), &mut out);
    }
    sp.tick(now, &mut out);
    net.carry(leader, out);
    let _ = propose_while(&mut net, &[0, 1, 2, 3, 4, 5], 3_000, |_| false);
    net.run(2_000_000);
    net.violations.len()
}

#[test]
fn nothing_extends_a_stop_sign() {
    assert_eq!(total_replacement_violations(None), 0);
}

#[cfg(feature = "mutations")]
#[test]
fn extending_after_the_stop_sign_is_caught() {
    assert!(
        total_replacement_violations(Some(crate::mutation::Mutation::SeqPaxosExtendAfterStopSign))
            > 0
    );
}

#[test]
fn the_configuration_record_round_trips_and_bad_bytes_are_refused() {
    let rec = reconfig::ConfigRecord {
        config: Configuration {
            id: 3,
            ..members(&[1, 2, 4])
        },
        base: 77,
        notify: vec![NodeId(4)],
        fetch: Some((
            90,
            Configuration {
                id: 4,
                ..members(&[2, 4, 5])
            },
        )),
    };
    let b = rec.encode();
    assert_eq!(reconfig::ConfigRecord::decode(&b), Ok(rec));
    for cut in 0..b.len() {
        assert!(reconfig::ConfigRecord::decode(&b.slice(..cut)).is_err());
    }
}

/// Messages of reconfiguration with a field out of place are refused by the decoder, and
/// a well-formed but wrong one changes nothing.
#[test]
fn bad_reconfiguration_messages_are_refused_without_a_panic() {
    use super::messages::{FetchReq, FetchResp, StopSigned};
    let enc = |m: &Message| {
        let mut e = Encoder::new();
        m.encode(&mut e);
        (m.kind(), e.to_bytes())
    };
    let bad = [
        Message::StopSigned(StopSigned {
            config: 1,
            index: 5,
            next: Configuration {
                id: 3,
                ..members(&[1])
            },
        }),
        Message::StopSigned(StopSigned {
            config: 1,
            index: 0,
            next: Configuration {
                id: 2,
                ..members(&[1])
            },
        }),
        Message::FetchReq(FetchReq {
            config: 0,
            from: 5,
            to: 5,
        }),
        Message::FetchReq(FetchReq {
            config: 0,
            from: 0,
            to: 5,
        }),
        Message::FetchResp(FetchResp {
            config: 0,
            from: 1,
            entries: vec![Entry {
                index: 1,
                ballot: Ballot::ZERO,
                payload: Bytes::from_static(b"x"),
            }],
            decided: 0,
        }),
    ];
    for m in &bad {
        let (k, b) = enc(m);
        assert!(Message::decode(k, b).is_err(), "{m:?}");
    }
    // Delivered in-process anyway (no codec), they change nothing.
    let mut net = Net::new(4, base_config(&[0, 1, 2]), false);
    let leader = net.stable_leader();
    let before = net.sp(3).store.decided_idx();
    for m in bad {
        let now = net.now;
        let mut out = Out::new();
        net.sp_mut(3).receive(now, NodeId(leader), m, &mut out);
        net.carry(3, out);
    }
    assert!(net.sp(3).fetch.is_none());
    assert_eq!(net.sp(3).store.decided_idx(), before);
    net.run(200_000);
    net.assert_no_violation();
}

/// A member of `c_0` restarts without its store after the cluster moved to `c_1`, where
/// it is a member too: built with `c_0` again, it learns of the stop-sign from the members
/// (its amnesic promise query is of an ended configuration), fetches the log, enters `c_1`
/// amnesic (it may have promised there in its previous life), recovers a promise there,
/// is repaired, and delivers what follows.
#[test]
fn an_amnesic_old_member_rejoins_the_next_configuration() {
    let mut net = Net::new(4, base_config(&[0, 1, 2]), false);
    let leader = net.stable_leader();
    let mut proposed = propose_while(&mut net, &[0, 1, 2], 50, |_| false);
    let to = [0, 1, 2, 3];
    net.reconfigure(leader, &to).expect("starts");
    proposed.extend(propose_while(&mut net, &[0, 1, 2, 3], 3_000, |n| {
        n.in_config(&to, 1) && n.leader().is_some_and(|l| n.sp(l).config_id() == 1)
    }));
    let victim = (leader + 1) % 3;
    net.restart(victim);
    assert_eq!(net.sp(victim).config_id(), 0, "it knows only c_0");
    assert!(net.sp(victim).amnesic);
    proposed.extend(propose_while(&mut net, &[0, 1, 2, 3], 2_000, |n| {
        n.sp(victim).config_id() == 1 && !n.sp(victim).amnesic
    }));
    assert_eq!(net.sp(victim).config_id(), 1);
    assert!(!net.sp(victim).amnesic, "repaired in c_1");
    proposed.extend(propose_while(&mut net, &[0, 1, 2, 3], 100, |_| false));
    assert!(net.run_until(3_000_000, |n| to.iter().all(|&i| n.has_all(i, &proposed))));
    net.assert_no_violation();
    net.same_log(&to);
}

// ---- bounded catch-up (beyond the thesis: messages have a size limit here) -------------

/// A configuration whose messages stay small: 1 KiB per `Accept` / catch-up message and
/// 1 KiB of undecided tail at the leader.
fn small_messages(first: &[u32]) -> SeqPaxosConfig {
    let mut c = base_config(first);
    c.max_message_bytes = 1024;
    c.uncommitted_bytes_max = 1024;
    c
}

/// Cuts node `i` off from every other node (`heal` undoes all cuts).
fn isolate(net: &mut Net, i: u32) {
    for j in 0..net.nodes.len() as u32 {
        if j != i {
            net.cut.insert((i, j));
            net.cut.insert((j, i));
        }
    }
}

/// Proposals at `at` until `count` values are acknowledged by a majority-held log.
fn load(net: &mut Net, at: u32, count: usize) -> Vec<ValueId> {
    let mut v = Vec::new();
    for _ in 0..count {
        if let Some(id) = net.propose(at) {
            v.push(id);
        }
        net.step();
    }
    v
}

/// A follower that was cut off while the others decided ~60 KB comes back: its promise
/// carries only its undecided tail, the decided entries it lacks come in messages of
/// `max_message_bytes`, and no message outgrows a few KiB (before: one `Promise` and one
/// `AcceptSync` with the whole gap, which a runtime frame limit would refuse forever).
#[test]
fn a_follower_far_behind_is_caught_up_in_bounded_messages() {
    let mut net = Net::new(3, small_messages(&[0, 1, 2]), true);
    let leader = net.stable_leader();
    let behind = (leader + 1) % 3;
    isolate(&mut net, behind);
    let values = load(&mut net, leader, 3000);
    assert!(
        net.run_until(5_000_000, |n| n.has_all(leader, &values)),
        "the majority decides without the follower\n{}",
        net.dump()
    );
    net.cut.clear();
    net.max_message = 0;
    assert!(
        net.run_until(20_000_000, |n| (0..3).all(|i| n.has_all(i, &values))),
        "the follower catches up\n{}",
        net.dump()
    );
    assert!(
        net.max_message <= 8 << 10,
        "largest message {} bytes",
        net.max_message
    );
    net.assert_no_violation();
}

/// `abcast demo --protocol seqpaxos --kill` on memory storage, as a story: under steady
/// load, each node in turn (the leader too) restarts without its state, the next restart
/// only once the previous node is repaired. Small messages, so each repair is a push of
/// many messages of decided entries (`CatchUpPush`) and then one `AcceptSync`: before the
/// push, each message of decided entries took a prepare round trip of its own, slower
/// than the leader decided, and the restarted node was never repaired before the next
/// kill.
#[test]
fn amnesic_restarts_one_after_another_under_load_are_repaired_and_lose_nothing() {
    let mut net = Net::new(3, small_messages(&[0, 1, 2]), false);
    net.stable_leader();
    let mut values = Vec::new();
    for round in 0..6u32 {
        let leader = net.leader().expect("a leader");
        let victim = if round % 2 == 0 {
            leader
        } else {
            (leader + 1) % 3
        };
        let others: Vec<u32> = (0..3).filter(|&i| i != victim).collect();
        values.extend(load(&mut net, others[0], 300));
        net.restart(victim);
        // Load goes on at a node that stays while the victim is repaired.
        let mut repaired = false;
        for _ in 0..40 {
            values.extend(load(&mut net, others[round as usize % 2], 50));
            if !net.sp(victim).status().amnesic {
                repaired = true;
                break;
            }
        }
        assert!(
            repaired,
            "round {round}: n{victim} repaired under load\n{}",
            net.dump()
        );
        assert!(
            net.run_until(20_000_000, |n| (0..3).all(|i| n.has_all(i, &values))),
            "round {round}: every value everywhere\n{}",
            net.dump()
        );
    }
    net.assert_no_violation();
}

/// A node cut off while the others decided comes back with the highest ballot and is
/// elected: it pulls the decided entries it lacks (`CatchUp`, in messages of
/// `max_message_bytes`) before it adopts the promised undecided tail, and every value
/// stays, in one order. (If the other node wins the election instead, the follower path
/// above runs; the test says which one ran.)
#[test]
fn a_leader_elected_far_behind_pulls_the_decided_log_before_it_adopts() {
    let mut cfg = small_messages(&[0, 1, 2]);
    cfg.priorities = vec![(NodeId(2), 5)];
    let mut net = Net::new(3, cfg, true);
    let first = net.stable_leader();
    // The node to fall behind: not the leader, and the one with the priority if possible.
    let behind = if first == 2 { 1 } else { 2 };
    isolate(&mut net, behind);
    let values = load(&mut net, first, 3000);
    assert!(
        net.run_until(5_000_000, |n| n.has_all(first, &values)),
        "the majority decides\n{}",
        net.dump()
    );
    // The node behind comes back; the old leader goes: the two left must elect one.
    net.cut.clear();
    isolate(&mut net, first);
    net.max_message = 0;
    let fetch_req_before = net.sent.get(&18).copied().unwrap_or(0);
    assert!(
        net.run_until(20_000_000, |n| {
            (0..3)
                .filter(|&i| i != first)
                .all(|i| n.has_all(i, &values))
        }),
        "the two left deliver everything\n{}",
        net.dump()
    );
    let more = load(&mut net, behind, 200);
    assert!(
        net.run_until(20_000_000, |n| (0..3)
            .filter(|&i| i != first)
            .all(|i| n.has_all(i, &more))),
        "and go on\n{}",
        net.dump()
    );
    assert!(
        net.max_message <= 8 << 10,
        "largest message {} bytes",
        net.max_message
    );
    net.assert_no_violation();
    let pulled = net.sent.get(&18).copied().unwrap_or(0) - fetch_req_before;
    if net.leader() == Some(behind) {
        assert!(pulled > 0, "the leader behind adopted without pulling");
    }
    eprintln!(
        "leader after: n{:?}, catch-up requests {pulled}",
        net.leader()
    );
}

// ---- snapshots and compaction (`snapshot.rs`) ---------------------------------------------

#[test]
fn a_snapshot_covers_only_decided_entries_and_compacts_the_log_below_it() {
    let mut net = Net::new(3, base_config(&[0, 1, 2]), true);
    let leader = net.stable_leader();
    let values = load(&mut net, leader, 20);
    assert!(net.run_until(1_000_000, |n| (0..3).all(|i| n.has_all(i, &values))));
    net.snapshot_all();
    for i in 0..3 {
        let sp = net.sp(i);
        let snap = net.nodes[i as usize].saved.clone().expect("a snapshot");
        assert_eq!(snap.upto, sp.delivered, "n{i}: up to what it delivered");
        assert!(
            snap.upto <= sp.store.decided_idx(),
            "n{i}: never past the decided index"
        );
        assert_eq!(
            sp.store.first_index(),
            snap.upto + 1,
            "n{i}: compacted below"
        );
    }
    let more = load(&mut net, leader, 10);
    assert!(net.run_until(1_000_000, |n| (0..3).all(|i| n.has_all(i, &more))));
    net.assert_no_violation();
    net.same_log(&[0, 1, 2]);
}

/// A follower cut off while the others decided and compacted comes back: the leader's
/// `AcceptSync` would start in its compacted prefix, so it offers its snapshot; the
/// follower pulls it in chunks of `max_message_bytes`, installs it, is prepared again
/// and goes on from the log.
#[test]
fn a_follower_behind_the_leaders_snapshot_installs_it_in_chunks_and_goes_on_from_the_log() {
    let mut net = Net::new(3, small_messages(&[0, 1, 2]), true);
    let leader = net.stable_leader();
    let behind = (leader + 1) % 3;
    isolate(&mut net, behind);
    let values = load(&mut net, leader, 300);
    assert!(net.run_until(5_000_000, |n| n.has_all(leader, &values)));
    net.snapshot_all();
    let upto = net.sp(leader).snapshot_index();
    assert!(upto > net.sp(behind).store.decided_idx());
    net.cut.clear();
    net.max_message = 0;
    assert!(
        net.run_until(10_000_000, |n| n.has_all(behind, &values)),
        "the follower catches up\n{}",
        net.dump()
    );
    let more = load(&mut net, leader, 20);
    assert!(net.run_until(5_000_000, |n| (0..3).all(|i| n.has_all(i, &more))));
    let installs = &net.nodes[behind as usize].installs;
    assert!(!installs.is_empty() && installs[0] >= upto, "{installs:?}");
    assert!(
        net.sent.get(&23).copied().unwrap_or(0) > 1,
        "several chunks"
    );
    assert!(
        net.max_message <= 2 << 10,
        "largest message {}",
        net.max_message
    );
    net.assert_no_violation();
    net.same_log(&[0, 1, 2]);
}

#[test]
fn a_restart_starts_after_its_snapshot_and_delivers_only_what_follows() {
    let mut net = Net::new(3, base_config(&[0, 1, 2]), true);
    let leader = net.stable_leader();
    let values = load(&mut net, leader, 20);
    assert!(net.run_until(1_000_000, |n| (0..3).all(|i| n.has_all(i, &values))));
    net.snapshot_all();
    let f = (leader + 1) % 3;
    let upto = net.nodes[f as usize].saved.as_ref().expect("saved").upto;
    net.restart(f);
    let more = load(&mut net, leader, 10);
    assert!(net.run_until(2_000_000, |n| n.has_all(f, &values) && n.has_all(f, &more)));
    assert!(
        net.nodes[f as usize].delivered.iter().all(|d| d.0 > upto),
        "nothing the snapshot covers is delivered again"
    );
    net.assert_no_violation();
}

#[test]
fn a_restart_whose_driver_lost_the_snapshot_gets_the_stores_as_an_install() {
    let mut net = Net::new(3, base_config(&[0, 1, 2]), true);
    let leader = net.stable_leader();
    let values = load(&mut net, leader, 20);
    assert!(net.run_until(1_000_000, |n| (0..3).all(|i| n.has_all(i, &values))));
    net.snapshot_all();
    net.step();
    let f = (leader + 1) % 3;
    let upto = net.sp(f).snapshot_index();
    assert!(upto > 0);
    net.nodes[f as usize].saved = None;
    net.restart(f);
    net.step();
    assert_eq!(net.nodes[f as usize].installs, vec![upto]);
    assert!(net.run_until(1_000_000, |n| n.has_all(f, &values)));
    net.assert_no_violation();
}

#[test]
fn a_snapshot_that_disagrees_with_the_decided_log_or_does_not_decode_is_refused() {
    let mut net = Net::new(3, base_config(&[0, 1, 2]), true);
    let leader = net.stable_leader();
    load(&mut net, leader, 5);
    net.run(100_000);
    let f = (leader + 1) % 3;
    net.restart(f);
    let decided = net.sp(f).store.decided_idx();
    assert!(decided > 0, "the restarted store kept its decided log");
    let bad_state = snapshot::SnapState {
        last_ballot: Ballot::new(99, NodeId(2), 0),
        config: net.sp(f).cfg.configuration(),
        base: 0,
        dedup: Dedup::default(),
    };
    let bad = crate::protocol::Snapshot {
        upto: decided,
        protocol: bad_state.encode(),
        app: Bytes::from("0"),
    };
    let err = net.sp_mut(f).restore_snapshot(&bad).expect_err("refused");
    assert!(err.contains("disagrees"), "{err}");
    let garbage = crate::protocol::Snapshot {
        protocol: Bytes::from_static(b"\x01junk"),
        ..bad
    };
    let err = net
        .sp_mut(f)
        .restore_snapshot(&garbage)
        .expect_err("refused");
    assert!(err.contains("Sequence Paxos snapshot state"), "{err}");
}

/// A node added after every member compacted the log it needs: the members offer their
/// snapshot when it fetches the final sequence, it installs it, enters the configuration
/// and delivers on.
#[test]
fn a_new_node_whose_predecessors_compacted_the_log_installs_a_snapshot_and_joins() {
    let mut net = Net::new(4, base_config(&[0, 1, 2]), true);
    let leader = net.stable_leader();
    let values = load(&mut net, leader, 50);
    assert!(net.run_until(2_000_000, |n| (0..3).all(|i| n.has_all(i, &values))));
    net.snapshot_all();
    net.reconfigure(leader, &[0, 1, 2, 3]).expect("reconfigure");
    assert!(
        net.run_until(5_000_000, |n| n.in_config(&[0, 1, 2, 3], 1)),
        "the new node joins\n{}",
        net.dump()
    );
    let more = load(&mut net, leader.min(2), 20);
    assert!(
        net.run_until(5_000_000, |n| (0..4)
            .all(|i| n.has_all(i, &values) && n.has_all(i, &more))),
        "everyone delivers\n{}",
        net.dump()
    );
    assert!(
        !net.nodes[3].installs.is_empty(),
        "the new node installed a snapshot"
    );
    net.assert_no_violation();
}

/// The chaos of `reconfigurations_under_chaos_keep_one_order_over_many_seeds` (loss,
/// duplication, reordering, crashes and power cuts, three reconfigurations) with every node
/// snapshotting and compacting every 150 ms.
#[test]
fn snapshots_under_reconfigurations_and_chaos_keep_one_order_and_lose_no_acknowledged_value() {
    let mut installs = 0;
    for seed in 0..6u64 {
        let transfer = if seed % 2 == 0 {
            Transfer::Pull
        } else {
            Transfer::Eager
        };
        installs += chaos_run_with(seed, transfer, true, Some(150)).2;
    }
    assert!(installs > 0, "no node installed a peer's snapshot");
}

/// A leader cut off from its followers appends proposals it cannot decide, then
/// snapshots: returns whether its store took undecided entries as decided (the broken
/// variant `SeqPaxosTrimUndecided` does).
fn snapshot_compacts_undecided(m: Option<crate::mutation::Mutation>) -> bool {
    let mut cfg = base_config(&[0, 1, 2]);
    cfg.set_mutation(m).expect("mutations available");
    let mut net = Net::new(3, cfg, true);
    let leader = net.stable_leader();
    let values = load(&mut net, leader, 5);
    assert!(net.run_until(1_000_000, |n| (0..3).all(|i| n.has_all(i, &values))));
    isolate(&mut net, leader);
    load(&mut net, leader, 5);
    let decided = net.sp(leader).store.decided_idx();
    assert!(
        net.sp(leader).log_len() > decided,
        "entries accepted, not decided"
    );
    net.snapshot_all();
    net.sp(leader).store.decided_idx() > decided
}

#[test]
fn a_snapshot_never_compacts_undecided_entries() {
    assert!(!snapshot_compacts_undecided(None));
}

#[cfg(feature = "mutations")]
#[test]
fn compacting_undecided_entries_is_the_broken_variant() {
    assert!(snapshot_compacts_undecided(Some(
        crate::mutation::Mutation::SeqPaxosTrimUndecided
    )));
}
