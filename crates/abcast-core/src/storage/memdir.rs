//! A [`LogDir`] in memory that models what a crash does to a disk, for the simulator and
//! the tests. Deterministic: the caller (the simulator, with its seeded random source)
//! decides how a crash tears each file.
//!
//! * `append` lands "in the OS": a process crash ([`MemDir::crash_process`]) keeps it.
//! * `sync` makes a file's bytes durable, `sync_dir` makes created and removed names durable.
//! * A machine crash ([`MemDir::crash_machine`]) keeps per file the synced bytes plus a prefix
//!   of the unsynced ones that the caller picks, optionally with one byte flipped inside that
//!   prefix (a torn, garbled last write); files created since the last `sync_dir` vanish and
//!   files removed since then come back.
//! * [`MemDir::flip_byte`] damages durable bytes (bit rot), for the "refuse to start" path.

use super::LogDir;
use std::collections::BTreeMap;
use std::io;
use std::sync::{Arc, Mutex, MutexGuard};

#[derive(Clone, Debug, Default)]
struct MemFile {
    data: Vec<u8>,
    synced_len: usize,
    /// The name survives a machine crash.
    name_durable: bool,
}

#[derive(Debug, Default)]
struct Disk {
    files: BTreeMap<String, MemFile>,
    /// Removed since the last `sync_dir`: a machine crash brings them back.
    removed: BTreeMap<String, MemFile>,
    /// Counters, for tests and the simulator's summary.
    syncs: u64,
    bytes_appended: u64,
}

/// How a machine crash treats one file's unsynced bytes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Tear {
    /// Unsynced bytes that reached the disk anyway (a prefix).
    pub keep: usize,
    /// Flip this byte of the kept unsynced prefix (an index into it), if any.
    pub flip: Option<usize>,
}

/// A handle on one simulated directory; clones share the same disk, so the simulator keeps
/// one across a node's crash and restart.
#[derive(Clone, Debug, Default)]
pub struct MemDir {
    disk: Arc<Mutex<Disk>>,
    label: String,
}

fn not_found(name: &str) -> io::Error {
    io::Error::new(io::ErrorKind::NotFound, format!("{name}: no such file"))
}

impl MemDir {
    pub fn new(label: impl Into<String>) -> MemDir {
        MemDir {
            disk: Arc::default(),
            label: label.into(),
        }
    }

    fn disk(&self) -> MutexGuard<'_, Disk> {
        // A poisoned lock means a test thread panicked while holding it: the data is still
        // consistent (every update below is a single step), so go on.
        self.disk.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// A process crash: everything written stays (it was in the OS's hands).
    pub fn crash_process(&self) {}

    /// A machine crash: see the module comment. `tear(name, unsynced_bytes)` picks what
    /// survives of each file's unsynced bytes.
    pub fn crash_machine(&self, mut tear: impl FnMut(&str, usize) -> Tear) {
        let mut d = self.disk();
        let removed = std::mem::take(&mut d.removed);
        for (name, f) in removed {
            if f.name_durable {
                d.files.entry(name).or_insert(f);
            }
        }
        d.files.retain(|_, f| f.name_durable);
        for (name, f) in d.files.iter_mut() {
            let unsynced = f.data.len() - f.synced_len;
            let t = tear(name, unsynced);
            let keep = t.keep.min(unsynced);
            f.data.truncate(f.synced_len + keep);
            if let Some(i) = t.flip
                && i < keep
            {
                f.data[f.synced_len + i] ^= 0x5a;
            }
        }
    }

    /// Damages one durable byte (bit rot).
    pub fn flip_byte(&self, name: &str, offset: usize) -> bool {
        let mut d = self.disk();
        match d.files.get_mut(name).and_then(|f| f.data.get_mut(offset)) {
            Some(b) => {
                *b ^= 0xff;
                true
            }
            None => false,
        }
    }

    /// Bytes per file, for tests.
    pub fn sizes(&self) -> BTreeMap<String, usize> {
        self.disk()
            .files
            .iter()
            .map(|(n, f)| (n.clone(), f.data.len()))
            .collect()
    }

    /// fdatasyncs done so far.
    pub fn syncs(&self) -> u64 {
        self.disk().syncs
    }
}

impl LogDir for MemDir {
    fn list(&self) -> io::Result<Vec<String>> {
        Ok(self.disk().files.keys().cloned().collect())
    }
    fn read(&self, name: &str) -> io::Result<Vec<u8>> {
        self.disk()
            .files
            .get(name)
            .map(|f| f.data.clone())
            .ok_or_else(|| not_found(name))
    }
    fn read_at(&self, name: &str, offset: u64, buf: &mut [u8]) -> io::Result<()> {
        let d = self.disk();
        let f = d.files.get(name).ok_or_else(|| not_found(name))?;
        let start = usize::try_from(offset).map_err(|_| io::ErrorKind::InvalidInput)?;
        let src = f
            .data
            .get(start..start + buf.len())
            .ok_or(io::ErrorKind::UnexpectedEof)?;
        buf.copy_from_slice(src);
        Ok(())
    }
    fn create(&mut self, name: &str) -> io::Result<()> {
        let mut d = self.disk();
        if d.files.contains_key(name) {
            return Err(io::Error::new(
                io::ErrorKind::AlreadyExists,
                format!("{name} exists"),
            ));
        }
        d.removed.remove(name);
        d.files.insert(name.to_string(), MemFile::default());
        Ok(())
    }
    fn append(&mut self, name: &str, chunks: &[&[u8]]) -> io::Result<()> {
        let mut d = self.disk();
        let n: usize = chunks.iter().map(|c| c.len()).sum();
        let f = d.files.get_mut(name).ok_or_else(|| not_found(name))?;
        for c in chunks {
            f.data.extend_from_slice(c);
        }
        d.bytes_appended += n as u64;
        Ok(())
    }
    fn sync(&mut self, name: &str) -> io::Result<()> {
        let mut d = self.disk();
        let f = d.files.get_mut(name).ok_or_else(|| not_found(name))?;
        f.synced_len = f.data.len();
        d.syncs += 1;
        Ok(())
    }
    fn sync_dir(&mut self) -> io::Result<()> {
        let mut d = self.disk();
        d.removed.clear();
        for f in d.files.values_mut() {
            f.name_durable = true;
        }
        Ok(())
    }
    fn truncate(&mut self, name: &str, len: u64) -> io::Result<()> {
        let mut d = self.disk();
        let f = d.files.get_mut(name).ok_or_else(|| not_found(name))?;
        let len = usize::try_from(len).map_err(|_| io::ErrorKind::InvalidInput)?;
        f.data.truncate(len);
        f.synced_len = f.synced_len.min(len);
        Ok(())
    }
    fn remove(&mut self, name: &str) -> io::Result<()> {
        let mut d = self.disk();
        let f = d.files.remove(name).ok_or_else(|| not_found(name))?;
        d.removed.insert(name.to_string(), f);
        Ok(())
    }
    fn describe(&self) -> String {
        format!("memdir:{}", self.label)
    }
}
