//! Injected per-link delay and loss, for experiments on one machine.
//!
//! `tc netem` is not available everywhere we measure, and seed 000's figures 4.7/4.10 need
//! rings whose throughput is bounded by link delay, so the runtime can emulate a slow or
//! lossy link itself. A rule shapes the directed link `from -> to`:
//!
//! - `delay_us`: every frame the protocol sends on the link is held that long before it is
//!   queued for the socket. All frames of a delayed link take the same path, so the link
//!   stays FIFO, as a TCP connection is.
//! - `loss_ppm`: each frame is dropped, independently, with probability `loss_ppm / 10^6`.
//!   On TCP this is an application-level stand-in for packet loss: the protocols' own
//!   retransmissions must repair it, which is what the experiments exercise.
//!
//! The dice come from one splitmix64 stream per link, seeded from the cluster id and the
//! link's two node ids, so the loss pattern of a link is a function of the configuration
//! (which frames it hits still depends on the order the protocol sends them).
//!
//! Held frames count against the link's send-queue budget together with the frames already
//! queued for the socket: a delayed link holds no more than an undelayed one may queue, and
//! a frame that does not fit is dropped like one that meets a full queue.
//!
//! A held frame is on the emulated wire: a broken connection clears the socket queue but not
//! the held frames, which go out on the next connection. The delay is a lower bound: the
//! event loop wakes for the next due frame, but its poll timeout has millisecond
//! granularity, so a frame can leave up to about a millisecond late.
//!
//! A rule may name a `group` (one protocol instance, e.g. one ring of Multi-Ring Paxos): it
//! then shapes only that group's frames on the link, each group in its own FIFO, so a
//! slow global ring and a fast local ring can share a pair of nodes (seed 000 §4.3.4,
//! figures 4.10 and 4.11). A group-specific rule takes precedence over a rule for every
//! group on the same link.
//!
//! A rule may name a `lane` ([`Lane`]): it then shapes only that lane's messages, so an
//! experiment can lose data messages and never the token (seed 002 §IV-A4: "we only
//! consider data-message loss in this evaluation, not token loss", the daemons drop a
//! share of the *data* messages they receive). The lane is the message's own
//! (`WireMessage::lane`), whichever socket or connection carries it: for the token ring
//! `Data` is its data messages (and the joins and merge announcements of a membership
//! change), `Control` its token and commit token. A lane-specific rule takes precedence
//! over a rule for every lane on the same link and group.
//!
//! Where a rule applies: on the send path, to every message to one peer (a TCP frame, a
//! UDP unicast datagram, and each copy of a logical multicast); and on receipt, to IP
//! multicast datagrams (one datagram reaches every member, so each receiver rolls the
//! dice of its own link from the sender, after decoding, when the lane is known:
//! [`RecvLoss`], used by `multicast.rs`).
//!
//! Frames to the node itself never pass here (the driver loops them back in-process), and
//! neither does the transport's `Hello`, which is not a protocol message.
//!
//! With no rule for a node, the driver holds no [`LinkFaults`] at all and its send path
//! costs one branch more than without this module.

use abcast_core::codec::Lane;
use abcast_core::{Micros, NodeId};
use bytes::Bytes;
use std::collections::{HashMap, VecDeque};
use std::fmt;

/// Longest injected one-way delay. Longer delays would hold frames past every protocol
/// timeout, which measures the timeouts, not the link.
pub const MAX_DELAY_US: Micros = 10_000_000;
/// Loss probability of one in one: every frame is lost.
pub const MAX_LOSS_PPM: u32 = 1_000_000;

/// One rule as written in the config (`[[link_faults]]`): `None` stands for every node
/// (`from`) or every peer (`to`).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct LinkFault {
    pub from: Option<NodeId>,
    pub to: Option<NodeId>,
    /// One-way delay added to every frame, at most [`MAX_DELAY_US`].
    pub delay_us: Micros,
    /// Probability of losing a frame in parts per million, at most [`MAX_LOSS_PPM`].
    pub loss_ppm: u32,
    /// Only frames of this group (protocol instance); `None` = every group.
    pub group: Option<u16>,
    /// Only messages of this lane (`WireMessage::lane`); `None` = every lane.
    pub lane: Option<Lane>,
}

impl LinkFault {
    /// A rule for every link of the cluster.
    pub fn everywhere(delay_us: Micros, loss_ppm: u32) -> LinkFault {
        LinkFault {
            from: None,
            to: None,
            delay_us,
            loss_ppm,
            group: None,
            lane: None,
        }
    }

    /// A rule for the one directed link `from -> to`.
    pub fn link(from: NodeId, to: NodeId, delay_us: Micros, loss_ppm: u32) -> LinkFault {
        LinkFault {
            from: Some(from),
            to: Some(to),
            delay_us,
            loss_ppm,
            group: None,
            lane: None,
        }
    }

    /// The same rule for one group's frames only.
    pub fn in_group(self, group: u16) -> LinkFault {
        LinkFault {
            group: Some(group),
            ..self
        }
    }

    /// The same rule for one lane's messages only.
    pub fn on_lane(self, lane: Lane) -> LinkFault {
        LinkFault {
            lane: Some(lane),
            ..self
        }
    }
}

/// The name of a lane as the config spells it (`lane = "data"`).
pub fn lane_name(lane: Lane) -> &'static str {
    match lane {
        Lane::Data => "data",
        Lane::Control => "control",
    }
}

/// A lane by its config name; `None` for any other word.
pub fn parse_lane(name: &str) -> Option<Lane> {
    match name {
        "data" => Some(Lane::Data),
        "control" => Some(Lane::Control),
        _ => None,
    }
}

/// What is wrong with a rule; `field` is the config's name for it, e.g.
/// `link_faults[2].loss_ppm`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct LinkFaultError {
    pub field: String,
    pub reason: String,
}

impl fmt::Display for LinkFaultError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}: {}", self.field, self.reason)
    }
}

impl std::error::Error for LinkFaultError {}

/// The fault of one directed link, after the rules are resolved.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct LinkShape {
    pub delay_us: Micros,
    pub loss_ppm: u32,
}

/// One resolved shape: the directed link, the group and lane it applies to (`None` =
/// every group, every lane).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ResolvedLink {
    pub from: NodeId,
    pub to: NodeId,
    pub group: Option<u16>,
    pub lane: Option<Lane>,
    pub shape: LinkShape,
}

impl ResolvedLink {
    /// Whether this shape applies to a message of `group` on `lane`.
    pub fn covers(&self, group: u16, lane: Lane) -> bool {
        self.group.is_none_or(|g| g == group) && self.lane.is_none_or(|l| l == lane)
    }
}

/// The order in which rules of one link are tried: group- and lane-specific first.
fn precedence(group: Option<u16>, lane: Option<Lane>) -> (bool, bool) {
    (group.is_none(), lane.is_none())
}

/// Checks `rules` against the cluster's `members` and expands them into one shape per
/// directed link `(from, to)`, `from != to`, group and lane. Errors name the rule's field:
/// an id that is not a member, a value out of range, a link to the node itself, two rules
/// for one link, group and lane (after expanding omitted ids; overlapping rules would make
/// the outcome depend on their order). Links whose rule has neither delay nor loss are left
/// out.
pub fn resolve(
    rules: &[LinkFault],
    members: &[NodeId],
) -> Result<Vec<ResolvedLink>, LinkFaultError> {
    let err = |i: usize, name: &str, reason: String| {
        Err(LinkFaultError {
            field: if name.is_empty() {
                format!("link_faults[{i}]")
            } else {
                format!("link_faults[{i}].{name}")
            },
            reason,
        })
    };
    // The driver's member list may name a node twice (itself among its peers).
    let mut unique: Vec<NodeId> = Vec::with_capacity(members.len());
    for &m in members {
        if !unique.contains(&m) {
            unique.push(m);
        }
    }
    let members = &unique[..];
    let mut owner: HashMap<(NodeId, NodeId, Option<u16>, Option<Lane>), usize> = HashMap::new();
    let mut shapes = Vec::new();
    for (i, r) in rules.iter().enumerate() {
        for (name, id) in [("from", r.from), ("to", r.to)] {
            if let Some(id) = id
                && !members.contains(&id)
            {
                return err(i, name, format!("node {} is not among the members", id.0));
            }
        }
        if r.from.is_some() && r.from == r.to {
            return err(
                i,
                "to",
                "a node's frames to itself never cross a link and are never delayed".into(),
            );
        }
        if r.delay_us > MAX_DELAY_US {
            return err(
                i,
                "delay_us",
                format!("{} us, at most {MAX_DELAY_US} us (10 s)", r.delay_us),
            );
        }
        if r.loss_ppm > MAX_LOSS_PPM {
            return err(
                i,
                "loss_ppm",
                format!("{}, at most {MAX_LOSS_PPM} (every frame lost)", r.loss_ppm),
            );
        }
        let froms: Vec<NodeId> = r.from.map_or_else(|| members.to_vec(), |f| vec![f]);
        for &from in &froms {
            let tos: Vec<NodeId> = r.to.map_or_else(|| members.to_vec(), |t| vec![t]);
            for to in tos.into_iter().filter(|&t| t != from) {
                if let Some(first) = owner.insert((from, to, r.group, r.lane), i) {
                    let mut which = r
                        .group
                        .map_or_else(String::new, |g| format!(" in group {g}"));
                    if let Some(l) = r.lane {
                        which += &format!(" on the {} lane", lane_name(l));
                    }
                    return err(
                        i,
                        "",
                        format!(
                            "link {} -> {}{which} is already shaped by link_faults[{first}]; give each link one rule",
                            from.0, to.0
                        ),
                    );
                }
                if r.delay_us > 0 || r.loss_ppm > 0 {
                    shapes.push(ResolvedLink {
                        from,
                        to,
                        group: r.group,
                        lane: r.lane,
                        shape: LinkShape {
                            delay_us: r.delay_us,
                            loss_ppm: r.loss_ppm,
                        },
                    });
                }
            }
        }
    }
    Ok(shapes)
}

/// splitmix64 (Steele, Lea, Flood 2014): tiny, fast, and good enough to roll loss dice.
#[derive(Clone, Debug)]
struct SplitMix64(u64);

impl SplitMix64 {
    fn next_u64(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }
}

/// A frame waiting for its link's delay to pass.
#[derive(Clone, Debug)]
pub struct HeldFrame {
    /// When the frame may be queued for the socket (driver clock).
    pub due_us: Micros,
    pub kind: u8,
    pub group: u16,
    pub chunks: Vec<Bytes>,
}

impl HeldFrame {
    fn wire_bytes(&self) -> usize {
        super::frame::HEADER_BYTES + self.chunks.iter().map(Bytes::len).sum::<usize>()
    }
}

#[derive(Debug)]
struct FaultyLink {
    /// The group this link's rule shapes; `None` = every group without a rule of its own.
    group: Option<u16>,
    /// The lane this link's rule shapes; `None` = every lane without a rule of its own.
    lane: Option<Lane>,
    shape: LinkShape,
    rng: SplitMix64,
    /// Due times grow front to back: one delay per link and a clock that never goes back.
    held: VecDeque<HeldFrame>,
    held_bytes: usize,
}

impl FaultyLink {
    fn covers(&self, group: u16, lane: Lane) -> bool {
        self.group.is_none_or(|g| g == group) && self.lane.is_none_or(|l| l == lane)
    }
}

/// Injected loss on receipt, for datagrams that reach every member at once (IP multicast):
/// the loss of each link `sender -> me`, rolled where the datagram arrives. Built from the
/// same rules as [`LinkFaults`]; only their loss applies (a multicast datagram is sent
/// once, so there is no per-link send queue to delay it in).
#[derive(Debug)]
pub struct RecvLoss {
    /// Per sender, its link's shapes with loss, group- and lane-specific first.
    links: HashMap<NodeId, Vec<ResolvedLink>>,
    rng: SplitMix64,
}

impl RecvLoss {
    /// The receive-side loss of node `me` under `rules` (`members`: every id the rules may
    /// name). `None` when no rule loses anything on a link to `me`, or the rules are
    /// invalid (the driver refuses those before any socket opens). `seed` varies the
    /// pattern between clusters.
    pub fn new(me: NodeId, seed: u64, rules: &[LinkFault], members: &[NodeId]) -> Option<RecvLoss> {
        let shapes = resolve(rules, members).ok()?;
        let mut links: HashMap<NodeId, Vec<ResolvedLink>> = HashMap::new();
        for r in shapes
            .into_iter()
            .filter(|r| r.to == me && r.from != me && r.shape.loss_ppm > 0)
        {
            links.entry(r.from).or_default().push(r);
        }
        for v in links.values_mut() {
            v.sort_by_key(|r| precedence(r.group, r.lane));
        }
        let mut mix = SplitMix64(seed ^ u64::from(me.0).rotate_left(29) ^ 0x006D_6361_7374);
        let state = mix.next_u64();
        (!links.is_empty()).then_some(RecvLoss {
            links,
            rng: SplitMix64(state),
        })
    }

    /// Rolls the dice for one message of `group` on `lane` that arrived from `from`: true
    /// when the link's loss drops it.
    pub fn lost(&mut self, from: NodeId, group: u16, lane: Lane) -> bool {
        let Some(r) = self
            .links
            .get(&from)
            .and_then(|v| v.iter().find(|r| r.covers(group, lane)))
        else {
            return false;
        };
        self.rng.next_u64() % u64::from(MAX_LOSS_PPM) < u64::from(r.shape.loss_ppm)
    }
}

/// The state of the peer's socket queue a held frame counts against.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct QueueRoom {
    pub queued_bytes: usize,
    pub limit_bytes: usize,
}

/// What became of a frame offered to [`LinkFaults::on_send`].
#[derive(Debug)]
pub enum Verdict {
    /// No delay on this link and the frame was not lost: queue it now.
    Pass(Vec<Bytes>),
    /// Dropped by the injected loss.
    Lost,
    /// Held until its delay has passed; [`LinkFaults::pop_due`] returns it then.
    Held,
    /// The link's budget (held plus queued bytes) is used up: dropped.
    Full,
}

/// The injected faults of one node's outgoing links, indexed like the driver's peers: per
/// peer, one FIFO per shaped group (group-specific rules first, then the rule for every
/// group, if any).
#[derive(Debug)]
pub struct LinkFaults {
    links: Vec<Vec<FaultyLink>>,
}

impl LinkFaults {
    /// The faults of node `me`'s links to `peers` (in the driver's peer order) under
    /// `rules`; `members` are all node ids the rules may name (`me` and `peers` at least).
    /// `None` when no rule shapes any of this node's links, so the driver's send path keeps
    /// its fast path. `seed` (the cluster id in the driver) varies the loss pattern between
    /// clusters; the same seed and rules give the same pattern.
    pub fn new(
        me: NodeId,
        seed: u64,
        rules: &[LinkFault],
        members: &[NodeId],
        peers: &[NodeId],
    ) -> Result<Option<LinkFaults>, LinkFaultError> {
        let shapes = resolve(rules, members)?;
        let mut any = false;
        let links = peers
            .iter()
            .map(|&to| {
                let mut mine: Vec<FaultyLink> = shapes
                    .iter()
                    .filter(|r| r.from == me && r.to == to)
                    .map(|r| {
                        let link_id = (u64::from(me.0) << 32) | u64::from(to.0);
                        let group_salt = r.group.map_or(0, |g| u64::from(g) + 1);
                        let mut mix =
                            SplitMix64(seed ^ link_id.rotate_left(17) ^ group_salt.rotate_left(47));
                        // One throw-away round so neighbouring ids do not start with related
                        // states.
                        let state = mix.next_u64();
                        FaultyLink {
                            group: r.group,
                            lane: r.lane,
                            shape: r.shape,
                            rng: SplitMix64(state),
                            held: VecDeque::new(),
                            held_bytes: 0,
                        }
                    })
                    .collect();
                // Group- and lane-specific rules first: they take precedence over the rules
                // for all.
                mine.sort_by_key(|l| precedence(l.group, l.lane));
                any |= !mine.is_empty();
                mine
            })
            .collect();
        Ok(any.then_some(LinkFaults { links }))
    }

    /// The shape of the link to peer `idx` for messages of `group` on `lane`, if it has one.
    pub fn shape(&self, idx: usize, group: u16, lane: Lane) -> Option<LinkShape> {
        self.links
            .get(idx)?
            .iter()
            .find(|l| l.covers(group, lane))
            .map(|l| l.shape)
    }

    /// Offers a frame the protocol sends to peer `idx` at `now` (a message of `lane`: see
    /// [`LinkFault::lane`]). A frame to be held is
    /// refused when the bytes held for the peer (every group) and the bytes in the peer's
    /// socket queue (`room`) would together exceed the queue's bound, unless both are empty,
    /// so one frame larger than the bound still gets through, as in `OutQueue`.
    #[allow(clippy::too_many_arguments)]
    pub fn on_send(
        &mut self,
        idx: usize,
        now: Micros,
        kind: u8,
        group: u16,
        lane: Lane,
        chunks: Vec<Bytes>,
        room: QueueRoom,
    ) -> Verdict {
        let Some(links) = self.links.get_mut(idx) else {
            return Verdict::Pass(chunks);
        };
        let held_total: usize = links.iter().map(|l| l.held_bytes).sum();
        let Some(link) = links.iter_mut().find(|l| l.covers(group, lane)) else {
            return Verdict::Pass(chunks);
        };
        if link.shape.loss_ppm > 0
            && link.rng.next_u64() % u64::from(MAX_LOSS_PPM) < u64::from(link.shape.loss_ppm)
        {
            return Verdict::Lost;
        }
        if link.shape.delay_us == 0 {
            return Verdict::Pass(chunks);
        }
        let frame = HeldFrame {
            due_us: now.saturating_add(link.shape.delay_us),
            kind,
            group,
            chunks,
        };
        let len = frame.wire_bytes();
        let used = held_total.saturating_add(room.queued_bytes);
        if used > 0 && used.saturating_add(len) > room.limit_bytes {
            return Verdict::Full;
        }
        link.held_bytes += len;
        link.held.push_back(frame);
        Verdict::Held
    }

    /// Removes and returns one frame whose delay has passed at `now`, with its peer index.
    /// Frames of one link and group come out in the order they were sent.
    pub fn pop_due(&mut self, now: Micros) -> Option<(usize, HeldFrame)> {
        for (idx, links) in self.links.iter_mut().enumerate() {
            for link in links.iter_mut() {
                if link.held.front().is_some_and(|f| f.due_us <= now) {
                    let f = link.held.pop_front()?;
                    link.held_bytes = link.held_bytes.saturating_sub(f.wire_bytes());
                    return Some((idx, f));
                }
            }
        }
        None
    }

    /// When the next held frame is due, for the event loop's poll timeout.
    pub fn next_due_us(&self) -> Option<Micros> {
        self.links
            .iter()
            .flatten()
            .filter_map(|l| l.held.front().map(|f| f.due_us))
            .min()
    }

    /// Frames held on all links.
    pub fn held_frames(&self) -> usize {
        self.links.iter().flatten().map(|l| l.held.len()).sum()
    }

    /// Bytes (headers included) held for peer `idx`, every group.
    pub fn held_bytes(&self, idx: usize) -> usize {
        self.links
            .get(idx)
            .map_or(0, |links| links.iter().map(|l| l.held_bytes).sum())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ids(n: u32) -> Vec<NodeId> {
        (0..n).map(NodeId).collect()
    }

    #[test]
    fn omitted_ids_expand_to_every_other_node() {
        let shapes = resolve(&[LinkFault::everywhere(5, 0)], &ids(3)).unwrap();
        assert_eq!(shapes.len(), 6);
        assert!(shapes.iter().all(|r| r.from != r.to && r.group.is_none()));
        let shapes = resolve(
            &[LinkFault {
                from: Some(NodeId(1)),
                ..LinkFault::everywhere(0, 7)
            }],
            &ids(3),
        )
        .unwrap();
        let links: Vec<_> = shapes.iter().map(|r| (r.from.0, r.to.0)).collect();
        assert_eq!(links, [(1, 0), (1, 2)]);
    }

    #[test]
    fn rules_without_effect_leave_no_shape() {
        let f = LinkFaults::new(
            NodeId(0),
            1,
            &[LinkFault::everywhere(0, 0)],
            &ids(2),
            &[NodeId(1)],
        )
        .unwrap();
        assert!(f.is_none());
    }

    #[test]
    fn a_node_without_rules_gets_none() {
        let rules = [LinkFault::link(NodeId(1), NodeId(0), 10, 0)];
        let f = LinkFaults::new(NodeId(0), 1, &rules, &ids(2), &[NodeId(1)]).unwrap();
        assert!(f.is_none());
        let f = LinkFaults::new(NodeId(1), 1, &rules, &ids(2), &[NodeId(0)]).unwrap();
        assert_eq!(
            f.and_then(|f| f.shape(0, 0, Lane::Data)),
            Some(LinkShape {
                delay_us: 10,
                loss_ppm: 0
            })
        );
    }

    #[test]
    fn repeated_member_ids_do_not_look_like_overlaps() {
        let members = [NodeId(0), NodeId(0), NodeId(1)];
        assert_eq!(
            resolve(&[LinkFault::everywhere(1, 0)], &members)
                .unwrap()
                .len(),
            2
        );
    }

    #[test]
    fn a_self_link_is_refused() {
        let e = resolve(&[LinkFault::link(NodeId(1), NodeId(1), 10, 0)], &ids(2)).unwrap_err();
        assert_eq!(e.field, "link_faults[0].to");
    }

    fn frame(due_hint: u8) -> Vec<Bytes> {
        vec![Bytes::from(vec![due_hint; 8])]
    }

    const ROOM: QueueRoom = QueueRoom {
        queued_bytes: 0,
        limit_bytes: 1 << 20,
    };

    #[test]
    fn a_group_rule_shapes_only_its_group_and_beats_the_rule_for_all() {
        let rules = [
            LinkFault::link(NodeId(0), NodeId(1), 1_000, 0).in_group(3),
            LinkFault::link(NodeId(0), NodeId(1), 10, 0),
        ];
        let mut f = LinkFaults::new(NodeId(0), 1, &rules, &ids(2), &[NodeId(1)])
            .unwrap()
            .unwrap();
        assert_eq!(f.shape(0, 3, Lane::Data).map(|s| s.delay_us), Some(1_000));
        assert_eq!(f.shape(0, 1, Lane::Data).map(|s| s.delay_us), Some(10));
        assert!(matches!(
            f.on_send(0, 0, 1, 3, Lane::Data, frame(3), ROOM),
            Verdict::Held
        ));
        assert!(matches!(
            f.on_send(0, 0, 1, 1, Lane::Data, frame(1), ROOM),
            Verdict::Held
        ));
        // The group-1 frame (10 us) overtakes the group-3 frame (1 ms): one FIFO per group.
        let (_, first) = f.pop_due(10).unwrap();
        assert_eq!(first.group, 1);
        assert!(f.pop_due(999).is_none());
        assert_eq!(f.pop_due(1_000).unwrap().1.group, 3);
        assert_eq!(f.held_frames(), 0);
    }

    #[test]
    fn a_group_rule_alone_leaves_other_groups_untouched() {
        let rules = [LinkFault::everywhere(500, 0).in_group(2)];
        let mut f = LinkFaults::new(NodeId(0), 1, &rules, &ids(2), &[NodeId(1)])
            .unwrap()
            .unwrap();
        assert!(matches!(
            f.on_send(0, 0, 1, 1, Lane::Data, frame(1), ROOM),
            Verdict::Pass(_)
        ));
        assert!(matches!(
            f.on_send(0, 0, 1, 2, Lane::Data, frame(2), ROOM),
            Verdict::Held
        ));
    }

    #[test]
    fn two_rules_for_one_link_and_group_are_refused_but_different_groups_are_not() {
        let a = LinkFault::link(NodeId(0), NodeId(1), 5, 0);
        assert!(resolve(&[a.in_group(1), a.in_group(2), a], &ids(2)).is_ok());
        let e = resolve(&[a.in_group(1), a.in_group(1)], &ids(2)).unwrap_err();
        assert_eq!(e.field, "link_faults[1]");
        assert!(e.reason.contains("in group 1"), "{}", e.reason);
    }

    #[test]
    fn a_lane_rule_shapes_only_its_lane_and_beats_the_rule_for_every_lane() {
        let rules = [
            LinkFault::link(NodeId(0), NodeId(1), 0, MAX_LOSS_PPM).on_lane(Lane::Data),
            LinkFault::link(NodeId(0), NodeId(1), 0, 7),
        ];
        let mut f = LinkFaults::new(NodeId(0), 1, &rules, &ids(2), &[NodeId(1)])
            .unwrap()
            .unwrap();
        assert_eq!(
            f.shape(0, 0, Lane::Data).map(|s| s.loss_ppm),
            Some(MAX_LOSS_PPM)
        );
        assert_eq!(f.shape(0, 0, Lane::Control).map(|s| s.loss_ppm), Some(7));
        // Every data message is lost; a control message (the token) only by the rule for
        // every lane, 7 in a million.
        for _ in 0..100 {
            assert!(matches!(
                f.on_send(0, 0, 1, 0, Lane::Data, frame(1), ROOM),
                Verdict::Lost
            ));
        }
        let passed = (0..100)
            .filter(|_| {
                matches!(
                    f.on_send(0, 0, 1, 0, Lane::Control, frame(1), ROOM),
                    Verdict::Pass(_)
                )
            })
            .count();
        assert!(passed >= 99, "{passed}");
    }

    #[test]
    fn a_data_lane_rule_alone_never_touches_the_token() {
        let rules = [LinkFault::everywhere(0, MAX_LOSS_PPM).on_lane(Lane::Data)];
        let mut f = LinkFaults::new(NodeId(0), 1, &rules, &ids(3), &[NodeId(1), NodeId(2)])
            .unwrap()
            .unwrap();
        for peer in 0..2 {
            assert!(matches!(
                f.on_send(peer, 0, 1, 0, Lane::Control, frame(1), ROOM),
                Verdict::Pass(_)
            ));
            assert!(matches!(
                f.on_send(peer, 0, 1, 0, Lane::Data, frame(1), ROOM),
                Verdict::Lost
            ));
        }
    }

    #[test]
    fn two_rules_for_one_link_and_lane_are_refused_but_different_lanes_are_not() {
        let a = LinkFault::link(NodeId(0), NodeId(1), 0, 5);
        assert!(
            resolve(
                &[a.on_lane(Lane::Data), a.on_lane(Lane::Control), a],
                &ids(2)
            )
            .is_ok()
        );
        let e = resolve(&[a.on_lane(Lane::Data), a.on_lane(Lane::Data)], &ids(2)).unwrap_err();
        assert_eq!(e.field, "link_faults[1]");
        assert!(e.reason.contains("on the data lane"), "{}", e.reason);
    }

    #[test]
    fn lane_names_round_trip_and_others_are_refused() {
        for lane in [Lane::Data, Lane::Control] {
            assert_eq!(parse_lane(lane_name(lane)), Some(lane));
        }
        assert_eq!(parse_lane("token"), None);
        assert_eq!(parse_lane("Data"), None);
    }

    #[test]
    fn receive_side_loss_drops_about_the_share_of_its_own_links_lane_and_group() {
        let rules = [
            LinkFault::link(NodeId(1), NodeId(0), 0, 200_000).on_lane(Lane::Data),
            LinkFault::link(NodeId(2), NodeId(0), 0, 200_000).in_group(3),
            // Another node's link: not node 0's to roll.
            LinkFault::link(NodeId(0), NodeId(1), 0, MAX_LOSS_PPM),
        ];
        let mut l = RecvLoss::new(NodeId(0), 9, &rules, &ids(3)).unwrap();
        let lost = (0..100_000)
            .filter(|_| l.lost(NodeId(1), 0, Lane::Data))
            .count();
        assert!((18_000..22_000).contains(&lost), "{lost}");
        assert!(!(0..1000).any(|_| l.lost(NodeId(1), 0, Lane::Control)));
        assert!(!(0..1000).any(|_| l.lost(NodeId(2), 0, Lane::Data)));
        assert!((0..1000).any(|_| l.lost(NodeId(2), 3, Lane::Data)));
        // A rule for the link 0 -> 1 is node 1's to roll on receipt, not node 0's.
        assert!(RecvLoss::new(NodeId(0), 9, &rules[2..], &ids(3)).is_none());
        assert!(RecvLoss::new(NodeId(1), 9, &rules[2..], &ids(3)).is_some());
    }
}
