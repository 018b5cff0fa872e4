//! The client protocol spoken on a node's client port (frame kinds 128..=255, group 0).
//!
//! A client proposes values and waits for them to be decided (`abcast propose`), or
//! subscribes to the stream of deliveries (`abcast learn`). Frames use the same header as
//! peer frames, so the same decoder guards both ports.
//!
//! | kind | frame | direction | body |
//! | --- | --- | --- | --- |
//! | 128 | `Propose` | client -> node | count u32, then per value: len u32, bytes |
//! | 129 | `Proposed` | node -> client | ids of a prefix of the proposed values (the rest were refused as busy) |
//! | 130 | `Busy` | node -> client | empty: no value was taken, retry later |
//! | 131 | `Error` | node -> client | len u32, UTF-8 text: the first value was refused for this reason |
//! | 132 | `Decided` | node -> client | ids of this client's values that are now decided |
//! | 133 | `Subscribe` | client -> node | from_instance u64 |
//! | 134 | `Delivered` | node -> client | instance u64, origin u32, first_seq u64, count u32, lens, data |
//! | 135 | `Follow` | client -> node | group u16, on u8 (1 = start, 0 = stop following a ring) |
//! | 136 | `FollowAsked` | node -> client | empty: the change is asked for; it takes effect once decided in the ring |
//! | 137 | `Gap` | node -> client | from u64, to u64 (exclusive), snapshot_upto u64, reason u8, len u32, UTF-8 how_to_fetch: a subscription's instances `[from, to)` whose values this stream does not carry (`history::GapReason`: 1 not held here, 2 a peer's snapshot installed, 3 skipped, 4 decided without values: no-ops, duplicates) |
//!
//! | 138 | `GetStatus` | client -> node | empty |
//! | 139 | `StatusReport` | node -> client | [`StatusReport`]: the node, its leader (and the leader's client address), ballot, delivered and decided indices, the configuration in effect and any pending change, each follower's progress as a leader sees it |
//! | 140 | `Reconfigure` | client -> node | a configuration (id u64, ignored; count u32, then per member: id u32, roles u8 with bits proposer 1, acceptor 2, learner 4) |
//! | 141 | `ReconfigureAsked` | node -> client | empty: the leader started the change; it is in effect once the node's status shows it |
//! | 142 | `NotLeader` | node -> client | has_hint u8, hint u32, len u16, UTF-8 client address of the hint (empty: unknown): only the leader answers; retry there |
//! | 143 | `ReadBarrier` | client -> node | empty |
//! | 144 | `ReadPoint` | node -> client | upto u64: a read of this node's state is linearizable once it applied every instance up to `upto` (it has, when this is sent) |
//!
//!
//! Process groups (the token ring, `protocol = "token"`; `abcast_core::groups`). Names are
//! `len u8` and UTF-8 (1 to 64 bytes, printable, no spaces; a sender's may be empty: not a
//! member); a member is `node u32, name`; a list is `count u32` and its items.
//!
//! | kind | frame | direction | body |
//! | --- | --- | --- | --- |
//! | 145 | `GroupJoin` | client -> node | group, member, bound u8 (1: the member leaves when this connection closes) |
//! | 146 | `GroupLeave` | client -> node | group, member |
//! | 147 | `GroupMulticast` | client -> node | group, sender (empty: a non-member), service u8 (0 agreed, 1 safe), count u32, per message: len u32, bytes; answered by `GroupSent`, then `Decided` for each value |
//! | 148 | `GroupListen` | client -> node | group (empty: every group): from now on the group's views and messages come to this connection; the views in effect come first |
//! | 149 | `GroupAsked` | node -> client | empty: the join or leave is asked for (in effect once delivered: a view shows it), or the listen is on |
//! | 150 | `GroupView` | node -> client | group, view config u64, change u64, kind u8 (0 regular, 1 transitional), members, joined, left |
//! | 151 | `GroupMessages` | node -> client | view config u64, change u64, transitional u8, level u8 (0 agreed, 1 safe), sender node u32, seq u64, then the rest of the body: the delivered value as the ring carried it, an `ABGR` envelope of group messages (`abcast_core::groups::wire`: group, sender name, count u32, per message: len u32, bytes): one sender's consecutive messages to one group, in delivery order, handed on without being encoded again |
//! | 152 | `GetGroups` | client -> node | empty |
//! | 153 | `Groups` | node -> client | count u32, per group: group, members |
//! | 154 | `GroupSent` | node -> client | count u32, per value: node u32, seq u64, messages u32: the request's first messages were taken, packed in order into these values (consecutive messages share a value up to the node's `group_value_bytes`); each value's `Decided` acknowledges its messages |
//!
//! A group request to a node that runs no process groups is answered `Error`.
//!
//! The shared-memory channel (`crate::shm`), on the Unix client socket only:
//!
//! | kind | frame | direction | body |
//! | --- | --- | --- | --- |
//! | 155 | `ShmOpen` | client -> node | empty: the connection's first frame; asks to trade frames through shared memory |
//! | 156 | `ShmReady` | node -> client | ring_bytes u64; the region's descriptor comes with it (`SCM_RIGHTS`); from now on every frame goes through the rings and the socket carries doorbells only |
//!
//! A node that offers no shared memory (`[transport] client_shm_bytes = 0`), or a request
//! on TCP or after other frames, is answered `Error`, and the connection goes on as it was.
//!
//! On a connection whose two ends are on one host, both ends write their frames without a
//! body checksum (`frame::CLIENT_UNCHECKED`: a flag in the header's group field, the crc
//! field 0); every other client frame, and every peer frame, is checked.
//!
//! `Reconfigure` and `ReadBarrier` are answered with one frame each: `ReconfigureAsked` or
//! `ReadPoint`, else `NotLeader`, `Busy` (a change already under way, a bound reached) or
//! `Error{text}` (the protocol has no reconfiguration, an invalid configuration).
//!
//! A subscription never passes an instance silently: every instance from `from_instance`
//! on comes as a `Delivered` or inside a `Gap`. On a Multi-Ring node the instances of a
//! subscription are positions in the node's merged delivery order (the n-th batch it
//! delivered), not a ring's own instance numbers (`history.rs`, docs/CONTRACTS.md). The client wire has no version of its own
//! (the frame header's version is shared with the peer protocol and unchanged); a client
//! older than kind 137 stops on it with an unknown-kind error instead of missing values
//! silently.
//! Ids are encoded as node u32, seq u64.

use abcast_core::DecodeError;
use abcast_core::codec::{Decoder, Encoder};
use abcast_core::config::Configuration;
use abcast_core::groups::{self, GroupView, Member, ViewId};
use abcast_core::protocol::FollowerProgress;
use abcast_core::replog::{ENTRY_MEMBERS_MAX, get_configuration, put_configuration};
use abcast_core::types::{Ballot, Batch, Instance, NodeId, ValueId};
use abcast_core::{ConfigKind, DeliveryLevel};
use bytes::Bytes;
use std::net::SocketAddr;

use crate::history::{Gap, GapReason};

pub const KIND_PROPOSE: u8 = 128;
pub const KIND_PROPOSED: u8 = 129;
pub const KIND_BUSY: u8 = 130;
pub const KIND_ERROR: u8 = 131;
pub const KIND_DECIDED: u8 = 132;
pub const KIND_SUBSCRIBE: u8 = 133;
pub const KIND_DELIVERED: u8 = 134;
pub const KIND_FOLLOW: u8 = 135;
pub const KIND_FOLLOW_ASKED: u8 = 136;
pub const KIND_GAP: u8 = 137;
pub const KIND_GET_STATUS: u8 = 138;
pub const KIND_STATUS_REPORT: u8 = 139;
pub const KIND_RECONFIGURE: u8 = 140;
pub const KIND_RECONFIGURE_ASKED: u8 = 141;
pub const KIND_NOT_LEADER: u8 = 142;
pub const KIND_READ_BARRIER: u8 = 143;
pub const KIND_READ_POINT: u8 = 144;
pub const KIND_GROUP_JOIN: u8 = 145;
pub const KIND_GROUP_LEAVE: u8 = 146;
pub const KIND_GROUP_MULTICAST: u8 = 147;
pub const KIND_GROUP_LISTEN: u8 = 148;
pub const KIND_GROUP_ASKED: u8 = 149;
pub const KIND_GROUP_VIEW: u8 = 150;
pub const KIND_GROUP_MESSAGES: u8 = 151;
pub const KIND_GET_GROUPS: u8 = 152;
pub const KIND_GROUPS: u8 = 153;
pub const KIND_GROUP_SENT: u8 = 154;
pub const KIND_SHM_OPEN: u8 = 155;
pub const KIND_SHM_READY: u8 = 156;

/// Most members one view or one group lists in a frame, and most groups in `Groups`.
const MAX_GROUP_ITEMS: usize = 1 << 20;

/// Most values in one `Propose` frame (and ids in one reply).
pub const MAX_VALUES_PER_FRAME: usize = 1 << 16;
/// A group multicast's messages of at least this many bytes leave as chunks of their own
/// (an iovec each in the client's vectored write) instead of copies: one pass over a
/// 1 KiB message fewer at the sender, which the group-peer profile showed as a quarter of
/// all user-space copies.
pub const CLIENT_ZERO_COPY_MIN_BYTES: usize = 256;
/// Most values in one delivered batch accepted from a node.
const MAX_BATCH_VALUES: usize = 1 << 24;
/// Longest error text.
const MAX_ERROR_BYTES: usize = 64 << 10;
/// Longest socket address text (`[ipv6%scope]:port` fits with room to spare).
const MAX_ADDR_BYTES: usize = 128;

/// A node's figures as `abcast status` shows them (the body of `StatusReport`): the
/// protocol's [`abcast_core::Status`] as the client needs it, and what the node adds (its
/// delivered index, the leader's client address).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct StatusReport {
    pub node: NodeId,
    /// The leader (coordinator) this node believes in.
    pub leader: Option<NodeId>,
    /// The leader's client port, when the node knows it.
    pub leader_client_addr: Option<SocketAddr>,
    /// This node leads (and completed its prepare phase).
    pub leading: bool,
    /// This node lost its state at a restart and is not yet repaired.
    pub amnesic: bool,
    pub ballot: Ballot,
    /// Every instance up to here was delivered (or passed over) at this node.
    pub delivered_upto: Instance,
    /// The highest instance this node knows to be decided.
    pub decided_max: Instance,
    /// Values proposed here and not yet decided.
    pub values_in_flight: u64,
    /// The configuration in effect, and a change under way (`Status::configuration`,
    /// `configuration_pending`); `None` where the protocol reports none.
    pub configuration: Option<Configuration>,
    pub configuration_pending: Option<Configuration>,
    /// At a leader: each follower's progress as it sees it.
    pub followers: Vec<FollowerProgress>,
}

/// The messages of one delivered value: one sender's consecutive messages to one group,
/// in order, with the view and service they are delivered in. On the wire the value goes
/// as the ring delivered it (its `ABGR` envelope, `abcast_core::groups::wire`), so a node
/// hands the same bytes to every listener without encoding the messages again.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct GroupBatch {
    pub group: String,
    pub view: ViewId,
    pub transitional: bool,
    pub level: DeliveryLevel,
    /// The sending member (its node is the value's origin; an empty name: not a member).
    pub sender: Member,
    /// The seq of the value that carried them.
    pub seq: u64,
    pub payloads: Vec<Bytes>,
    /// The value as delivered: the envelope of `group`, the sender's name and `payloads`.
    pub value: Bytes,
}

impl GroupBatch {
    /// The batch of a delivered value, read from its envelope: an error unless it is a
    /// value of group messages.
    pub fn from_value(
        view: ViewId,
        transitional: bool,
        level: DeliveryLevel,
        id: ValueId,
        value: Bytes,
    ) -> Result<GroupBatch, DecodeError> {
        match groups::wire::decode(&value)? {
            Some(groups::wire::Envelope::Messages {
                group,
                sender,
                payloads,
            }) => Ok(GroupBatch {
                group,
                view,
                transitional,
                level,
                sender: Member {
                    node: id.node,
                    name: sender,
                },
                seq: id.seq,
                payloads,
                value,
            }),
            _ => Err(DecodeError::Invalid {
                what: "group messages",
                detail: "the value is not an envelope of group messages".into(),
            }),
        }
    }
}

/// One client-port frame.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum ClientFrame {
    Propose {
        payloads: Vec<Bytes>,
    },
    Proposed {
        ids: Vec<ValueId>,
    },
    Busy,
    Error {
        text: String,
    },
    Decided {
        ids: Vec<ValueId>,
    },
    Subscribe {
        from_instance: Instance,
    },
    Delivered {
        instance: Instance,
        batch: Batch,
    },
    /// Multi-Ring: start (`on`) or stop following ring `group` at this node's learner.
    Follow {
        group: u16,
        on: bool,
    },
    FollowAsked,
    /// Instances `[gap.from, gap.to)` this subscription does not carry, and why.
    Gap {
        gap: Gap,
    },
    GetStatus,
    StatusReport {
        report: Box<StatusReport>,
    },
    /// Move to this configuration (its id is ignored: the protocol numbers it).
    Reconfigure {
        config: Configuration,
    },
    ReconfigureAsked,
    /// Only the leader answers this request; `hint` is the leader this node believes in,
    /// with its client port when known.
    NotLeader {
        hint: Option<NodeId>,
        client_addr: Option<SocketAddr>,
    },
    ReadBarrier,
    ReadPoint {
        upto: Instance,
    },
    /// Make `member` (on this node) a member of `group`; `bound`: it leaves when this
    /// connection closes.
    GroupJoin {
        group: String,
        member: String,
        bound: bool,
    },
    GroupLeave {
        group: String,
        member: String,
    },
    /// Messages for `group` from `sender` (a member on this node; empty: a non-member).
    GroupMulticast {
        group: String,
        sender: String,
        level: DeliveryLevel,
        payloads: Vec<Bytes>,
    },
    /// Stream `group`'s views and messages (empty: every group) to this connection.
    GroupListen {
        group: String,
    },
    GroupAsked,
    GroupView {
        view: Box<GroupView>,
    },
    GroupMessages {
        batch: Box<GroupBatch>,
    },
    GetGroups,
    /// Every group with members, as this node's views have them.
    Groups {
        groups: Vec<(String, Vec<Member>)>,
    },
    /// A `GroupMulticast`'s first messages were taken, packed in order into these values:
    /// each value's id and how many messages it carries.
    GroupSent {
        values: Vec<(ValueId, u32)>,
    },
    /// Asks for the shared-memory channel (`crate::shm`): the first frame on a Unix socket.
    ShmOpen,
    /// The channel is open: each ring holds `ring_bytes` (the region's descriptor came
    /// with this frame).
    ShmReady {
        ring_bytes: u64,
    },
}

impl ClientFrame {
    pub fn kind(&self) -> u8 {
        match self {
            ClientFrame::Propose { .. } => KIND_PROPOSE,
            ClientFrame::Proposed { .. } => KIND_PROPOSED,
            ClientFrame::Busy => KIND_BUSY,
            ClientFrame::Error { .. } => KIND_ERROR,
            ClientFrame::Decided { .. } => KIND_DECIDED,
            ClientFrame::Subscribe { .. } => KIND_SUBSCRIBE,
            ClientFrame::Delivered { .. } => KIND_DELIVERED,
            ClientFrame::Follow { .. } => KIND_FOLLOW,
            ClientFrame::FollowAsked => KIND_FOLLOW_ASKED,
            ClientFrame::Gap { .. } => KIND_GAP,
            ClientFrame::GetStatus => KIND_GET_STATUS,
            ClientFrame::StatusReport { .. } => KIND_STATUS_REPORT,
            ClientFrame::Reconfigure { .. } => KIND_RECONFIGURE,
            ClientFrame::ReconfigureAsked => KIND_RECONFIGURE_ASKED,
            ClientFrame::NotLeader { .. } => KIND_NOT_LEADER,
            ClientFrame::ReadBarrier => KIND_READ_BARRIER,
            ClientFrame::ReadPoint { .. } => KIND_READ_POINT,
            ClientFrame::GroupJoin { .. } => KIND_GROUP_JOIN,
            ClientFrame::GroupLeave { .. } => KIND_GROUP_LEAVE,
            ClientFrame::GroupMulticast { .. } => KIND_GROUP_MULTICAST,
            ClientFrame::GroupListen { .. } => KIND_GROUP_LISTEN,
            ClientFrame::GroupAsked => KIND_GROUP_ASKED,
            ClientFrame::GroupView { .. } => KIND_GROUP_VIEW,
            ClientFrame::GroupMessages { .. } => KIND_GROUP_MESSAGES,
            ClientFrame::GetGroups => KIND_GET_GROUPS,
            ClientFrame::Groups { .. } => KIND_GROUPS,
            ClientFrame::GroupSent { .. } => KIND_GROUP_SENT,
            ClientFrame::ShmOpen => KIND_SHM_OPEN,
            ClientFrame::ShmReady { .. } => KIND_SHM_READY,
        }
    }

    /// The body as chunks; payloads are shared, not copied, when large (a group
    /// multicast's from [`CLIENT_ZERO_COPY_MIN_BYTES`]).
    pub fn encode(&self) -> Vec<Bytes> {
        let mut e = Encoder::new();
        match self {
            ClientFrame::Propose { payloads } => {
                e.put_u32(payloads.len() as u32);
                for p in payloads {
                    e.put_u32(p.len() as u32);
                    e.put_bytes(p);
                }
            }
            ClientFrame::GroupSent { values } => {
                e.put_u32(values.len() as u32);
                for (id, n) in values {
                    e.put_u32(id.node.0);
                    e.put_u64(id.seq);
                    e.put_u32(*n);
                }
            }
            ClientFrame::Proposed { ids } | ClientFrame::Decided { ids } => {
                e.put_u32(ids.len() as u32);
                for id in ids {
                    e.put_u32(id.node.0);
                    e.put_u64(id.seq);
                }
            }
            ClientFrame::Busy => {}
            ClientFrame::Error { text } => {
                let t = text.as_bytes();
                let t = &t[..t.len().min(MAX_ERROR_BYTES)];
                e.put_u32(t.len() as u32);
                e.put_slice(t);
            }
            ClientFrame::Subscribe { from_instance } => e.put_u64(*from_instance),
            ClientFrame::Delivered { instance, batch } => {
                e.put_u64(*instance);
                e.put_u32(batch.origin().0);
                e.put_u64(batch.first_seq());
                e.put_u32(batch.len() as u32);
                e.put_bytes(batch.lens_raw());
                e.put_bytes(batch.data_raw());
            }
            ClientFrame::Follow { group, on } => {
                e.put_u16(*group);
                e.put_u8(u8::from(*on));
            }
            ClientFrame::FollowAsked => {}
            ClientFrame::Gap { gap } => {
                e.put_u64(gap.from);
                e.put_u64(gap.to);
                e.put_u64(gap.snapshot_upto);
                e.put_u8(gap.reason as u8);
                let t = gap.how_to_fetch.as_bytes();
                let t = &t[..t.len().min(MAX_ERROR_BYTES)];
                e.put_u32(t.len() as u32);
                e.put_slice(t);
            }
            ClientFrame::GetStatus | ClientFrame::ReconfigureAsked | ClientFrame::ReadBarrier => {}
            ClientFrame::StatusReport { report } => put_report(&mut e, report),
            ClientFrame::Reconfigure { config } => put_configuration(&mut e, config),
            ClientFrame::NotLeader { hint, client_addr } => {
                e.put_u8(u8::from(hint.is_some()));
                e.put_u32(hint.map_or(0, |n| n.0));
                put_addr(&mut e, *client_addr);
            }
            ClientFrame::ReadPoint { upto } => e.put_u64(*upto),
            ClientFrame::GroupJoin {
                group,
                member,
                bound,
            } => {
                put_name(&mut e, group);
                put_name(&mut e, member);
                e.put_u8(u8::from(*bound));
            }
            ClientFrame::GroupLeave { group, member } => {
                put_name(&mut e, group);
                put_name(&mut e, member);
            }
            ClientFrame::GroupMulticast {
                group,
                sender,
                level,
                payloads,
            } => {
                put_name(&mut e, group);
                put_name(&mut e, sender);
                e.put_u8(level_byte(*level));
                e.put_u32(payloads.len() as u32);
                for p in payloads {
                    e.put_u32(p.len() as u32);
                    // A client writes the frame in vectored writes: its messages go to the
                    // kernel from where they are, not copied into one buffer first.
                    e.put_bytes_from(p, CLIENT_ZERO_COPY_MIN_BYTES);
                }
            }
            ClientFrame::GroupListen { group } => put_name(&mut e, group),
            ClientFrame::GroupAsked | ClientFrame::GetGroups | ClientFrame::ShmOpen => {}
            ClientFrame::ShmReady { ring_bytes } => e.put_u64(*ring_bytes),
            ClientFrame::GroupView { view } => {
                put_name(&mut e, &view.group);
                e.put_u64(view.id.config);
                e.put_u64(view.id.change);
                e.put_u8(u8::from(view.kind == ConfigKind::Transitional));
                put_members(&mut e, &view.members);
                put_members(&mut e, &view.joined);
                put_members(&mut e, &view.left);
            }
            ClientFrame::GroupMessages { batch } => {
                e.put_u64(batch.view.config);
                e.put_u64(batch.view.change);
                e.put_u8(u8::from(batch.transitional));
                e.put_u8(level_byte(batch.level));
                e.put_u32(batch.sender.node.0);
                e.put_u64(batch.seq);
                // The rest of the body: the value as delivered, never copied when large.
                e.put_bytes(&batch.value);
            }
            ClientFrame::Groups { groups } => {
                e.put_u32(groups.len() as u32);
                for (g, ms) in groups {
                    put_name(&mut e, g);
                    put_members(&mut e, ms);
                }
            }
        }
        e.finish()
    }

    /// Decodes a body; rejects, never panics on, any byte string.
    pub fn decode(kind: u8, body: Bytes) -> Result<ClientFrame, DecodeError> {
        let mut d = Decoder::new(body);
        let f = match kind {
            KIND_PROPOSE => {
                let n = d.count("propose count", MAX_VALUES_PER_FRAME, 4)?;
                let mut payloads = Vec::with_capacity(n);
                for _ in 0..n {
                    let len = d.u32("value length")? as usize;
                    payloads.push(d.bytes(len, "value")?);
                }
                ClientFrame::Propose { payloads }
            }
            KIND_PROPOSED | KIND_DECIDED => {
                let n = d.count("id count", MAX_VALUES_PER_FRAME, 12)?;
                let mut ids = Vec::with_capacity(n);
                for _ in 0..n {
                    let node = NodeId(d.u32("id node")?);
                    let seq = d.u64("id seq")?;
                    ids.push(ValueId { node, seq });
                }
                if kind == KIND_PROPOSED {
                    ClientFrame::Proposed { ids }
                } else {
                    ClientFrame::Decided { ids }
                }
            }
            KIND_BUSY => ClientFrame::Busy,
            KIND_ERROR => {
                let n = d.count("error length", MAX_ERROR_BYTES, 1)?;
                let text = String::from_utf8_lossy(&d.bytes(n, "error text")?).into_owned();
                ClientFrame::Error { text }
            }
            KIND_SUBSCRIBE => ClientFrame::Subscribe {
                from_instance: d.u64("from_instance")?,
            },
            KIND_DELIVERED => {
                let instance = d.u64("instance")?;
                let origin = NodeId(d.u32("origin")?);
                let first_seq = d.u64("first_seq")?;
                let n = d.count("value count", MAX_BATCH_VALUES, 4)?;
                let lens = d.bytes(n * 4, "value lengths")?;
                let rest = d.remaining();
                let data = d.bytes(rest, "values")?;
                let batch = Batch::from_parts(origin, first_seq, lens, data)?;
                ClientFrame::Delivered { instance, batch }
            }
            KIND_FOLLOW => {
                let group = d.u16("group")?;
                let on = match d.u8("on")? {
                    0 => false,
                    1 => true,
                    v => {
                        return Err(DecodeError::Invalid {
                            what: "on",
                            detail: format!("{v}, expected 0 or 1"),
                        });
                    }
                };
                ClientFrame::Follow { group, on }
            }
            KIND_FOLLOW_ASKED => ClientFrame::FollowAsked,
            KIND_GAP => {
                let from = d.u64("gap from")?;
                let to = d.u64("gap to")?;
                let snapshot_upto = d.u64("gap snapshot_upto")?;
                let r = d.u8("gap reason")?;
                let reason = GapReason::from_u8(r).ok_or_else(|| DecodeError::Invalid {
                    what: "gap reason",
                    detail: format!("{r}, expected 1 to 4"),
                })?;
                if to <= from {
                    return Err(DecodeError::Invalid {
                        what: "gap",
                        detail: format!("[{from}, {to}) is empty"),
                    });
                }
                let n = d.count("how_to_fetch length", MAX_ERROR_BYTES, 1)?;
                let how_to_fetch =
                    String::from_utf8_lossy(&d.bytes(n, "how_to_fetch")?).into_owned();
                ClientFrame::Gap {
                    gap: Gap {
                        from,
                        to,
                        snapshot_upto,
                        reason,
                        how_to_fetch,
                    },
                }
            }
            KIND_GET_STATUS => ClientFrame::GetStatus,
            KIND_STATUS_REPORT => ClientFrame::StatusReport {
                report: Box::new(get_report(&mut d)?),
            },
            KIND_RECONFIGURE => ClientFrame::Reconfigure {
                config: get_configuration(&mut d)?,
            },
            KIND_RECONFIGURE_ASKED => ClientFrame::ReconfigureAsked,
            KIND_NOT_LEADER => {
                let has = get_flag(&mut d, "not_leader.has_hint")?;
                let node = NodeId(d.u32("not_leader.hint")?);
                let client_addr = get_addr(&mut d, "not_leader.client_addr")?;
                if !has && (node.0 != 0 || client_addr.is_some()) {
                    return Err(DecodeError::Invalid {
                        what: "not_leader",
                        detail: "a client address or node without a hint".into(),
                    });
                }
                ClientFrame::NotLeader {
                    hint: has.then_some(node),
                    client_addr,
                }
            }
            KIND_READ_BARRIER => ClientFrame::ReadBarrier,
            KIND_READ_POINT => ClientFrame::ReadPoint {
                upto: d.u64("read_point.upto")?,
            },
            KIND_GROUP_JOIN..=KIND_GROUP_SENT => decode_group(kind, &mut d)?,
            KIND_SHM_OPEN => ClientFrame::ShmOpen,
            KIND_SHM_READY => ClientFrame::ShmReady {
                ring_bytes: d.u64("ring_bytes")?,
            },
            other => return Err(DecodeError::UnknownKind(other)),
        };
        d.finish()?;
        Ok(f)
    }
}

/// The body of a process-group frame (kinds 145..=154).
fn decode_group(kind: u8, d: &mut Decoder) -> Result<ClientFrame, DecodeError> {
    let f = match kind {
        KIND_GROUP_JOIN => ClientFrame::GroupJoin {
            group: get_name(d, "group", false)?,
            member: get_name(d, "member", false)?,
            bound: get_flag(d, "bound")?,
        },
        KIND_GROUP_LEAVE => ClientFrame::GroupLeave {
            group: get_name(d, "group", false)?,
            member: get_name(d, "member", false)?,
        },
        KIND_GROUP_MULTICAST => {
            let group = get_name(d, "group", false)?;
            let sender = get_name(d, "sender", true)?;
            let level = get_level(d, "service")?;
            let n = d.count("message count", MAX_VALUES_PER_FRAME, 4)?;
            let mut payloads = Vec::with_capacity(n);
            for _ in 0..n {
                let len = d.u32("message length")? as usize;
                payloads.push(d.bytes(len, "message")?);
            }
            ClientFrame::GroupMulticast {
                group,
                sender,
                level,
                payloads,
            }
        }
        KIND_GROUP_LISTEN => ClientFrame::GroupListen {
            group: get_name(d, "group", true)?,
        },
        KIND_GROUP_ASKED => ClientFrame::GroupAsked,
        KIND_GROUP_VIEW => {
            let group = get_name(d, "group", false)?;
            let id = ViewId {
                config: d.u64("view config")?,
                change: d.u64("view change")?,
            };
            let kind = if get_flag(d, "view kind")? {
                ConfigKind::Transitional
            } else {
                ConfigKind::Regular
            };
            ClientFrame::GroupView {
                view: Box::new(GroupView {
                    group,
                    id,
                    kind,
                    members: get_members(d, "members")?,
                    joined: get_members(d, "joined")?,
                    left: get_members(d, "left")?,
                }),
            }
        }
        KIND_GROUP_MESSAGES => {
            let view = ViewId {
                config: d.u64("view config")?,
                change: d.u64("view change")?,
            };
            let transitional = get_flag(d, "transitional")?;
            let level = get_level(d, "level")?;
            let id = ValueId {
                node: NodeId(d.u32("sender node")?),
                seq: d.u64("seq")?,
            };
            let n = d.remaining();
            let value = d.bytes(n, "group value")?;
            ClientFrame::GroupMessages {
                batch: Box::new(GroupBatch::from_value(
                    view,
                    transitional,
                    level,
                    id,
                    value,
                )?),
            }
        }
        KIND_GET_GROUPS => ClientFrame::GetGroups,
        KIND_GROUP_SENT => {
            let n = d.count("value count", MAX_VALUES_PER_FRAME, 16)?;
            let mut values = Vec::with_capacity(n);
            for _ in 0..n {
                let node = NodeId(d.u32("id node")?);
                let seq = d.u64("id seq")?;
                let m = d.u32("messages")?;
                if m == 0 {
                    return Err(DecodeError::Invalid {
                        what: "messages",
                        detail: "a value of no messages".into(),
                    });
                }
                values.push((ValueId { node, seq }, m));
            }
            ClientFrame::GroupSent { values }
        }
        KIND_GROUPS => {
            let n = d.count("group count", MAX_GROUP_ITEMS, 5)?;
            let mut groups = Vec::with_capacity(n);
            for _ in 0..n {
                let g = get_name(d, "group", false)?;
                groups.push((g, get_members(d, "members")?));
            }
            ClientFrame::Groups { groups }
        }
        other => return Err(DecodeError::UnknownKind(other)),
    };
    Ok(f)
}

fn put_name(e: &mut Encoder, s: &str) {
    // Names are checked where they are made (at most `groups::NAME_BYTES_MAX` bytes).
    let b = &s.as_bytes()[..s.len().min(groups::NAME_BYTES_MAX)];
    e.put_u8(b.len() as u8);
    e.put_slice(b);
}

fn get_name(d: &mut Decoder, what: &'static str, empty_ok: bool) -> Result<String, DecodeError> {
    let n = usize::from(d.u8(what)?);
    let b = d.bytes(n, what)?;
    let s = std::str::from_utf8(&b).map_err(|_| DecodeError::Invalid {
        what,
        detail: "not UTF-8".into(),
    })?;
    groups::check_name(what, s, empty_ok)
        .map_err(|detail| DecodeError::Invalid { what, detail })?;
    Ok(s.to_string())
}

fn put_member(e: &mut Encoder, m: &Member) {
    e.put_u32(m.node.0);
    put_name(e, &m.name);
}

fn get_member(d: &mut Decoder, what: &'static str, empty_ok: bool) -> Result<Member, DecodeError> {
    let node = NodeId(d.u32(what)?);
    Ok(Member {
        node,
        name: get_name(d, what, empty_ok)?,
    })
}

fn put_members(e: &mut Encoder, ms: &[Member]) {
    e.put_u32(ms.len() as u32);
    for m in ms {
        put_member(e, m);
    }
}

fn get_members(d: &mut Decoder, what: &'static str) -> Result<Vec<Member>, DecodeError> {
    let n = d.count(what, MAX_GROUP_ITEMS, 6)?;
    let mut v = Vec::with_capacity(n);
    for _ in 0..n {
        v.push(get_member(d, what, false)?);
    }
    Ok(v)
}

fn level_byte(l: DeliveryLevel) -> u8 {
    match l {
        DeliveryLevel::Agreed => 0,
        DeliveryLevel::Safe => 1,
    }
}

fn get_level(d: &mut Decoder, what: &'static str) -> Result<DeliveryLevel, DecodeError> {
    match d.u8(what)? {
        0 => Ok(DeliveryLevel::Agreed),
        1 => Ok(DeliveryLevel::Safe),
        v => Err(DecodeError::Invalid {
            what,
            detail: format!("{v}, expected 0 (agreed) or 1 (safe)"),
        }),
    }
}

fn get_flag(d: &mut Decoder, what: &'static str) -> Result<bool, DecodeError> {
    match d.u8(what)? {
        0 => Ok(false),
        1 => Ok(true),
        v => Err(DecodeError::Invalid {
            what,
            detail: format!("{v}, expected 0 or 1"),
        }),
    }
}

/// An optional socket address: `len u16` and its text (`len` 0: none).
fn put_addr(e: &mut Encoder, a: Option<SocketAddr>) {
    let text = a.map(|a| a.to_string()).unwrap_or_default();
    let t = &text.as_bytes()[..text.len().min(MAX_ADDR_BYTES)];
    e.put_u16(t.len() as u16);
    e.put_slice(t);
}

fn get_addr(d: &mut Decoder, what: &'static str) -> Result<Option<SocketAddr>, DecodeError> {
    let n = usize::from(d.u16(what)?);
    if n == 0 {
        return Ok(None);
    }
    if n > MAX_ADDR_BYTES {
        return Err(DecodeError::Invalid {
            what,
            detail: format!("{n} bytes, at most {MAX_ADDR_BYTES}"),
        });
    }
    let b = d.bytes(n, what)?;
    let text = std::str::from_utf8(&b).map_err(|_| DecodeError::Invalid {
        what,
        detail: "not UTF-8".into(),
    })?;
    text.parse::<SocketAddr>()
        .map(Some)
        .map_err(|e| DecodeError::Invalid {
            what,
            detail: format!("{text:?} is not an address: {e}"),
        })
}

fn put_opt_config(e: &mut Encoder, c: Option<&Configuration>) {
    match c {
        None => e.put_u8(0),
        Some(c) => {
            e.put_u8(1);
            put_configuration(e, c);
        }
    }
}

fn get_opt_config(
    d: &mut Decoder,
    what: &'static str,
) -> Result<Option<Configuration>, DecodeError> {
    Ok(if get_flag(d, what)? {
        Some(get_configuration(d)?)
    } else {
        None
    })
}

const REPORT_LEADING: u8 = 1;
const REPORT_AMNESIC: u8 = 2;

/// `StatusReport`'s body: `node u32 | flags u8 (1 leading, 2 amnesic) | has_leader u8 |
/// leader u32 | leader client address | ballot round u32, node u32, incarnation u32 |
/// delivered_upto u64 | decided_max u64 | values_in_flight u64 | configuration (flag u8,
/// then as in `Reconfigure`) | pending configuration (same) | followers count u32, then
/// per follower: node u32, accepted u64, decided u64, voter u8`.
fn put_report(e: &mut Encoder, r: &StatusReport) {
    e.put_u32(r.node.0);
    let mut flags = 0;
    if r.leading {
        flags |= REPORT_LEADING;
    }
    if r.amnesic {
        flags |= REPORT_AMNESIC;
    }
    e.put_u8(flags);
    e.put_u8(u8::from(r.leader.is_some()));
    e.put_u32(r.leader.map_or(0, |n| n.0));
    put_addr(e, r.leader_client_addr);
    e.put_u32(r.ballot.round);
    e.put_u32(r.ballot.node.0);
    e.put_u32(r.ballot.incarnation);
    e.put_u64(r.delivered_upto);
    e.put_u64(r.decided_max);
    e.put_u64(r.values_in_flight);
    put_opt_config(e, r.configuration.as_ref());
    put_opt_config(e, r.configuration_pending.as_ref());
    let n = r.followers.len().min(ENTRY_MEMBERS_MAX);
    e.put_u32(n as u32);
    for f in &r.followers[..n] {
        e.put_u32(f.node.0);
        e.put_u64(f.accepted);
        e.put_u64(f.decided);
        e.put_u8(u8::from(f.voter));
    }
}

fn get_report(d: &mut Decoder) -> Result<StatusReport, DecodeError> {
    let node = NodeId(d.u32("status.node")?);
    let flags = d.u8("status.flags")?;
    if flags & !(REPORT_LEADING | REPORT_AMNESIC) != 0 {
        return Err(DecodeError::Invalid {
            what: "status.flags",
            detail: format!("{flags:#x} has unknown bits"),
        });
    }
    let has_leader = get_flag(d, "status.has_leader")?;
    let leader = NodeId(d.u32("status.leader")?);
    let leader_client_addr = get_addr(d, "status.leader_client_addr")?;
    if !has_leader && (leader.0 != 0 || leader_client_addr.is_some()) {
        return Err(DecodeError::Invalid {
            what: "status.leader",
            detail: "a leader's node or address without the leader flag".into(),
        });
    }
    let ballot = Ballot {
        round: d.u32("status.ballot.round")?,
        node: NodeId(d.u32("status.ballot.node")?),
        incarnation: d.u32("status.ballot.incarnation")?,
    };
    let delivered_upto = d.u64("status.delivered_upto")?;
    let decided_max = d.u64("status.decided_max")?;
    let values_in_flight = d.u64("status.values_in_flight")?;
    let configuration = get_opt_config(d, "status.configuration")?;
    let configuration_pending = get_opt_config(d, "status.configuration_pending")?;
    let n = d.count("status.followers", ENTRY_MEMBERS_MAX, 21)?;
    let mut followers = Vec::with_capacity(n);
    for _ in 0..n {
        let node = NodeId(d.u32("status.follower.node")?);
        let accepted = d.u64("status.follower.accepted")?;
        let decided = d.u64("status.follower.decided")?;
        let voter = get_flag(d, "status.follower.voter")?;
        followers.push(FollowerProgress {
            node,
            accepted,
            decided,
            voter,
        });
    }
    Ok(StatusReport {
        node,
        leader: has_leader.then_some(leader),
        leader_client_addr,
        leading: flags & REPORT_LEADING != 0,
        amnesic: flags & REPORT_AMNESIC != 0,
        ballot,
        delivered_upto,
        decided_max,
        values_in_flight,
        configuration,
        configuration_pending,
        followers,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn roundtrip(f: ClientFrame) {
        let chunks = f.encode();
        let mut all = Vec::new();
        for c in &chunks {
            all.extend_from_slice(c);
        }
        assert_eq!(ClientFrame::decode(f.kind(), Bytes::from(all)).unwrap(), f);
    }

    #[test]
    fn every_group_frame_roundtrips() {
        let m = |n: u32, s: &str| Member {
            node: NodeId(n),
            name: s.into(),
        };
        roundtrip(ClientFrame::GroupJoin {
            group: "orders".into(),
            member: "alice".into(),
            bound: true,
        });
        roundtrip(ClientFrame::GroupLeave {
            group: "orders".into(),
            member: "alice".into(),
        });
        roundtrip(ClientFrame::GroupMulticast {
            group: "orders".into(),
            sender: String::new(),
            level: DeliveryLevel::Safe,
            payloads: vec![Bytes::from_static(b"x"), Bytes::new()],
        });
        // Messages from CLIENT_ZERO_COPY_MIN_BYTES up leave as chunks of their own.
        let big = ClientFrame::GroupMulticast {
            group: "orders".into(),
            sender: "alice".into(),
            level: DeliveryLevel::Agreed,
            payloads: vec![
                Bytes::from(vec![1u8; CLIENT_ZERO_COPY_MIN_BYTES]),
                Bytes::from_static(b"small"),
                Bytes::from(vec![2u8; 1024]),
            ],
        };
        let chunks = big.encode();
        let shared = |len: usize| chunks.iter().filter(|c| c.len() == len).count();
        assert_eq!((shared(CLIENT_ZERO_COPY_MIN_BYTES), shared(1024)), (1, 1));
        roundtrip(big);
        roundtrip(ClientFrame::GroupListen {
            group: String::new(),
        });
        roundtrip(ClientFrame::GroupAsked);
        roundtrip(ClientFrame::GroupView {
            view: Box::new(GroupView {
                group: "g".into(),
                id: ViewId {
                    config: 7,
                    change: 2,
                },
                kind: ConfigKind::Transitional,
                members: vec![m(1, "a"), m(2, "b")],
                joined: vec![m(2, "b")],
                left: vec![],
            }),
        });
        for (sender, payloads) in [
            ("", vec![Bytes::from_static(b"hello")]),
            (
                "b",
                vec![Bytes::from_static(b"x"), Bytes::from(vec![7u8; 3000])],
            ),
        ] {
            let value = groups::wire::encode_messages("g", sender, &payloads);
            let batch = GroupBatch::from_value(
                ViewId {
                    config: 7,
                    change: 3,
                },
                false,
                DeliveryLevel::Safe,
                ValueId {
                    node: NodeId(2),
                    seq: 9,
                },
                value,
            )
            .unwrap();
            assert_eq!((&batch.group[..], &batch.sender.name[..]), ("g", sender));
            assert_eq!(batch.payloads, payloads);
            roundtrip(ClientFrame::GroupMessages {
                batch: Box::new(batch),
            });
        }
        // A value that is not one of group messages is refused, not passed on.
        let join = groups::wire::encode_join("g", "a");
        let f = ClientFrame::GroupMessages {
            batch: Box::new(GroupBatch {
                group: "g".into(),
                view: ViewId {
                    config: 1,
                    change: 1,
                },
                transitional: false,
                level: DeliveryLevel::Agreed,
                sender: m(1, "a"),
                seq: 1,
                payloads: vec![],
                value: join,
            }),
        };
        let body: Vec<u8> = f.encode().iter().flat_map(|c| c.iter().copied()).collect();
        assert!(ClientFrame::decode(f.kind(), Bytes::from(body)).is_err());
        roundtrip(ClientFrame::GetGroups);
        roundtrip(ClientFrame::ShmOpen);
        roundtrip(ClientFrame::ShmReady {
            ring_bytes: 1 << 22,
        });
        roundtrip(ClientFrame::GroupSent {
            values: vec![
                (
                    ValueId {
                        node: NodeId(1),
                        seq: 4,
                    },
                    200,
                ),
                (
                    ValueId {
                        node: NodeId(1),
                        seq: 5,
                    },
                    1,
                ),
            ],
        });
        roundtrip(ClientFrame::Groups {
            groups: vec![("g".into(), vec![m(1, "a")]), ("h".into(), vec![])],
        });
    }

    #[test]
    fn malformed_group_requests_are_refused_with_the_field_named() {
        let bad: Vec<(u8, Vec<u8>, &str)> = vec![
            (KIND_GROUP_JOIN, b"\x00\x01m\x00".to_vec(), "group"),
            (KIND_GROUP_JOIN, b"\x01g\x01m\x02".to_vec(), "bound"),
            (KIND_GROUP_JOIN, b"\x03a b\x01m\x00".to_vec(), "group"),
            (KIND_GROUP_LEAVE, b"\x01g\x05m".to_vec(), "member"),
            (
                KIND_GROUP_MULTICAST,
                b"\x01g\x00\x07\x00\x00\x00\x00".to_vec(),
                "service",
            ),
            (
                KIND_GROUP_MULTICAST,
                b"\x01g\x00\x00\x01\x00\x00\x00\x09\x00\x00\x00ab".to_vec(),
                "message",
            ),
            (KIND_GROUP_LISTEN, b"\x02\xff\xfe".to_vec(), "group"),
        ];
        for (kind, body, field) in bad {
            let e = ClientFrame::decode(kind, Bytes::from(body.clone()))
                .expect_err(&format!("kind {kind} {body:?} must be refused"));
            assert!(e.to_string().contains(field), "kind {kind}: {e}");
        }
    }

    #[test]
    fn every_frame_roundtrips() {
        let id = ValueId {
            node: NodeId(3),
            seq: 99,
        };
        roundtrip(ClientFrame::Propose {
            payloads: vec![Bytes::from_static(b"a"), Bytes::from(vec![1u8; 9000])],
        });
        roundtrip(ClientFrame::Proposed { ids: vec![id, id] });
        roundtrip(ClientFrame::Busy);
        roundtrip(ClientFrame::Error {
            text: "nope".into(),
        });
        roundtrip(ClientFrame::Decided { ids: vec![id] });
        roundtrip(ClientFrame::Subscribe { from_instance: 7 });
        roundtrip(ClientFrame::Follow { group: 2, on: true });
        roundtrip(ClientFrame::Follow {
            group: 9,
            on: false,
        });
        roundtrip(ClientFrame::FollowAsked);
        roundtrip(ClientFrame::Gap {
            gap: Gap {
                from: 3,
                to: 9,
                snapshot_upto: 8,
                reason: GapReason::SnapshotInstalled,
                how_to_fetch: "snapshot file".into(),
            },
        });
        assert!(ClientFrame::decode(KIND_FOLLOW, Bytes::from_static(&[0, 2, 7])).is_err());
        let batch = Batch::single(id, Bytes::from_static(b"payload"));
        roundtrip(ClientFrame::Delivered {
            instance: 12,
            batch,
        });
    }

    fn member(id: u32, acceptor: bool) -> abcast_core::config::Member {
        abcast_core::config::Member {
            id: NodeId(id),
            roles: abcast_core::config::Roles {
                proposer: true,
                acceptor,
                learner: true,
            },
        }
    }

    fn report() -> StatusReport {
        StatusReport {
            node: NodeId(1),
            leader: Some(NodeId(2)),
            leader_client_addr: Some("127.0.0.1:7502".parse().unwrap()),
            leading: false,
            amnesic: true,
            ballot: Ballot {
                round: 4,
                node: NodeId(2),
                incarnation: 1,
            },
            delivered_upto: 99,
            decided_max: 100,
            values_in_flight: 3,
            configuration: Some(Configuration {
                id: 1,
                members: vec![member(0, true), member(1, true), member(2, true)],
            }),
            configuration_pending: Some(Configuration {
                id: 2,
                members: vec![
                    member(0, true),
                    member(1, true),
                    member(3, true),
                    member(4, false),
                ],
            }),
            followers: vec![FollowerProgress {
                node: NodeId(0),
                accepted: 100,
                decided: 98,
                voter: true,
            }],
        }
    }

    fn body(f: &ClientFrame) -> Vec<u8> {
        f.encode().iter().flat_map(|c| c.iter().copied()).collect()
    }

    #[test]
    fn the_status_reconfigure_and_read_frames_roundtrip() {
        roundtrip(ClientFrame::GetStatus);
        roundtrip(ClientFrame::StatusReport {
            report: Box::new(report()),
        });
        roundtrip(ClientFrame::StatusReport {
            report: Box::default(),
        });
        roundtrip(ClientFrame::Reconfigure {
            config: Configuration {
                id: 0,
                members: vec![member(0, true), member(4, false)],
            },
        });
        roundtrip(ClientFrame::ReconfigureAsked);
        roundtrip(ClientFrame::NotLeader {
            hint: Some(NodeId(7)),
            client_addr: Some("[::1]:9000".parse().unwrap()),
        });
        roundtrip(ClientFrame::NotLeader {
            hint: Some(NodeId(0)),
            client_addr: None,
        });
        roundtrip(ClientFrame::NotLeader {
            hint: None,
            client_addr: None,
        });
        roundtrip(ClientFrame::ReadBarrier);
        roundtrip(ClientFrame::ReadPoint { upto: 1 << 40 });
    }

    #[test]
    fn every_truncation_of_the_new_frames_is_an_error() {
        let frames = [
            ClientFrame::StatusReport {
                report: Box::new(report()),
            },
            ClientFrame::Reconfigure {
                config: Configuration {
                    id: 3,
                    members: vec![member(0, true), member(1, true)],
                },
            },
            ClientFrame::NotLeader {
                hint: Some(NodeId(2)),
                client_addr: Some("10.0.0.2:7502".parse().unwrap()),
            },
            ClientFrame::ReadPoint { upto: 5 },
        ];
        for f in &frames {
            let all = body(f);
            for cut in 0..all.len() {
                let r = ClientFrame::decode(f.kind(), Bytes::copy_from_slice(&all[..cut]));
                assert!(r.is_err(), "kind {} cut at {cut} decoded: {r:?}", f.kind());
            }
            // A byte too many is refused too.
            let mut long = all.clone();
            long.push(0);
            assert!(matches!(
                ClientFrame::decode(f.kind(), Bytes::from(long)),
                Err(DecodeError::Trailing { left: 1 })
            ));
        }
        // Empty frames take no body.
        for kind in [KIND_GET_STATUS, KIND_RECONFIGURE_ASKED, KIND_READ_BARRIER] {
            assert!(ClientFrame::decode(kind, Bytes::from_static(&[0])).is_err());
        }
    }

    #[test]
    fn malformed_fields_of_the_new_frames_are_named() {
        let err = |kind: u8, b: Vec<u8>| match ClientFrame::decode(kind, Bytes::from(b)) {
            Err(e) => e.to_string(),
            Ok(f) => panic!("decoded {f:?}"),
        };
        // A configuration with a node twice, with no acceptor, with unknown role bits.
        let mut twice = body(&ClientFrame::Reconfigure {
            config: Configuration {
                id: 0,
                members: vec![member(1, true), member(2, true)],
            },
        });
        twice[17..21].copy_from_slice(&1u32.to_le_bytes());
        assert!(err(KIND_RECONFIGURE, twice).contains("twice"));
        let none = body(&ClientFrame::Reconfigure {
            config: Configuration {
                id: 0,
                members: vec![member(1, false)],
            },
        });
        assert!(err(KIND_RECONFIGURE, none).contains("acceptor"));
        let mut bits = body(&ClientFrame::Reconfigure {
            config: Configuration {
                id: 0,
                members: vec![member(1, true)],
            },
        });
        let last = bits.len() - 1;
        bits[last] = 0x80;
        assert!(err(KIND_RECONFIGURE, bits).contains("roles"));
        // A member count far beyond the body.
        let mut huge = vec![0u8; 8];
        huge.extend_from_slice(&u32::MAX.to_le_bytes());
        assert!(err(KIND_RECONFIGURE, huge).contains("configuration.members"));
        // NotLeader: a flag that is no flag, an address that is not one, an address
        // without a hint.
        assert!(err(KIND_NOT_LEADER, vec![2, 0, 0, 0, 0, 0, 0]).contains("has_hint"));
        let mut addr = vec![1, 3, 0, 0, 0, 5, 0];
        addr.extend_from_slice(b"nope!");
        assert!(err(KIND_NOT_LEADER, addr).contains("not an address"));
        let mut utf = vec![1, 3, 0, 0, 0, 2, 0];
        utf.extend_from_slice(&[0xff, 0xfe]);
        assert!(err(KIND_NOT_LEADER, utf).contains("UTF-8"));
        let mut orphan = vec![0, 0, 0, 0, 0, 9, 0];
        orphan.extend_from_slice(b"1.2.3.4:5");
        assert!(err(KIND_NOT_LEADER, orphan).contains("without a hint"));
        let mut long = vec![1, 3, 0, 0, 0, 0xff, 0xff];
        long.extend_from_slice(&[b'1'; 300]);
        assert!(err(KIND_NOT_LEADER, long).contains("at most"));
        // StatusReport: unknown flag bits, a follower's voter flag out of its space.
        let mut flags = body(&ClientFrame::StatusReport {
            report: Box::new(report()),
        });
        flags[4] = 0x10;
        assert!(err(KIND_STATUS_REPORT, flags).contains("status.flags"));
        let mut voter = body(&ClientFrame::StatusReport {
            report: Box::new(report()),
        });
        let last = voter.len() - 1;
        voter[last] = 9;
        assert!(err(KIND_STATUS_REPORT, voter).contains("voter"));
    }

    #[test]
    fn garbage_bodies_are_errors_not_panics() {
        for kind in 128..=150u8 {
            for len in 0..64usize {
                let body = Bytes::from(
                    (0..len)
                        .map(|i| (i * 37 + kind as usize) as u8)
                        .collect::<Vec<_>>(),
                );
                let _ = ClientFrame::decode(kind, body);
            }
        }
        assert!(
            ClientFrame::decode(KIND_PROPOSE, Bytes::from_static(&[255, 255, 255, 255])).is_err()
        );
    }
}
