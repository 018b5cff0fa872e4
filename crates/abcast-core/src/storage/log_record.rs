//! The records of the durable log store, on the segmented log (`seglog.rs`, which frames
//! them: magic "ABG2", length, crc32c salted with the segment number).
//!
//! ```text
//! body = kind (u8) | fields (u64 le, ballots as `wire::put_ballot`,
//!        bytes as len (u32 le) | bytes, optional bytes as flag (u8) | bytes)
//! ```
//!
//! Each record is one operation of [`super::LogStore`], replayed in order at recovery;
//! `Checkpoint` opens every segment with the whole hard state and the log's bounds, so any
//! old segment without a live entry or the current snapshot can be deleted (its other
//! records are superseded by the checkpoint of every later segment). An `Entry` record is
//! always written as an append: replaying it also cuts whatever followed its index.
//! `Commit` ends every group commit: recovery replays only whole groups (see `seglog.rs`).
//!
//! Format 2 ("ABG2") added `Commit`. A log of format 1 ("ABG1") has no commit markers, so
//! every record in it would read as part of a torn group: it is refused with a message
//! that says so, as the acceptor's format 1 is.

use super::log::{Entry, LogSnapshot, Meta};
use super::seglog::{self, LogRecord};
use crate::codec::{Decoder, Encoder};
use crate::error::DecodeError;
use crate::types::Ballot;
use crate::wire::{get_ballot, get_bool, put_ballot};
use bytes::Bytes;

pub const MAGIC: u32 = u32::from_le_bytes(*b"ABG2");
/// The magic of format 1 (no commit markers), recognised to refuse it.
pub const MAGIC_V1: u32 = u32::from_le_bytes(*b"ABG1");

#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) enum LogRec {
    /// Opens every segment: the state when it began (`meta.snapshot` is not in it: the
    /// snapshot's own record stays live), and whether the file is recycled.
    Checkpoint {
        recycled: bool,
        meta: Meta,
    },
    Promise(Ballot),
    AcceptedRound(Ballot),
    Decided(u64),
    Entry(Entry),
    Truncate {
        from: u64,
    },
    Trim {
        below: u64,
        prev_ballot: Ballot,
    },
    /// `keep_suffix`: the entries after the snapshot stayed (else every entry went).
    Snapshot {
        snapshot: LogSnapshot,
        keep_suffix: bool,
    },
    StopSign(Option<Bytes>),
    Synced {
        upto: u64,
    },
    /// Ends a group commit of `records` records (see [`LogRecord::commit`]).
    Commit {
        records: u32,
    },
}

const KIND_CHECKPOINT: u8 = 1;
const KIND_PROMISE: u8 = 2;
const KIND_ACCEPTED_ROUND: u8 = 3;
const KIND_DECIDED: u8 = 4;
const KIND_ENTRY: u8 = 5;
const KIND_TRUNCATE: u8 = 6;
const KIND_TRIM: u8 = 7;
const KIND_SNAPSHOT: u8 = 8;
const KIND_STOP_SIGN: u8 = 9;
const KIND_SYNCED: u8 = 10;
const KIND_COMMIT: u8 = 11;

fn put_blob(e: &mut Encoder, b: &Bytes) {
    e.put_u32(b.len() as u32);
    e.put_bytes(b);
}

fn get_blob(d: &mut Decoder, what: &'static str) -> Result<Bytes, DecodeError> {
    let n = d.u32(what)? as usize;
    d.bytes(n, what)
}

fn put_opt_blob(e: &mut Encoder, b: &Option<Bytes>) {
    match b {
        Some(b) => {
            e.put_u8(1);
            put_blob(e, b);
        }
        None => e.put_u8(0),
    }
}

fn get_opt_blob(d: &mut Decoder, what: &'static str) -> Result<Option<Bytes>, DecodeError> {
    Ok(if get_bool(d, what)? {
        Some(get_blob(d, what)?)
    } else {
        None
    })
}

impl LogRec {
    pub fn kind_name(&self) -> &'static str {
        match self {
            LogRec::Checkpoint { .. } => "checkpoint",
            LogRec::Promise(_) => "promise",
            LogRec::AcceptedRound(_) => "accepted round",
            LogRec::Decided(_) => "decided",
            LogRec::Entry(_) => "entry",
            LogRec::Truncate { .. } => "truncate",
            LogRec::Trim { .. } => "trim",
            LogRec::Snapshot { .. } => "snapshot",
            LogRec::StopSign(_) => "stop-sign",
            LogRec::Synced { .. } => "synced",
            LogRec::Commit { .. } => "commit",
        }
    }
}

impl LogRecord for LogRec {
    const MAGIC: u32 = MAGIC;

    fn encode(&self, seg: u64) -> (Vec<Bytes>, usize) {
        let mut e = Encoder::new();
        match self {
            LogRec::Checkpoint { recycled, meta } => {
                e.put_u8(KIND_CHECKPOINT);
                e.put_u8(u8::from(*recycled));
                put_ballot(&mut e, meta.promised);
                put_ballot(&mut e, meta.accepted_round);
                e.put_u64(meta.decided_idx);
                e.put_u64(meta.first_index);
                e.put_u64(meta.last_index);
                put_ballot(&mut e, meta.prev_ballot);
                put_opt_blob(&mut e, &meta.stop_sign);
            }
            LogRec::Promise(b) => {
                e.put_u8(KIND_PROMISE);
                put_ballot(&mut e, *b);
            }
            LogRec::AcceptedRound(b) => {
                e.put_u8(KIND_ACCEPTED_ROUND);
                put_ballot(&mut e, *b);
            }
            LogRec::Decided(i) => {
                e.put_u8(KIND_DECIDED);
                e.put_u64(*i);
            }
            LogRec::Entry(x) => {
                e.put_u8(KIND_ENTRY);
                e.put_u64(x.index);
                put_ballot(&mut e, x.ballot);
                put_blob(&mut e, &x.payload);
            }
            LogRec::Truncate { from } => {
                e.put_u8(KIND_TRUNCATE);
                e.put_u64(*from);
            }
            LogRec::Trim { below, prev_ballot } => {
                e.put_u8(KIND_TRIM);
                e.put_u64(*below);
                put_ballot(&mut e, *prev_ballot);
            }
            LogRec::Snapshot {
                snapshot,
                keep_suffix,
            } => {
                e.put_u8(KIND_SNAPSHOT);
                e.put_u8(u8::from(*keep_suffix));
                e.put_u64(snapshot.index);
                put_ballot(&mut e, snapshot.ballot);
                put_blob(&mut e, &snapshot.data);
            }
            LogRec::StopSign(s) => {
                e.put_u8(KIND_STOP_SIGN);
                put_opt_blob(&mut e, s);
            }
            LogRec::Synced { upto } => {
                e.put_u8(KIND_SYNCED);
                e.put_u64(*upto);
            }
            LogRec::Commit { records } => {
                e.put_u8(KIND_COMMIT);
                e.put_u32(*records);
            }
        }
        seglog::frame(e.finish(), seg, MAGIC)
    }

    fn decode(body: Bytes) -> Result<LogRec, DecodeError> {
        let mut d = Decoder::new(body);
        let rec = match d.u8("log record.kind")? {
            KIND_CHECKPOINT => {
                let recycled = get_bool(&mut d, "checkpoint.recycled")?;
                let meta = Meta {
                    promised: get_ballot(&mut d)?,
                    accepted_round: get_ballot(&mut d)?,
                    decided_idx: d.u64("checkpoint.decided_idx")?,
                    first_index: d.u64("checkpoint.first_index")?,
                    last_index: d.u64("checkpoint.last_index")?,
                    prev_ballot: get_ballot(&mut d)?,
                    stop_sign: get_opt_blob(&mut d, "checkpoint.stop_sign")?,
                    snapshot: None,
                };
                // `last_index` u64::MAX is no log's (its successor does not exist): refused
                // here, before any `last_index + 1` (found by the `durable_log_store` fuzz
                // target, an overflow).
                if meta.first_index == 0
                    || meta.last_index == u64::MAX
                    || meta.last_index + 1 < meta.first_index
                    || meta.decided_idx > meta.last_index
                {
                    return Err(DecodeError::Invalid {
                        what: "checkpoint",
                        detail: format!(
                            "bounds out of order: first {}, last {}, decided {}",
                            meta.first_index, meta.last_index, meta.decided_idx
                        ),
                    });
                }
                LogRec::Checkpoint { recycled, meta }
            }
            KIND_PROMISE => LogRec::Promise(get_ballot(&mut d)?),
            KIND_ACCEPTED_ROUND => LogRec::AcceptedRound(get_ballot(&mut d)?),
            KIND_DECIDED => LogRec::Decided(d.u64("decided.index")?),
            KIND_ENTRY => LogRec::Entry(Entry {
                index: d.u64("entry.index")?,
                ballot: get_ballot(&mut d)?,
                payload: get_blob(&mut d, "entry.payload")?,
            }),
            KIND_TRUNCATE => LogRec::Truncate {
                from: d.u64("truncate.from")?,
            },
            KIND_TRIM => LogRec::Trim {
                below: d.u64("trim.below")?,
                prev_ballot: get_ballot(&mut d)?,
            },
            KIND_SNAPSHOT => {
                let keep_suffix = get_bool(&mut d, "snapshot.keep_suffix")?;
                LogRec::Snapshot {
                    keep_suffix,
                    snapshot: LogSnapshot {
                        index: d.u64("snapshot.index")?,
                        ballot: get_ballot(&mut d)?,
                        data: get_blob(&mut d, "snapshot.data")?,
                    },
                }
            }
            KIND_STOP_SIGN => LogRec::StopSign(get_opt_blob(&mut d, "stop_sign")?),
            KIND_SYNCED => LogRec::Synced {
                upto: d.u64("synced.upto")?,
            },
            KIND_COMMIT => LogRec::Commit {
                records: d.u32("commit.records")?,
            },
            k => {
                return Err(DecodeError::Invalid {
                    what: "log record.kind",
                    detail: format!("{k} (expected 1 to 11)"),
                });
            }
        };
        d.finish()?;
        Ok(rec)
    }

    fn synced(upto: u64) -> LogRec {
        LogRec::Synced { upto }
    }

    fn synced_upto(&self) -> Option<u64> {
        match self {
            LogRec::Synced { upto } => Some(*upto),
            _ => None,
        }
    }

    fn opens_recycled(&self) -> bool {
        matches!(self, LogRec::Checkpoint { recycled: true, .. })
    }

    fn commit(records: u32) -> LogRec {
        LogRec::Commit { records }
    }

    fn commit_records(&self) -> Option<u32> {
        match self {
            LogRec::Commit { records } => Some(*records),
            _ => None,
        }
    }

    fn old_magic(word: u32) -> Option<&'static str> {
        (word == MAGIC_V1).then_some("a record of log store format 1 (\"ABG1\")")
    }

    fn refuse_file(head: &[u8]) -> Option<String> {
        let word = head.get(..4)?;
        if word == MAGIC_V1.to_le_bytes() {
            return Some(
                "a log store of format 1 (\"ABG1\"), written by an earlier version of abcast; \
                 this version writes format 2 (group commits end with a commit marker) and \
                 does not read it. Move the directory away and add the node back as a new, \
                 empty replica"
                    .to_string(),
            );
        }
        let acceptor = super::record::ACCEPTOR_MAGICS.map(u32::to_le_bytes);
        acceptor.iter().any(|m| word == m).then(|| {
            "an acceptor log (magic ABL*), not a log store's (ABG*): \
             is the storage directory shared by two kinds of protocol?"
                .to_string()
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::storage::log::tests::{ballot, entry};
    use crate::storage::seglog::{Framed, frame_at};

    fn sample() -> Vec<LogRec> {
        let mut big = entry(7, 2);
        big.payload = Bytes::from(vec![9u8; 5000]);
        vec![
            LogRec::Checkpoint {
                recycled: true,
                meta: Meta {
                    promised: ballot(3),
                    accepted_round: ballot(2),
                    decided_idx: 4,
                    first_index: 2,
                    last_index: 6,
                    prev_ballot: ballot(1),
                    stop_sign: Some(Bytes::from_static(b"ss")),
                    snapshot: None,
                },
            },
            LogRec::Promise(ballot(4)),
            LogRec::AcceptedRound(ballot(4)),
            LogRec::Decided(5),
            LogRec::Entry(big),
            LogRec::Truncate { from: 6 },
            LogRec::Trim {
                below: 3,
                prev_ballot: ballot(1),
            },
            LogRec::Snapshot {
                snapshot: LogSnapshot {
                    index: 4,
                    ballot: ballot(2),
                    data: Bytes::from_static(b"state"),
                },
                keep_suffix: true,
            },
            LogRec::StopSign(None),
            LogRec::Synced { upto: 4096 },
            LogRec::Commit { records: 9 },
        ]
    }

    #[test]
    fn every_log_record_kind_round_trips_and_a_damaged_one_never_panics() {
        for r in sample() {
            let (chunks, len) = r.encode(3);
            let buf: Vec<u8> = chunks.iter().flat_map(|c| c.iter().copied()).collect();
            assert_eq!(buf.len(), len);
            let Framed::Whole { body, .. } = frame_at::<LogRec>(&buf, 0, 3) else {
                panic!("{} does not frame", r.kind_name());
            };
            let back = LogRec::decode(Bytes::copy_from_slice(&buf[body.clone()]));
            assert_eq!(back.as_ref(), Ok(&r));
            // Any body, even one that passed a checksum by chance, decodes or errs.
            for cut in 0..body.len() {
                let _ = LogRec::decode(Bytes::copy_from_slice(&buf[body.start..body.start + cut]));
            }
            for i in body.clone() {
                let mut bad = buf[body.clone()].to_vec();
                bad[i - body.start] ^= 0xff;
                let _ = LogRec::decode(Bytes::from(bad));
            }
        }
    }
}
