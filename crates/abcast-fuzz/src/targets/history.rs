//! The history journal (`abcast_runtime::history`): a node starting on a journal directory
//! whose files are fuzz bytes, then serving a subscriber from it and recording more.
//!
//! Input: a byte (the journal's bound, the first instance a subscriber asks for), then
//! steps that lay out the directory: `0 number`: start `history-<number>.log` (or, for odd
//! kinds, a stray name); `1 string16`: raw bytes; `2 string16`: a record body with a
//! correct header and checksum (so mutations reach the record decoder behind it);
//! `3 u16`: zeros.
//! Checks: `Journal::open` opens or fails with an I/O error, never panics; the history
//! serves reads from the requested instance (each read bounded) until it says it is
//! caught up or errs; it records a delivery after what it holds; and it opens again.
//! The files live in a directory of this process under the temporary directory
//! (`/dev/shm` where there is one: no disk I/O per run), emptied before each run.

use crate::input::Input;
use abcast_core::{Batch, Delivery, NodeId, ValueId};
use abcast_runtime::history::{History, Journal};
use bytes::Bytes;
use std::path::PathBuf;

const STEPS_MAX: usize = 256;
/// Reads per run; each returns at least one item or ends the loop.
const READS_MAX: usize = 64;

/// `"ABH1"`, the journal's record magic (`history.rs`).
pub const RECORD_MAGIC: u32 = u32::from_le_bytes(*b"ABH1");

/// A journal record around `body`, as the journal writes it.
pub fn record(body: &[u8]) -> Vec<u8> {
    let mut r = Vec::with_capacity(12 + body.len());
    r.extend_from_slice(&RECORD_MAGIC.to_le_bytes());
    r.extend_from_slice(&(body.len() as u32).to_le_bytes());
    r.extend_from_slice(&crc32c::crc32c(body).to_le_bytes());
    r.extend_from_slice(body);
    r
}

/// This process's journal directory, emptied.
fn fresh_dir() -> PathBuf {
    let base = if std::path::Path::new("/dev/shm").is_dir() {
        PathBuf::from("/dev/shm")
    } else {
        std::env::temp_dir()
    };
    let tid = format!("{:?}", std::thread::current().id());
    let tid: String = tid.chars().filter(char::is_ascii_digit).collect();
    let dir = base.join(format!("abcast-fuzz-history-{}-{tid}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    let _ = std::fs::create_dir_all(&dir);
    dir
}

pub fn history(data: &[u8]) {
    let mut input = Input::new(data);
    let Some(opts) = input.u8() else { return };
    let max_bytes = [1u64 << 16, 1 << 20][usize::from(opts & 1)];
    let from = u64::from(opts >> 1);
    let dir = fresh_dir();
    let mut files: Vec<(String, Vec<u8>)> = Vec::new();
    for _ in 0..STEPS_MAX {
        let Some(op) = input.u8() else { break };
        if op % 4 == 0 {
            let Some(n) = input.u8() else { break };
            let name = match op & 0x10 {
                0 => format!("history-{n:08}.log"),
                _ => format!("history-{n}.tmp"),
            };
            files.push((name, Vec::new()));
            continue;
        }
        if files.is_empty() {
            files.push(("history-00000000.log".into(), Vec::new()));
        }
        let Some((_, bytes)) = files.last_mut() else {
            break;
        };
        match op % 4 {
            1 => bytes.extend_from_slice(input.string16().unwrap_or_default()),
            2 => bytes.extend_from_slice(&record(input.string16().unwrap_or_default())),
            _ => bytes.resize(bytes.len() + usize::from(input.u16().unwrap_or(0)), 0),
        }
    }
    for (name, bytes) in &files {
        let _ = std::fs::write(dir.join(name), bytes);
    }
    run(&dir, max_bytes, from);
    let _ = std::fs::remove_dir_all(&dir);
}

fn run(dir: &std::path::Path, max_bytes: u64, from: u64) {
    let Ok(journal) = Journal::open(dir, max_bytes) else {
        return;
    };
    let mut h = History::new(0, Some(journal));
    let mut next = from;
    let mut out = Vec::new();
    for _ in 0..READS_MAX {
        out.clear();
        match h.read(next, 1 << 16, 256, &mut out) {
            Ok(caught_up) => {
                assert!(
                    out.len() <= abcast_runtime::history::READ_ITEMS_MAX,
                    "a read returned {} items",
                    out.len()
                );
                let end = out.iter().map(|i| i.end()).max().unwrap_or(next);
                if caught_up || end <= next {
                    break;
                }
                next = end;
            }
            Err(_) => break,
        }
    }
    let at = h.end();
    let id = ValueId {
        node: NodeId(1),
        seq: 1,
    };
    let d = Delivery::new(at, Batch::single(id, Bytes::from_static(b"fuzz")));
    if h.record_delivery(&d).is_err() || h.sync().is_err() {
        return;
    }
    drop(h);
    if let Err(e) = Journal::open(dir, max_bytes) {
        panic!("a journal that opened and recorded refuses to open again: {e}");
    }
}
