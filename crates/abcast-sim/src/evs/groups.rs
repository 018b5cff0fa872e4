//! The process groups' checker (issue 18): every simulated node runs the group layer
//! (`abcast_core::groups`) over what its token ring delivers, clients join, leave and
//! send at random, and what each life is told is held to the groups' promises:
//!
//! - **One view per message.** Members that deliver a group's message in the same
//!   configuration (the same regular one, or the same transitional one) deliver it in
//!   the same view of the group: the same view id and the same members.
//! - **Views in their configuration.** A view lists only members on nodes of the
//!   configuration the life is in (the transitional one's, in one), and is of the
//!   configuration's kind; a message is delivered in the view last told of its group.
//! - **Settled after the heal** ([`GroupChecker::settled`]): every live node ended its
//!   state exchange, and every live node's groups are exactly the members the live nodes
//!   hold (each node's own joins, not left since), as told to it in its last views.

use super::checker::Life;
use crate::checker::{Failure, ViolationKind};
use abcast_core::groups::{GroupEvent, GroupLayer, Member, ViewId};
use abcast_core::{ConfigChange, ConfigKind, NodeId, ValueId};
use std::collections::{BTreeMap, BTreeSet, HashMap};

/// A configuration as the groups' checker names it: regular (id, members) or transitional
/// (the regular one's id it leads to, its members).
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
enum ConfKey {
    Regular(u64, Vec<NodeId>),
    Transitional(u64, Vec<NodeId>),
}

type Told = (ViewId, ConfigKind, Vec<Member>);
/// One delivery of a group message: the configuration, the view and its members, who.
type Seen = (ConfKey, ViewId, Vec<Member>, Life);

#[derive(Default)]
struct GLife {
    conf: Option<ConfKey>,
    nodes: BTreeSet<NodeId>,
    told: BTreeMap<String, Told>,
}

/// See the module comment.
#[derive(Default)]
pub struct GroupChecker {
    lives: HashMap<Life, GLife>,
    /// Per message: the configurations it was delivered in, each with the view.
    seen: HashMap<ValueId, Vec<Seen>>,
    pub views: u64,
    pub messages: u64,
    pub transitional_views: u64,
}

fn fail(kind: ViolationKind, life: Life, detail: String) -> Failure {
    let mut f = Failure::new(kind, detail);
    f.node = Some(life.0);
    f.incarnation = Some(life.1);
    f
}

fn names(ms: &[Member]) -> String {
    let v: Vec<String> = ms.iter().map(|m| m.to_string()).collect();
    format!("[{}]", v.join(" "))
}

impl GroupChecker {
    /// A life's configuration changed (before the layer's events of that change).
    pub fn config_changed(&mut self, life: Life, c: &ConfigChange) {
        let mut nodes: Vec<NodeId> = c.config.members.iter().map(|m| m.id).collect();
        nodes.sort_unstable();
        let l = self.lives.entry(life).or_default();
        l.nodes = nodes.iter().copied().collect();
        l.conf = Some(match c.kind {
            ConfigKind::Regular => ConfKey::Regular(c.config.id, nodes),
            ConfigKind::Transitional => ConfKey::Transitional(c.config.id, nodes),
        });
    }

    /// What the layer told `life`, in order.
    pub fn events(&mut self, life: Life, events: &[GroupEvent]) -> Result<(), Failure> {
        for e in events {
            self.event(life, e)?;
        }
        Ok(())
    }

    fn event(&mut self, life: Life, e: &GroupEvent) -> Result<(), Failure> {
        let l = self.lives.entry(life).or_default();
        let Some(conf) = l.conf.clone() else {
            return Err(fail(
                ViolationKind::GroupView,
                life,
                format!("told {e:?} before any configuration"),
            ));
        };
        let in_trans = matches!(conf, ConfKey::Transitional(..));
        match e {
            GroupEvent::View(v) => {
                self.views += 1;
                if in_trans {
                    self.transitional_views += 1;
                }
                if (v.kind == ConfigKind::Transitional) != in_trans {
                    return Err(fail(
                        ViolationKind::GroupView,
                        life,
                        format!(
                            "view {} of {} is {:?} in configuration {conf:?}",
                            v.id, v.group, v.kind
                        ),
                    ));
                }
                if let Some(m) = v.members.iter().find(|m| !l.nodes.contains(&m.node)) {
                    return Err(fail(
                        ViolationKind::GroupView,
                        life,
                        format!(
                            "view {} of {} lists {m}, whose node is not in configuration \
                             {conf:?}: {}",
                            v.id,
                            v.group,
                            names(&v.members)
                        ),
                    ));
                }
                if v.members.is_empty() {
                    l.told.remove(&v.group);
                } else {
                    l.told
                        .insert(v.group.clone(), (v.id, v.kind, v.members.clone()));
                }
            }
            GroupEvent::Message(m) => {
                self.messages += 1;
                let (told_id, members) = match l.told.get(&m.group) {
                    Some((id, _, ms)) => (Some(*id), ms.clone()),
                    None => (None, Vec::new()),
                };
                if told_id.is_some_and(|id| id != m.view) || m.transitional != in_trans {
                    return Err(fail(
                        ViolationKind::GroupView,
                        life,
                        format!(
                            "message {} of {} delivered in view {}{} while the last view told \
                             is {told_id:?} (configuration {conf:?})",
                            m.id,
                            m.group,
                            m.view,
                            if m.transitional {
                                " (transitional)"
                            } else {
                                ""
                            }
                        ),
                    ));
                }
                let seen = self.seen.entry(m.id).or_default();
                if let Some((_, id, ms, other)) = seen
                    .iter()
                    .find(|(c, id, ms, _)| *c == conf && (*id != m.view || *ms != members))
                {
                    return Err(fail(
                        ViolationKind::GroupView,
                        life,
                        format!(
                            "message {} of {} delivered in view {} {} here and in view {id} {} \
                             at {}#{}, both in configuration {conf:?}",
                            m.id,
                            m.group,
                            m.view,
                            names(&members),
                            names(ms),
                            other.0,
                            other.1
                        ),
                    ));
                }
                if !seen.iter().any(|(c, ..)| *c == conf) {
                    seen.push((conf, m.view, members, life));
                }
            }
        }
        Ok(())
    }

    /// Whether the live nodes' groups settled (see the module comment); the reason when
    /// they did not. `live` is each live node's life and layer.
    pub fn settled(&self, live: &[(Life, &GroupLayer)]) -> Result<(), String> {
        let mut expected: BTreeMap<String, BTreeSet<Member>> = BTreeMap::new();
        for ((node, _), layer) in live {
            if !layer.settled() {
                return Err(format!("node {node} is still exchanging group states"));
            }
            for (g, m) in layer.mine() {
                expected.entry(g.clone()).or_default().insert(Member {
                    node: *node,
                    name: m.clone(),
                });
            }
        }
        for (life, layer) in live {
            let have: BTreeMap<String, BTreeSet<Member>> = layer
                .groups()
                .map(|(g, m)| (g.to_string(), m.clone()))
                .collect();
            if have != expected {
                return Err(format!(
                    "node {}'s groups {have:?} are not the members the live nodes hold \
                     {expected:?}",
                    life.0
                ));
            }
            let told: BTreeMap<String, BTreeSet<Member>> = self
                .lives
                .get(life)
                .map(|l| {
                    l.told
                        .iter()
                        .map(|(g, (_, _, ms))| (g.clone(), ms.iter().cloned().collect()))
                        .collect()
                })
                .unwrap_or_default();
            if told != expected {
                return Err(format!(
                    "node {} was last told the views {told:?}, not the groups {expected:?}",
                    life.0
                ));
            }
        }
        Ok(())
    }
}
