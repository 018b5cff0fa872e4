//! Process groups over a partitionable total order (issue 18): named groups that members
//! join and leave at run time, as Spread's groups and Corosync's CPG offer them, carried by
//! one ring for every group. Each group's membership changes (its *views*) are delivered
//! in order with its messages, and every member of a configuration that delivers a message
//! delivers it in the same view of its group.
//!
//! The layer is neutral: it reads the delivered sequence and the configuration changes of
//! any protocol ([`crate::ConfigChange`], Extended Virtual Synchrony's regular and
//! transitional configurations; the token ring of seed 002 is the one that has them), and
//! it is a pure, deterministic function of them, so every member that delivers the same
//! sequence computes the same views. A join, a leave and a message each travel as one value
//! of the total order ([`wire`]); the node a member lives on is the value's origin.
//!
//! **Configuration changes: the state exchange** (Spread's group state exchange after a
//! membership change). Members of the two sides of a healed partition know different
//! members, so after each regular configuration every node multicasts its own members (a
//! `State` value naming the configuration), and nothing of the groups is delivered until
//! the states of every member of the configuration are in: joins, leaves and messages
//! delivered meanwhile are held, in order. When the last state is delivered, each group's
//! members are the union of the states, a new view is delivered for every group with
//! members (as Spread does at every configuration change), and the held values follow, in
//! order. Every member delivers the states at the same place
//! of one sequence, so the exchange ends at the same place everywhere.
//!
//! **Transitional configurations** do not change the layer's state (two members that move
//! together may be told of the transitional configuration at different places of the same
//! sequence: a Safe message one delivers before it, the other after). They only restrict
//! what is told: in a transitional configuration a group's view lists only the members on
//! nodes of that configuration (a view of kind `Transitional`). An exchange cut short by a
//! change ends at the next regular configuration with the states that came (the held
//! values follow), before the next exchange begins.
//!
//! A view's id is the regular configuration's id and the number of changes the group had
//! in it ([`ViewId`]): a function of the delivered sequence, the same at every member.

#[cfg(test)]
mod tests;
pub mod wire;

pub use wire::{Envelope, MEMBERS_PER_NODE_MAX, NAME_BYTES_MAX, check_name};

use crate::mutation::{Mutation, Slot};
use crate::protocol::{ConfigChange, ConfigKind, Delivery, DeliveryLevel};
use crate::types::{NodeId, ValueId};
use bytes::Bytes;
use std::collections::{BTreeMap, BTreeSet};

/// Values, and their bytes, one exchange holds at most. An exchange that never ends (a
/// member that runs no process groups sends no state) would hold every group value; past
/// either bound they are passed over, at every member alike (the same sequence), and
/// counted. An exchange under load lasts as long as the members' proposal queues take to
/// reach their states: a few rounds' worth of values.
pub const HELD_MAX: usize = 1 << 20;
pub const HELD_BYTES_MAX: usize = 256 << 20;

/// Groups one node's table holds at most; a join of one more group is passed over at every
/// member alike (counted in [`GroupStats::refused`]).
pub const GROUPS_MAX: usize = 4096;

/// A group member: a name on a node (Corosync CPG: node id and pid; Spread: a private name
/// at a daemon). An empty name is a sender that is not a member.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Member {
    pub node: NodeId,
    pub name: String,
}

impl std::fmt::Display for Member {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        if self.name.is_empty() {
            write!(f, "(non-member)@{}", self.node)
        } else {
            write!(f, "{}@{}", self.name, self.node)
        }
    }
}

/// Which view of a group: the regular configuration it belongs to and how many changes the
/// group had in that configuration before it.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct ViewId {
    pub config: u64,
    pub change: u64,
}

impl std::fmt::Display for ViewId {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}.{}", self.config, self.change)
    }
}

/// A group's new membership, delivered in order with its messages.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct GroupView {
    pub group: String,
    pub id: ViewId,
    /// `Transitional`: only the members on nodes of the transitional configuration.
    pub kind: ConfigKind,
    /// Sorted by node, then name.
    pub members: Vec<Member>,
    /// Members in this view and not in the one told before, and the other way round.
    pub joined: Vec<Member>,
    pub left: Vec<Member>,
}

/// Consecutive messages of one sender to a group (one value of the total order), delivered
/// in order.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct GroupMessage {
    pub group: String,
    pub sender: Member,
    /// The value that carried them.
    pub id: ValueId,
    pub level: DeliveryLevel,
    pub payloads: Vec<Bytes>,
    /// The view of the group it is delivered in.
    pub view: ViewId,
    /// Delivered in a transitional configuration.
    pub transitional: bool,
    /// The whole value as the ring delivered it (its `ABGR` envelope: group, sender name,
    /// `payloads`): a node hands it to its listening clients as it is, without encoding
    /// the messages again.
    pub value: Bytes,
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub enum GroupEvent {
    View(GroupView),
    Message(GroupMessage),
}

impl GroupEvent {
    pub fn group(&self) -> &str {
        match self {
            GroupEvent::View(v) => &v.group,
            GroupEvent::Message(m) => &m.group,
        }
    }
}

/// Counters for an operator.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct GroupStats {
    /// Values without the group magic (ordinary values), passed over.
    pub plain: u64,
    /// Group values with a malformed body, passed over.
    pub malformed: u64,
    /// State values of an earlier configuration, or repeated, passed over.
    pub stale_states: u64,
    /// Joins passed over at a bound (`GROUPS_MAX`, `MEMBERS_PER_NODE_MAX`).
    pub refused: u64,
    /// Exchanges completed, and those ended by the next configuration.
    pub exchanges: u64,
    pub exchanges_cut: u64,
    /// Values held while an exchange ran, and those passed over at `HELD_MAX`.
    pub held: u64,
    pub held_dropped: u64,
}

struct Held {
    id: ValueId,
    level: DeliveryLevel,
    env: Envelope,
    value: Bytes,
}

struct Exchange {
    config: u64,
    waiting: BTreeSet<NodeId>,
    states: BTreeMap<NodeId, Vec<(String, String)>>,
    held: Vec<Held>,
    held_bytes: usize,
}

/// One node's process groups (see the module comment).
pub struct GroupLayer {
    me: NodeId,
    table: BTreeMap<String, BTreeSet<Member>>,
    /// Members per node in `table` (the `MEMBERS_PER_NODE_MAX` bound).
    per_node: BTreeMap<NodeId, usize>,
    /// Per group, changes in the current regular configuration.
    changes: BTreeMap<String, u64>,
    config: u64,
    /// In a transitional configuration: its members.
    trans: Option<BTreeSet<NodeId>>,
    exchange: Option<Exchange>,
    /// This node's own members, (group, name), as the delivered sequence has them.
    mine: BTreeSet<(String, String)>,
    /// What was last told of each group: its view id, kind and members.
    told: BTreeMap<String, (ViewId, ConfigKind, Vec<Member>)>,
    proposals: Vec<Bytes>,
    stats: GroupStats,
    mutation: Slot,
}

impl GroupLayer {
    pub fn new(me: NodeId) -> GroupLayer {
        GroupLayer {
            me,
            table: BTreeMap::new(),
            per_node: BTreeMap::new(),
            changes: BTreeMap::new(),
            config: 0,
            trans: None,
            exchange: None,
            mine: BTreeSet::new(),
            told: BTreeMap::new(),
            proposals: Vec::new(),
            stats: GroupStats::default(),
            mutation: Slot::default(),
        }
    }

    /// Selects a broken variant (the simulator's mutation sweeps only).
    pub fn set_mutation(&mut self, m: Option<Mutation>) -> Result<(), String> {
        self.mutation.set(m)
    }

    fn mutated(&self, m: Mutation) -> bool {
        crate::mutation::on(self.mutation.get(), m)
    }

    pub fn stats(&self) -> GroupStats {
        self.stats
    }

    /// No state exchange is running: the groups' views are established.
    pub fn settled(&self) -> bool {
        self.exchange.is_none()
    }

    /// Every group with members, and its members (the regular view).
    pub fn groups(&self) -> impl Iterator<Item = (&str, &BTreeSet<Member>)> {
        self.table.iter().map(|(g, m)| (g.as_str(), m))
    }

    pub fn members(&self, group: &str) -> Option<&BTreeSet<Member>> {
        self.table.get(group)
    }

    /// This node's own members, (group, name).
    pub fn mine(&self) -> &BTreeSet<(String, String)> {
        &self.mine
    }

    /// Values the layer asks to broadcast (the state of a new configuration), in order.
    /// The caller proposes each, in order, and keeps one that is refused as busy for later.
    pub fn take_proposals(&mut self) -> Vec<Bytes> {
        std::mem::take(&mut self.proposals)
    }

    /// Whether values wait in [`GroupLayer::take_proposals`].
    pub fn has_proposals(&self) -> bool {
        !self.proposals.is_empty()
    }

    // ---- requests of this node's clients: values to propose --------------------------

    /// The value that makes `member` (on this node) a member of `group`, once delivered.
    pub fn join_value(&self, group: &str, member: &str) -> Result<Bytes, String> {
        check_name("group", group, false)?;
        check_name("member", member, false)?;
        if self.mine.contains(&(group.to_string(), member.to_string())) {
            return Err(format!(
                "{member} is already a member of group {group} at node {}",
                self.me
            ));
        }
        if self.mine.len() >= MEMBERS_PER_NODE_MAX {
            return Err(format!(
                "node {} holds {MEMBERS_PER_NODE_MAX} members already, the most one node holds",
                self.me
            ));
        }
        Ok(wire::encode_join(group, member))
    }

    /// The value that takes `member` (on this node) out of `group`, once delivered.
    pub fn leave_value(&self, group: &str, member: &str) -> Result<Bytes, String> {
        check_name("group", group, false)?;
        check_name("member", member, false)?;
        if !self.mine.contains(&(group.to_string(), member.to_string())) {
            return Err(format!(
                "{member} is not a member of group {group} at node {}",
                self.me
            ));
        }
        Ok(wire::encode_leave(group, member))
    }

    /// The value of a message for `group` from `sender` (a member on this node; empty for
    /// a sender that is not a member: groups are open, as Spread's are).
    pub fn message_value(
        &self,
        group: &str,
        sender: &str,
        payload: &[u8],
    ) -> Result<Bytes, String> {
        self.messages_value(group, sender, &[payload])
    }

    /// One value of several consecutive messages (at most
    /// [`wire::MESSAGES_PER_VALUE_MAX`]): ordered, acknowledged and delivered together,
    /// each in its place.
    pub fn messages_value<P: AsRef<[u8]>>(
        &self,
        group: &str,
        sender: &str,
        payloads: &[P],
    ) -> Result<Bytes, String> {
        if payloads.is_empty() || payloads.len() > wire::MESSAGES_PER_VALUE_MAX {
            return Err(format!(
                "{} messages in one value: 1 to {}",
                payloads.len(),
                wire::MESSAGES_PER_VALUE_MAX
            ));
        }
        check_name("group", group, false)?;
        check_name("sender", sender, true)?;
        if !sender.is_empty() && !self.mine.contains(&(group.to_string(), sender.to_string())) {
            return Err(format!(
                "{sender} is not a member of group {group} at node {}: join first, or send \
                 without a sender name",
                self.me
            ));
        }
        Ok(wire::encode_messages(group, sender, payloads))
    }

    // ---- the delivered sequence --------------------------------------------------------

    /// A configuration change, at its place in the delivered sequence.
    pub fn config_changed(&mut self, c: &ConfigChange, events: &mut Vec<GroupEvent>) {
        let nodes: BTreeSet<NodeId> = c.config.members.iter().map(|m| m.id).collect();
        match c.kind {
            ConfigKind::Transitional => {
                self.trans = Some(nodes);
                if self.exchange.is_none() {
                    self.tell_all(events);
                }
            }
            ConfigKind::Regular => {
                if let Some(x) = self.exchange.take() {
                    // Cut short by this change: end it with the states that came.
                    self.stats.exchanges_cut += 1;
                    self.complete(x, events);
                }
                self.trans = None;
                self.config = c.config.id;
                self.changes.clear();
                self.exchange = Some(Exchange {
                    config: c.config.id,
                    waiting: nodes,
                    states: BTreeMap::new(),
                    held: Vec::new(),
                    held_bytes: 0,
                });
                let state = wire::encode_state(
                    c.config.id,
                    self.mine.iter().map(|(g, m)| (g.as_str(), m.as_str())),
                );
                self.proposals.push(state);
            }
        }
    }

    /// A delivery of the protocol: each of its values in order.
    pub fn delivered(&mut self, d: &Delivery, events: &mut Vec<GroupEvent>) {
        for v in d.batch.values() {
            self.value(v.id, d.level, &v.payload, events);
        }
    }

    /// One delivered value.
    pub fn value(
        &mut self,
        id: ValueId,
        level: DeliveryLevel,
        v: &Bytes,
        events: &mut Vec<GroupEvent>,
    ) {
        let env = match wire::decode(v) {
            Ok(Some(e)) => e,
            Ok(None) => {
                self.stats.plain += 1;
                return;
            }
            Err(_) => {
                self.stats.malformed += 1;
                return;
            }
        };
        if let Envelope::State { config, members } = env {
            self.on_state(id.node, config, members, events);
            return;
        }
        let hold = !self.mutated(Mutation::GroupsDeliverDuringExchange);
        match self.exchange.as_mut() {
            Some(x) if hold => {
                if x.held.len() >= HELD_MAX || x.held_bytes + v.len() > HELD_BYTES_MAX {
                    self.stats.held_dropped += 1;
                    return;
                }
                self.stats.held += 1;
                x.held_bytes += v.len();
                x.held.push(Held {
                    id,
                    level,
                    env,
                    value: v.clone(),
                });
            }
            _ => self.apply(id, level, env, v, events),
        }
    }

    fn on_state(
        &mut self,
        from: NodeId,
        config: u64,
        members: Vec<(String, String)>,
        events: &mut Vec<GroupEvent>,
    ) {
        let Some(x) = self.exchange.as_mut() else {
            self.stats.stale_states += 1;
            return;
        };
        if config != x.config || !x.waiting.remove(&from) {
            self.stats.stale_states += 1;
            return;
        }
        x.states.insert(from, members);
        if x.waiting.is_empty()
            && let Some(x) = self.exchange.take()
        {
            self.stats.exchanges += 1;
            self.complete(x, events);
        }
    }

    /// Ends an exchange: each group's members are the union of the states; then the held
    /// values, in order.
    fn complete(&mut self, x: Exchange, events: &mut Vec<GroupEvent>) {
        if !self.mutated(Mutation::GroupsNoStateExchange) {
            let mut table: BTreeMap<String, BTreeSet<Member>> = BTreeMap::new();
            let mut per_node: BTreeMap<NodeId, usize> = BTreeMap::new();
            // Every state delivered counts, in a transitional configuration too: two
            // members that move together may deliver the last state on either side of the
            // transitional configuration (a Safe value), and the table must not depend on
            // which (what is told is restricted to the transitional members, `current`).
            for (node, list) in &x.states {
                for (g, m) in list {
                    let count = per_node.entry(*node).or_insert(0);
                    let is_new_group = !table.contains_key(g);
                    if *count >= MEMBERS_PER_NODE_MAX || (is_new_group && table.len() >= GROUPS_MAX)
                    {
                        self.stats.refused += 1;
                        continue;
                    }
                    if table.entry(g.clone()).or_default().insert(Member {
                        node: *node,
                        name: m.clone(),
                    }) {
                        *count += 1;
                    }
                }
            }
            // Every group with members gets a new view; its id counts from the exchange,
            // not from what this node knew before (a node that restarted knew nothing).
            self.changes = table.keys().map(|g| (g.clone(), 1)).collect();
            self.table = table;
            self.per_node = per_node;
        }
        self.tell_all(events);
        for h in x.held {
            self.apply(h.id, h.level, h.env, &h.value, events);
        }
    }

    fn apply(
        &mut self,
        id: ValueId,
        level: DeliveryLevel,
        env: Envelope,
        value: &Bytes,
        events: &mut Vec<GroupEvent>,
    ) {
        match env {
            Envelope::Messages {
                group,
                sender,
                payloads,
            } => {
                let view = ViewId {
                    config: self.config,
                    change: self.changes.get(&group).copied().unwrap_or(0),
                };
                events.push(GroupEvent::Message(GroupMessage {
                    group,
                    sender: Member {
                        node: id.node,
                        name: sender,
                    },
                    id,
                    level,
                    payloads,
                    view,
                    transitional: self.trans.is_some(),
                    value: value.clone(),
                }));
            }
            Envelope::Join { group, member } => {
                let count = self.per_node.get(&id.node).copied().unwrap_or(0);
                if count >= MEMBERS_PER_NODE_MAX
                    || (!self.table.contains_key(&group) && self.table.len() >= GROUPS_MAX)
                {
                    self.stats.refused += 1;
                    return;
                }
                let m = Member {
                    node: id.node,
                    name: member.clone(),
                };
                if id.node == self.me {
                    self.mine.insert((group.clone(), member));
                }
                if self.table.entry(group.clone()).or_default().insert(m) {
                    *self.per_node.entry(id.node).or_insert(0) += 1;
                    *self.changes.entry(group.clone()).or_insert(0) += 1;
                    self.tell(&group, events);
                }
            }
            Envelope::Leave { group, member } => {
                if id.node == self.me {
                    self.mine.remove(&(group.clone(), member.clone()));
                }
                let m = Member {
                    node: id.node,
                    name: member,
                };
                let Some(set) = self.table.get_mut(&group) else {
                    return;
                };
                if set.remove(&m) {
                    if set.is_empty() {
                        self.table.remove(&group);
                    }
                    if let Some(c) = self.per_node.get_mut(&id.node) {
                        *c = c.saturating_sub(1);
                    }
                    *self.changes.entry(group.clone()).or_insert(0) += 1;
                    self.tell(&group, events);
                }
            }
            // States never reach here (`on_state`).
            Envelope::State { .. } => {}
        }
    }

    /// The view of `group` as it is to be told now: its members (on the transitional
    /// configuration's nodes, in one), sorted.
    fn current(&self, group: &str) -> (ViewId, ConfigKind, Vec<Member>) {
        let id = ViewId {
            config: self.config,
            change: self.changes.get(group).copied().unwrap_or(0),
        };
        let members: Vec<Member> = self
            .table
            .get(group)
            .map(|s| {
                s.iter()
                    .filter(|m| self.trans.as_ref().is_none_or(|t| t.contains(&m.node)))
                    .cloned()
                    .collect()
            })
            .unwrap_or_default();
        let kind = if self.trans.is_some() {
            ConfigKind::Transitional
        } else {
            ConfigKind::Regular
        };
        (id, kind, members)
    }

    /// Tells `group`'s view if it differs from what was told last (a new regular
    /// configuration is a new view of every group with members, as in Spread, even when
    /// its members stay).
    fn tell(&mut self, group: &str, events: &mut Vec<GroupEvent>) {
        let now = self.current(group);
        let before = self.told.get(group);
        if before.is_some_and(|b| *b == now) {
            return;
        }
        if before.is_none() && now.2.is_empty() {
            return;
        }
        let old: &[Member] = before.map_or(&[], |b| b.2.as_slice());
        let joined = now.2.iter().filter(|m| !old.contains(m)).cloned().collect();
        let left = old.iter().filter(|m| !now.2.contains(m)).cloned().collect();
        events.push(GroupEvent::View(GroupView {
            group: group.to_string(),
            id: now.0,
            kind: now.1,
            members: now.2.clone(),
            joined,
            left,
        }));
        if now.2.is_empty() {
            self.told.remove(group);
        } else {
            self.told.insert(group.to_string(), now);
        }
    }

    /// Tells every group whose view changed (a group told before and empty now included).
    fn tell_all(&mut self, events: &mut Vec<GroupEvent>) {
        let groups: BTreeSet<String> = self.table.keys().chain(self.told.keys()).cloned().collect();
        for g in groups {
            self.tell(&g, events);
        }
    }

    /// The view a message of `group` would be delivered in now (members as told).
    pub fn view_of(&self, group: &str) -> (ViewId, ConfigKind, Vec<Member>) {
        self.current(group)
    }
}
