//! The Extended Virtual Synchrony checker (issue 18; Moser, Amir, Melliar-Smith, Agarwal,
//! "Extended Virtual Synchrony", ICDCS 1994, and Totem, TOCS 1995). The single-sequence
//! checker of `checker.rs` does not apply to a token ring: a partition makes two rings
//! that deliver different messages, each correctly. What EVS promises instead, and what is
//! checked here, per process life (a node's incarnation):
//!
//! - **Configurations in their place.** A delivery happens inside an installed
//!   configuration. A regular configuration after the first is preceded by a
//!   transitional one whose members are among the old and the new one's and include the
//!   member itself, with the new one's id (`config_changed`).
//! - **One order per regular configuration.** Within a regular configuration, every
//!   member's deliveries are a prefix of one sequence (`delivered`).
//! - **One home per message.** A message is delivered in the regular configuration it was
//!   sent in, or in a transitional configuration that follows that one, and nowhere else.
//! - **Virtual synchrony.** Members that move together from one regular configuration to
//!   the next delivered the same messages, in the same order, in the old configuration and
//!   its transitional one (checked at each install of the new one).
//! - **One total order.** The union of every life's delivery order has no cycle (`end`).
//! - **Safe delivery.** A message delivered Safe in a configuration is delivered by every
//!   member of it that installed it, unless that member failed (crashed) before it left it
//!   (`end`).
//! - **Acknowledged means held.** A value acknowledged to its proposer is delivered by every
//!   member of the configuration the proposer delivered it in that was alive then and still
//!   is (`end`): nothing acknowledged is lost while a member that had it lives.
//! - **Self-delivery, integrity.** A life delivers every value it proposed unless it
//!   crashes; no value twice in one life; none never proposed; payloads intact.
//! - **Settled after the heal** (`settled`): every live node in one regular configuration
//!   of every live node, everything sent in it delivered by all of them.

use crate::checker::{Failure, ViolationKind};
use abcast_core::protocol::Ack;
use abcast_core::{ConfigChange, ConfigKind, Delivery, DeliveryLevel, Micros, NodeId, ValueId};
use bytes::Bytes;
use std::collections::{BTreeMap, BTreeSet, HashMap, HashSet, VecDeque};

/// A process life: a node and its incarnation.
pub type Life = (NodeId, u64);

/// A configuration, as a member reports it. A regular one is its id (the ring's sequence
/// number) and members: two rings of one partition may share a sequence number, never a
/// member set with it. A transitional one is named by the regular one it leaves (none for
/// a node's first), the id of the one it leads to, and its members.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub enum Conf {
    Regular {
        id: u64,
        members: Vec<NodeId>,
    },
    Transitional {
        from: Option<u32>,
        to_id: u64,
        members: Vec<NodeId>,
    },
}

/// What the checker knows of one life.
#[derive(Default)]
struct LifeState {
    alive: bool,
    /// The configuration it is in, and the last regular one it installed.
    conf: Option<u32>,
    reg: Option<u32>,
    /// Its position in `reg`'s sequence.
    pos: usize,
    /// Every value it delivered, with the configuration it delivered it in.
    delivered: HashMap<ValueId, u32>,
    /// What it delivered in `reg` and the transitional configuration after it, in order.
    since_reg: Vec<ValueId>,
    last: Option<ValueId>,
    proposed: BTreeSet<ValueId>,
    installs: u64,
    last_install_us: Micros,
    /// The last transitional configuration it went through.
    last_trans: Option<u32>,
}

struct ValueInfo {
    payload: Bytes,
    /// The regular configuration it was sent in (from its first delivery).
    home: Option<Option<u32>>,
}

/// The EVS checker (see the module comment).
#[derive(Default)]
pub struct EvsChecker {
    lives: HashMap<Life, LifeState>,
    current: BTreeMap<NodeId, u64>,
    confs: Vec<Conf>,
    conf_index: HashMap<Conf, u32>,
    values: HashMap<ValueId, ValueInfo>,
    /// Per regular configuration, the one sequence its members deliver prefixes of.
    canon: HashMap<u32, Vec<ValueId>>,
    /// Per move from one regular configuration to the next: the first mover, its
    /// transitional configuration, and what it delivered in the old one and that.
    moves: HashMap<(u32, u32), (Life, u32, Vec<ValueId>)>,
    /// The lives that installed each configuration.
    installed_by: HashMap<u32, Vec<Life>>,
    /// Safe deliveries: the value, the configuration, the life.
    safe: Vec<(ValueId, u32, Life)>,
    /// Acknowledgements: the value, the configuration the proposer delivered it in, and
    /// that configuration's members alive at the time.
    acks: Vec<(ValueId, u32, Vec<Life>)>,
    /// The delivery order: each life's consecutive pairs.
    edges: HashMap<ValueId, Vec<ValueId>>,
    pub proposed: u64,
    pub acked: u64,
    pub deliveries: u64,
    pub safe_deliveries: u64,
    pub configs_installed: u64,
    pub transitional_deliveries: u64,
}

fn fail(kind: ViolationKind, life: Life, detail: String) -> Failure {
    let mut f = Failure::new(kind, detail);
    f.node = Some(life.0);
    f.incarnation = Some(life.1);
    f
}

impl EvsChecker {
    pub fn new() -> EvsChecker {
        EvsChecker::default()
    }

    fn intern(&mut self, c: Conf) -> u32 {
        if let Some(&i) = self.conf_index.get(&c) {
            return i;
        }
        let i = self.confs.len() as u32;
        self.confs.push(c.clone());
        self.conf_index.insert(c, i);
        i
    }

    fn show(&self, c: Option<u32>) -> String {
        match c.and_then(|i| self.confs.get(i as usize)) {
            None => "none".into(),
            Some(Conf::Regular { id, members }) => format!("regular {id} {members:?}"),
            Some(Conf::Transitional {
                from,
                to_id,
                members,
            }) => format!(
                "transitional {members:?} from ({}) to {to_id}",
                self.show(*from)
            ),
        }
    }

    pub fn start(&mut self, life: Life) {
        self.current.insert(life.0, life.1);
        self.lives.insert(
            life,
            LifeState {
                alive: true,
                ..LifeState::default()
            },
        );
    }

    pub fn crash(&mut self, life: Life) {
        self.current.remove(&life.0);
        if let Some(l) = self.lives.get_mut(&life) {
            l.alive = false;
        }
    }

    pub fn propose(&mut self, life: Life, id: ValueId, payload: Bytes) -> Result<(), Failure> {
        if id.node != life.0 || self.values.contains_key(&id) {
            return Err(fail(
                ViolationKind::BadValueId,
                life,
                format!("propose returned {id}, given before or of another node"),
            ));
        }
        self.values.insert(
            id,
            ValueInfo {
                payload,
                home: None,
            },
        );
        if let Some(l) = self.lives.get_mut(&life) {
            l.proposed.insert(id);
        }
        self.proposed += 1;
        Ok(())
    }

    /// Installs (EVS: delivers) a configuration change at `life`.
    pub fn config_changed(
        &mut self,
        now: Micros,
        life: Life,
        c: &ConfigChange,
    ) -> Result<(), Failure> {
        let members: Vec<NodeId> = c.config.members.iter().map(|m| m.id).collect();
        let mut sorted = members.clone();
        sorted.sort_unstable();
        sorted.dedup();
        let bad = |why: String| fail(ViolationKind::ConfigMismatch, life, why);
        if sorted != members || !members.contains(&life.0) {
            return Err(bad(format!(
                "configuration {} {members:?}: not ascending, or without the member itself",
                c.config.id
            )));
        }
        let Some(l) = self.lives.get(&life) else {
            return Err(bad("a configuration change at a life never started".into()));
        };
        let (cur, reg) = (l.conf, l.reg);
        let cur_conf = cur.and_then(|i| self.confs.get(i as usize)).cloned();
        match c.kind {
            ConfigKind::Transitional => {
                if matches!(cur_conf, Some(Conf::Transitional { .. })) {
                    return Err(bad(format!(
                        "two transitional configurations in a row ({} then {members:?})",
                        self.show(cur)
                    )));
                }
                if let Some(Conf::Regular { members: old, .. }) = &cur_conf
                    && members.iter().any(|m| !old.contains(m))
                {
                    return Err(bad(format!(
                        "transitional configuration {members:?} has members outside the regular \
                         configuration it leaves ({old:?})"
                    )));
                }
                if cur_conf.is_none() && members != [life.0] {
                    return Err(bad(format!(
                        "a first transitional configuration {members:?} of more than the member"
                    )));
                }
                let t = self.intern(Conf::Transitional {
                    from: reg,
                    to_id: c.config.id,
                    members,
                });
                self.installed_by.entry(t).or_default().push(life);
                if let Some(l) = self.lives.get_mut(&life) {
                    l.conf = Some(t);
                    l.last_trans = Some(t);
                }
            }
            ConfigKind::Regular => {
                let trans = match &cur_conf {
                    Some(Conf::Transitional {
                        to_id, members: tm, ..
                    }) => {
                        if *to_id != c.config.id || tm.iter().any(|m| !members.contains(m)) {
                            return Err(bad(format!(
                                "regular configuration {} {members:?} after {}",
                                c.config.id,
                                self.show(cur)
                            )));
                        }
                        cur
                    }
                    _ => {
                        return Err(bad(format!(
                            "regular configuration {} {members:?} installed without a \
                             transitional configuration before it (after {})",
                            c.config.id,
                            self.show(cur)
                        )));
                    }
                };
                let r = self.intern(Conf::Regular {
                    id: c.config.id,
                    members,
                });
                if reg == Some(r) {
                    return Err(bad(format!("{} installed twice", self.show(Some(r)))));
                }
                // Virtual synchrony: those that move together delivered the same.
                let since = self
                    .lives
                    .get_mut(&life)
                    .map(|l| std::mem::take(&mut l.since_reg))
                    .unwrap_or_default();
                if let (Some(from), Some(t)) = (reg, trans) {
                    match self.moves.get(&(from, r)) {
                        None => {
                            self.moves.insert((from, r), (life, t, since));
                        }
                        Some((first, ft, seq)) => {
                            if *ft != t {
                                return Err(fail(
                                    ViolationKind::EvsVirtualSynchrony,
                                    life,
                                    format!(
                                        "moved from ({}) to ({}) through ({}), {}#{} through ({})",
                                        self.show(Some(from)),
                                        self.show(Some(r)),
                                        self.show(Some(t)),
                                        first.0,
                                        first.1,
                                        self.show(Some(*ft))
                                    ),
                                ));
                            }
                            if *seq != since {
                                let k = seq.iter().zip(&since).take_while(|(a, b)| a == b).count();
                                return Err(fail(
                                    ViolationKind::EvsVirtualSynchrony,
                                    life,
                                    format!(
                                        "moved from ({}) to ({}) with {}#{} but delivered {} \
                                         messages there against its {}; first difference at \
                                         {k}: {:?} against {:?}",
                                        self.show(Some(from)),
                                        self.show(Some(r)),
                                        first.0,
                                        first.1,
                                        since.len(),
                                        seq.len(),
                                        since.get(k),
                                        seq.get(k)
                                    ),
                                ));
                            }
                        }
                    }
                }
                self.installed_by.entry(r).or_default().push(life);
                self.configs_installed += 1;
                if let Some(l) = self.lives.get_mut(&life) {
                    l.conf = Some(r);
                    l.reg = Some(r);
                    l.pos = 0;
                    l.installs += 1;
                    l.last_install_us = now;
                }
            }
        }
        Ok(())
    }

    pub fn delivered(&mut self, life: Life, d: &Delivery) -> Result<(), Failure> {
        let Some(l) = self.lives.get(&life) else {
            return Err(fail(
                ViolationKind::ConfigMismatch,
                life,
                "a delivery at a life never started".into(),
            ));
        };
        let Some(conf) = l.conf else {
            return Err(fail(
                ViolationKind::ConfigMismatch,
                life,
                format!("delivered {} outside any configuration", d.batch.key()),
            ));
        };
        let (reg, is_trans) = match &self.confs[conf as usize] {
            Conf::Regular { .. } => (Some(conf), false),
            Conf::Transitional { from, .. } => (*from, true),
        };
        for value in d.batch.values() {
            let (id, payload) = (value.id, value.payload);
            let Some(v) = self.values.get_mut(&id) else {
                return Err(fail(
                    ViolationKind::NeverProposed,
                    life,
                    format!("delivered {id}, never returned by propose"),
                ));
            };
            if v.payload != payload {
                return Err(fail(
                    ViolationKind::PayloadMismatch,
                    life,
                    format!("delivered {id} with another payload than proposed"),
                ));
            }
            match v.home {
                None => v.home = Some(reg),
                Some(h) if h == reg => {}
                Some(h) => {
                    let (was, now) = (self.show(h), self.show(Some(conf)));
                    return Err(fail(
                        ViolationKind::EvsWrongConfiguration,
                        life,
                        format!("delivered {id} in ({now}); it was sent in ({was})"),
                    ));
                }
            }
            let Some(l) = self.lives.get_mut(&life) else {
                continue;
            };
            if l.delivered.insert(id, conf).is_some() {
                return Err(fail(
                    ViolationKind::DuplicateDelivery,
                    life,
                    format!("delivered {id} twice"),
                ));
            }
            l.since_reg.push(id);
            if let Some(prev) = l.last.replace(id) {
                self.edges.entry(prev).or_default().push(id);
            }
            if !is_trans {
                let pos = l.pos;
                l.pos += 1;
                let canon = self.canon.entry(conf).or_default();
                if pos < canon.len() {
                    if canon[pos] != id {
                        let other = canon[pos];
                        return Err(fail(
                            ViolationKind::EvsOrder,
                            life,
                            format!(
                                "delivered {id} as message {pos} of ({}), where another member \
                                 delivered {other}",
                                self.show(Some(conf))
                            ),
                        ));
                    }
                } else {
                    canon.push(id);
                }
            } else {
                self.transitional_deliveries += 1;
            }
            if d.level == DeliveryLevel::Safe {
                self.safe.push((id, conf, life));
                self.safe_deliveries += 1;
            }
            self.deliveries += 1;
        }
        Ok(())
    }

    pub fn acked(&mut self, life: Life, a: &Ack) -> Result<(), Failure> {
        for k in 0..u64::from(a.count) {
            let id = ValueId {
                node: a.key.origin,
                seq: a.key.first_seq + k,
            };
            let proposed_here = self
                .lives
                .get(&life)
                .is_some_and(|l| id.node == life.0 && l.proposed.contains(&id));
            let conf = self.lives.get(&life).and_then(|l| l.delivered.get(&id));
            let (true, Some(&conf)) = (proposed_here, conf) else {
                return Err(fail(
                    ViolationKind::UnknownAck,
                    life,
                    format!(
                        "acknowledged {id}, which this life did not propose or has not delivered"
                    ),
                ));
            };
            // Acknowledged where it was delivered, if the proposer is still in that regular
            // configuration; otherwise at the install that left it, on the strength of
            // the recovery: every member of the transitional configuration has it.
            let l = self.lives.get(&life);
            let holders = match l.map(|l| (l.reg, l.last_trans)) {
                Some((reg, _)) if reg == Some(conf) => conf,
                Some((_, Some(t))) => t,
                _ => conf,
            };
            // The lives that installed it and still live (a node's later life was never
            // in it).
            let members: Vec<Life> = self
                .installed_by
                .get(&holders)
                .map_or(&[][..], Vec::as_slice)
                .iter()
                .copied()
                .filter(|q| self.lives.get(q).is_some_and(|l| l.alive))
                .collect();
            self.acks.push((id, holders, members));
            self.acked += 1;
        }
        Ok(())
    }

    /// Whether the run settled: every live node in one regular configuration whose members
    /// are exactly the live nodes, having delivered every value it proposed and every
    /// value any of them delivered in that configuration.
    pub fn settled(&self) -> bool {
        let live: Vec<Life> = self.current.iter().map(|(n, i)| (*n, *i)).collect();
        let nodes: Vec<NodeId> = live.iter().map(|l| l.0).collect();
        let Some(first) = live.first().and_then(|l| self.lives.get(l)) else {
            return false;
        };
        let Some(r) = first.reg else {
            return false;
        };
        if self.confs[r as usize]
            != (Conf::Regular {
                id: match &self.confs[r as usize] {
                    Conf::Regular { id, .. } => *id,
                    Conf::Transitional { .. } => return false,
                },
                members: nodes,
            })
        {
            return false;
        }
        let canon_len = self.canon.get(&r).map_or(0, Vec::len);
        live.iter().all(|life| {
            self.lives.get(life).is_some_and(|l| {
                l.conf == Some(r)
                    && l.pos == canon_len
                    && l.proposed.iter().all(|v| l.delivered.contains_key(v))
            })
        })
    }

    /// When each live node last installed a configuration, and how many it installed.
    pub fn installs(&self) -> Vec<(NodeId, u64, Micros)> {
        self.current
            .iter()
            .filter_map(|(n, i)| {
                self.lives
                    .get(&(*n, *i))
                    .map(|l| (*n, l.installs, l.last_install_us))
            })
            .collect()
    }

    /// Deliveries so far by the live life of `node`.
    pub fn delivered_by(&self, node: NodeId) -> usize {
        self.current
            .get(&node)
            .and_then(|i| self.lives.get(&(node, *i)))
            .map_or(0, |l| l.delivered.len())
    }

    /// The checks that need the whole run: one total order, Safe delivery, acknowledged
    /// values held, self-delivery.
    pub fn end(&self) -> Result<(), Failure> {
        self.one_total_order()?;
        let delivered_by = |life: &Life, id: &ValueId| {
            self.lives
                .get(life)
                .is_some_and(|l| l.delivered.contains_key(id))
        };
        for (id, conf, by) in &self.safe {
            for q in self.installed_by.get(conf).map_or(&[][..], Vec::as_slice) {
                let Some(l) = self.lives.get(q) else {
                    continue;
                };
                // It failed while in that configuration: exempt.
                let left = l.reg != Some(*conf) && l.conf != Some(*conf);
                if (l.alive || left) && !delivered_by(q, id) {
                    return Err(fail(
                        ViolationKind::EvsSafe,
                        *by,
                        format!(
                            "Safe-delivered {id} in ({}), and member {}#{} of it {} without \
                             delivering it",
                            self.show(Some(*conf)),
                            q.0,
                            q.1,
                            if l.alive { "lives" } else { "left it" }
                        ),
                    ));
                }
            }
        }
        for (id, conf, members) in &self.acks {
            for q in members {
                if self.lives.get(q).is_some_and(|l| l.alive) && !delivered_by(q, id) {
                    return Err(fail(
                        ViolationKind::LostAckedValue,
                        *q,
                        format!(
                            "{id} was acknowledged to its proposer in ({}), of which this life \
                             was a member then; it never delivered it",
                            self.show(Some(*conf))
                        ),
                    ));
                }
            }
        }
        for (life, l) in &self.lives {
            if !l.alive {
                continue;
            }
            if let Some(id) = l.proposed.iter().find(|v| !l.delivered.contains_key(v)) {
                return Err(fail(
                    ViolationKind::EvsSelfDelivery,
                    *life,
                    format!(
                        "proposed {id} and never delivered it ({} proposed, {} delivered)",
                        l.proposed.len(),
                        l.delivered.len()
                    ),
                ));
            }
        }
        Ok(())
    }

    /// The union of every life's delivery order is acyclic (Kahn's algorithm).
    fn one_total_order(&self) -> Result<(), Failure> {
        let mut indegree: HashMap<ValueId, usize> = HashMap::new();
        for (from, tos) in &self.edges {
            indegree.entry(*from).or_insert(0);
            for to in tos {
                *indegree.entry(*to).or_insert(0) += 1;
            }
        }
        let mut ready: VecDeque<ValueId> = indegree
            .iter()
            .filter(|(_, d)| **d == 0)
            .map(|(v, _)| *v)
            .collect();
        let mut done = 0usize;
        let mut seen = HashSet::new();
        while let Some(v) = ready.pop_front() {
            if !seen.insert(v) {
                continue;
            }
            done += 1;
            for to in self.edges.get(&v).map_or(&[][..], Vec::as_slice) {
                if let Some(d) = indegree.get_mut(to) {
                    *d -= 1;
                    if *d == 0 {
                        ready.push_back(*to);
                    }
                }
            }
        }
        if done < indegree.len() {
            let stuck = indegree
                .iter()
                .filter(|(v, d)| **d > 0 && !seen.contains(*v))
                .map(|(v, _)| *v)
                .min();
            return Err(Failure::new(
                ViolationKind::EvsOrder,
                format!(
                    "the lives' delivery orders form a cycle: {} of {} delivered values are on \
                     or behind one (e.g. {:?})",
                    indegree.len() - done,
                    indegree.len(),
                    stuck
                ),
            ));
        }
        Ok(())
    }
}
