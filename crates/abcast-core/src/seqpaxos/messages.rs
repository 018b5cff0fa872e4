//! Sequence Paxos and Ballot Leader Election messages, and their wire codec.
//!
//! | message | from → to | seed 001 |
//! | --- | --- | --- |
//! | `HeartbeatRequest` / `HeartbeatReply` | everybody ↔ everybody | appendix A lines 20, 22-24 (`quorum_connected` added: OmniPaxos EuroSys'23) |
//! | `Prepare` | leader → follower | appendix B, General line 26 |
//! | `Promise` | follower → leader | Acceptor line 6 (`log_len` and `amnesic` added, below) |
//! | `AcceptSync` | leader → follower | Leader (1) line 27, Leader (2) line 3 (`from` generalises the §4.4.3 max AcceptSync) |
//! | `Accept` | leader → follower | Leader (1) line 7, batched per follower per flush (§4.4.3) |
//! | `Accepted` | follower → leader | Acceptor lines 12, 16 (the latest one per flush, §7.1) |
//! | `Decide` | leader → follower | Leader (2) line 11 (only the latest, §4.4.3) |
//! | `Forward` | proposer → leader | §4.4.1 "forward the proposal to the leader" |
//! | `PrepareReq` | follower → leader | not in the thesis: OmniPaxos' re-synchronisation after a dropped session (§2.1 FIFO links hold only within one) |
//! | `Nack` | follower → stale leader | not in the thesis: a leader whose ballot was overtaken learns it and steps down |
//! | `ReadProbe` / `ReadAck` | leader ↔ follower | the read-index barrier's round of confirmations |
//! | `PromiseQuery` / `PromiseReply` | amnesic node ↔ everybody | not in the thesis (crash-stop): an amnesic restart recovers a promise |
//! | `StopSigned` | a node past `SS_i` → a node that may not know it | §2.4.3: `SS_i` names `c_{i+1}`; the §4.4 `ReconfigurationInit` |
//! | `StopSignQuery` | a node that heard a later configuration → its sender | not in the thesis: how a node learns of `SS_i` it missed |
//! | `FetchReq` / `FetchResp` | fetcher ↔ any node with the decided entries | §4.4 "pull final sequences" (segments in parallel); `FetchResp` unasked is §4.4's eager transfer |
//! | `FetchAck` | fetcher → pusher, notifier | how far the fetcher holds the decided log (eager pacing, stops notices) |
//! | `SnapshotOffer` | a node asked for decided entries it compacted → the asker | not in the thesis (no compaction there): OmniPaxos sends its snapshot in `AcceptSync` (`SnapshotType`); here the node says "my snapshot up to `upto` replaces them", and the asker pulls it |
//! | `SnapshotFetch` / `SnapshotChunk` | the asker ↔ the offerer | the chunked transfer every protocol shares (`snapshot_transfer.rs`), chunks of at most `max_message_bytes` |
//!
//! Every message of Sequence Paxos carries the configuration id it belongs to (§2.4.3: a
//! process runs one replica per configuration); heartbeats carry theirs inside the ballot's
//! configuration field of the reply.

use crate::codec::{Decoder, Encoder, WireMessage};
use crate::config::Configuration;
use crate::error::DecodeError;
use crate::replog::{get_configuration, put_configuration};
use crate::snapshot_transfer::{SnapshotChunk, SnapshotFetch};
use crate::storage::Entry;
use crate::types::{Ballot, Batch};
use crate::wire::{get_ballot, get_batch, get_bool, put_ballot, put_batch};
use bytes::Bytes;

/// Entries one message may carry, at most (a bound for the decoder; senders cut by bytes
/// long before).
pub const MESSAGE_ENTRIES_MAX: usize = 1 << 20;

#[derive(Clone, Debug, PartialEq, Eq)]
pub struct HeartbeatRequest {
    pub config: u64,
    pub round: u64,
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub struct HeartbeatReply {
    pub config: u64,
    pub round: u64,
    /// The replier's own ballot (appendix A line 24: `n`).
    pub ballot: Ballot,
    /// The replier heard a majority in its last heartbeat round: only such a node may be
    /// elected (the quorum-connectivity rule).
    pub quorum_connected: bool,
    /// The leader the replier follows (its BLE's, zero for none): a leader deposed by a
    /// higher ballot it cannot hear leads again only if no quorum-connected node follows
    /// that ballot (`ble.rs`, `check_leader`). Not in appendix A.
    pub leader: Ballot,
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Prepare {
    pub config: u64,
    pub n: Ballot,
    /// The leader's decided length `l_d`.
    pub ld: u64,
    /// The leader's accepted round `n_a`.
    pub n_a: Ballot,
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Promise {
    pub config: u64,
    pub n: Ballot,
    /// The follower's accepted round `n'` (`n_a`).
    pub n_a: Ballot,
    /// The follower's decided length `ld_a`.
    pub ld: u64,
    /// The follower's whole log length. Not in the thesis: with it, two promises of the same
    /// `n_a` and `log_len` are known to hold the same log (both are prefixes of the
    /// sequence of `n_a`'s leader), which is what the max AcceptSync needs (§4.4.3, the
    /// empty-suffix corner case: see `leader.rs::sync_from`).
    pub log_len: u64,
    /// `SUFFIX(v_a, ld)` for the leader's `ld` when `n_a >= na_L`, else empty (Acceptor
    /// line 5); its first entry is `ld + 1`.
    pub suffix: Vec<Entry>,
    /// The follower restarted without its state: its promise does not count toward the
    /// prepare majority, nor its `Accepted` toward a chosen index (it forgot what it
    /// promised and accepted before).
    pub amnesic: bool,
}

#[derive(Clone, Debug, PartialEq, Eq)]
/// The body of both `Accept` and `AcceptSync`. In an `Accept`, a follower appends the
/// entries when they continue its log and asks to be re-synchronised when they leave a gap
/// (a lost message). In an `AcceptSync`, the follower's log is replaced from entry `from` on
/// by `entries` (Acceptor line 10: `v_a ← PREFIX(v_a, ld) ++ suffix`, with `from = ld + 1`;
/// a follower whose log is already the leader's up to `from - 1` gets only what follows,
/// §4.4.3), and `decided` lets it decide at once (Leader (2) line 5).
pub struct Accept {
    pub config: u64,
    pub n: Ballot,
    /// The index of `entries[0]`.
    pub from: u64,
    pub entries: Vec<Entry>,
    /// The chosen length, piggy-backed (what Raft does with its commit index; seed 001
    /// §5.5.1 names the separate Decide as the cost Raft avoids).
    pub decided: u64,
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Accepted {
    pub config: u64,
    pub n: Ballot,
    /// `|v_a|`: the follower's log length in round `n`.
    pub la: u64,
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Decide {
    pub config: u64,
    pub n: Ballot,
    pub ld: u64,
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Nack {
    pub config: u64,
    /// The ballot the follower promised, higher than the one it refused.
    pub promised: Ballot,
}

/// `SS_i` is decided: the configuration `config` (`c_i`) ended with the stop-sign at
/// `index`, and `next` (`c_{i+1}`, id `config + 1`) continues the log after it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct StopSigned {
    pub config: u64,
    pub index: u64,
    pub next: Configuration,
}

/// Asks for the decided entries `[from, to)` (a segment of the final sequence, §4.4 pull).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct FetchReq {
    /// The configuration whose stop-sign the fetcher is after (informational).
    pub config: u64,
    pub from: u64,
    pub to: u64,
}

/// Decided entries from `from` on (possibly fewer than asked: bounded by
/// `max_message_bytes`; none if the sender has not decided them), and the sender's decided
/// length.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct FetchResp {
    pub config: u64,
    pub from: u64,
    pub entries: Vec<Entry>,
    pub decided: u64,
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Message {
    HeartbeatRequest(HeartbeatRequest),
    HeartbeatReply(HeartbeatReply),
    Prepare(Prepare),
    Promise(Promise),
    AcceptSync(Accept),
    Accept(Accept),
    Accepted(Accepted),
    Decide(Decide),
    Forward(Batch),
    PrepareReq {
        config: u64,
    },
    Nack(Nack),
    ReadProbe {
        config: u64,
        n: Ballot,
        round: u64,
    },
    ReadAck {
        config: u64,
        n: Ballot,
        round: u64,
    },
    /// An amnesic node asks what the others promised (see `follower.rs::recover_promise`);
    /// `incarnation` is the asker's life, echoed in the reply, so an answer to an earlier
    /// life's question never counts for this one.
    PromiseQuery {
        config: u64,
        incarnation: u32,
    },
    PromiseReply {
        config: u64,
        promised: Ballot,
        incarnation: u32,
    },
    StopSigned(StopSigned),
    /// "I am in configuration `config`: what ended it?" (answered with `StopSigned`).
    StopSignQuery {
        config: u64,
    },
    FetchReq(FetchReq),
    FetchResp(FetchResp),
    /// The sender holds the decided log up to `upto`.
    FetchAck {
        config: u64,
        upto: u64,
    },
    /// The sender compacted the decided entries asked of it: its snapshot up to `upto`
    /// (at least 1) replaces them; the receiver fetches it (`SnapshotFetch`) if it is
    /// behind it. Sent in place of a `FetchResp`, an `AcceptSync` or an `Accept` whose
    /// entries start below the sender's log.
    SnapshotOffer {
        config: u64,
        upto: u64,
    },
    SnapshotFetch(SnapshotFetch),
    SnapshotChunk(SnapshotChunk),
}

const K_HB_REQUEST: u8 = 1;
const K_HB_REPLY: u8 = 2;
const K_PREPARE: u8 = 3;
const K_PROMISE: u8 = 4;
const K_ACCEPT_SYNC: u8 = 5;
const K_ACCEPT: u8 = 6;
const K_ACCEPTED: u8 = 7;
const K_DECIDE: u8 = 8;
const K_FORWARD: u8 = 9;
const K_PREPARE_REQ: u8 = 10;
const K_NACK: u8 = 11;
const K_READ_PROBE: u8 = 12;
const K_READ_ACK: u8 = 13;
const K_PROMISE_QUERY: u8 = 14;
const K_PROMISE_REPLY: u8 = 15;
const K_STOP_SIGNED: u8 = 16;
const K_STOP_SIGN_QUERY: u8 = 17;
const K_FETCH_REQ: u8 = 18;
const K_FETCH_RESP: u8 = 19;
const K_FETCH_ACK: u8 = 20;
const K_SNAPSHOT_OFFER: u8 = 21;
const K_SNAPSHOT_FETCH: u8 = 22;
const K_SNAPSHOT_CHUNK: u8 = 23;

/// Entries on the wire: `count u32 | (index u64 | ballot | len u32 | payload)*`. Payloads
/// stay shared chunks (the encoder keeps large ones apart, the decoder slices).
pub fn put_entries(e: &mut Encoder, entries: &[Entry]) {
    e.put_u32(entries.len() as u32);
    for x in entries {
        e.put_u64(x.index);
        put_ballot(e, x.ballot);
        e.put_u32(x.payload.len() as u32);
        e.put_bytes(&x.payload);
    }
}

/// Reads [`put_entries`]'s bytes: consecutive indexes from the first, each with a payload.
pub fn get_entries(d: &mut Decoder) -> Result<Vec<Entry>, DecodeError> {
    let n = d.count("entries", MESSAGE_ENTRIES_MAX, 8 + 12 + 4)?;
    let mut v: Vec<Entry> = Vec::with_capacity(n);
    for _ in 0..n {
        let index = d.u64("entry.index")?;
        let ballot = get_ballot(d)?;
        let len = d.u32("entry.len")? as usize;
        let payload: Bytes = d.bytes(len, "entry.payload")?;
        if index == 0 {
            return Err(DecodeError::Invalid {
                what: "entry.index",
                detail: "entries are numbered from 1".into(),
            });
        }
        if let Some(prev) = v.last()
            && prev.index.checked_add(1) != Some(index)
        {
            return Err(DecodeError::Invalid {
                what: "entry.index",
                detail: format!("entry {index} after entry {}", prev.index),
            });
        }
        v.push(Entry {
            index,
            ballot,
            payload,
        });
    }
    Ok(v)
}

/// `entries` start at `from` (or are empty).
fn check_from(from: u64, entries: &[Entry], what: &'static str) -> Result<(), DecodeError> {
    match entries.first() {
        Some(e) if e.index != from => Err(DecodeError::Invalid {
            what,
            detail: format!("entries start at {} where the message says {from}", e.index),
        }),
        _ if from == 0 => Err(DecodeError::Invalid {
            what,
            detail: "entries are numbered from 1".into(),
        }),
        _ => Ok(()),
    }
}

impl Message {
    /// The configuration the message belongs to (`None`: a forwarded proposal, which any
    /// configuration takes).
    pub fn config(&self) -> Option<u64> {
        match self {
            Message::HeartbeatRequest(m) => Some(m.config),
            Message::HeartbeatReply(m) => Some(m.config),
            Message::Prepare(m) => Some(m.config),
            Message::Promise(m) => Some(m.config),
            Message::AcceptSync(m) => Some(m.config),
            Message::Accept(m) => Some(m.config),
            Message::Accepted(m) => Some(m.config),
            Message::Decide(m) => Some(m.config),
            Message::Forward(_) => None,
            Message::PrepareReq { config } => Some(*config),
            Message::Nack(m) => Some(m.config),
            Message::ReadProbe { config, .. } | Message::ReadAck { config, .. } => Some(*config),
            Message::PromiseQuery { config, .. } | Message::PromiseReply { config, .. } => {
                Some(*config)
            }
            Message::StopSigned(m) => Some(m.config),
            Message::StopSignQuery { config } | Message::FetchAck { config, .. } => Some(*config),
            Message::FetchReq(m) => Some(m.config),
            Message::FetchResp(m) => Some(m.config),
            Message::SnapshotOffer { config, .. } => Some(*config),
            Message::SnapshotFetch(_) | Message::SnapshotChunk(_) => None,
        }
    }
}

impl WireMessage for Message {
    /// Ballot Leader Election's heartbeats are a component of their own (appendix A): they
    /// carry a round number, a ballot and the quorum-connected flag, none of which depends
    /// on Sequence Paxos' messages around them, and a heartbeat late behind Accept data
    /// counts as a lost peer (a 5-node leader under a million values in flight lost its
    /// leadership every few hundred milliseconds).
    fn urgent(&self) -> bool {
        matches!(
            self,
            Message::HeartbeatRequest(_) | Message::HeartbeatReply(_)
        )
    }

    fn kind(&self) -> u8 {
        match self {
            Message::HeartbeatRequest(_) => K_HB_REQUEST,
            Message::HeartbeatReply(_) => K_HB_REPLY,
            Message::Prepare(_) => K_PREPARE,
            Message::Promise(_) => K_PROMISE,
            Message::AcceptSync(_) => K_ACCEPT_SYNC,
            Message::Accept(_) => K_ACCEPT,
            Message::Accepted(_) => K_ACCEPTED,
            Message::Decide(_) => K_DECIDE,
            Message::Forward(_) => K_FORWARD,
            Message::PrepareReq { .. } => K_PREPARE_REQ,
            Message::Nack(_) => K_NACK,
            Message::ReadProbe { .. } => K_READ_PROBE,
            Message::ReadAck { .. } => K_READ_ACK,
            Message::PromiseQuery { .. } => K_PROMISE_QUERY,
            Message::PromiseReply { .. } => K_PROMISE_REPLY,
            Message::StopSigned(_) => K_STOP_SIGNED,
            Message::StopSignQuery { .. } => K_STOP_SIGN_QUERY,
            Message::FetchReq(_) => K_FETCH_REQ,
            Message::FetchResp(_) => K_FETCH_RESP,
            Message::FetchAck { .. } => K_FETCH_ACK,
            Message::SnapshotOffer { .. } => K_SNAPSHOT_OFFER,
            Message::SnapshotFetch(_) => K_SNAPSHOT_FETCH,
            Message::SnapshotChunk(_) => K_SNAPSHOT_CHUNK,
        }
    }

    fn encode(&self, e: &mut Encoder) {
        match self {
            Message::HeartbeatRequest(m) => {
                e.put_u64(m.config);
                e.put_u64(m.round);
            }
            Message::HeartbeatReply(m) => {
                e.put_u64(m.config);
                e.put_u64(m.round);
                put_ballot(e, m.ballot);
                e.put_u8(u8::from(m.quorum_connected));
                put_ballot(e, m.leader);
            }
            Message::Prepare(m) => {
                e.put_u64(m.config);
                put_ballot(e, m.n);
                e.put_u64(m.ld);
                put_ballot(e, m.n_a);
            }
            Message::Promise(m) => {
                e.put_u64(m.config);
                put_ballot(e, m.n);
                put_ballot(e, m.n_a);
                e.put_u64(m.ld);
                e.put_u64(m.log_len);
                e.put_u8(u8::from(m.amnesic));
                put_entries(e, &m.suffix);
            }
            Message::AcceptSync(m) | Message::Accept(m) => {
                e.put_u64(m.config);
                put_ballot(e, m.n);
                e.put_u64(m.from);
                e.put_u64(m.decided);
                put_entries(e, &m.entries);
            }
            Message::Accepted(m) => {
                e.put_u64(m.config);
                put_ballot(e, m.n);
                e.put_u64(m.la);
            }
            Message::Decide(m) => {
                e.put_u64(m.config);
                put_ballot(e, m.n);
                e.put_u64(m.ld);
            }
            Message::Forward(b) => put_batch(e, b),
            Message::PrepareReq { config } => e.put_u64(*config),
            Message::Nack(m) => {
                e.put_u64(m.config);
                put_ballot(e, m.promised);
            }
            Message::ReadProbe { config, n, round } | Message::ReadAck { config, n, round } => {
                e.put_u64(*config);
                put_ballot(e, *n);
                e.put_u64(*round);
            }
            Message::PromiseQuery {
                config,
                incarnation,
            } => {
                e.put_u64(*config);
                e.put_u32(*incarnation);
            }
            Message::PromiseReply {
                config,
                promised,
                incarnation,
            } => {
                e.put_u64(*config);
                put_ballot(e, *promised);
                e.put_u32(*incarnation);
            }
            Message::StopSigned(m) => {
                e.put_u64(m.config);
                e.put_u64(m.index);
                put_configuration(e, &m.next);
            }
            Message::StopSignQuery { config } => e.put_u64(*config),
            Message::FetchReq(m) => {
                e.put_u64(m.config);
                e.put_u64(m.from);
                e.put_u64(m.to);
            }
            Message::FetchResp(m) => {
                e.put_u64(m.config);
                e.put_u64(m.from);
                e.put_u64(m.decided);
                put_entries(e, &m.entries);
            }
            Message::FetchAck { config, upto } => {
                e.put_u64(*config);
                e.put_u64(*upto);
            }
            Message::SnapshotOffer { config, upto } => {
                e.put_u64(*config);
                e.put_u64(*upto);
            }
            Message::SnapshotFetch(m) => m.encode(e),
            Message::SnapshotChunk(m) => m.encode(e),
        }
    }

    fn decode(kind: u8, body: Bytes) -> Result<Message, DecodeError> {
        let mut d = Decoder::new(body);
        let m = match kind {
            K_HB_REQUEST => Message::HeartbeatRequest(HeartbeatRequest {
                config: d.u64("heartbeat.config")?,
                round: d.u64("heartbeat.round")?,
            }),
            K_HB_REPLY => Message::HeartbeatReply(HeartbeatReply {
                config: d.u64("heartbeat_reply.config")?,
                round: d.u64("heartbeat_reply.round")?,
                ballot: get_ballot(&mut d)?,
                quorum_connected: get_bool(&mut d, "heartbeat_reply.quorum_connected")?,
                leader: get_ballot(&mut d)?,
            }),
            K_PREPARE => Message::Prepare(Prepare {
                config: d.u64("prepare.config")?,
                n: get_ballot(&mut d)?,
                ld: d.u64("prepare.ld")?,
                n_a: get_ballot(&mut d)?,
            }),
            K_PROMISE => {
                let config = d.u64("promise.config")?;
                let n = get_ballot(&mut d)?;
                let n_a = get_ballot(&mut d)?;
                let ld = d.u64("promise.ld")?;
                let log_len = d.u64("promise.log_len")?;
                let amnesic = get_bool(&mut d, "promise.amnesic")?;
                let suffix = get_entries(&mut d)?;
                if let Some(last) = suffix.last()
                    && last.index > log_len
                {
                    return Err(DecodeError::Invalid {
                        what: "promise.suffix",
                        detail: format!("entry {} past the log length {log_len}", last.index),
                    });
                }
                Message::Promise(Promise {
                    config,
                    n,
                    n_a,
                    ld,
                    log_len,
                    suffix,
                    amnesic,
                })
            }
            K_ACCEPT_SYNC | K_ACCEPT => {
                let config = d.u64("accept.config")?;
                let n = get_ballot(&mut d)?;
                let from = d.u64("accept.from")?;
                let decided = d.u64("accept.decided")?;
                let entries = get_entries(&mut d)?;
                check_from(from, &entries, "accept.from")?;
                let m = Accept {
                    config,
                    n,
                    from,
                    entries,
                    decided,
                };
                if kind == K_ACCEPT_SYNC {
                    Message::AcceptSync(m)
                } else {
                    Message::Accept(m)
                }
            }
            K_ACCEPTED => Message::Accepted(Accepted {
                config: d.u64("accepted.config")?,
                n: get_ballot(&mut d)?,
                la: d.u64("accepted.la")?,
            }),
            K_DECIDE => Message::Decide(Decide {
                config: d.u64("decide.config")?,
                n: get_ballot(&mut d)?,
                ld: d.u64("decide.ld")?,
            }),
            K_FORWARD => Message::Forward(get_batch(&mut d)?),
            K_PREPARE_REQ => Message::PrepareReq {
                config: d.u64("prepare_req.config")?,
            },
            K_NACK => Message::Nack(Nack {
                config: d.u64("nack.config")?,
                promised: get_ballot(&mut d)?,
            }),
            K_READ_PROBE | K_READ_ACK => {
                let config = d.u64("read.config")?;
                let n = get_ballot(&mut d)?;
                let round = d.u64("read.round")?;
                if kind == K_READ_PROBE {
                    Message::ReadProbe { config, n, round }
                } else {
                    Message::ReadAck { config, n, round }
                }
            }
            K_PROMISE_QUERY => Message::PromiseQuery {
                config: d.u64("promise_query.config")?,
                incarnation: d.u32("promise_query.incarnation")?,
            },
            K_PROMISE_REPLY => Message::PromiseReply {
                config: d.u64("promise_reply.config")?,
                promised: get_ballot(&mut d)?,
                incarnation: d.u32("promise_reply.incarnation")?,
            },
            K_STOP_SIGNED => {
                let config = d.u64("stop_signed.config")?;
                let index = d.u64("stop_signed.index")?;
                let next = get_configuration(&mut d)?;
                if index == 0 {
                    return Err(DecodeError::Invalid {
                        what: "stop_signed.index",
                        detail: "entries are numbered from 1".into(),
                    });
                }
                if config.checked_add(1) != Some(next.id) {
                    return Err(DecodeError::Invalid {
                        what: "stop_signed.next",
                        detail: format!("configuration {} does not follow {config}", next.id),
                    });
                }
                Message::StopSigned(StopSigned {
                    config,
                    index,
                    next,
                })
            }
            K_STOP_SIGN_QUERY => Message::StopSignQuery {
                config: d.u64("stop_sign_query.config")?,
            },
            K_FETCH_REQ => {
                let config = d.u64("fetch_req.config")?;
                let from = d.u64("fetch_req.from")?;
                let to = d.u64("fetch_req.to")?;
                if from == 0 || to <= from {
                    return Err(DecodeError::Invalid {
                        what: "fetch_req.range",
                        detail: format!("[{from}, {to}) is no range of entries"),
                    });
                }
                Message::FetchReq(FetchReq { config, from, to })
            }
            K_FETCH_RESP => {
                let config = d.u64("fetch_resp.config")?;
                let from = d.u64("fetch_resp.from")?;
                let decided = d.u64("fetch_resp.decided")?;
                let entries = get_entries(&mut d)?;
                check_from(from, &entries, "fetch_resp.from")?;
                if let Some(last) = entries.last()
                    && last.index > decided
                {
                    return Err(DecodeError::Invalid {
                        what: "fetch_resp.entries",
                        detail: format!("entry {} past the decided length {decided}", last.index),
                    });
                }
                Message::FetchResp(FetchResp {
                    config,
                    from,
                    entries,
                    decided,
                })
            }
            K_FETCH_ACK => Message::FetchAck {
                config: d.u64("fetch_ack.config")?,
                upto: d.u64("fetch_ack.upto")?,
            },
            K_SNAPSHOT_OFFER => {
                let config = d.u64("snapshot_offer.config")?;
                let upto = d.u64("snapshot_offer.upto")?;
                if upto == 0 {
                    return Err(DecodeError::Invalid {
                        what: "snapshot_offer.upto",
                        detail: "0: a snapshot covers at least entry 1".into(),
                    });
                }
                Message::SnapshotOffer { config, upto }
            }
            K_SNAPSHOT_FETCH => Message::SnapshotFetch(SnapshotFetch::decode(&mut d)?),
            K_SNAPSHOT_CHUNK => Message::SnapshotChunk(SnapshotChunk::decode(&mut d)?),
            k => return Err(DecodeError::UnknownKind(k)),
        };
        d.finish()?;
        Ok(m)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::types::{NodeId, ValueId};

    fn entry(index: u64) -> Entry {
        Entry {
            index,
            ballot: Ballot::new(2, NodeId(1), 0),
            payload: Bytes::from(vec![index as u8; 3000]),
        }
    }

    pub(crate) fn samples() -> Vec<Message> {
        let n = Ballot::new(513, NodeId(2), 1);
        vec![
            Message::HeartbeatRequest(HeartbeatRequest {
                config: 1,
                round: 9,
            }),
            Message::HeartbeatReply(HeartbeatReply {
                config: 1,
                round: 9,
                ballot: n,
                quorum_connected: true,
                leader: n,
            }),
            Message::Prepare(Prepare {
                config: 1,
                n,
                ld: 4,
                n_a: Ballot::ZERO,
            }),
            Message::Promise(Promise {
                config: 1,
                n,
                n_a: n,
                ld: 3,
                log_len: 6,
                suffix: vec![entry(5), entry(6)],
                amnesic: false,
            }),
            Message::AcceptSync(Accept {
                config: 1,
                n,
                from: 7,
                entries: vec![entry(7)],
                decided: 5,
            }),
            Message::Accept(Accept {
                config: 1,
                n,
                from: 8,
                entries: vec![entry(8), entry(9)],
                decided: 7,
            }),
            Message::Accepted(Accepted {
                config: 1,
                n,
                la: 9,
            }),
            Message::Decide(Decide {
                config: 1,
                n,
                ld: 9,
            }),
            Message::Forward(Batch::single(
                ValueId {
                    node: NodeId(3),
                    seq: 4,
                },
                Bytes::from_static(b"v"),
            )),
            Message::PrepareReq { config: 1 },
            Message::Nack(Nack {
                config: 1,
                promised: n,
            }),
            Message::ReadProbe {
                config: 1,
                n,
                round: 3,
            },
            Message::ReadAck {
                config: 1,
                n,
                round: 3,
            },
            Message::PromiseQuery {
                config: 1,
                incarnation: 2,
            },
            Message::PromiseReply {
                config: 1,
                promised: n,
                incarnation: 2,
            },
            Message::StopSigned(StopSigned {
                config: 1,
                index: 9,
                next: Configuration {
                    id: 2,
                    members: vec![crate::config::Member {
                        id: NodeId(4),
                        roles: crate::config::Roles::PAL,
                    }],
                },
            }),
            Message::StopSignQuery { config: 1 },
            Message::FetchReq(FetchReq {
                config: 1,
                from: 3,
                to: 9,
            }),
            Message::FetchResp(FetchResp {
                config: 1,
                from: 5,
                entries: vec![entry(5), entry(6)],
                decided: 9,
            }),
            Message::FetchAck { config: 1, upto: 6 },
            Message::SnapshotOffer {
                config: 1,
                upto: 40,
            },
            Message::SnapshotFetch(SnapshotFetch {
                upto: 40,
                min_upto: 30,
                offset: 100,
            }),
            Message::SnapshotChunk(SnapshotChunk {
                upto: 40,
                total: 300,
                offset: 100,
                data: Bytes::from(vec![9u8; 200]),
            }),
        ]
    }

    #[test]
    fn snapshot_messages_that_cannot_be_are_refused() {
        let decode = |kind, f: &dyn Fn(&mut Encoder)| {
            let mut e = Encoder::new();
            f(&mut e);
            Message::decode(kind, e.to_bytes())
        };
        let offer0 = decode(K_SNAPSHOT_OFFER, &|e| {
            e.put_u64(1);
            e.put_u64(0);
        });
        assert!(
            matches!(offer0, Err(DecodeError::Invalid { .. })),
            "{offer0:?}"
        );
        // A chunk that runs past the snapshot's end.
        let past = decode(K_SNAPSHOT_CHUNK, &|e| {
            e.put_u64(40);
            e.put_u64(10);
            e.put_u64(8);
            e.put_u32(5);
            e.put_slice(&[0; 5]);
        });
        assert!(matches!(past, Err(DecodeError::Invalid { .. })), "{past:?}");
        // A chunk larger than any chunk.
        let big = decode(K_SNAPSHOT_CHUNK, &|e| {
            e.put_u64(40);
            e.put_u64(u64::MAX);
            e.put_u64(0);
            e.put_u32(u32::MAX);
        });
        assert!(matches!(big, Err(DecodeError::Invalid { .. })), "{big:?}");
    }

    #[test]
    fn every_message_round_trips() {
        for m in samples() {
            let mut e = Encoder::new();
            m.encode(&mut e);
            assert_eq!(Message::decode(m.kind(), e.to_bytes()), Ok(m));
        }
    }

    #[test]
    fn every_cut_and_every_flipped_kind_is_refused_without_a_panic() {
        for m in samples() {
            let mut e = Encoder::new();
            m.encode(&mut e);
            let bytes = e.to_bytes();
            for cut in 0..bytes.len() {
                assert!(
                    Message::decode(m.kind(), bytes.slice(..cut)).is_err(),
                    "{m:?} cut at {cut}"
                );
            }
            for k in 0..=255u8 {
                let _ = Message::decode(k, bytes.clone());
            }
        }
    }

    #[test]
    fn entries_out_of_sequence_or_off_their_start_are_refused() {
        let mut e = Encoder::new();
        e.put_u64(1);
        put_ballot(&mut e, Ballot::ZERO);
        e.put_u64(5);
        e.put_u64(0);
        put_entries(&mut e, &[entry(5), entry(7)]);
        assert!(Message::decode(K_ACCEPT, e.to_bytes()).is_err(), "a gap");
        let mut e = Encoder::new();
        e.put_u64(1);
        put_ballot(&mut e, Ballot::ZERO);
        e.put_u64(4);
        e.put_u64(0);
        put_entries(&mut e, &[entry(5)]);
        assert!(
            Message::decode(K_ACCEPT, e.to_bytes()).is_err(),
            "off start"
        );
    }
}
