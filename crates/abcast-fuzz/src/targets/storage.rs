//! Durable-log recovery: [`DurableStore`] (the acceptor store, records `ABL3`) and
//! [`DurableLogStore`] (the log store, records `ABG2`), both over the segmented log
//! (`seglog.rs`), opening a directory ([`MemDir`]) whose files are made of fuzz bytes.
//!
//! Input: an options byte (bit 0 `sync`; bits 1-2 the segment size), then steps that lay
//! out the directory (see [`lay_out`]): start a file (a segment, a spare, or a stray
//! name), append raw bytes, append a record framed with a correct checksum for its
//! segment (so mutations reach the record decoder and recovery behind the checksum),
//! append a record of the other store's or an older format, or append zeros
//! (preallocated space).
//! Checks: `open` recovers or refuses with an error; never a panic, and its work is
//! bounded by what is on the disk. A store that opened answers reads of everything it
//! says it holds, takes a write and a sync, and opens again (a node restarts on what it
//! accepted and wrote itself).

use crate::input::Input;
use abcast_core::storage::record::{MAGIC as ACCEPTOR_MAGIC, MAGIC_V2 as ACCEPTOR_MAGIC_V2};
use abcast_core::storage::seglog;
use abcast_core::storage::{
    Accepted, AcceptorStore, DurableLogStore, DurableOptions, DurableStore, Entry, LogDir,
    LogStore, MemDir,
};
use abcast_core::types::{Ballot, Decree, NodeId};
use bytes::Bytes;

/// The log store's record magic (`storage/log_record.rs`, a private module).
pub const LOG_MAGIC: u32 = u32::from_le_bytes(*b"ABG2");
/// Steps per input.
const STEPS_MAX: usize = 512;
/// Reads after open: at most this many instances or entries.
const READ_MAX: u64 = 4096;

/// Which store's directory an input lays out.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Store {
    Acceptor,
    Log,
}

impl Store {
    fn magics(self) -> [u32; 2] {
        match self {
            Store::Acceptor => [ACCEPTOR_MAGIC, LOG_MAGIC],
            Store::Log => [LOG_MAGIC, ACCEPTOR_MAGIC_V2],
        }
    }
}

/// The name a "start a file" step makes.
pub fn file_name(kind: u8, number: u8) -> String {
    match kind % 4 {
        0 | 1 => format!("seg-{:020}.log", number),
        2 => format!("spare-{:020}.log", number),
        _ => format!("seg-{number}.log"),
    }
}

/// Steps that lay out a directory (one byte each, then operands):
/// `0 kind number`: start file [`file_name`]; `1 string16`: raw bytes; `2 string16`: a
/// record body framed for the current segment with the store's magic; `3 string16`: the
/// same with the other magic; `4 u16`: that many zeros. Bytes before the first file go to
/// `seg-00000000000000000001.log`.
pub fn lay_out(store: Store, input: &mut Input<'_>) -> MemDir {
    let mut files: Vec<(String, u64, Vec<u8>)> = Vec::new();
    for _ in 0..STEPS_MAX {
        let Some(op) = input.u8() else { break };
        if op % 5 == 0 {
            let (Some(kind), Some(number)) = (input.u8(), input.u8()) else {
                break;
            };
            files.push((file_name(kind, number), u64::from(number), Vec::new()));
            continue;
        }
        if files.is_empty() {
            files.push((file_name(0, 1), 1, Vec::new()));
        }
        let Some((_, seg, bytes)) = files.last_mut() else {
            break;
        };
        match op % 5 {
            1 => {
                let Some(b) = input.string16() else { break };
                bytes.extend_from_slice(b);
            }
            2 | 3 => {
                let Some(b) = input.string16() else { break };
                let magic = store.magics()[usize::from(op % 5 - 2)];
                let (chunks, _) = seglog::frame(vec![Bytes::copy_from_slice(b)], *seg, magic);
                chunks.iter().for_each(|c| bytes.extend_from_slice(c));
            }
            _ => {
                let Some(n) = input.u16() else { break };
                bytes.resize(bytes.len() + usize::from(n), 0);
            }
        }
    }
    let mut dir = MemDir::new("fuzz");
    for (name, _, bytes) in files {
        // A name given twice keeps its first file.
        if dir.create(&name).is_ok() {
            let _ = dir.write_at(&name, 0, &[&bytes]);
            let _ = dir.sync(&name);
        }
    }
    let _ = dir.sync_dir();
    dir
}

/// The options an input's first byte picks.
pub fn options(opts: u8) -> DurableOptions {
    DurableOptions {
        sync: opts & 1 == 1,
        segment_bytes: [4 << 10, 64 << 10, 1 << 20, 16 << 20][usize::from((opts >> 1) & 3)],
        cache_instances: 64,
        cache_bytes: 1 << 20,
    }
}

pub fn durable_store(data: &[u8]) {
    let mut input = Input::new(data);
    let Some(opts) = input.u8() else { return };
    let opts = options(opts);
    let dir = lay_out(Store::Acceptor, &mut input);
    let Ok((mut s, _recovery)) = DurableStore::open(dir.clone(), opts.clone()) else {
        return;
    };
    let (start, max) = (s.log_start(), s.max_instance());
    let to = max.saturating_add(1).min(start.saturating_add(READ_MAX));
    for (i, a) in s.range(start, to) {
        assert!(
            (start..to).contains(&i),
            "range gave instance {i} outside {start}..{to}"
        );
        let _ = a.decided;
    }
    // A write on top of what was recovered, then a restart.
    let next = max.max(start).saturating_add(1);
    let b = Ballot::new(s.promised().round.saturating_add(1), NodeId(1), 0);
    s.set_promised(b);
    let _ = s.put(
        next,
        Accepted {
            ballot: b,
            decree: Decree::Noop,
            decided: false,
        },
    );
    if s.sync().is_err() {
        return;
    }
    drop(s);
    if let Err(e) = DurableStore::open(dir, opts) {
        panic!("a store that opened and synced refuses to open again: {e}");
    }
}

pub fn durable_log_store(data: &[u8]) {
    let mut input = Input::new(data);
    let Some(opts) = input.u8() else { return };
    let opts = options(opts);
    let dir = lay_out(Store::Log, &mut input);
    let Ok((mut s, _recovery)) = DurableLogStore::open(dir.clone(), opts.clone()) else {
        return;
    };
    let (first, last) = (s.first_index(), s.last_index());
    let to = last.saturating_add(1).min(first.saturating_add(READ_MAX));
    if let Ok(entries) = s.entries(first, to, 1 << 20) {
        for e in &entries {
            assert!(
                (first..to).contains(&e.index),
                "entry {} outside {first}..{to}",
                e.index
            );
        }
    }
    let _ = (
        s.promised(),
        s.accepted_round(),
        s.decided_idx(),
        s.stop_sign(),
        s.snapshot(),
    );
    let e = Entry {
        index: last.saturating_add(1),
        ballot: Ballot::new(s.accepted_round().round, NodeId(1), 0),
        payload: Bytes::from_static(b"fuzz"),
    };
    if s.append(&[e]).is_err() || s.sync().is_err() {
        return;
    }
    drop(s);
    if let Err(e) = DurableLogStore::open(dir, opts) {
        panic!("a log store that opened and synced refuses to open again: {e}");
    }
}
