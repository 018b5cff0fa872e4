//! Snapshot transfer between learners, in chunks (issue 4: "a learner that falls behind the
//! trim point installs a snapshot transferred from a peer, in chunks, then continues from
//! the log"). Protocol-agnostic: a protocol holds one [`SnapshotServer`] and one
//! [`SnapshotFetcher`] and wraps [`SnapshotFetch`] / [`SnapshotChunk`] in its own message
//! enum (U-Ring Paxos does; Raft's `InstallSnapshot` and Sequence Paxos will fit the same
//! shape).
//!
//! The seeds have no counterpart: seed 000 §5.2 names the missing piece ("learners have to
//! relearn from instance 1"), and URingPaxos leaves the transfer to the application.
//!
//! The exchange, pull-based so the learner paces it and a lost message costs one timeout:
//!
//! 1. The learner asks a peer whose reported snapshot covers what it needs:
//!    `SnapshotFetch { upto: 0, min_upto, offset: 0 }`.
//! 2. The peer *pins* its latest snapshot (encoded once, [`Snapshot::encode`], checksummed)
//!    and answers with the first chunk: `SnapshotChunk { upto, total, offset: 0, data }`.
//!    `upto = 0` means "none that covers `min_upto`".
//! 3. The learner appends the chunk and asks for the next offset of that same `upto`; the
//!    pin keeps the bytes stable while the peer goes on taking newer snapshots. A pin that
//!    is not read for [`PIN_IDLE_US`] is dropped; at most [`PINS_MAX`] live at once.
//! 4. When `offset + len == total`, the learner decodes the whole (checksum, lengths) and
//!    installs it. Every chunk is validated against the transfer in progress (peer, `upto`,
//!    `total`, offset, size bounds); a chunk that does not fit ends the transfer, which the
//!    protocol starts again later.
//!
//! Memory: the learner holds at most [`MAX_SNAPSHOT_BYTES`] of transfer buffer, the server
//! its latest snapshot (shared bytes, no copy) and at most [`PINS_MAX`] encodings.

use crate::codec::{Decoder, Encoder};
use crate::error::DecodeError;
use crate::protocol::Snapshot;
use crate::types::{Instance, Micros, NodeId};
use bytes::Bytes;

/// Bytes of snapshot per chunk: large enough that a transfer is a few round trips per
/// hundred MiB, small enough to share a connection with the ring's traffic.
pub const CHUNK_BYTES: usize = 1 << 20;
/// The largest snapshot a learner accepts from a peer (its whole encoding is buffered
/// before it is checked and installed).
pub const MAX_SNAPSHOT_BYTES: u64 = 1 << 30;
/// Snapshots a server keeps pinned for transfers in progress.
pub const PINS_MAX: usize = 2;
/// A pin nobody read for this long is dropped.
pub const PIN_IDLE_US: Micros = 30_000_000;

/// A learner asks a peer for part of a snapshot.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SnapshotFetch {
    /// The snapshot being transferred (its `upto`), or 0 to start with the peer's latest.
    pub upto: Instance,
    /// The snapshot must cover every instance up to here.
    pub min_upto: Instance,
    /// Byte offset into the snapshot's encoding.
    pub offset: u64,
}

/// Part of a snapshot's encoding, or (`upto == 0`) "no snapshot covering `min_upto`".
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SnapshotChunk {
    pub upto: Instance,
    /// Length of the whole encoding.
    pub total: u64,
    pub offset: u64,
    pub data: Bytes,
}

impl SnapshotFetch {
    pub fn encode(&self, e: &mut Encoder) {
        e.put_u64(self.upto);
        e.put_u64(self.min_upto);
        e.put_u64(self.offset);
    }
    pub fn decode(d: &mut Decoder) -> Result<SnapshotFetch, DecodeError> {
        Ok(SnapshotFetch {
            upto: d.u64("snapshot_fetch.upto")?,
            min_upto: d.u64("snapshot_fetch.min_upto")?,
            offset: d.u64("snapshot_fetch.offset")?,
        })
    }
}

impl SnapshotChunk {
    pub fn encode(&self, e: &mut Encoder) {
        e.put_u64(self.upto);
        e.put_u64(self.total);
        e.put_u64(self.offset);
        e.put_u32(self.data.len() as u32);
        e.put_bytes(&self.data);
    }
    pub fn decode(d: &mut Decoder) -> Result<SnapshotChunk, DecodeError> {
        let upto = d.u64("snapshot_chunk.upto")?;
        let total = d.u64("snapshot_chunk.total")?;
        let offset = d.u64("snapshot_chunk.offset")?;
        let len = d.u32("snapshot_chunk.len")? as usize;
        if len > CHUNK_BYTES {
            return Err(DecodeError::Invalid {
                what: "snapshot_chunk.len",
                detail: format!("{len} bytes, more than a chunk ({CHUNK_BYTES})"),
            });
        }
        if offset.saturating_add(len as u64) > total {
            return Err(DecodeError::Invalid {
                what: "snapshot_chunk.offset",
                detail: format!("{offset} + {len} bytes runs past the total {total}"),
            });
        }
        let data = d.bytes(len, "snapshot_chunk.data")?;
        Ok(SnapshotChunk {
            upto,
            total,
            offset,
            data,
        })
    }
}

#[derive(Debug)]
struct Pin {
    upto: Instance,
    bytes: Bytes,
    last_read_us: Micros,
}

/// The serving side: the learner's latest snapshot, and the encodings pinned for transfers.
#[derive(Debug, Default)]
pub struct SnapshotServer {
    latest: Option<Snapshot>,
    pins: Vec<Pin>,
    /// Chunks served since the node started.
    pub chunks_served: u64,
}

impl SnapshotServer {
    /// This learner took (or installed) a snapshot; it is what new transfers get.
    pub fn set_latest(&mut self, snap: &Snapshot) {
        debug_assert!(
            self.latest.as_ref().is_none_or(|l| l.upto <= snap.upto),
            "snapshots go forward"
        );
        self.latest = Some(snap.clone());
    }

    /// As [`SnapshotServer::set_latest`], for a protocol whose snapshots may differ at one
    /// `upto` (Multi-Ring Paxos: its `upto` is the merge position, which stays while the
    /// rings move on with skips): a pin of an earlier snapshot with the same `upto` is
    /// dropped, so a new transfer gets the newer one (a transfer in progress of the old one
    /// then fails its checks and starts over).
    pub fn replace_latest(&mut self, snap: &Snapshot) {
        let same = self.latest.as_ref().is_some_and(|l| l == snap);
        if !same {
            self.pins.retain(|p| p.upto != snap.upto);
        }
        self.set_latest(snap);
    }

    /// The latest snapshot, if any (its bytes shared).
    pub fn latest(&self) -> Option<Snapshot> {
        self.latest.clone()
    }

    /// The latest snapshot's `upto` (0: none).
    pub fn latest_upto(&self) -> Instance {
        self.latest.as_ref().map_or(0, |s| s.upto)
    }

    /// Answers one fetch. Never panics on a fetch that makes no sense (an offset past the
    /// end, a snapshot long gone): it answers "none", and the learner starts over.
    pub fn serve(&mut self, now: Micros, f: &SnapshotFetch) -> SnapshotChunk {
        self.serve_in_chunks_of(now, f, CHUNK_BYTES)
    }

    /// [`SnapshotServer::serve`] with chunks of at most `chunk_bytes` (at least 1, at most
    /// [`CHUNK_BYTES`]): for a protocol whose messages must stay below a bound of its own
    /// (Sequence Paxos' `max_message_bytes`).
    pub fn serve_in_chunks_of(
        &mut self,
        now: Micros,
        f: &SnapshotFetch,
        chunk_bytes: usize,
    ) -> SnapshotChunk {
        let chunk_bytes = chunk_bytes.clamp(1, CHUNK_BYTES);
        self.pins
            .retain(|p| now.saturating_sub(p.last_read_us) < PIN_IDLE_US);
        let none = SnapshotChunk {
            upto: 0,
            total: 0,
            offset: 0,
            data: Bytes::new(),
        };
        let want = if f.upto == 0 {
            match &self.latest {
                Some(s) if s.upto >= f.min_upto => s.upto,
                _ => return none,
            }
        } else {
            f.upto
        };
        if !self.pins.iter().any(|p| p.upto == want) {
            // Pin the latest if it is the one asked for; an older one is gone.
            let Some(latest) = self.latest.as_ref().filter(|s| s.upto == want) else {
                return none;
            };
            if self.pins.len() >= PINS_MAX {
                // Drop the least recently read pin: its learner starts over.
                if let Some(i) = (0..self.pins.len()).min_by_key(|&i| self.pins[i].last_read_us) {
                    self.pins.swap_remove(i);
                }
            }
            self.pins.push(Pin {
                upto: want,
                bytes: Bytes::from(latest.encode()),
                last_read_us: now,
            });
        }
        let Some(pin) = self.pins.iter_mut().find(|p| p.upto == want) else {
            return none;
        };
        pin.last_read_us = now;
        let total = pin.bytes.len() as u64;
        if f.offset > total {
            return none;
        }
        let start = f.offset as usize;
        let end = (start + chunk_bytes).min(pin.bytes.len());
        self.chunks_served += 1;
        SnapshotChunk {
            upto: want,
            total,
            offset: f.offset,
            data: pin.bytes.slice(start..end),
        }
    }
}

/// A transfer in progress at the learner.
#[derive(Debug)]
pub struct Transfer {
    pub peer: NodeId,
    /// 0 until the first chunk names the snapshot.
    pub upto: Instance,
    pub min_upto: Instance,
    pub total: u64,
    buf: Vec<u8>,
    pub last_progress_us: Micros,
    pub started_us: Micros,
}

/// What the learner does after a chunk.
#[derive(Debug, PartialEq, Eq)]
pub enum ChunkOutcome {
    /// Ask for the next part.
    Next(SnapshotFetch),
    /// The whole snapshot arrived and checked out: install it.
    Complete(Snapshot),
    /// The chunk ended the transfer (the peer has no snapshot, or the chunk did not fit);
    /// the reason is for the log. Start again later, maybe elsewhere.
    Abandoned(String),
    /// Not for the transfer in progress (late, duplicated, or from another peer): ignored.
    Ignored,
}

/// The fetching side.
#[derive(Debug, Default)]
pub struct SnapshotFetcher {
    pub transfer: Option<Transfer>,
    /// Snapshots installed since the node started.
    pub installed: u64,
}

impl SnapshotFetcher {
    /// Starts a transfer from `peer` of a snapshot covering `min_upto`; returns the first
    /// fetch. Replaces a transfer in progress.
    pub fn start(&mut self, now: Micros, peer: NodeId, min_upto: Instance) -> SnapshotFetch {
        self.transfer = Some(Transfer {
            peer,
            upto: 0,
            min_upto,
            total: 0,
            buf: Vec::new(),
            last_progress_us: now,
            started_us: now,
        });
        SnapshotFetch {
            upto: 0,
            min_upto,
            offset: 0,
        }
    }

    pub fn in_progress(&self) -> bool {
        self.transfer.is_some()
    }

    /// The fetch to repeat after a timeout (the request or its answer was lost), and the
    /// peer to send it to.
    pub fn retry(&mut self, now: Micros) -> Option<(NodeId, SnapshotFetch)> {
        let t = self.transfer.as_mut()?;
        t.last_progress_us = now;
        Some((
            t.peer,
            SnapshotFetch {
                upto: t.upto,
                min_upto: t.min_upto,
                offset: t.buf.len() as u64,
            },
        ))
    }

    pub fn abandon(&mut self) {
        self.transfer = None;
    }

    /// A chunk from `from`. Validates it against the transfer in progress.
    pub fn on_chunk(&mut self, now: Micros, from: NodeId, c: SnapshotChunk) -> ChunkOutcome {
        let Some(t) = self.transfer.as_mut() else {
            return ChunkOutcome::Ignored;
        };
        if from != t.peer || (t.upto != 0 && c.upto != 0 && c.upto != t.upto) {
            return ChunkOutcome::Ignored;
        }
        if c.offset != t.buf.len() as u64 {
            // A duplicate or a late answer to a retried fetch.
            return ChunkOutcome::Ignored;
        }
        let problem = if c.upto == 0 {
            Some(format!(
                "node {} has no snapshot covering the one asked for",
                from.0
            ))
        } else if c.upto < t.min_upto {
            Some(format!(
                "node {} sent a snapshot up to {}, below the {} needed",
                from.0, c.upto, t.min_upto
            ))
        } else if c.total > MAX_SNAPSHOT_BYTES {
            Some(format!(
                "node {} offers a snapshot of {} bytes, more than the {} accepted",
                from.0, c.total, MAX_SNAPSHOT_BYTES
            ))
        } else if t.upto != 0 && c.total != t.total {
            Some(format!(
                "node {}: snapshot {} changed size mid-transfer ({} then {} bytes)",
                from.0, c.upto, t.total, c.total
            ))
        } else if c.data.is_empty() && c.offset < c.total {
            Some(format!("node {}: an empty chunk mid-transfer", from.0))
        } else {
            None
        };
        if let Some(why) = problem {
            self.transfer = None;
            return ChunkOutcome::Abandoned(why);
        }
        if t.upto == 0 {
            t.upto = c.upto;
            t.total = c.total;
        }
        t.buf.extend_from_slice(&c.data);
        t.last_progress_us = now;
        if (t.buf.len() as u64) < t.total {
            return ChunkOutcome::Next(SnapshotFetch {
                upto: t.upto,
                min_upto: t.min_upto,
                offset: t.buf.len() as u64,
            });
        }
        let Some(done) = self.transfer.take() else {
            return ChunkOutcome::Ignored;
        };
        match Snapshot::decode(&done.buf) {
            Ok(s) if s.upto == done.upto => {
                self.installed += 1;
                ChunkOutcome::Complete(s)
            }
            Ok(s) => ChunkOutcome::Abandoned(format!(
                "node {}: the snapshot announced as {} says {}",
                from.0, done.upto, s.upto
            )),
            Err(e) => ChunkOutcome::Abandoned(format!("node {}: snapshot {e}", from.0)),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn snap(upto: Instance, app_len: usize) -> Snapshot {
        Snapshot {
            upto,
            protocol: Bytes::from_static(b"dedup"),
            app: Bytes::from((0..app_len).map(|i| (i % 251) as u8).collect::<Vec<u8>>()),
        }
    }

    fn roundtrip_chunk(c: &SnapshotChunk) -> SnapshotChunk {
        let mut e = Encoder::new();
        c.encode(&mut e);
        let mut d = Decoder::new(e.to_bytes());
        let back = SnapshotChunk::decode(&mut d).expect("decodes");
        d.finish().expect("nothing left");
        back
    }

    #[test]
    fn a_snapshot_larger_than_a_chunk_arrives_whole_across_a_newer_snapshot() {
        let mut server = SnapshotServer::default();
        let first = snap(100, 3 * CHUNK_BYTES + 17);
        server.set_latest(&first);
        let mut fetcher = SnapshotFetcher::default();
        let peer = NodeId(2);
        let mut fetch = fetcher.start(0, peer, 90);
        let mut rounds = 0;
        let got = loop {
            rounds += 1;
            assert!(rounds < 10, "transfer does not end");
            let chunk = roundtrip_chunk(&server.serve(rounds, &fetch));
            // The server takes a newer snapshot mid-transfer: the pin keeps the old one.
            if rounds == 2 {
                server.set_latest(&snap(200, 10));
            }
            match fetcher.on_chunk(rounds, peer, chunk) {
                ChunkOutcome::Next(f) => fetch = f,
                ChunkOutcome::Complete(s) => break s,
                other => panic!("unexpected {other:?}"),
            }
        };
        assert_eq!(got, first);
        assert_eq!(rounds, 4);
        assert!(!fetcher.in_progress());
    }

    #[test]
    fn a_server_without_a_covering_snapshot_says_none_and_the_transfer_ends() {
        let mut server = SnapshotServer::default();
        server.set_latest(&snap(50, 10));
        let mut fetcher = SnapshotFetcher::default();
        let fetch = fetcher.start(0, NodeId(3), 60);
        let chunk = server.serve(1, &fetch);
        assert_eq!(chunk.upto, 0);
        assert!(matches!(
            fetcher.on_chunk(1, NodeId(3), chunk),
            ChunkOutcome::Abandoned(_)
        ));
        assert!(!fetcher.in_progress());
    }

    #[test]
    fn chunks_that_do_not_fit_the_transfer_are_ignored_or_end_it() {
        let mut server = SnapshotServer::default();
        server.set_latest(&snap(10, 2 * CHUNK_BYTES));
        let mut fetcher = SnapshotFetcher::default();
        let fetch = fetcher.start(0, NodeId(2), 1);
        let first = server.serve(1, &fetch);
        // From another node: ignored.
        assert_eq!(
            fetcher.on_chunk(1, NodeId(9), first.clone()),
            ChunkOutcome::Ignored
        );
        let ChunkOutcome::Next(next) = fetcher.on_chunk(1, NodeId(2), first.clone()) else {
            panic!("first chunk accepted");
        };
        // The same chunk again (a duplicate): ignored, the transfer goes on.
        assert_eq!(
            fetcher.on_chunk(2, NodeId(2), first.clone()),
            ChunkOutcome::Ignored
        );
        // A chunk claiming another total: the transfer ends.
        let mut bad = server.serve(2, &next);
        bad.total += 1;
        assert!(matches!(
            fetcher.on_chunk(2, NodeId(2), bad),
            ChunkOutcome::Abandoned(_)
        ));
    }

    #[test]
    fn a_corrupted_transfer_is_refused_by_the_checksum() {
        let mut server = SnapshotServer::default();
        server.set_latest(&snap(10, 1000));
        let mut fetcher = SnapshotFetcher::default();
        let fetch = fetcher.start(0, NodeId(2), 1);
        let c = server.serve(1, &fetch);
        let mut data = c.data.to_vec();
        data[40] ^= 0x10;
        let c = SnapshotChunk {
            data: Bytes::from(data),
            ..c
        };
        assert!(matches!(
            fetcher.on_chunk(1, NodeId(2), c),
            ChunkOutcome::Abandoned(why) if why.contains("checksum")
        ));
    }

    #[test]
    fn decoding_refuses_oversized_and_overrunning_chunks() {
        let mut e = Encoder::new();
        e.put_u64(1);
        e.put_u64(10);
        e.put_u64(8);
        e.put_u32(5);
        e.put_slice(&[0; 5]);
        let mut d = Decoder::new(e.to_bytes());
        assert!(SnapshotChunk::decode(&mut d).is_err());
        let mut e = Encoder::new();
        e.put_u64(1);
        e.put_u64(u64::MAX);
        e.put_u64(0);
        e.put_u32(CHUNK_BYTES as u32 + 1);
        let mut d = Decoder::new(e.to_bytes());
        assert!(SnapshotChunk::decode(&mut d).is_err());
    }

    #[test]
    fn idle_pins_expire_and_at_most_two_are_kept() {
        let mut server = SnapshotServer::default();
        for (i, upto) in [10u64, 20, 30].into_iter().enumerate() {
            server.set_latest(&snap(upto, 10));
            let c = server.serve(
                i as Micros,
                &SnapshotFetch {
                    upto: 0,
                    min_upto: 0,
                    offset: 0,
                },
            );
            assert_eq!(c.upto, upto);
        }
        assert_eq!(server.pins.len(), PINS_MAX);
        // The oldest pin (10) went first; 20 is still served.
        let f = |upto| SnapshotFetch {
            upto,
            min_upto: 0,
            offset: 0,
        };
        assert_eq!(server.serve(3, &f(10)).upto, 0);
        assert_eq!(server.serve(3, &f(20)).upto, 20);
        // After PIN_IDLE_US without a read, only the latest can be pinned again.
        assert_eq!(server.serve(3 + PIN_IDLE_US, &f(20)).upto, 0);
        assert_eq!(server.serve(3 + PIN_IDLE_US, &f(30)).upto, 30);
    }
}
