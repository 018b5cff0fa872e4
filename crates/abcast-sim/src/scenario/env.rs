//! The in-process world a scenario file drives: nodes of one protocol (through its
//! [`Adapter`]), one FIFO network queue, standing network rules, held messages, a clock,
//! and a record of every life's deliveries for `delivered` and `check`. Deterministic: no
//! randomness anywhere; time moves only when a command says so.

use super::adapter::{Adapter, Args, MsgInfo};
use abcast_core::config::StartInfo;
use abcast_core::{Ballot, Instance, Micros, NodeId, Outbox, Protocol, Snapshot, ValueId};
use bytes::Bytes;
use std::collections::{BTreeMap, BTreeSet, HashMap, HashSet, VecDeque};
use std::fmt::Write as _;

/// How much of what a step caused its output shows.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub enum Level {
    /// Only what the command itself prints.
    Quiet,
    /// Deliveries, snapshot installs and skips (the default).
    Deliveries,
    /// And the protocols' events (coordinator changes, phase 1, repairs).
    Events,
    /// And every message delivered, dropped or held, heartbeats aside.
    Msgs,
    /// And heartbeats.
    All,
}

impl std::str::FromStr for Level {
    type Err = String;
    fn from_str(s: &str) -> Result<Level, String> {
        Ok(match s {
            "quiet" => Level::Quiet,
            "deliveries" => Level::Deliveries,
            "events" => Level::Events,
            "msgs" => Level::Msgs,
            "all" => Level::All,
            _ => {
                return Err(format!(
                    "unknown trace level {s:?} (quiet, deliveries, events, msgs, all)"
                ));
            }
        })
    }
}

/// What the network does with a message.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Fate {
    Deliver,
    Drop,
    /// Kept back, late in the network, until `release-held`.
    Hold,
    /// Delivered, and a copy held.
    Dup,
}

/// A standing network rule (`rule`, `partition`); the first that matches decides.
#[derive(Clone, Debug)]
struct Rule {
    fate: Fate,
    from: Vec<u32>,
    to: Vec<u32>,
    kinds: Vec<String>,
    instance: Option<Instance>,
    value: Option<String>,
    /// A partition: the message crosses between this set and the rest (`out`: from the
    /// set only, `in`: into it only).
    cut: Option<(Vec<u32>, bool, bool)>,
    /// `both`: the rule holds the other way too (`to` to `from`), so one rule cuts a set
    /// of links both ways.
    both: bool,
}

impl Rule {
    fn matches(&self, from: u32, to: u32, info: &MsgInfo) -> bool {
        if let Some((set, out, inn)) = &self.cut {
            let (f, t) = (set.contains(&from), set.contains(&to));
            if !((f && !t && *out) || (!f && t && *inn)) {
                return false;
            }
        }
        let ends = |from: u32, to: u32| {
            (self.from.is_empty() || self.from.contains(&from))
                && (self.to.is_empty() || self.to.contains(&to))
        };
        (ends(from, to) || (self.both && ends(to, from)))
            && (self.kinds.is_empty() || self.kinds.iter().any(|k| k == info.kind))
            && self.instance.is_none_or(|i| info.instance == Some(i))
            && self
                .value
                .as_ref()
                .is_none_or(|v| info.values.iter().any(|b| b.as_ref() == v.as_bytes()))
    }
}

/// A message filter of `deliver-msgs`, `release-held`, `sent`.
#[derive(Clone, Debug, Default)]
struct Filter {
    from: Vec<u32>,
    to: Vec<u32>,
    kinds: Vec<String>,
}

impl Filter {
    fn take(args: &mut Args) -> Result<Filter, String> {
        Ok(Filter {
            from: args.parsed_list("from")?,
            to: args.parsed_list("to")?,
            kinds: args.list("kind"),
        })
    }
    fn matches(&self, from: u32, to: Option<u32>, kind: &str) -> bool {
        (self.from.is_empty() || self.from.contains(&from))
            && (self.to.is_empty() || to.is_some_and(|t| self.to.contains(&t)))
            && (self.kinds.is_empty() || self.kinds.iter().any(|k| k == kind))
    }
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum NodeState {
    Up,
    /// Frozen and cut off: no ticks; messages to or from it are lost. `resume` thaws it.
    Stopped,
    /// Gone, state and all; messages to it are lost. `restart` starts a new life.
    Crashed,
}

struct Slot<P> {
    proto: Option<P>,
    state: NodeState,
    incarnation: u64,
    /// Index of the current life in `Env::lives`.
    life: usize,
    acked: u64,
}

#[derive(Clone, Debug)]
enum Entry {
    Deliver {
        group: u16,
        instance: Instance,
        values: Vec<(ValueId, Bytes)>,
    },
    /// The life started from its own snapshot file.
    Restored(Instance),
    /// A snapshot fetched from a peer was installed.
    Install(Instance),
    Skip {
        group: u16,
        from: Instance,
        to: Instance,
    },
}

struct Life {
    node: usize,
    incarnation: u64,
    entries: Vec<Entry>,
    /// The application state: the delivered values joined by commas (what `snapshot`
    /// hands the protocol, and what an install replaces).
    app: String,
}

/// A snapshot taken or installed, for `check`.
struct SnapRecord {
    node: usize,
    snapshot: Snapshot,
    installed: bool,
    /// Taken with an `app=` of the story's own: not a delivered prefix, not checked.
    custom: bool,
    /// A snapshot of several groups (`Protocol::snapshot_groups`, Multi-Ring Paxos): its
    /// state is the learner's merged sequence, not group 0's prefix. An installed one must
    /// be, byte for byte, one a peer took.
    multi: bool,
}

struct Envelope<M> {
    from: NodeId,
    to: NodeId,
    msg: M,
}

pub struct Env<A: Adapter> {
    ad: A,
    ids: Vec<NodeId>,
    nodes: Vec<Slot<A::P>>,
    queue: VecDeque<Envelope<Msg<A>>>,
    held: Vec<Envelope<Msg<A>>>,
    rules: Vec<Rule>,
    now: Micros,
    level: Level,
    cur: Level,
    /// This step shows only messages of these kinds (`only=`), if any.
    only: Vec<String>,
    out: Vec<String>,
    step_deliveries: BTreeMap<usize, Vec<String>>,
    lives: Vec<Life>,
    proposed: HashMap<ValueId, Bytes>,
    /// Messages sent since the last `mark`: (from, to or `None` for a multicast, kind).
    counts: BTreeMap<(u32, Option<u32>, &'static str), u64>,
    values_since_mark: HashSet<ValueId>,
    /// Ballots each node put in messages it sent: (node, incarnation, kind, ballot), once.
    ballots: Vec<(u32, u64, &'static str, Ballot)>,
    snapshots: Vec<SnapRecord>,
    last_snapshot: HashMap<usize, Snapshot>,
    /// Non-background messages sent and deliveries made (what `stabilize` waits to stop).
    activity: u64,
}

type Msg<A> = <<A as Adapter>::P as Protocol>::Message;

/// Longest `run`/`stabilize`, in simulated microseconds (a bound on every loop).
const RUN_MAX_US: Micros = 600_000_000;
/// Messages one burst of deliveries may carry before the runner calls it a storm.
const BURST_MAX: usize = 100_000;
/// Time between the rounds of `run` and `stabilize`: every node ticks, then the network
/// empties.
const ROUND_US: Micros = 100;

fn node_list(args: &mut Args, key: &str) -> Result<Vec<usize>, String> {
    args.parsed_list::<usize>(key)
}

fn text(b: &Bytes) -> String {
    String::from_utf8_lossy(b).into_owned()
}

/// `v0..v3` is `v0,v1,v2,v3`; anything else is itself.
fn expand(values: Vec<String>) -> Result<Vec<String>, String> {
    let mut out = Vec::new();
    for v in values {
        if let Some((a, b)) = v.split_once("..") {
            let digits = a.len() - a.trim_end_matches(|c: char| c.is_ascii_digit()).len();
            let (prefix, lo) = a.split_at(a.len() - digits);
            let hi = b.strip_prefix(prefix).unwrap_or(b);
            let (lo, hi): (u64, u64) = match (lo.parse(), hi.parse()) {
                (Ok(l), Ok(h)) if l <= h && h - l < 100_000 => (l, h),
                _ => return Err(format!("bad range {v:?} (write v0..v9)")),
            };
            out.extend((lo..=hi).map(|k| format!("{prefix}{k}")));
        } else {
            out.push(v);
        }
    }
    Ok(out)
}

impl<A: Adapter> Env<A> {
    pub fn new(ad: A) -> Result<Env<A>, String> {
        let ids = ad.node_ids();
        for (k, id) in ids.iter().enumerate() {
            if id.0 as usize != k {
                return Err(format!("node ids must be 0..n, found {} at {k}", id.0));
            }
        }
        let mut env = Env {
            ad,
            ids: ids.clone(),
            nodes: Vec::new(),
            queue: VecDeque::new(),
            held: Vec::new(),
            rules: Vec::new(),
            now: 0,
            level: Level::Deliveries,
            cur: Level::Deliveries,
            only: Vec::new(),
            out: Vec::new(),
            step_deliveries: BTreeMap::new(),
            lives: Vec::new(),
            proposed: HashMap::new(),
            counts: BTreeMap::new(),
            values_since_mark: HashSet::new(),
            ballots: Vec::new(),
            snapshots: Vec::new(),
            last_snapshot: HashMap::new(),
            activity: 0,
        };
        for id in ids {
            let p = env.ad.build(id, StartInfo::FRESH)?;
            let life = env.new_life(id.0 as usize, 0);
            env.nodes.push(Slot {
                proto: Some(p),
                state: NodeState::Up,
                incarnation: 0,
                life,
                acked: 0,
            });
        }
        Ok(env)
    }

    fn new_life(&mut self, node: usize, incarnation: u64) -> usize {
        self.lives.push(Life {
            node,
            incarnation,
            entries: Vec::new(),
            app: String::new(),
        });
        self.lives.len() - 1
    }

    fn node_arg(&self, args: &mut Args) -> Result<usize, String> {
        let i: usize = args.req("node")?;
        if i >= self.nodes.len() {
            return Err(format!("no node {i} (nodes 0..{})", self.nodes.len()));
        }
        Ok(i)
    }

    fn nodes_arg(&self, args: &mut Args, key: &str) -> Result<Vec<usize>, String> {
        let v = node_list(args, key)?;
        if let Some(i) = v.iter().find(|&&i| i >= self.nodes.len()) {
            return Err(format!("no node {i}"));
        }
        Ok(if v.is_empty() {
            (0..self.nodes.len()).collect()
        } else {
            v
        })
    }

    fn line(&mut self, at: Level, s: String) {
        if self.cur >= at {
            self.out.push(s);
        }
    }

    fn msg_line(&self, prefix: &str, from: NodeId, to: Option<NodeId>, info: &MsgInfo) -> String {
        let mut s = String::from(prefix);
        let _ = write!(s, "{} -> ", from.0);
        match to {
            Some(t) => {
                let _ = write!(s, "{}", t.0);
            }
            None => s.push('*'),
        }
        let _ = write!(s, " {}", info.kind);
        if let Some(g) = info.group {
            let _ = write!(s, " r{g}");
        }
        if let Some(b) = info.ballot {
            let _ = write!(s, " b={b}");
        }
        if let Some(i) = info.instance {
            let _ = write!(s, " i={i}");
        }
        if !info.values.is_empty() {
            let v: Vec<String> = info.values.iter().map(text).collect();
            let _ = write!(s, " [{}]", v.join(","));
        }
        if !info.detail.is_empty() {
            let _ = write!(s, " ({})", info.detail);
        }
        s
    }

    /// Through the codec, as on the wire.
    fn wire(m: &Msg<A>) -> Msg<A> {
        let (kind, body) = crate::encode(m);
        match crate::decode(kind, &body) {
            Ok(m) => m,
            Err(e) => panic!("a message does not survive its codec: {e}"),
        }
    }

    /// Carries out node `i`'s outbox: sync, sends, multicasts, deliveries, acks, events.
    fn apply(&mut self, i: usize, out: &mut Outbox<Msg<A>>) {
        let from = NodeId(i as u32);
        let inc = self.nodes[i].incarnation;
        if out.needs_sync
            && let Some(p) = self.nodes[i].proto.as_mut()
            && let Err(e) = p.sync_storage()
        {
            self.out.push(format!("n{i} sync failed: {e}"));
        }
        // The contract's order (`carry.rs`): the first `multicasts_first` multicasts, the
        // sends, the other multicasts (a token ring's pre- and post-token messages).
        let mut multicasts: Vec<Msg<A>> = out.multicasts.drain(..).collect();
        let after = multicasts.split_off(out.multicasts_first.min(multicasts.len()));
        let sends: Vec<(NodeId, Msg<A>)> = out.sends.drain(..).collect();
        for m in multicasts {
            self.multicast(from, inc, &m);
        }
        for (to, m) in sends {
            self.record_send(from, inc, Some(to), &m);
            self.queue.push_back(Envelope {
                from,
                to,
                msg: Self::wire(&m),
            });
        }
        for m in after {
            self.multicast(from, inc, &m);
        }
        let life = self.nodes[i].life;
        let installs: Vec<_> = out.installs.drain(..).collect();
        let skips: Vec<_> = out.skips.drain(..).collect();
        let changes: Vec<_> = out.config_changes.drain(..).collect();
        let mut installs = installs.into_iter().peekable();
        let mut skips = skips.into_iter().peekable();
        let mut changes = changes.into_iter().peekable();
        let deliveries: Vec<_> = out.deliveries.drain(..).collect();
        for k in 0..=deliveries.len() {
            while let Some(ins) = installs.next_if(|x| x.position <= k) {
                let upto = ins.snapshot.upto;
                self.lives[life].entries.push(Entry::Install(upto));
                self.lives[life].app = text(&ins.snapshot.app);
                let multi = self.nodes[i]
                    .proto
                    .as_ref()
                    .is_some_and(|p| !p.snapshot_groups(&ins.snapshot).is_empty());
                self.snapshots.push(SnapRecord {
                    node: i,
                    snapshot: ins.snapshot,
                    installed: true,
                    custom: false,
                    multi,
                });
                self.activity += 1;
                self.line(
                    Level::Deliveries,
                    format!("n{i} installed a peer's snapshot up to {upto}"),
                );
            }
            while let Some(sk) = skips.next_if(|x| x.position <= k) {
                self.lives[life].entries.push(Entry::Skip {
                    group: sk.group.0,
                    from: sk.from,
                    to: sk.to,
                });
                self.activity += 1;
                self.line(
                    Level::Deliveries,
                    format!("n{i} skipped instances {}..{} (trimmed)", sk.from, sk.to),
                );
            }
            while let Some(c) = changes.next_if(|x| x.position <= k) {
                self.activity += 1;
                let members: Vec<u32> = c.config.members.iter().map(|m| m.id.0).collect();
                self.line(
                    Level::Deliveries,
                    format!(
                        "n{i} installs {} configuration {} {members:?}",
                        match c.kind {
                            abcast_core::ConfigKind::Regular => "regular",
                            abcast_core::ConfigKind::Transitional => "transitional",
                        },
                        A::config_label(c.config.id)
                    ),
                );
            }
            let Some(d) = deliveries.get(k) else { break };
            let values: Vec<(ValueId, Bytes)> =
                d.batch.values().map(|v| (v.id, v.payload)).collect();
            let shown: Vec<String> = values.iter().map(|(_, p)| text(p)).collect();
            let g = d.group.0;
            let label = if g == 0 {
                format!("{}:{}", d.instance, shown.join(","))
            } else {
                format!("r{g}/{}:{}", d.instance, shown.join(","))
            };
            self.step_deliveries.entry(i).or_default().push(label);
            let l = &mut self.lives[life];
            for s in &shown {
                if !l.app.is_empty() {
                    l.app.push(',');
                }
                l.app.push_str(s);
            }
            for (id, _) in &values {
                self.values_since_mark.insert(*id);
            }
            l.entries.push(Entry::Deliver {
                group: g,
                instance: d.instance,
                values,
            });
            self.activity += 1;
        }
        let acked: u64 = out.acks.iter().map(|a| u64::from(a.count)).sum();
        self.nodes[i].acked += acked;
        let events: Vec<String> = out.events.drain(..).map(|e| e.to_string()).collect();
        for e in events {
            self.activity += 1;
            let e = if e.starts_with(&format!("n{i} ")) {
                e
            } else {
                format!("n{i}: {e}")
            };
            self.line(Level::Events, e);
        }
        out.clear();
    }

    fn multicast(&mut self, from: NodeId, inc: u64, m: &Msg<A>) {
        self.record_send(from, inc, None, m);
        for k in 0..self.ids.len() {
            let to = self.ids[k];
            self.queue.push_back(Envelope {
                from,
                to,
                msg: Self::wire(m),
            });
        }
    }

    fn record_send(&mut self, from: NodeId, inc: u64, to: Option<NodeId>, m: &Msg<A>) {
        let info = A::describe(m);
        *self
            .counts
            .entry((from.0, to.map(|t| t.0), info.kind))
            .or_default() += 1;
        if !info.background {
            self.activity += 1;
        }
        if let Some(b) = info.ballot
            && b.node == from
            && !self
                .ballots
                .iter()
                .any(|&(n, i, k, x)| (n, i, k, x) == (from.0, inc, info.kind, b))
        {
            self.ballots.push((from.0, inc, info.kind, b));
        }
    }

    /// Hands `msg` to its destination now (if it is running).
    fn receive(&mut self, from: NodeId, to: NodeId, msg: Msg<A>) {
        let t = to.0 as usize;
        let mut out = Outbox::new();
        let now = self.now;
        if let Some(p) = self.nodes[t].proto.as_mut() {
            p.receive(now, from, msg, &mut out);
        }
        self.apply(t, &mut out);
    }

    /// One message off the network: lost if an end is down, then the rules (or `forced`).
    fn step_msg(&mut self, e: Envelope<Msg<A>>, forced: Option<Fate>) {
        let info = A::describe(&e.msg);
        let level = if info.background {
            Level::All
        } else {
            Level::Msgs
        };
        let shown =
            self.cur >= level && (self.only.is_empty() || self.only.iter().any(|k| k == info.kind));
        let (f, t) = (e.from.0 as usize, e.to.0 as usize);
        let to_down = self.nodes[t].state != NodeState::Up;
        let from_stopped = self.nodes[f].state == NodeState::Stopped;
        if to_down || from_stopped {
            let who = if to_down { t } else { f };
            let line = self.msg_line("lost ", e.from, Some(e.to), &info);
            if shown {
                self.out.push(format!("{line} (n{who} is down)"));
            }
            return;
        }
        let fate = forced.unwrap_or_else(|| {
            self.rules
                .iter()
                .find(|r| r.matches(e.from.0, e.to.0, &info))
                .map_or(Fate::Deliver, |r| r.fate)
        });
        match fate {
            Fate::Deliver => {
                let line = self.msg_line("", e.from, Some(e.to), &info);
                if shown {
                    self.out.push(line);
                }
                self.receive(e.from, e.to, e.msg);
            }
            Fate::Drop => {
                let line = self.msg_line("drop ", e.from, Some(e.to), &info);
                if shown {
                    self.out.push(line);
                }
            }
            Fate::Hold => {
                let line = self.msg_line("hold ", e.from, Some(e.to), &info);
                if shown {
                    self.out.push(line);
                }
                self.held.push(e);
            }
            Fate::Dup => {
                let line = self.msg_line("dup ", e.from, Some(e.to), &info);
                if shown {
                    self.out.push(line);
                }
                self.held.push(Envelope {
                    from: e.from,
                    to: e.to,
                    msg: e.msg.clone(),
                });
                self.receive(e.from, e.to, e.msg);
            }
        }
    }

    /// Empties the network (bounded).
    fn drain(&mut self) -> Result<(), String> {
        for _ in 0..BURST_MAX {
            let Some(e) = self.queue.pop_front() else {
                return Ok(());
            };
            self.step_msg(e, None);
        }
        Err(format!(
            "more than {BURST_MAX} messages in one burst: a message storm"
        ))
    }

    fn tick_node(&mut self, i: usize) {
        if self.nodes[i].state != NodeState::Up {
            return;
        }
        let mut out = Outbox::new();
        let now = self.now;
        if let Some(p) = self.nodes[i].proto.as_mut() {
            p.tick(now, &mut out);
        }
        self.apply(i, &mut out);
    }

    /// One round: time passes, every running node ticks, the network empties (or, for an
    /// adapter with `ONE_HOP_PER_ROUND`, what was in it arrives).
    fn round(&mut self) -> Result<(), String> {
        self.now += ROUND_US;
        for i in 0..self.nodes.len() {
            self.tick_node(i);
        }
        if A::ONE_HOP_PER_ROUND {
            for _ in 0..self.queue.len() {
                if let Some(e) = self.queue.pop_front() {
                    self.step_msg(e, None);
                }
            }
            return Ok(());
        }
        self.drain()
    }

    fn run_for(&mut self, us: Micros) -> Result<(), String> {
        if us > RUN_MAX_US {
            return Err(format!("at most {RUN_MAX_US} us at once"));
        }
        let end = self.now + us;
        while self.now < end {
            self.round()?;
        }
        Ok(())
    }

    fn status_of(&self, i: usize) -> Option<abcast_core::Status> {
        self.nodes[i].proto.as_ref().map(|p| p.status())
    }

    fn flush_deliveries(&mut self) {
        let step = std::mem::take(&mut self.step_deliveries);
        if self.cur < Level::Deliveries {
            return;
        }
        for (i, items) in step {
            if items.len() <= 8 {
                self.out.push(format!("n{i} delivered {}", items.join(" ")));
            } else {
                let (first, last) = (&items[0], &items[items.len() - 1]);
                self.out.push(format!(
                    "n{i} delivered {} instances: {first} ... {last}",
                    items.len()
                ));
            }
        }
    }

    /// Runs one command; `trace` overrides the trace level for this step.
    pub fn exec(&mut self, cmd: &str, args: &mut Args) -> Result<String, String> {
        self.cur = args.opt::<Level>("trace")?.unwrap_or(self.level);
        self.only = args.list("only");
        if !self.only.is_empty() && self.cur < Level::Msgs {
            self.cur = Level::Msgs;
        }
        self.out.clear();
        let r = self.command(cmd, args);
        self.flush_deliveries();
        let mut s = std::mem::take(&mut self.out).join("\n");
        match r {
            Ok(tail) => {
                args.done()?;
                if !tail.is_empty() {
                    if !s.is_empty() {
                        s.push('\n');
                    }
                    s.push_str(&tail);
                }
                Ok(s)
            }
            Err(e) => Err(if s.is_empty() { e } else { format!("{s}\n{e}") }),
        }
    }

    fn command(&mut self, cmd: &str, args: &mut Args) -> Result<String, String> {
        match cmd {
            "trace" => {
                self.level = args.req("level")?;
                Ok(String::new())
            }
            "propose" => self.cmd_propose(args),
            "tick" => {
                let us: Micros = args.opt("us")?.unwrap_or(0);
                let nodes = self.nodes_arg(args, "node")?;
                self.now += us;
                for i in nodes {
                    self.tick_node(i);
                }
                Ok(String::new())
            }
            "run" => self.cmd_run(args),
            "stabilize" => self.cmd_stabilize(args),
            "deliver-msgs" => self.cmd_deliver(args),
            "release-held" => self.cmd_release(args),
            "held" => Ok(self.cmd_held()),
            "rule" => self.cmd_rule(args),
            "partition" => {
                let set: Vec<u32> = args.parsed_list("nodes")?;
                let way: Option<String> = args.opt("oneway")?;
                let (out, inn) = match way.as_deref() {
                    None => (true, true),
                    Some("out") => (true, false),
                    Some("in") => (false, true),
                    Some(w) => return Err(format!("oneway={w}: out or in")),
                };
                self.rules.push(Rule {
                    fate: Fate::Drop,
                    from: Vec::new(),
                    to: Vec::new(),
                    kinds: Vec::new(),
                    instance: None,
                    value: None,
                    cut: Some((set, out, inn)),
                    both: false,
                });
                Ok(String::new())
            }
            "heal" => {
                self.rules.clear();
                Ok(String::new())
            }
            "stop" | "resume" | "crash" => {
                let i = self.node_arg(args)?;
                let slot = &mut self.nodes[i];
                match cmd {
                    "stop" => slot.state = NodeState::Stopped,
                    "resume" => {
                        if slot.state != NodeState::Stopped {
                            return Err(format!("n{i} is not stopped"));
                        }
                        slot.state = NodeState::Up;
                    }
                    _ => {
                        slot.state = NodeState::Crashed;
                        slot.proto = None;
                    }
                }
                Ok(String::new())
            }
            "reconfigure" => self.cmd_reconfigure(args),
            "restart" => self.cmd_restart(args),
            "snapshot" => self.cmd_snapshot(args),
            "status" => self.cmd_status(args),
            "delivered" => self.cmd_delivered(args),
            "check" => Ok(self.cmd_check()),
            "sent" => self.cmd_sent(args),
            "mark" => {
                self.counts.clear();
                self.values_since_mark.clear();
                Ok(String::new())
            }
            "ballots" => self.cmd_ballots(args),
            "clock" => Ok(format!("t={} us", self.now)),
            _ => Err(format!("unknown command {cmd:?}")),
        }
    }

    fn cmd_propose(&mut self, args: &mut Args) -> Result<String, String> {
        let nodes = node_list(args, "node")?;
        if nodes.is_empty() {
            return Err("node= is missing".into());
        }
        if let Some(i) = nodes.iter().find(|&&i| i >= self.nodes.len()) {
            return Err(format!("no node {i}"));
        }
        let values = expand(args.list("values"))?;
        let group: Option<u16> = args.opt("group")?;
        let every: Option<Micros> = args.opt("every-us")?;
        let mut refused = Vec::new();
        for (k, v) in values.iter().enumerate() {
            let i = nodes[k % nodes.len()];
            let mut out = Outbox::new();
            let payload = Bytes::from(v.clone());
            let now = self.now;
            let r = match self.nodes[i].proto.as_mut() {
                None => {
                    refused.push(format!("n{i} refused {v}: the node is down"));
                    continue;
                }
                Some(p) => match group {
                    Some(g) => A::propose_to(p, now, g, payload.clone(), &mut out)?,
                    None => p.propose(now, payload.clone(), &mut out),
                },
            };
            match r {
                Ok(id) => {
                    self.proposed.insert(id, payload);
                }
                Err(e) => refused.push(format!("n{i} refused {v}: {e:?}")),
            }
            self.apply(i, &mut out);
            if let Some(us) = every {
                self.run_for(us)?;
            }
        }
        Ok(refused.join("\n"))
    }

    /// `reconfigure node=I voters=A,B,.. [learners=C,..]`: node I is asked for a new
    /// configuration (`Protocol::reconfigure`): the voters as acceptors, the learners as
    /// learners only.
    fn cmd_reconfigure(&mut self, args: &mut Args) -> Result<String, String> {
        use abcast_core::config::{Configuration, Member, Roles};
        let i = self.node_arg(args)?;
        let voters: Vec<u32> = args.parsed_list("voters")?;
        let learners: Vec<u32> = args.parsed_list("learners")?;
        let member = |id: u32, acceptor: bool| Member {
            id: NodeId(id),
            roles: Roles {
                proposer: true,
                acceptor,
                learner: true,
            },
        };
        let config = Configuration {
            id: 0,
            members: voters
                .iter()
                .map(|&v| member(v, true))
                .chain(learners.iter().map(|&l| member(l, false)))
                .collect(),
        };
        let now = self.now;
        let mut out = Outbox::new();
        let r = match self.nodes[i].proto.as_mut() {
            None => return Err(format!("n{i} is down")),
            Some(p) => p.reconfigure(now, config, &mut out),
        };
        self.apply(i, &mut out);
        Ok(match r {
            Ok(()) => String::new(),
            Err(e) => format!("n{i} refused: {e:?}"),
        })
    }

    fn cmd_run(&mut self, args: &mut Args) -> Result<String, String> {
        let until: Option<String> = args.opt("until")?;
        let Some(until) = until else {
            let us: Micros = args.req("us")?;
            self.run_for(us)?;
            return Ok(String::new());
        };
        let nodes = node_list(args, "node")?;
        if nodes.is_empty() {
            return Err("node= is missing".into());
        }
        if let Some(i) = nodes.iter().find(|&&i| i >= self.nodes.len()) {
            return Err(format!("no node {i}"));
        }
        let max: Micros = args.req("max-us")?;
        let step: Micros = args.opt("step-us")?.unwrap_or(1_000);
        let timed = args.flag("timed")?;
        let start = self.now;
        let end = self.now + max.min(RUN_MAX_US);
        let after = |now: Micros| {
            if timed {
                format!(" after {} us", now - start)
            } else {
                String::new()
            }
        };
        match until.as_str() {
            "leading" => loop {
                if let Some(&i) = nodes
                    .iter()
                    .find(|&&i| self.status_of(i).is_some_and(|s| s.leading))
                {
                    return Ok(format!("n{i} leads{}", after(self.now)));
                }
                if self.now >= end {
                    return Err(format!(
                        "{} does not lead within {max} us",
                        Self::names(&nodes)
                    ));
                }
                self.run_for(step)?;
            },
            "delivered" => {
                let value: String = args.req("value")?;
                let need: usize = args.opt("count")?.unwrap_or(nodes.len());
                loop {
                    let have: Vec<usize> = nodes
                        .iter()
                        .copied()
                        .filter(|&i| self.delivered_now(i, &value))
                        .collect();
                    if have.len() >= need {
                        return Ok(format!(
                            "{value} delivered at {}{}",
                            Self::names(&have),
                            after(self.now)
                        ));
                    }
                    if self.now >= end {
                        return Err(format!(
                            "{value} delivered at {} of {} ({} needed) within {max} us",
                            if have.is_empty() {
                                "none".to_string()
                            } else {
                                Self::names(&have)
                            },
                            Self::names(&nodes),
                            need
                        ));
                    }
                    self.run_for(step)?;
                }
            }
            u => Err(format!("until={u}: until=leading or until=delivered")),
        }
    }

    /// `n0 n2`.
    fn names(nodes: &[usize]) -> String {
        nodes
            .iter()
            .map(|i| format!("n{i}"))
            .collect::<Vec<_>>()
            .join(" ")
    }

    /// Whether node `i`'s current life delivered the value `v`.
    fn delivered_now(&self, i: usize, v: &str) -> bool {
        self.lives[self.nodes[i].life].entries.iter().any(|e| {
            matches!(e, Entry::Deliver { values, .. }
                if values.iter().any(|(_, p)| p.as_ref() == v.as_bytes()))
        })
    }

    fn cmd_stabilize(&mut self, args: &mut Args) -> Result<String, String> {
        let max: Micros = args.opt("max-us")?.unwrap_or(10_000_000).min(RUN_MAX_US);
        let quiet: Micros = args.opt("quiet-us")?.unwrap_or(1_000_000);
        let end = self.now + max;
        let mut last = (self.activity, self.now);
        while self.now < end {
            self.round()?;
            if self.activity != last.0 {
                last = (self.activity, self.now);
            } else if self.now - last.1 >= quiet {
                return Ok(String::new());
            }
        }
        Ok(format!("not quiet after {max} us"))
    }

    fn cmd_deliver(&mut self, args: &mut Args) -> Result<String, String> {
        let filter = Filter::take(args)?;
        let forced = if args.flag("drop")? {
            Some(Fate::Drop)
        } else if args.flag("hold")? {
            Some(Fate::Hold)
        } else if args.flag("dup")? {
            Some(Fate::Dup)
        } else {
            None
        };
        let mut n = 0;
        while let Some(k) = self
            .queue
            .iter()
            .position(|e| filter.matches(e.from.0, Some(e.to.0), A::describe(&e.msg).kind))
        {
            n += 1;
            if n > BURST_MAX {
                return Err(format!("more than {BURST_MAX} messages: a message storm"));
            }
            let e = self.queue.remove(k).ok_or("queue index")?;
            self.step_msg(e, forced);
        }
        Ok(String::new())
    }

    fn cmd_release(&mut self, args: &mut Args) -> Result<String, String> {
        let filter = Filter::take(args)?;
        let max: usize = args.opt("n")?.unwrap_or(usize::MAX);
        let mut lines = Vec::new();
        let mut k = 0;
        let mut released = 0;
        while k < self.held.len() && released < max {
            let e = &self.held[k];
            let info = A::describe(&e.msg);
            if !filter.matches(e.from.0, Some(e.to.0), info.kind) {
                k += 1;
                continue;
            }
            let e = self.held.remove(k);
            lines.push(self.msg_line("released ", e.from, Some(e.to), &info));
            // The message was in the network all along: it reaches its destination
            // whatever the rules say now (and its sender may have failed since).
            self.out.push(lines.pop().unwrap_or_default());
            self.receive(e.from, e.to, e.msg);
            released += 1;
        }
        if released == 0 {
            return Err("no held message matches".into());
        }
        Ok(String::new())
    }

    fn cmd_held(&self) -> String {
        if self.held.is_empty() {
            return "nothing held".into();
        }
        self.held
            .iter()
            .map(|e| self.msg_line("", e.from, Some(e.to), &A::describe(&e.msg)))
            .collect::<Vec<_>>()
            .join("\n")
    }

    fn cmd_rule(&mut self, args: &mut Args) -> Result<String, String> {
        let mut fate = None;
        for (flag, f) in [
            ("deliver", Fate::Deliver),
            ("drop", Fate::Drop),
            ("hold", Fate::Hold),
            ("dup", Fate::Dup),
        ] {
            if args.flag(flag)? {
                if fate.is_some() {
                    return Err("one of deliver, drop, hold, dup".into());
                }
                fate = Some(f);
            }
        }
        let fate = fate.ok_or("rule needs one of deliver, drop, hold, dup")?;
        self.rules.push(Rule {
            fate,
            from: args.parsed_list("from")?,
            to: args.parsed_list("to")?,
            kinds: args.list("kind"),
            instance: args.opt("instance")?,
            value: args.opt("value")?,
            cut: None,
            both: args.flag("both")?,
        });
        Ok(String::new())
    }

    fn cmd_restart(&mut self, args: &mut Args) -> Result<String, String> {
        let i = self.node_arg(args)?;
        let amnesic = args.flag("amnesic")?;
        let fresh = args.flag("fresh")?;
        let from_snapshot = args.flag("from-snapshot")?;
        let inc: Option<u64> = args.opt("incarnation")?;
        let start = match (fresh, amnesic) {
            (true, false) => StartInfo::FRESH,
            (false, true) => {
                let inc = inc.unwrap_or(self.nodes[i].incarnation + 1);
                StartInfo::restart(inc, true).map_err(|e| e.to_string())?
            }
            _ => {
                return Err(
                    "restart needs `amnesic` (an in-memory store forgets everything) or \
                     `fresh` (a first start, incarnation 0)"
                        .into(),
                );
            }
        };
        let mut p = self.ad.build(NodeId(i as u32), start)?;
        let life = self.new_life(i, start.incarnation);
        let mut said = String::new();
        if from_snapshot {
            let snap = self
                .last_snapshot
                .get(&i)
                .ok_or_else(|| format!("n{i} took no snapshot"))?;
            // Through its file encoding, as a node restarts from disk.
            let encoded = snap.encode();
            let back = Snapshot::decode(&encoded)?;
            if &back != snap {
                return Err("the snapshot does not survive its encoding".into());
            }
            let mut bad = encoded.clone();
            if let Some(b) = bad.last_mut() {
                *b ^= 1;
            }
            let corrupt = if Snapshot::decode(&bad).is_err() {
                "a corrupt copy is refused"
            } else {
                "A CORRUPT COPY IS ACCEPTED"
            };
            p.restore_snapshot(&back)?;
            let upto = back.upto;
            self.lives[life].entries.push(Entry::Restored(upto));
            self.lives[life].app = text(&back.app);
            said = format!(
                "n{i} restored its snapshot file up to {upto}; {corrupt}; delivered_upto={}",
                p.status().delivered_upto
            );
        }
        let slot = &mut self.nodes[i];
        slot.proto = Some(p);
        slot.state = NodeState::Up;
        slot.incarnation = start.incarnation;
        slot.life = life;
        Ok(said)
    }

    fn cmd_snapshot(&mut self, args: &mut Args) -> Result<String, String> {
        let i = self.node_arg(args)?;
        let custom: Option<String> = args.opt("app")?;
        let life = self.nodes[i].life;
        let app = custom
            .clone()
            .unwrap_or_else(|| self.lives[life].app.clone());
        let p = self.nodes[i]
            .proto
            .as_mut()
            .ok_or(format!("n{i} is down"))?;
        let snap = p.take_snapshot(Bytes::from(app))?;
        let groups = p.snapshot_groups(&snap);
        let mut s = format!("n{i} snapshot up to {}", snap.upto);
        for g in &groups {
            let _ = write!(
                s,
                " r{}:{}{}",
                g.group.0,
                g.covered,
                if g.following { "" } else { "(not following)" }
            );
        }
        self.last_snapshot.insert(i, snap.clone());
        self.snapshots.push(SnapRecord {
            node: i,
            snapshot: snap,
            installed: false,
            custom: custom.is_some(),
            multi: !groups.is_empty(),
        });
        Ok(s)
    }

    fn cmd_status(&mut self, args: &mut Args) -> Result<String, String> {
        let nodes = self.nodes_arg(args, "node")?;
        let mut lines = Vec::new();
        for i in nodes {
            let slot = &self.nodes[i];
            let mut s = format!("n{i}");
            if slot.incarnation > 0 {
                let _ = write!(s, " (life {})", slot.incarnation);
            }
            s.push(':');
            match slot.state {
                NodeState::Crashed => {
                    lines.push(format!("{s} crashed"));
                    continue;
                }
                NodeState::Stopped => s.push_str(" stopped"),
                NodeState::Up => {}
            }
            let Some(p) = slot.proto.as_ref() else {
                lines.push(format!("{s} down"));
                continue;
            };
            let st = p.status();
            if st.leading {
                s.push_str(" leading");
            }
            if st.amnesic {
                s.push_str(" amnesic");
            }
            match st.coordinator {
                Some(c) => {
                    let _ = write!(s, " coordinator={}", c.0);
                }
                None => s.push_str(" coordinator=none"),
            }
            let _ = write!(
                s,
                " ballot={} delivered_upto={} decided_max={} acked={}",
                st.ballot, st.delivered_upto, st.decided_max, slot.acked
            );
            if st.values_in_flight > 0 {
                let _ = write!(s, " in_flight={}", st.values_in_flight);
            }
            for d in A::details(p) {
                let _ = write!(s, " {d}");
            }
            for g in &st.groups {
                let _ = write!(
                    s,
                    " r{}:{}{}",
                    g.group.0,
                    g.delivered_upto,
                    if g.following { "" } else { "(not following)" }
                );
            }
            lines.push(s);
        }
        Ok(lines.join("\n"))
    }

    fn cmd_delivered(&mut self, args: &mut Args) -> Result<String, String> {
        let nodes = self.nodes_arg(args, "node")?;
        let instances = args.flag("instances")?;
        let mut lines = Vec::new();
        for i in nodes {
            let l = &self.lives[self.nodes[i].life];
            let mut s = format!("n{i}");
            if l.incarnation > 0 {
                let _ = write!(s, " (life {})", l.incarnation);
            }
            s.push(':');
            for e in &l.entries {
                match e {
                    Entry::Deliver {
                        group,
                        instance,
                        values,
                    } => {
                        let v: Vec<String> = values.iter().map(|(_, p)| text(p)).collect();
                        match (instances, *group) {
                            (false, _) => {
                                for x in v {
                                    let _ = write!(s, " {x}");
                                }
                            }
                            (true, 0) => {
                                let _ = write!(s, " {instance}:{}", v.join(","));
                            }
                            (true, g) => {
                                let _ = write!(s, " r{g}/{instance}:{}", v.join(","));
                            }
                        }
                    }
                    Entry::Restored(u) => {
                        let _ = write!(s, " [restored ..{u}]");
                    }
                    Entry::Install(u) => {
                        let _ = write!(s, " [installed ..{u}]");
                    }
                    Entry::Skip { group: 0, from, to } => {
                        let _ = write!(s, " [skipped {from}..{to}]");
                    }
                    Entry::Skip { group, from, to } => {
                        let _ = write!(s, " [skipped r{group}/{from}..{to}]");
                    }
                }
            }
            lines.push(s);
        }
        Ok(lines.join("\n"))
    }

    /// Agreement (one decree per instance across every node and life), order, no
    /// duplicates, integrity, snapshots that hold the common prefix, and which running
    /// nodes have converged.
    fn cmd_check(&self) -> String {
        let mut lines = Vec::new();
        // (group, instance) -> (values, first node that delivered it)
        let mut decided: BTreeMap<(u16, Instance), (Vec<Bytes>, usize)> = BTreeMap::new();
        let mut disagreements = Vec::new();
        let mut order = Vec::new();
        let mut dups = Vec::new();
        let mut foreign = Vec::new();
        for l in &self.lives {
            let mut seen = HashSet::new();
            let mut last: HashMap<u16, Instance> = HashMap::new();
            for e in &l.entries {
                let Entry::Deliver {
                    group,
                    instance,
                    values,
                } = e
                else {
                    continue;
                };
                let payloads: Vec<Bytes> = values.iter().map(|(_, p)| p.clone()).collect();
                match decided.get(&(*group, *instance)) {
                    Some((other, n)) if *other != payloads => disagreements.push(format!(
                        "DISAGREEMENT in {}instance {instance}: n{} delivered [{}], n{} [{}]",
                        if *group == 0 {
                            String::new()
                        } else {
                            format!("ring {group} ")
                        },
                        n,
                        other.iter().map(text).collect::<Vec<_>>().join(","),
                        l.node,
                        payloads.iter().map(text).collect::<Vec<_>>().join(",")
                    )),
                    Some(_) => {}
                    None => {
                        decided.insert((*group, *instance), (payloads, l.node));
                    }
                }
                if last.get(group).is_some_and(|&p| p >= *instance) {
                    order.push(format!(
                        "n{} delivered {instance} after a later one",
                        l.node
                    ));
                }
                last.insert(*group, *instance);
                for (id, p) in values {
                    if !seen.insert(*id) {
                        dups.push(format!("n{} delivered {} twice", l.node, text(p)));
                    }
                    if self.proposed.get(id) != Some(p) {
                        foreign.push(format!("n{} delivered {}, never proposed", l.node, text(p)));
                    }
                }
            }
        }
        if disagreements.is_empty() {
            lines.push(format!("agreement: ok ({} instances)", decided.len()));
        } else {
            lines.extend(disagreements);
        }
        for (what, v) in [
            ("order", order),
            ("no duplicates", dups),
            ("integrity", foreign),
        ] {
            if v.is_empty() {
                lines.push(format!("{what}: ok"));
            } else {
                lines.extend(v.into_iter().map(|s| format!("{what}: {s}")));
            }
        }
        if !self.snapshots.is_empty() {
            let mut bad = Vec::new();
            for r in self.snapshots.iter().filter(|r| !r.custom) {
                if r.multi {
                    // The taker's state is what it delivered (the story's `app`); an
                    // installed one must be exactly one a peer took.
                    let taken = self
                        .snapshots
                        .iter()
                        .any(|t| !t.installed && t.node != r.node && t.snapshot == r.snapshot);
                    if r.installed && !taken {
                        bad.push(format!(
                            "snapshots: n{} installed a snapshot at position {} that no peer took",
                            r.node, r.snapshot.upto
                        ));
                    }
                    continue;
                }
                let prefix: Vec<String> = decided
                    .range((0, 0)..=(0, r.snapshot.upto))
                    .flat_map(|(_, (v, _))| v.iter().map(text))
                    .collect();
                if text(&r.snapshot.app) != prefix.join(",") {
                    bad.push(format!(
                        "snapshots: n{}'s snapshot up to {} does not hold the values decided up to there",
                        r.node, r.snapshot.upto
                    ));
                }
            }
            let taken = self.snapshots.iter().filter(|r| !r.installed).count();
            if bad.is_empty() {
                lines.push(format!(
                    "snapshots: ok ({taken} taken, {} installed)",
                    self.snapshots.len() - taken
                ));
            } else {
                lines.extend(bad);
            }
        }
        // Convergence: running nodes grouped by how far they delivered.
        let mut by_upto: BTreeMap<Instance, Vec<usize>> = BTreeMap::new();
        for (i, slot) in self.nodes.iter().enumerate() {
            if slot.state == NodeState::Up
                && let Some(st) = self.status_of(i)
            {
                by_upto.entry(st.delivered_upto).or_default().push(i);
            }
        }
        let groups: Vec<String> = by_upto
            .iter()
            .rev()
            .map(|(u, ns)| {
                let ns: Vec<String> = ns.iter().map(|n| format!("n{n}")).collect();
                format!("{} up to {u}", ns.join(" "))
            })
            .collect();
        if groups.len() <= 1 {
            lines.push(format!("converged: {}", groups.join("")));
        } else {
            lines.push(format!("not converged: {}", groups.join("; ")));
        }
        lines.join("\n")
    }

    fn cmd_sent(&mut self, args: &mut Args) -> Result<String, String> {
        let filter = Filter::take(args)?;
        let by_kind = args.flag("by-kind")?;
        let mut lines = Vec::new();
        let rows: Vec<(u32, Option<u32>, &str, u64)> = self
            .counts
            .iter()
            .filter(|&(&(f, t, k), _)| {
                (filter.from.is_empty() || filter.from.contains(&f))
                    && (filter.to.is_empty() || t.is_some_and(|t| filter.to.contains(&t)))
                    && (filter.kinds.is_empty() || filter.kinds.iter().any(|x| x == k))
            })
            .map(|(&(f, t, k), &c)| (f, t, k, c))
            .collect();
        if by_kind {
            let values = self.values_since_mark.len();
            let mut per: BTreeMap<&str, u64> = BTreeMap::new();
            for (_, _, k, c) in rows {
                *per.entry(k).or_default() += c;
            }
            lines.push(format!("{values} values delivered"));
            for (k, c) in per {
                let pv = if values == 0 {
                    String::new()
                } else {
                    format!(" ({:.2} per value)", c as f64 / values as f64)
                };
                lines.push(format!("{k}: {c}{pv}"));
            }
        } else {
            for (f, t, k, c) in rows {
                let to = t.map_or("*".to_string(), |t| t.to_string());
                lines.push(format!("{f} -> {to} {k}: {c}"));
            }
            if lines.is_empty() {
                lines.push("none".into());
            }
        }
        Ok(lines.join("\n"))
    }

    fn cmd_ballots(&mut self, args: &mut Args) -> Result<String, String> {
        let i = self.node_arg(args)? as u32;
        let kind: String = args.req("kind")?;
        let mut lives: BTreeMap<u64, Vec<Ballot>> = BTreeMap::new();
        for &(n, inc, k, b) in &self.ballots {
            if n == i && k == kind {
                lives.entry(inc).or_default().push(b);
            }
        }
        let mut lines = Vec::new();
        let mut earlier: Vec<Ballot> = Vec::new();
        for (inc, bs) in &lives {
            let shown: Vec<String> = bs.iter().map(Ballot::to_string).collect();
            lines.push(format!("n{i} life {inc}: {}", shown.join(" ")));
            if !earlier.is_empty() {
                let reused: BTreeSet<String> = bs
                    .iter()
                    .filter(|b| earlier.contains(b))
                    .map(Ballot::to_string)
                    .collect();
                let same_round: BTreeSet<String> = bs
                    .iter()
                    .filter(|b| {
                        earlier
                            .iter()
                            .any(|o| (o.round, o.node) == (b.round, b.node))
                    })
                    .map(Ballot::to_string)
                    .collect();
                let wrong_life = bs.iter().any(|b| u64::from(b.incarnation) != *inc);
                lines.push(format!(
                    "  ballots of an earlier life reused: {}",
                    if reused.is_empty() {
                        "none".to_string()
                    } else {
                        reused.into_iter().collect::<Vec<_>>().join(" ")
                    }
                ));
                lines.push(format!(
                    "  round and node of an earlier life, told apart by the incarnation: {}",
                    if same_round.is_empty() {
                        "none".to_string()
                    } else {
                        same_round.into_iter().collect::<Vec<_>>().join(" ")
                    }
                ));
                lines.push(format!(
                    "  every ballot carries incarnation {inc}: {}",
                    if wrong_life { "NO" } else { "yes" }
                ));
                if let Some(last) = bs.last() {
                    lines.push(format!(
                        "  last ballot {last} above every earlier life's: {}",
                        if earlier.iter().all(|o| o < last) {
                            "yes"
                        } else {
                            "NO"
                        }
                    ));
                }
            }
            earlier.extend(bs.iter().copied());
        }
        if lines.is_empty() {
            lines.push(format!("n{i} sent no {kind} with a ballot of its own"));
        }
        Ok(lines.join("\n"))
    }
}

/// A running cluster of any protocol: what the file runner holds.
pub trait Cluster {
    fn exec(&mut self, cmd: &str, args: &mut Args) -> Result<String, String>;
}

impl<A: Adapter> Cluster for Env<A> {
    fn exec(&mut self, cmd: &str, args: &mut Args) -> Result<String, String> {
        Env::exec(self, cmd, args)
    }
}
