//! The records of the durable acceptor log and their checked framing.
//!
//! ```text
//! record = magic "ABL3" (u32 le) | body_len (u32 le) | crc32c (u32 le) | body
//! body   = kind (u8) | fields (wire codec: `wire::put_ballot`, `wire::put_decree`)
//! crc32c covers the segment number (u64 le, not stored), body_len's four bytes and the body
//! ```
//!
//! The segment number in the checksum (format 2) makes a record valid only in the segment
//! it was written for: a recycled segment file (a trimmed one renamed and written over)
//! still holds its earlier records after the new ones, and those fail the checksum instead
//! of passing for new records. Format 1 (magic "ABL1") had no segment number; a log in it
//! is refused with a message that says so. Format 3 ("ABL3") added `Commit`, which ends
//! every group commit: recovery replays only whole groups (see `seglog.rs`). A log of
//! format 2 has no commit markers, so all of it would read as one torn group: it is refused
//! too, with a message that says so.
//!
//! What an acceptor must not forget (seed 003 §4.2: `rnd`, `v-rnd`, `v-val`, `v-vid`) is
//! exactly what these records hold: `Promise` (rnd), `Accept` (v-rnd and v-val with its id,
//! the batch key). `Decided` and `Trim` only save work after a restart; `Checkpoint` opens
//! every segment, so older segments can be deleted without losing the promise or the trim
//! point. `Synced` opens a write once earlier writes are durable, so that recovery can tell
//! a garbled unsynced write (a torn tail, cut) from damage to durable bytes (refused).
//! `Commit` closes each write's group.

//!
//! The framing, segments and recovery are the segmented log's (`seglog.rs`); this module is
//! what the acceptor writes on it.

use super::seglog::{self, LogRecord};
pub use super::seglog::{BODY_MAX_BYTES, Framed, HEADER_BYTES};
use crate::codec::{Decoder, Encoder};
use crate::error::DecodeError;
use crate::types::{Ballot, Decree, Instance};
use crate::wire::{get_ballot, get_bool, get_decree, put_ballot, put_decree};
use bytes::Bytes;

pub const MAGIC: u32 = u32::from_le_bytes(*b"ABL3");
/// The magic of format 1 (no segment number in the checksum), recognised to refuse it.
pub const MAGIC_V1: u32 = u32::from_le_bytes(*b"ABL1");
/// The magic of format 2 (no commit markers), recognised to refuse it.
pub const MAGIC_V2: u32 = u32::from_le_bytes(*b"ABL2");
/// Every acceptor log magic, current and old (a log store refuses all of them).
pub const ACCEPTOR_MAGICS: [u32; 3] = [MAGIC, MAGIC_V2, MAGIC_V1];

#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Record {
    /// Opens every segment: the promise and the trim point when the segment began, and
    /// whether the file is a recycled one (its earlier contents may follow the records).
    Checkpoint {
        promised: Ballot,
        log_start: Instance,
        recycled: bool,
    },
    /// The acceptor promised this ballot (rnd).
    Promise(Ballot),
    /// The acceptor accepted (voted for) this decree at this ballot, or learned it decided.
    Accept {
        instance: Instance,
        ballot: Ballot,
        decided: bool,
        decree: Decree,
    },
    /// The acceptor saw the decision for an instance it holds.
    Decided(Instance),
    /// Everything below `log_start` was decided, covered by every learner's snapshot,
    /// and is forgotten.
    Trim { log_start: Instance },
    /// The first `upto` bytes of this segment were durable before this record was written
    /// (fdatasync'd with `sync = true`; written, so safe from a process crash, with
    /// `sync = false`). A crash can damage only bytes written after the last durable point,
    /// so a bad record below `upto` is corruption, and one above it a torn write.
    Synced { upto: u64 },
    /// Ends a group commit of `records` records: without it, recovery drops the group
    /// whole (see [`LogRecord::commit`]).
    Commit { records: u32 },
}

const KIND_CHECKPOINT: u8 = 1;
const KIND_PROMISE: u8 = 2;
const KIND_ACCEPT: u8 = 3;
const KIND_DECIDED: u8 = 4;
const KIND_TRIM: u8 = 5;
const KIND_SYNCED: u8 = 6;
const KIND_COMMIT: u8 = 7;

impl Record {
    /// The record's kind, for messages.
    pub fn kind_name(&self) -> &'static str {
        match self {
            Record::Checkpoint { .. } => "checkpoint",
            Record::Promise(_) => "promise",
            Record::Accept { .. } => "accept",
            Record::Decided(_) => "decided",
            Record::Trim { .. } => "trim",
            Record::Synced { .. } => "synced",
            Record::Commit { .. } => "commit",
        }
    }

    /// The framed record for segment `seg`, as chunks (large payloads shared, not copied),
    /// and its length.
    pub fn encode(&self, seg: u64) -> (Vec<Bytes>, usize) {
        let mut e = Encoder::new();
        match self {
            Record::Checkpoint {
                promised,
                log_start,
                recycled,
            } => {
                e.put_u8(KIND_CHECKPOINT);
                put_ballot(&mut e, *promised);
                e.put_u64(*log_start);
                e.put_u8(u8::from(*recycled));
            }
            Record::Promise(b) => {
                e.put_u8(KIND_PROMISE);
                put_ballot(&mut e, *b);
            }
            Record::Accept {
                instance,
                ballot,
                decided,
                decree,
            } => {
                e.put_u8(KIND_ACCEPT);
                e.put_u64(*instance);
                put_ballot(&mut e, *ballot);
                e.put_u8(u8::from(*decided));
                put_decree(&mut e, decree);
            }
            Record::Decided(i) => {
                e.put_u8(KIND_DECIDED);
                e.put_u64(*i);
            }
            Record::Trim { log_start } => {
                e.put_u8(KIND_TRIM);
                e.put_u64(*log_start);
            }
            Record::Synced { upto } => {
                e.put_u8(KIND_SYNCED);
                e.put_u64(*upto);
            }
            Record::Commit { records } => {
                e.put_u8(KIND_COMMIT);
                e.put_u32(*records);
            }
        }
        seglog::frame(e.finish(), seg, MAGIC)
    }

    /// Decodes a body that passed its checksum.
    pub fn decode(body: Bytes) -> Result<Record, DecodeError> {
        let mut d = Decoder::new(body);
        let rec = match d.u8("record.kind")? {
            KIND_CHECKPOINT => Record::Checkpoint {
                promised: get_ballot(&mut d)?,
                log_start: d.u64("checkpoint.log_start")?,
                recycled: get_bool(&mut d, "checkpoint.recycled")?,
            },
            KIND_PROMISE => Record::Promise(get_ballot(&mut d)?),
            KIND_ACCEPT => Record::Accept {
                instance: d.u64("accept.instance")?,
                ballot: get_ballot(&mut d)?,
                decided: get_bool(&mut d, "accept.decided")?,
                decree: get_decree(&mut d)?,
            },
            KIND_DECIDED => Record::Decided(d.u64("decided.instance")?),
            KIND_TRIM => Record::Trim {
                log_start: d.u64("trim.log_start")?,
            },
            KIND_SYNCED => Record::Synced {
                upto: d.u64("synced.upto")?,
            },
            KIND_COMMIT => Record::Commit {
                records: d.u32("commit.records")?,
            },
            k => {
                return Err(DecodeError::Invalid {
                    what: "record.kind",
                    detail: format!("{k} (expected 1 to 7)"),
                });
            }
        };
        d.finish()?;
        Ok(rec)
    }
}

impl LogRecord for Record {
    const MAGIC: u32 = MAGIC;
    fn encode(&self, seg: u64) -> (Vec<Bytes>, usize) {
        Record::encode(self, seg)
    }
    fn decode(body: Bytes) -> Result<Record, DecodeError> {
        Record::decode(body)
    }
    fn synced(upto: u64) -> Record {
        Record::Synced { upto }
    }
    fn synced_upto(&self) -> Option<u64> {
        match self {
            Record::Synced { upto } => Some(*upto),
            _ => None,
        }
    }
    fn opens_recycled(&self) -> bool {
        matches!(self, Record::Checkpoint { recycled: true, .. })
    }
    fn commit(records: u32) -> Record {
        Record::Commit { records }
    }
    fn commit_records(&self) -> Option<u32> {
        match self {
            Record::Commit { records } => Some(*records),
            _ => None,
        }
    }
    fn old_magic(word: u32) -> Option<&'static str> {
        match word {
            MAGIC_V1 => Some("a record of log format 1 (\"ABL1\")"),
            MAGIC_V2 => Some("a record of log format 2 (\"ABL2\")"),
            _ => None,
        }
    }
    fn refuse_file(head: &[u8]) -> Option<String> {
        let word = head.get(..4)?;
        let format = if word == MAGIC_V1.to_le_bytes() {
            1
        } else if word == MAGIC_V2.to_le_bytes() {
            2
        } else {
            return None;
        };
        Some(format!(
            "a log of format {format}, written by an earlier version of abcast; this version \
             writes format 3 and does not read it. Move the directory away (the acceptor then \
             starts empty, as a new or amnesic one)"
        ))
    }
}

/// Reads the framing of the record at `off` in `buf`, a file of segment `seg`, checking
/// magic, length and checksum.
pub fn frame_at(buf: &[u8], off: usize, seg: u64) -> Framed {
    seglog::frame_at::<Record>(buf, off, seg)
}

/// Whether a whole good record starts anywhere after `off`: tells a torn tail (nothing
/// after) from corruption in the middle of the log (something good after).
pub fn good_record_after(buf: &[u8], off: usize, seg: u64) -> Option<usize> {
    seglog::good_record_after::<Record>(buf, off, seg)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::types::{Batch, NodeId};

    fn flat(chunks: &[Bytes]) -> Vec<u8> {
        chunks.iter().flat_map(|c| c.iter().copied()).collect()
    }

    fn sample() -> Vec<Record> {
        let payload = Bytes::from(vec![7u8; 5000]);
        let batch = Batch::single(
            crate::types::ValueId {
                node: NodeId(2),
                seq: 9,
            },
            payload,
        );
        vec![
            Record::Checkpoint {
                promised: Ballot::new(3, NodeId(1), 0),
                log_start: 17,
                recycled: true,
            },
            Record::Promise(Ballot::new(4, NodeId(2), 0)),
            Record::Accept {
                instance: 18,
                ballot: Ballot::new(4, NodeId(2), 0),
                decided: false,
                decree: Decree::Values(batch),
            },
            Record::Decided(18),
            Record::Trim { log_start: 19 },
            Record::Synced { upto: 4096 },
            Record::Commit { records: 5 },
        ]
    }

    #[test]
    fn every_record_kind_round_trips() {
        let mut buf = Vec::new();
        for r in sample() {
            let (chunks, len) = r.encode(7);
            assert_eq!(flat(&chunks).len(), len);
            buf.extend(flat(&chunks));
        }
        let mut off = 0;
        let mut back = Vec::new();
        loop {
            match frame_at(&buf, off, 7) {
                Framed::Whole { body, next } => {
                    back.push(Record::decode(Bytes::copy_from_slice(&buf[body])).unwrap());
                    off = next;
                }
                Framed::End => break,
                Framed::Bad(why) => panic!("bad record at {off}: {why}"),
            }
        }
        assert_eq!(back, sample());
    }

    #[test]
    fn a_torn_or_flipped_record_is_bad_and_never_panics() {
        let (chunks, len) = sample()[2].encode(7);
        let whole = flat(&chunks);
        for cut in 0..len {
            assert!(matches!(
                frame_at(&whole[..cut], 0, 7),
                Framed::Bad(_) | Framed::End
            ));
        }
        for i in 0..len {
            let mut bad = whole.clone();
            bad[i] ^= 0x40;
            assert!(
                matches!(frame_at(&bad, 0, 7), Framed::Bad(_)),
                "flip at byte {i} went unnoticed"
            );
        }
    }

    #[test]
    fn a_good_record_after_a_bad_one_is_found() {
        let mut buf = Vec::new();
        for r in sample() {
            buf.extend(flat(&r.encode(7).0));
        }
        let second = match frame_at(&buf, 0, 7) {
            Framed::Whole { next, .. } => next,
            other => panic!("{other:?}"),
        };
        buf[2] ^= 1; // the first record's magic
        assert_eq!(good_record_after(&buf, 0, 7), Some(second));
        let tail_at = buf.len() - 3;
        assert_eq!(good_record_after(&buf, tail_at, 7), None);
    }

    #[test]
    fn a_record_is_valid_only_in_the_segment_it_was_written_for() {
        let (chunks, _) = sample()[2].encode(7);
        let buf = flat(&chunks);
        assert!(matches!(frame_at(&buf, 0, 7), Framed::Whole { .. }));
        assert!(
            matches!(frame_at(&buf, 0, 8), Framed::Bad(why) if why.contains("checksum")),
            "the earlier contents of a recycled segment must not pass"
        );
        let mut v1 = buf.clone();
        v1[..4].copy_from_slice(&MAGIC_V1.to_le_bytes());
        assert!(matches!(frame_at(&v1, 0, 7), Framed::Bad(why) if why.contains("format 1")));
    }
}
