//! Raft messages and their wire codec (seed 001 §2.5; Ongaro's thesis for the rest).
//!
//! | message | from → to | rule |
//! | --- | --- | --- |
//! | `RequestVote` / `RequestVoteReply` | candidate ↔ voters | §2.5 election; `pre_vote`: thesis §9.6; `transfer`: §3.10 |
//! | `AppendEntries` / `AppendEntriesReply` | leader ↔ every member | §2.5 replication, log matching; the reply's conflict hint: §5.3's optimisation |
//! | `Heartbeat` / `HeartbeatReply` | leader ↔ every member | §2.5 heartbeats; the commit index; `ctx`: a read-index round (thesis §6.4) |
//! | `TimeoutNow` | leader → transfer target | leadership transfer (thesis §3.10) |
//! | `Forward` | any proposer → leader | a batch proposed at a follower |
//! | `InstallSnapshot` / `InstallSnapshotReply` | leader ↔ a follower behind its compacted prefix | Raft §7 (extended paper, fig. 13; thesis ch. 5): the snapshot in chunks of at most `max_append_bytes`, one out at a time, the reply naming the next offset |
//! | `TermQuery` / `TermReply` | an amnesic node ↔ every other voter | ours (`repair.rs`): the terms it must never vote in again |
//!
//! Terms are `u32` (the `round` of a [`Ballot`]). An entry travels as `ballot | len u32 |
//! payload`; its index is implied (`prev_index + 1 + k`). Decoding refuses, never panics
//! on, any byte string: a short or long body, an unknown kind, a boolean that is not 0 or
//! 1, an entry whose payload is not an [`EntryBody`], entry terms that go down, start
//! below `prev_term` or pass the message's term, an index that overflows.

use crate::codec::{Decoder, Encoder, WireMessage};
use crate::error::DecodeError;
use crate::replog::EntryBody;
use crate::snapshot_transfer::MAX_SNAPSHOT_BYTES;
use crate::storage::Entry;
use crate::types::{Ballot, Batch, NodeId};
use crate::wire::{BALLOT_BYTES, get_ballot, get_batch, get_bool, put_ballot, put_batch};

/// Entries one AppendEntries may carry, at most.
pub const APPEND_ENTRIES_MAX: usize = 1 << 16;

#[derive(Clone, Debug, PartialEq, Eq)]
pub struct RequestVote {
    /// The candidate's term; for a pre-vote, the term it would campaign in (its own + 1).
    pub term: u32,
    pub candidate: NodeId,
    pub last_index: u64,
    pub last_term: u32,
    /// A pre-vote: nobody changes term or vote for it (thesis §9.6).
    pub pre_vote: bool,
    /// Sent after a `TimeoutNow`: voters ignore their leader stickiness (thesis §3.10).
    pub transfer: bool,
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub struct RequestVoteReply {
    /// The voter's term; for a granted pre-vote, the term asked about.
    pub term: u32,
    pub granted: bool,
    pub pre_vote: bool,
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub struct AppendEntries {
    pub term: u32,
    pub leader: NodeId,
    pub prev_index: u64,
    pub prev_term: u32,
    /// At `prev_index + 1` on, in order; each entry's term in its ballot's `round`.
    pub entries: Vec<Entry>,
    pub leader_commit: u64,
    /// The leader's message number in its term (see [`Heartbeat::seq`]).
    pub seq: u64,
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub struct AppendEntriesReply {
    pub term: u32,
    pub success: bool,
    /// Success: the follower's log matches the leader's up to here. Refusal: the
    /// `prev_index` refused (the leader ignores a refusal of an append it no longer waits for).
    pub match_index: u64,
    /// Refusal: the term of the follower's entry at `prev_index` (0: the follower's log is
    /// shorter), and the first index of that term in its log (or its `last_index + 1`):
    /// the leader skips the whole conflicting term in one step (§5.3).
    pub conflict_term: u32,
    pub conflict_index: u64,
    /// The follower's process life: a new one means it restarted, and what the leader knew
    /// of its log is stale.
    pub incarnation: u32,
    /// The follower forgot its log and votes in a restart: the leader does not count it.
    pub amnesic: bool,
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Heartbeat {
    pub term: u32,
    pub leader: NodeId,
    /// The leader's commit index, capped at what it knows the follower's log matches.
    pub commit: u64,
    /// A read-index round (every periodic heartbeat is one); 0: a commit notice only,
    /// which is not answered.
    pub ctx: u64,
    /// The leader's message number in its term: every AppendEntries and Heartbeat it sends
    /// takes the next one (from 1). A follower takes a message as a sign of its leader's
    /// life only if it is newer than every one it has seen, so messages held in the network
    /// do not keep a dead leader alive (its entries and commit index still count).
    pub seq: u64,
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub struct HeartbeatReply {
    pub term: u32,
    pub ctx: u64,
    pub incarnation: u32,
    pub amnesic: bool,
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub struct TimeoutNow {
    pub term: u32,
    pub leader: NodeId,
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Forward {
    pub batch: Batch,
}

/// One chunk of the leader's snapshot (Raft §7, fig. 13): `data` is the bytes
/// `offset .. offset + data.len()` of the snapshot's encoding ([`crate::Snapshot::encode`],
/// checksummed), `total_bytes` long; the last chunk ends at `total_bytes` ("done").
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct InstallSnapshot {
    pub term: u32,
    pub leader: NodeId,
    /// `lastIncludedIndex`: the snapshot replaces every entry up to here.
    pub last_index: u64,
    /// The ballot of that entry (its `round` is `lastIncludedTerm`; the whole ballot, so
    /// the follower's log store can tell whether it holds the same entry).
    pub last_ballot: Ballot,
    pub offset: u64,
    pub total_bytes: u64,
    pub data: bytes::Bytes,
    /// The leader's message number in its term (see [`Heartbeat::seq`]).
    pub seq: u64,
}

/// The follower's answer to a chunk: how much of snapshot `last_index` it holds.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct InstallSnapshotReply {
    pub term: u32,
    pub last_index: u64,
    /// The next byte it wants (the leader goes on from there); meaningless when `done`.
    pub next_offset: u64,
    /// The snapshot is installed (or the follower's commit index already covered it): its
    /// log matches the leader's up to `last_index`.
    pub done: bool,
    pub incarnation: u32,
    pub amnesic: bool,
}

/// An amnesic node asks for the term its peer is in (`repair.rs`); `incarnation` is the
/// asker's process life, echoed in the reply, so that an answer to an earlier life's
/// question never counts for this one.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct TermQuery {
    pub incarnation: u32,
}

/// The answer to a [`TermQuery`]: the responder's term when it answered.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct TermReply {
    pub term: u32,
    /// The asker's incarnation, as the query said.
    pub incarnation: u32,
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Message {
    RequestVote(RequestVote),
    RequestVoteReply(RequestVoteReply),
    AppendEntries(AppendEntries),
    AppendEntriesReply(AppendEntriesReply),
    Heartbeat(Heartbeat),
    HeartbeatReply(HeartbeatReply),
    TimeoutNow(TimeoutNow),
    Forward(Forward),
    InstallSnapshot(InstallSnapshot),
    InstallSnapshotReply(InstallSnapshotReply),
    TermQuery(TermQuery),
    TermReply(TermReply),
}

const K_REQUEST_VOTE: u8 = 1;
const K_REQUEST_VOTE_REPLY: u8 = 2;
const K_APPEND_ENTRIES: u8 = 3;
const K_APPEND_ENTRIES_REPLY: u8 = 4;
const K_HEARTBEAT: u8 = 5;
const K_HEARTBEAT_REPLY: u8 = 6;
const K_TIMEOUT_NOW: u8 = 7;
const K_FORWARD: u8 = 8;
const K_INSTALL_SNAPSHOT: u8 = 9;
const K_INSTALL_SNAPSHOT_REPLY: u8 = 10;
const K_TERM_QUERY: u8 = 11;
const K_TERM_REPLY: u8 = 12;

fn put_bool(e: &mut Encoder, b: bool) {
    e.put_u8(u8::from(b));
}

fn invalid(what: &'static str, detail: String) -> DecodeError {
    DecodeError::Invalid { what, detail }
}

impl WireMessage for Message {
    fn kind(&self) -> u8 {
        match self {
            Message::RequestVote(_) => K_REQUEST_VOTE,
            Message::RequestVoteReply(_) => K_REQUEST_VOTE_REPLY,
            Message::AppendEntries(_) => K_APPEND_ENTRIES,
            Message::AppendEntriesReply(_) => K_APPEND_ENTRIES_REPLY,
            Message::Heartbeat(_) => K_HEARTBEAT,
            Message::HeartbeatReply(_) => K_HEARTBEAT_REPLY,
            Message::TimeoutNow(_) => K_TIMEOUT_NOW,
            Message::Forward(_) => K_FORWARD,
            Message::InstallSnapshot(_) => K_INSTALL_SNAPSHOT,
            Message::InstallSnapshotReply(_) => K_INSTALL_SNAPSHOT_REPLY,
            Message::TermQuery(_) => K_TERM_QUERY,
            Message::TermReply(_) => K_TERM_REPLY,
        }
    }

    fn encode(&self, e: &mut Encoder) {
        match self {
            Message::RequestVote(m) => {
                e.put_u32(m.term);
                e.put_u32(m.candidate.0);
                e.put_u64(m.last_index);
                e.put_u32(m.last_term);
                put_bool(e, m.pre_vote);
                put_bool(e, m.transfer);
            }
            Message::RequestVoteReply(m) => {
                e.put_u32(m.term);
                put_bool(e, m.granted);
                put_bool(e, m.pre_vote);
            }
            Message::AppendEntries(m) => {
                e.put_u32(m.term);
                e.put_u32(m.leader.0);
                e.put_u64(m.prev_index);
                e.put_u32(m.prev_term);
                e.put_u64(m.leader_commit);
                e.put_u64(m.seq);
                e.put_u32(m.entries.len() as u32);
                for entry in &m.entries {
                    put_ballot(e, entry.ballot);
                    e.put_u32(entry.payload.len() as u32);
                    e.put_bytes(&entry.payload);
                }
            }
            Message::AppendEntriesReply(m) => {
                e.put_u32(m.term);
                put_bool(e, m.success);
                e.put_u64(m.match_index);
                e.put_u32(m.conflict_term);
                e.put_u64(m.conflict_index);
                e.put_u32(m.incarnation);
                put_bool(e, m.amnesic);
            }
            Message::Heartbeat(m) => {
                e.put_u32(m.term);
                e.put_u32(m.leader.0);
                e.put_u64(m.commit);
                e.put_u64(m.ctx);
                e.put_u64(m.seq);
            }
            Message::HeartbeatReply(m) => {
                e.put_u32(m.term);
                e.put_u64(m.ctx);
                e.put_u32(m.incarnation);
                put_bool(e, m.amnesic);
            }
            Message::TimeoutNow(m) => {
                e.put_u32(m.term);
                e.put_u32(m.leader.0);
            }
            Message::Forward(m) => put_batch(e, &m.batch),
            Message::InstallSnapshot(m) => {
                e.put_u32(m.term);
                e.put_u32(m.leader.0);
                e.put_u64(m.last_index);
                put_ballot(e, m.last_ballot);
                e.put_u64(m.offset);
                e.put_u64(m.total_bytes);
                e.put_u64(m.seq);
                e.put_u32(m.data.len() as u32);
                e.put_bytes(&m.data);
            }
            Message::InstallSnapshotReply(m) => {
                e.put_u32(m.term);
                e.put_u64(m.last_index);
                e.put_u64(m.next_offset);
                put_bool(e, m.done);
                e.put_u32(m.incarnation);
                put_bool(e, m.amnesic);
            }
            Message::TermQuery(m) => e.put_u32(m.incarnation),
            Message::TermReply(m) => {
                e.put_u32(m.term);
                e.put_u32(m.incarnation);
            }
        }
    }

    fn decode(kind: u8, body: bytes::Bytes) -> Result<Message, DecodeError> {
        let mut d = Decoder::new(body);
        let m = match kind {
            K_REQUEST_VOTE => Message::RequestVote(RequestVote {
                term: d.u32("request_vote.term")?,
                candidate: NodeId(d.u32("request_vote.candidate")?),
                last_index: d.u64("request_vote.last_index")?,
                last_term: d.u32("request_vote.last_term")?,
                pre_vote: get_bool(&mut d, "request_vote.pre_vote")?,
                transfer: get_bool(&mut d, "request_vote.transfer")?,
            }),
            K_REQUEST_VOTE_REPLY => Message::RequestVoteReply(RequestVoteReply {
                term: d.u32("vote_reply.term")?,
                granted: get_bool(&mut d, "vote_reply.granted")?,
                pre_vote: get_bool(&mut d, "vote_reply.pre_vote")?,
            }),
            K_APPEND_ENTRIES => Message::AppendEntries(get_append_entries(&mut d)?),
            K_APPEND_ENTRIES_REPLY => Message::AppendEntriesReply(AppendEntriesReply {
                term: d.u32("append_reply.term")?,
                success: get_bool(&mut d, "append_reply.success")?,
                match_index: d.u64("append_reply.match_index")?,
                conflict_term: d.u32("append_reply.conflict_term")?,
                conflict_index: d.u64("append_reply.conflict_index")?,
                incarnation: d.u32("append_reply.incarnation")?,
                amnesic: get_bool(&mut d, "append_reply.amnesic")?,
            }),
            K_HEARTBEAT => Message::Heartbeat(Heartbeat {
                term: d.u32("heartbeat.term")?,
                leader: NodeId(d.u32("heartbeat.leader")?),
                commit: d.u64("heartbeat.commit")?,
                ctx: d.u64("heartbeat.ctx")?,
                seq: d.u64("heartbeat.seq")?,
            }),
            K_HEARTBEAT_REPLY => Message::HeartbeatReply(HeartbeatReply {
                term: d.u32("heartbeat_reply.term")?,
                ctx: d.u64("heartbeat_reply.ctx")?,
                incarnation: d.u32("heartbeat_reply.incarnation")?,
                amnesic: get_bool(&mut d, "heartbeat_reply.amnesic")?,
            }),
            K_TIMEOUT_NOW => Message::TimeoutNow(TimeoutNow {
                term: d.u32("timeout_now.term")?,
                leader: NodeId(d.u32("timeout_now.leader")?),
            }),
            K_FORWARD => Message::Forward(Forward {
                batch: get_batch(&mut d)?,
            }),
            K_INSTALL_SNAPSHOT => Message::InstallSnapshot(get_install_snapshot(&mut d)?),
            K_INSTALL_SNAPSHOT_REPLY => Message::InstallSnapshotReply(InstallSnapshotReply {
                term: d.u32("install_reply.term")?,
                last_index: d.u64("install_reply.last_index")?,
                next_offset: d.u64("install_reply.next_offset")?,
                done: get_bool(&mut d, "install_reply.done")?,
                incarnation: d.u32("install_reply.incarnation")?,
                amnesic: get_bool(&mut d, "install_reply.amnesic")?,
            }),
            K_TERM_QUERY => Message::TermQuery(TermQuery {
                incarnation: d.u32("term_query.incarnation")?,
            }),
            K_TERM_REPLY => Message::TermReply(TermReply {
                term: d.u32("term_reply.term")?,
                incarnation: d.u32("term_reply.incarnation")?,
            }),
            k => return Err(DecodeError::UnknownKind(k)),
        };
        d.finish()?;
        Ok(m)
    }
}

/// Refuses a chunk that cannot be part of a snapshot: an empty snapshot (index 0, or no
/// bytes), a last entry newer than the leader, a snapshot larger than a follower accepts
/// ([`MAX_SNAPSHOT_BYTES`]), a chunk that runs past the end or is empty before it.
fn get_install_snapshot(d: &mut Decoder) -> Result<InstallSnapshot, DecodeError> {
    let term = d.u32("install.term")?;
    let leader = NodeId(d.u32("install.leader")?);
    let last_index = d.u64("install.last_index")?;
    let last_ballot = get_ballot(d)?;
    let offset = d.u64("install.offset")?;
    let total_bytes = d.u64("install.total_bytes")?;
    let seq = d.u64("install.seq")?;
    let len = d.u32("install.data.len")? as u64;
    if last_index == 0 {
        return Err(invalid(
            "install.last_index",
            "0: a snapshot covers at least entry 1".into(),
        ));
    }
    if last_ballot.round > term {
        return Err(invalid(
            "install.last_ballot",
            format!(
                "term {} is past the message's term {term}",
                last_ballot.round
            ),
        ));
    }
    if total_bytes == 0 || total_bytes > MAX_SNAPSHOT_BYTES {
        return Err(invalid(
            "install.total_bytes",
            format!("{total_bytes} bytes (a snapshot has 1 to {MAX_SNAPSHOT_BYTES})"),
        ));
    }
    match offset.checked_add(len) {
        Some(end) if end <= total_bytes && (len > 0 || offset == total_bytes) => {}
        _ => {
            return Err(invalid(
                "install.offset",
                format!("{offset} + {len} bytes does not fit a snapshot of {total_bytes}"),
            ));
        }
    }
    let data = d.bytes(len as usize, "install.data")?;
    Ok(InstallSnapshot {
        term,
        leader,
        last_index,
        last_ballot,
        offset,
        total_bytes,
        data,
        seq,
    })
}

fn get_append_entries(d: &mut Decoder) -> Result<AppendEntries, DecodeError> {
    let term = d.u32("append.term")?;
    let leader = NodeId(d.u32("append.leader")?);
    let prev_index = d.u64("append.prev_index")?;
    let prev_term = d.u32("append.prev_term")?;
    let leader_commit = d.u64("append.leader_commit")?;
    let seq = d.u64("append.seq")?;
    if prev_term > term {
        return Err(invalid(
            "append.prev_term",
            format!("{prev_term} is past the message's term {term}"),
        ));
    }
    let n = d.count("append.entries", APPEND_ENTRIES_MAX, BALLOT_BYTES + 4)?;
    if prev_index.checked_add(n as u64).is_none() {
        return Err(invalid(
            "append.prev_index",
            format!("{prev_index} + {n} entries overflows"),
        ));
    }
    let mut entries = Vec::with_capacity(n);
    let mut last_term = prev_term;
    for k in 0..n as u64 {
        let ballot = get_ballot(d)?;
        if ballot.round < last_term || ballot.round > term {
            return Err(invalid(
                "append.entry.term",
                format!(
                    "entry term {} after term {last_term} in a message of term {term} (terms \
                     of a log never go down, and no entry is newer than its leader)",
                    ballot.round
                ),
            ));
        }
        last_term = ballot.round;
        let len = d.u32("append.entry.len")? as usize;
        let payload = d.bytes(len, "append.entry.payload")?;
        EntryBody::decode(&payload)?;
        entries.push(Entry {
            index: prev_index + 1 + k,
            ballot,
            payload,
        });
    }
    Ok(AppendEntries {
        term,
        leader,
        prev_index,
        prev_term,
        entries,
        leader_commit,
        seq,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::replog::Membership;
    use crate::types::{Ballot, ValueId};
    use bytes::Bytes;

    fn all() -> Vec<Message> {
        let batch = Batch::single(
            ValueId {
                node: NodeId(2),
                seq: 7,
            },
            Bytes::from(vec![5u8; 3000]),
        );
        let b = |t| Ballot::new(t, NodeId(1), 0);
        vec![
            Message::RequestVote(RequestVote {
                term: 4,
                candidate: NodeId(1),
                last_index: 9,
                last_term: 3,
                pre_vote: true,
                transfer: false,
            }),
            Message::RequestVoteReply(RequestVoteReply {
                term: 4,
                granted: true,
                pre_vote: false,
            }),
            Message::AppendEntries(AppendEntries {
                term: 5,
                leader: NodeId(1),
                prev_index: 7,
                prev_term: 3,
                entries: vec![
                    EntryBody::Noop.entry(8, b(4)),
                    EntryBody::Values(batch.clone()).entry(9, b(5)),
                    EntryBody::Membership(Membership {
                        id: 10,
                        voters: vec![NodeId(1), NodeId(2)],
                        outgoing: vec![NodeId(0)],
                        learners: vec![NodeId(3)],
                    })
                    .entry(10, b(5)),
                ],
                leader_commit: 6,
                seq: 31,
            }),
            Message::AppendEntriesReply(AppendEntriesReply {
                term: 5,
                success: false,
                match_index: 7,
                conflict_term: 2,
                conflict_index: 4,
                incarnation: 3,
                amnesic: true,
            }),
            Message::Heartbeat(Heartbeat {
                term: 5,
                leader: NodeId(1),
                commit: 9,
                ctx: 12,
                seq: 32,
            }),
            Message::HeartbeatReply(HeartbeatReply {
                term: 5,
                ctx: 12,
                incarnation: 1,
                amnesic: false,
            }),
            Message::TimeoutNow(TimeoutNow {
                term: 5,
                leader: NodeId(1),
            }),
            Message::Forward(Forward { batch }),
            Message::InstallSnapshot(InstallSnapshot {
                term: 5,
                leader: NodeId(1),
                last_index: 40,
                last_ballot: b(4),
                offset: 10,
                total_bytes: 30,
                data: Bytes::from(vec![7u8; 20]),
                seq: 33,
            }),
            Message::InstallSnapshotReply(InstallSnapshotReply {
                term: 5,
                last_index: 40,
                next_offset: 30,
                done: true,
                incarnation: 2,
                amnesic: false,
            }),
            Message::TermQuery(TermQuery { incarnation: 3 }),
            Message::TermReply(TermReply {
                term: 9,
                incarnation: 3,
            }),
        ]
    }

    fn body(m: &Message) -> Bytes {
        let mut e = Encoder::new();
        m.encode(&mut e);
        e.to_bytes()
    }

    #[test]
    fn every_message_round_trips() {
        for m in all() {
            assert_eq!(Message::decode(m.kind(), body(&m)), Ok(m.clone()));
        }
    }

    #[test]
    fn every_malformed_message_decodes_to_an_error() {
        for m in all() {
            let body = body(&m);
            for cut in 0..body.len() {
                assert!(
                    Message::decode(m.kind(), body.slice(..cut)).is_err(),
                    "cut {cut} of {m:?}"
                );
            }
            let mut long = body.to_vec();
            long.push(0);
            assert!(Message::decode(m.kind(), Bytes::from(long)).is_err());
            // Every single byte flipped: an error or another message, never a panic.
            for at in 0..body.len().min(200) {
                let mut v = body.to_vec();
                v[at] ^= 0xa5;
                let _ = Message::decode(m.kind(), Bytes::from(v));
            }
        }
        assert_eq!(
            Message::decode(0, Bytes::new()),
            Err(DecodeError::UnknownKind(0))
        );
        let mut x: u64 = 0x9e37_79b9_7f4a_7c15;
        for kind in 0..=11u8 {
            for len in 0..300usize {
                let v: Vec<u8> = (0..len)
                    .map(|_| {
                        x ^= x << 13;
                        x ^= x >> 7;
                        x ^= x << 17;
                        x as u8
                    })
                    .collect();
                let _ = Message::decode(kind, Bytes::from(v));
            }
        }
    }

    #[test]
    fn entries_whose_terms_go_down_or_pass_the_leaders_are_refused() {
        let b = |t| Ballot::new(t, NodeId(1), 0);
        let append = |prev_term, terms: &[u32], term| {
            Message::AppendEntries(AppendEntries {
                term,
                leader: NodeId(1),
                prev_index: 3,
                prev_term,
                entries: terms
                    .iter()
                    .enumerate()
                    .map(|(k, &t)| EntryBody::Noop.entry(4 + k as u64, b(t)))
                    .collect(),
                leader_commit: 0,
                seq: 1,
            })
        };
        let decode = |m: Message| Message::decode(m.kind(), body(&m));
        assert!(decode(append(2, &[2, 3, 3], 3)).is_ok());
        assert!(decode(append(2, &[3, 2], 3)).is_err(), "a term goes down");
        assert!(decode(append(3, &[2], 3)).is_err(), "below prev_term");
        assert!(
            decode(append(2, &[4], 3)).is_err(),
            "past the leader's term"
        );
        assert!(
            decode(append(4, &[], 3)).is_err(),
            "prev_term past the term"
        );
        let bad_payload = Message::AppendEntries(AppendEntries {
            term: 1,
            leader: NodeId(1),
            prev_index: 0,
            prev_term: 0,
            entries: vec![Entry {
                index: 1,
                ballot: b(1),
                payload: Bytes::from_static(&[99]),
            }],
            leader_commit: 0,
            seq: 1,
        });
        assert!(decode(bad_payload).is_err(), "not an entry body");
    }

    #[test]
    fn install_snapshot_chunks_that_cannot_be_part_of_a_snapshot_are_refused() {
        let ok = InstallSnapshot {
            term: 5,
            leader: NodeId(1),
            last_index: 40,
            last_ballot: Ballot::new(4, NodeId(1), 0),
            offset: 0,
            total_bytes: 8,
            data: Bytes::from(vec![1u8; 8]),
            seq: 1,
        };
        let decode = |m: InstallSnapshot| {
            let m = Message::InstallSnapshot(m);
            Message::decode(m.kind(), body(&m))
        };
        assert!(decode(ok.clone()).is_ok());
        let bad = [
            (
                "index 0",
                InstallSnapshot {
                    last_index: 0,
                    ..ok.clone()
                },
            ),
            (
                "last term past the leader's",
                InstallSnapshot {
                    last_ballot: Ballot::new(6, NodeId(1), 0),
                    ..ok.clone()
                },
            ),
            (
                "no bytes",
                InstallSnapshot {
                    total_bytes: 0,
                    data: Bytes::new(),
                    ..ok.clone()
                },
            ),
            (
                "larger than a follower takes",
                InstallSnapshot {
                    total_bytes: MAX_SNAPSHOT_BYTES + 1,
                    ..ok.clone()
                },
            ),
            (
                "runs past the end",
                InstallSnapshot {
                    offset: 1,
                    ..ok.clone()
                },
            ),
            (
                "empty before the end",
                InstallSnapshot {
                    data: Bytes::new(),
                    ..ok.clone()
                },
            ),
            (
                "offset overflows",
                InstallSnapshot {
                    offset: u64::MAX,
                    ..ok.clone()
                },
            ),
        ];
        for (why, m) in bad {
            assert!(
                matches!(decode(m), Err(DecodeError::Invalid { .. })),
                "{why}"
            );
        }
    }

    #[test]
    fn a_large_payload_travels_as_its_own_chunk() {
        let m = all().swap_remove(2);
        let mut e = Encoder::new();
        m.encode(&mut e);
        let chunks = e.finish();
        assert!(chunks.len() >= 3, "{chunks:?}");
    }
}
