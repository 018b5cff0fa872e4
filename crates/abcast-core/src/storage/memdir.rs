//! A [`LogDir`] in memory that models what a crash does to a disk, for the simulator and
//! the tests. Deterministic: the caller (the simulator, with its seeded random source)
//! decides how a crash tears each file.
//!
//! * `write_at` lands "in the OS": a process crash ([`MemDir::crash_process`]) keeps it. It
//!   writes only at the end of what was written (all the durable store does).
//! * `preallocate` reserves zeros after what was written (fallocate); the file reads as
//!   zeros there. The reservation survives a machine crash once the file was synced.
//! * `sync` makes a file's bytes durable, `sync_dir` makes created, removed and renamed
//!   names durable. A machine crash undoes a rename not yet synced: the file is back under
//!   its last durable name, with what it holds now (as on a real file system).
//! * A machine crash ([`MemDir::crash_machine`]) keeps per file the synced bytes plus a prefix
//!   of the unsynced ones that the caller picks, optionally with one byte flipped inside that
//!   prefix (a torn, garbled last write); files created since the last `sync_dir` vanish and
//!   files removed since then come back. What survives is on the platter: durable, so a
//!   later crash keeps it. [`MemDir::crash_machine_fate`] lets the caller keep a file whose
//!   name was never made durable, with a prefix of its bytes, as ext4 and xfs do when their
//!   journal committed the name but not the data (the simulator's `torn_unsynced` fault):
//!   a store must not take such a file for a durable one.
//! * Every machine crash is a new boot ([`LogDir::boot_id`]): a store written without
//!   fdatasync can tell that a crash may have taken some of it.
//! * [`MemDir::inject`]: the next write (EIO, ENOSPC) or sync (EIO) fails, and the disk
//!   keeps failing until [`MemDir::clear_injection`] (the simulator's `disk_error` fault).
//!   A failed sync drops the file's unsynced writes (Linux marks the pages clean after a
//!   failed fsync: what was not durable is gone, PostgreSQL's "fsyncgate").
//! * [`MemDir::wipe`]: every file of the disk is gone (`wiped_dir`).
//! * [`MemDir::flip_byte`] damages durable bytes (bit rot), for the "refuse to start" path.
//! * [`MemDir::begin_power_loss`]: from then until the crash, `sync` and `sync_dir` do not
//!   complete (they return, but make nothing durable): a machine that loses power in the
//!   middle of a group commit, after the write reached the OS and before the fdatasync did.
//! * [`MemDir::subdir`]: a directory inside the same disk (one per Multi-Ring ring on a
//!   node); a crash of the disk hits every directory on it alike.

use super::LogDir;
use std::collections::BTreeMap;
use std::io;
use std::sync::{Arc, Mutex, MutexGuard};

#[derive(Clone, Debug)]
struct MemFile {
    /// What was written (what a read sees).
    data: Vec<u8>,
    /// What survives a machine crash: the bytes as of the last sync.
    durable: Vec<u8>,
    /// The range written since the last sync, `dirty_from..dirty_to` (`dirty_from` is
    /// `CLEAN`: none): `data` and `durable` agree outside it.
    dirty_from: usize,
    dirty_to: usize,
    /// The file's size by `preallocate` (zeros after `data`), and what of it is durable.
    allocated: usize,
    allocated_synced: usize,
    /// The name survives a machine crash.
    name_durable: bool,
}

const CLEAN: usize = usize::MAX;

impl Default for MemFile {
    fn default() -> Self {
        MemFile {
            data: Vec::new(),
            durable: Vec::new(),
            dirty_from: CLEAN,
            dirty_to: 0,
            allocated: 0,
            allocated_synced: 0,
            name_durable: false,
        }
    }
}

impl MemFile {
    /// The file's size: what was written, or the preallocated size if larger.
    fn size(&self) -> usize {
        self.data.len().max(self.allocated)
    }
    /// Bytes written since the last sync (the span from the lowest to the highest).
    fn unsynced(&self) -> usize {
        if self.dirty_from == CLEAN {
            0
        } else {
            self.dirty_to.saturating_sub(self.dirty_from)
        }
    }
}

#[derive(Debug, Default)]
struct Disk {
    files: BTreeMap<String, MemFile>,
    /// Removed since the last `sync_dir`: a machine crash brings them back.
    removed: BTreeMap<String, MemFile>,
    /// Renamed since the last `sync_dir`: new name -> the last durable name (none for a
    /// file created since, which a crash takes away).
    renamed: BTreeMap<String, Option<String>>,
    /// Counters, for tests and the simulator's summary.
    syncs: u64,
    bytes_appended: u64,
    /// The power is failing: no sync completes until the crash.
    power_lost: bool,
    /// Machine crashes so far: the boot id.
    boot: u64,
    /// An injected failure: `(operations of its class to let through first, the fault)`.
    injected: Option<(u32, DiskFault)>,
    /// The injected failure fired (and keeps failing every operation of its class).
    fired: Option<DiskFault>,
}

/// A failure the disk answers an operation with ([`MemDir::inject`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum DiskFault {
    /// A write (`write_at`, `create`, `preallocate`, `rename`, `truncate`, `remove`)
    /// fails with EIO and changes nothing.
    WriteEio,
    /// A write fails with ENOSPC (the disk is full) and changes nothing.
    WriteNoSpace,
    /// A `sync` or `sync_dir` fails with EIO; the file's unsynced writes are lost.
    SyncEio,
}

impl DiskFault {
    pub const ALL: [DiskFault; 3] = [
        DiskFault::WriteEio,
        DiskFault::WriteNoSpace,
        DiskFault::SyncEio,
    ];

    fn error(self, what: &str) -> io::Error {
        let (code, name) = match self {
            DiskFault::WriteEio | DiskFault::SyncEio => (5, "EIO"),
            DiskFault::WriteNoSpace => (28, "ENOSPC"),
        };
        let e = io::Error::from_raw_os_error(code);
        io::Error::new(e.kind(), format!("{what}: {e} (injected {name})"))
    }

    fn is_sync(self) -> bool {
        self == DiskFault::SyncEio
    }
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
    /// Where this directory's files live on the disk: "" for the top directory, `"name/"`
    /// for [`MemDir::subdir`]`("name")`.
    prefix: String,
}

fn not_found(name: &str) -> io::Error {
    io::Error::new(io::ErrorKind::NotFound, format!("{name}: no such file"))
}

impl MemDir {
    pub fn new(label: impl Into<String>) -> MemDir {
        MemDir {
            disk: Arc::default(),
            label: label.into(),
            prefix: String::new(),
        }
    }

    /// The directory `name` inside this one, on the same disk: its files are listed, synced
    /// (`sync_dir`) and removed on their own, and a crash of the disk (called on any handle)
    /// treats them like every other file. The directory itself always exists (as if created
    /// and made durable before the node first started). `name` must not contain `/`.
    pub fn subdir(&self, name: &str) -> MemDir {
        debug_assert!(
            !name.is_empty() && !name.contains('/'),
            "subdir name {name:?}"
        );
        MemDir {
            disk: Arc::clone(&self.disk),
            label: self.label.clone(),
            prefix: format!("{}{name}/", self.prefix),
        }
    }

    /// The file's name on the disk.
    fn path(&self, name: &str) -> String {
        format!("{}{name}", self.prefix)
    }

    /// A name on the disk that is a file of this directory (not of a subdirectory): its name
    /// in the directory.
    fn own<'n>(&self, path: &'n str) -> Option<&'n str> {
        path.strip_prefix(self.prefix.as_str())
            .filter(|n| !n.contains('/'))
    }

    fn disk(&self) -> MutexGuard<'_, Disk> {
        // A poisoned lock means a test thread panicked while holding it: the data is still
        // consistent (every update below is a single step), so go on.
        self.disk.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// A process crash: everything written stays (it was in the OS's hands).
    pub fn crash_process(&self) {
        self.disk().power_lost = false;
    }

    /// The power fails now: until the next [`MemDir::crash_machine`], `sync` and `sync_dir`
    /// (of every directory on this disk) return without making anything durable. The
    /// simulator calls it before the group commit it interrupts.
    pub fn begin_power_loss(&self) {
        self.disk().power_lost = true;
    }

    /// A machine crash of the whole disk (every directory on it): see the module comment.
    /// `tear(name, unsynced_bytes)` picks what survives of each file's unsynced bytes; it is
    /// called for every file that exists after the crash, in name order, with the file's
    /// path on the disk (`"ring-1/seg-..."` for a file of a subdirectory). Files whose
    /// names were never made durable vanish.
    pub fn crash_machine(&self, mut tear: impl FnMut(&str, usize) -> Tear) {
        self.crash_machine_fate(|name, unsynced, named| named.then(|| tear(name, unsynced)));
    }

    /// [`MemDir::crash_machine`] where `fate(name, unsynced_bytes, name_durable)` also
    /// decides, for a file whose name was never made durable (`name_durable` false), whether
    /// it survives (`Some`, torn as the `Tear` says over its synced bytes) or vanishes
    /// (`None`); for the others `None` keeps nothing of the unsynced bytes. Called for
    /// every file, in name order.
    pub fn crash_machine_fate(&self, mut fate: impl FnMut(&str, usize, bool) -> Option<Tear>) {
        let mut d = self.disk();
        d.power_lost = false;
        d.boot += 1;
        for (new, orig) in std::mem::take(&mut d.renamed) {
            if d.files.get(&new).is_some_and(|f| !f.name_durable)
                && let Some(mut f) = d.files.remove(&new)
                && let Some(o) = orig
            {
                f.name_durable = true;
                d.files.insert(o, f);
            }
        }
        let removed = std::mem::take(&mut d.removed);
        for (name, f) in removed {
            if f.name_durable {
                d.files.entry(name).or_insert(f);
            }
        }
        let mut gone = Vec::new();
        for (name, f) in d.files.iter_mut() {
            let unsynced = f.unsynced();
            let t = match fate(name, unsynced, f.name_durable) {
                Some(t) => t,
                None if f.name_durable => Tear {
                    keep: 0,
                    flip: None,
                },
                None => {
                    gone.push(name.clone());
                    continue;
                }
            };
            let keep = t.keep.min(unsynced);
            if f.dirty_from != CLEAN {
                // The durable bytes, with a prefix of what was written since laid over
                // them (a recycled file shows its older contents after that prefix).
                let from = f.dirty_from;
                let mut out = std::mem::take(&mut f.durable);
                if out.len() < from + keep {
                    out.resize(from + keep, 0);
                }
                out[from..from + keep].copy_from_slice(&f.data[from..from + keep]);
                if let Some(i) = t.flip
                    && i < keep
                {
                    out[from + i] ^= 0x5a;
                }
                f.data = out;
            }
            f.allocated = f.allocated_synced;
            // The machine restarts reading what reached the disk: no page cache any more.
            f.durable = f.data.clone();
            f.dirty_from = CLEAN;
            f.dirty_to = 0;
            f.name_durable = true;
        }
        for name in gone {
            d.files.remove(&name);
        }
    }

    /// From the `after + 1`-th operation of its class on (writes, or syncs) on any
    /// directory of this disk, every such operation fails with `fault`, until
    /// [`MemDir::clear_injection`].
    pub fn inject(&self, after: u32, fault: DiskFault) {
        let mut d = self.disk();
        d.injected = Some((after, fault));
        d.fired = None;
    }

    /// The injected failure that fired, if one did.
    pub fn injected_fired(&self) -> Option<DiskFault> {
        self.disk().fired
    }

    /// No injected failure fires from now on; one that fired already stays (its error may
    /// still be on its way up: a trim's failure that the next group commit reports).
    pub fn disarm_injection(&self) {
        self.disk().injected = None;
    }

    /// No more injected failures (a failed disk replaced, space freed): the next life of
    /// the node finds a working disk.
    pub fn clear_injection(&self) {
        let mut d = self.disk();
        d.injected = None;
        d.fired = None;
    }

    /// Every file of the disk, in every directory, is gone, durably (a wiped or replaced
    /// disk; the node's directory deleted).
    pub fn wipe(&self) {
        let mut d = self.disk();
        d.files.clear();
        d.removed.clear();
        d.renamed.clear();
    }

    /// Files whose names were never made durable (created since the last `sync_dir`, not
    /// renamed from a durable name, which a crash would bring back), over the whole disk.
    pub fn unsynced_names(&self) -> usize {
        let d = self.disk();
        d.files
            .iter()
            .filter(|(n, f)| !f.name_durable && !matches!(d.renamed.get(*n), Some(Some(_))))
            .count()
    }

    /// Damages one durable byte (bit rot) of a file of this directory.
    pub fn flip_byte(&self, name: &str, offset: usize) -> bool {
        let mut d = self.disk();
        let path = self.path(name);
        let Some(f) = d.files.get_mut(&path) else {
            return false;
        };
        if let Some(b) = f.durable.get_mut(offset) {
            *b ^= 0xff;
        }
        match f.data.get_mut(offset) {
            Some(b) => {
                *b ^= 0xff;
                true
            }
            None => false,
        }
    }

    /// Bytes per file of this directory, for tests.
    pub fn sizes(&self) -> BTreeMap<String, usize> {
        self.disk()
            .files
            .iter()
            .filter_map(|(n, f)| self.own(n).map(|n| (n.to_string(), f.size())))
            .collect()
    }

    /// Bytes written and not yet synced, over the whole disk.
    pub fn unsynced_bytes(&self) -> usize {
        self.disk().files.values().map(MemFile::unsynced).sum()
    }

    /// fdatasyncs done so far on the whole disk (those that completed).
    pub fn syncs(&self) -> u64 {
        self.disk().syncs
    }
}

impl Disk {
    /// An operation of the class `sync` (else a write) on `what`: the injected failure,
    /// once its turn came.
    fn gate(&mut self, sync: bool, what: &str) -> io::Result<()> {
        if let Some(f) = self.fired
            && f.is_sync() == sync
        {
            return Err(f.error(what));
        }
        if let Some((after, f)) = self.injected
            && f.is_sync() == sync
        {
            if after == 0 {
                self.injected = None;
                self.fired = Some(f);
                return Err(f.error(what));
            }
            self.injected = Some((after - 1, f));
        }
        Ok(())
    }
}

impl LogDir for MemDir {
    fn boot_id(&self) -> io::Result<Option<String>> {
        Ok(Some(format!("memdir-boot-{}", self.disk().boot)))
    }
    fn list(&self) -> io::Result<Vec<String>> {
        Ok(self
            .disk()
            .files
            .keys()
            .filter_map(|n| self.own(n).map(str::to_string))
            .collect())
    }
    fn read(&self, name: &str) -> io::Result<Vec<u8>> {
        self.disk()
            .files
            .get(&self.path(name))
            .map(|f| {
                let mut v = f.data.clone();
                v.resize(f.size(), 0);
                v
            })
            .ok_or_else(|| not_found(name))
    }
    fn read_at(&self, name: &str, offset: u64, buf: &mut [u8]) -> io::Result<()> {
        let d = self.disk();
        let f = d
            .files
            .get(&self.path(name))
            .ok_or_else(|| not_found(name))?;
        let start = usize::try_from(offset).map_err(|_| io::ErrorKind::InvalidInput)?;
        let end = start
            .checked_add(buf.len())
            .filter(|&e| e <= f.size())
            .ok_or(io::ErrorKind::UnexpectedEof)?;
        let written = end.min(f.data.len()).max(start);
        buf[..written - start].copy_from_slice(&f.data[start..written]);
        buf[written - start..].fill(0);
        Ok(())
    }
    fn create(&mut self, name: &str) -> io::Result<()> {
        let path = self.path(name);
        let mut d = self.disk();
        d.gate(false, name)?;
        if d.files.contains_key(&path) {
            return Err(io::Error::new(
                io::ErrorKind::AlreadyExists,
                format!("{name} exists"),
            ));
        }
        d.removed.remove(&path);
        d.files.insert(path, MemFile::default());
        Ok(())
    }
    fn write_at(&mut self, name: &str, offset: u64, chunks: &[&[u8]]) -> io::Result<()> {
        let path = self.path(name);
        let mut d = self.disk();
        d.gate(false, name)?;
        let n: usize = chunks.iter().map(|c| c.len()).sum();
        let f = d.files.get_mut(&path).ok_or_else(|| not_found(name))?;
        let off = usize::try_from(offset).map_err(|_| io::ErrorKind::InvalidInput)?;
        if off > f.data.len() {
            return Err(io::Error::new(
                io::ErrorKind::InvalidInput,
                format!(
                    "{name}: a write at {offset}, past the end of what was written ({})",
                    f.data.len()
                ),
            ));
        }
        f.dirty_from = f.dirty_from.min(off);
        f.dirty_to = f.dirty_to.max(off + n);
        let mut at = off;
        for c in chunks {
            let over = c.len().min(f.data.len() - at);
            f.data[at..at + over].copy_from_slice(&c[..over]);
            f.data.extend_from_slice(&c[over..]);
            at += c.len();
        }
        d.bytes_appended += n as u64;
        Ok(())
    }
    fn preallocate(&mut self, name: &str, len: u64) -> io::Result<()> {
        let path = self.path(name);
        let mut d = self.disk();
        d.gate(false, name)?;
        let f = d.files.get_mut(&path).ok_or_else(|| not_found(name))?;
        let len = usize::try_from(len).map_err(|_| io::ErrorKind::InvalidInput)?;
        f.allocated = f.allocated.max(len);
        Ok(())
    }
    fn sync(&mut self, name: &str) -> io::Result<()> {
        let path = self.path(name);
        let mut d = self.disk();
        let power_lost = d.power_lost;
        if let Err(e) = d.gate(true, name) {
            // Linux marks the pages clean after a failed fsync: the unsynced writes are
            // gone (the data reads as what was durable).
            if let Some(f) = d.files.get_mut(&path)
                && f.dirty_from != CLEAN
            {
                f.data = f.durable.clone();
                f.allocated = f.allocated_synced;
                f.dirty_from = CLEAN;
                f.dirty_to = 0;
            }
            return Err(e);
        }
        let f = d.files.get_mut(&path).ok_or_else(|| not_found(name))?;
        if power_lost {
            return Ok(());
        }
        if f.dirty_from != CLEAN {
            let from = f.dirty_from.min(f.durable.len());
            f.durable.truncate(from);
            f.durable.extend_from_slice(&f.data[from..]);
            f.dirty_from = CLEAN;
            f.dirty_to = 0;
        }
        f.allocated_synced = f.allocated;
        d.syncs += 1;
        Ok(())
    }
    fn sync_dir(&mut self) -> io::Result<()> {
        let mut d = self.disk();
        d.gate(true, "the directory")?;
        if d.power_lost {
            return Ok(());
        }
        d.removed.retain(|n, _| self.own(n).is_none());
        d.renamed.retain(|n, _| self.own(n).is_none());
        for (n, f) in d.files.iter_mut() {
            if self.own(n).is_some() {
                f.name_durable = true;
            }
        }
        Ok(())
    }
    /// A handle on the same disk that syncs when the step runs (what it makes durable then
    /// includes anything written after the step was taken: "at least", as the trait says).
    fn sync_step(&mut self, name: Option<&str>) -> io::Result<Option<super::SyncStep>> {
        let mut d = self.clone();
        Ok(Some(match name {
            Some(n) => {
                let n = n.to_string();
                Box::new(move || d.sync(&n))
            }
            None => Box::new(move || d.sync_dir()),
        }))
    }
    fn truncate(&mut self, name: &str, len: u64) -> io::Result<()> {
        let path = self.path(name);
        let mut d = self.disk();
        d.gate(false, name)?;
        let f = d.files.get_mut(&path).ok_or_else(|| not_found(name))?;
        let len = usize::try_from(len).map_err(|_| io::ErrorKind::InvalidInput)?;
        f.data.truncate(len);
        f.durable.truncate(len);
        if f.dirty_from >= len {
            f.dirty_from = CLEAN;
            f.dirty_to = 0;
        }
        f.dirty_to = f.dirty_to.min(len);
        f.allocated = f.allocated.min(len);
        f.allocated_synced = f.allocated_synced.min(len);
        Ok(())
    }
    fn remove(&mut self, name: &str) -> io::Result<()> {
        let path = self.path(name);
        let mut d = self.disk();
        d.gate(false, name)?;
        let mut f = d.files.remove(&path).ok_or_else(|| not_found(name))?;
        // Renamed and removed since the last `sync_dir`: a crash brings it back under its
        // last durable name.
        match d.renamed.remove(&path) {
            Some(Some(orig)) => {
                f.name_durable = true;
                d.removed.insert(orig, f);
            }
            Some(None) => {}
            None => {
                d.removed.insert(path, f);
            }
        }
        Ok(())
    }
    fn rename(&mut self, from: &str, to: &str) -> io::Result<()> {
        let (fp, tp) = (self.path(from), self.path(to));
        let mut d = self.disk();
        d.gate(false, to)?;
        if d.files.contains_key(&tp) {
            return Err(io::Error::new(
                io::ErrorKind::AlreadyExists,
                format!("{to} exists"),
            ));
        }
        let mut f = d.files.remove(&fp).ok_or_else(|| not_found(from))?;
        let orig = if f.name_durable {
            Some(fp.clone())
        } else {
            d.renamed.remove(&fp).flatten()
        };
        f.name_durable = false;
        d.renamed.insert(tp.clone(), orig);
        d.files.insert(tp, f);
        Ok(())
    }
    fn describe(&self) -> String {
        format!(
            "memdir:{}/{}",
            self.label,
            self.prefix.trim_end_matches('/')
        )
        .trim_end_matches('/')
        .to_string()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Writes at the end of what was written (what the durable store does).
    trait Append {
        fn append(&mut self, name: &str, chunks: &[&[u8]]) -> io::Result<()>;
    }

    impl Append for MemDir {
        fn append(&mut self, name: &str, chunks: &[&[u8]]) -> io::Result<()> {
            let end = self
                .disk()
                .files
                .get(&self.path(name))
                .map_or(0, |f| f.data.len());
            self.write_at(name, end as u64, chunks)
        }
    }

    #[test]
    fn an_unsynced_overwrite_is_torn_over_the_durable_bytes() {
        let mut d = MemDir::new("o");
        d.create("a").unwrap();
        d.write_at("a", 0, &[b"0123456789"]).unwrap();
        d.sync("a").unwrap();
        d.sync_dir().unwrap();
        d.write_at("a", 2, &[b"abcdef"]).unwrap();
        assert_eq!(d.read("a").unwrap(), b"01abcdef89");
        assert_eq!(
            d.unsynced_bytes(),
            6,
            "what was written, not the old bytes after it"
        );
        // Three bytes of the overwrite reached the disk; the rest shows the old bytes.
        d.crash_machine(|_, n| {
            assert_eq!(n, 6);
            Tear {
                keep: 3,
                flip: None,
            }
        });
        assert_eq!(d.read("a").unwrap(), b"01abc56789");
        d.write_at("a", 10, &[b"XY"]).unwrap();
        d.sync("a").unwrap();
        d.crash_machine(keep_none);
        assert_eq!(d.read("a").unwrap(), b"01abc56789XY");
    }

    #[test]
    fn a_crash_undoes_renames_not_yet_synced_keeping_what_the_file_holds() {
        let mut d = MemDir::new("r");
        d.create("seg-1").unwrap();
        d.append("seg-1", &[b"old"]).unwrap();
        d.sync("seg-1").unwrap();
        d.sync_dir().unwrap();
        d.rename("seg-1", "spare-1").unwrap();
        d.rename("spare-1", "seg-9").unwrap();
        d.append("seg-9", &[b"new"]).unwrap();
        d.sync("seg-9").unwrap();
        d.crash_machine(keep_none);
        assert_eq!(d.list().unwrap(), vec!["seg-1".to_string()]);
        assert_eq!(
            d.read("seg-1").unwrap(),
            b"oldnew",
            "the name came back, not the data"
        );
        // Synced names stay.
        d.rename("seg-1", "spare-1").unwrap();
        d.sync_dir().unwrap();
        d.crash_machine(keep_none);
        assert_eq!(d.list().unwrap(), vec!["spare-1".to_string()]);
    }

    #[test]
    fn preallocated_space_reads_as_zeros_and_survives_a_crash_once_synced() {
        let mut d = MemDir::new("p");
        d.create("a").unwrap();
        d.preallocate("a", 8).unwrap();
        d.write_at("a", 0, &[b"abc"]).unwrap();
        assert_eq!(d.read("a").unwrap(), b"abc\0\0\0\0\0");
        let mut buf = [9u8; 4];
        d.read_at("a", 2, &mut buf).unwrap();
        assert_eq!(&buf, b"c\0\0\0");
        assert!(d.read_at("a", 6, &mut buf).is_err(), "past the file's size");
        assert!(
            d.write_at("a", 5, &[b"x"]).is_err(),
            "only at the written end"
        );
        d.sync_dir().unwrap();
        // Not synced: the crash takes the reservation and the unsynced bytes.
        d.crash_machine(keep_none);
        assert_eq!(d.read("a").unwrap(), b"");
        d.write_at("a", 0, &[b"abc"]).unwrap();
        d.preallocate("a", 8).unwrap();
        d.sync("a").unwrap();
        d.write_at("a", 3, &[b"de"]).unwrap();
        d.crash_machine(keep_none);
        assert_eq!(
            d.read("a").unwrap(),
            b"abc\0\0\0\0\0",
            "synced: kept, as zeros"
        );
        d.truncate("a", 2).unwrap();
        assert_eq!(d.read("a").unwrap(), b"ab");
    }

    fn keep_none(_: &str, _: usize) -> Tear {
        Tear {
            keep: 0,
            flip: None,
        }
    }

    #[test]
    fn a_machine_crash_keeps_synced_bytes_and_the_chosen_prefix_of_the_rest() {
        let mut d = MemDir::new("t");
        d.create("a").unwrap();
        d.write_at("a", 0, &[b"hello"]).unwrap();
        d.sync("a").unwrap();
        d.sync_dir().unwrap();
        d.write_at("a", 5, &[b" world"]).unwrap();
        d.create("b").unwrap();
        d.write_at("b", 0, &[b"gone"]).unwrap();
        d.sync("b").unwrap();
        assert_eq!(d.unsynced_bytes(), 6);
        let mut seen = Vec::new();
        d.crash_machine(|name, unsynced| {
            seen.push((name.to_string(), unsynced));
            Tear {
                keep: 3,
                flip: Some(1),
            }
        });
        // "b" was synced but its name never was: it vanishes.
        assert_eq!(seen, vec![("a".to_string(), 6)]);
        assert_eq!(d.list().unwrap(), vec!["a".to_string()]);
        assert_eq!(
            d.read("a").unwrap(),
            [b"hello ".as_slice(), &[b'w' ^ 0x5a], b"o"].concat()
        );
    }

    /// Found by the simulator (`tests/durable.rs`, seed 23 of U-Ring's crash mix at 1000
    /// values/s): bytes a machine crash kept stayed "unsynced", so the next crash tore them
    /// again, although they had been on the disk since the first one, and the durable log
    /// then found its older segment damaged.
    #[test]
    fn what_a_machine_crash_kept_is_durable() {
        let mut d = MemDir::new("t");
        d.create("a").unwrap();
        d.append("a", &[b"abcdef"]).unwrap();
        d.crash_machine(|_, n| Tear {
            keep: n,
            flip: None,
        });
        // The file itself vanished: its name was never synced.
        assert!(d.list().unwrap().is_empty());
        d.create("a").unwrap();
        d.sync_dir().unwrap();
        d.append("a", &[b"abcdef"]).unwrap();
        d.crash_machine(|_, n| Tear {
            keep: n / 2,
            flip: None,
        });
        assert_eq!(d.read("a").unwrap(), b"abc");
        assert_eq!(d.unsynced_bytes(), 0);
        d.crash_machine(keep_none);
        assert_eq!(d.read("a").unwrap(), b"abc", "kept by the first crash");
    }

    #[test]
    fn a_process_crash_keeps_everything_written() {
        let mut d = MemDir::new("t");
        d.create("a").unwrap();
        d.append("a", &[b"abc"]).unwrap();
        d.crash_process();
        assert_eq!(d.read("a").unwrap(), b"abc");
    }

    #[test]
    fn a_removal_not_made_durable_is_undone_by_a_machine_crash() {
        let mut d = MemDir::new("t");
        d.create("old").unwrap();
        d.append("old", &[b"x"]).unwrap();
        d.sync("old").unwrap();
        d.sync_dir().unwrap();
        d.remove("old").unwrap();
        assert!(d.list().unwrap().is_empty());
        d.crash_machine(keep_none);
        assert_eq!(d.read("old").unwrap(), b"x");
        d.remove("old").unwrap();
        d.sync_dir().unwrap();
        d.crash_machine(keep_none);
        assert!(d.list().unwrap().is_empty());
    }

    #[test]
    fn syncs_during_a_power_loss_make_nothing_durable() {
        let mut d = MemDir::new("t");
        d.create("a").unwrap();
        d.append("a", &[b"12"]).unwrap();
        d.sync("a").unwrap();
        d.sync_dir().unwrap();
        d.begin_power_loss();
        d.append("a", &[b"34"]).unwrap();
        d.sync("a").unwrap();
        d.create("b").unwrap();
        d.sync_dir().unwrap();
        d.crash_machine(keep_none);
        assert_eq!(d.read("a").unwrap(), b"12");
        assert_eq!(d.list().unwrap(), vec!["a".to_string()]);
        // The power is back after the crash.
        d.append("a", &[b"56"]).unwrap();
        d.sync("a").unwrap();
        d.crash_machine(keep_none);
        assert_eq!(d.read("a").unwrap(), b"1256");
    }

    #[test]
    fn subdirectories_share_the_disk_but_not_their_names() {
        let root = MemDir::new("node-1");
        let mut r1 = root.subdir("ring-1");
        let mut r2 = root.subdir("ring-2");
        r1.create("seg").unwrap();
        r2.create("seg").unwrap();
        r1.append("seg", &[b"one"]).unwrap();
        r2.append("seg", &[b"two"]).unwrap();
        assert_eq!(r1.read("seg").unwrap(), b"one");
        assert_eq!(r2.read("seg").unwrap(), b"two");
        assert_eq!(r1.list().unwrap(), vec!["seg".to_string()]);
        assert!(
            root.list().unwrap().is_empty(),
            "the top lists only its own files"
        );
        assert_eq!(r1.describe(), "memdir:node-1/ring-1");
        // A clone of the subdirectory is the same directory.
        assert_eq!(r1.clone().read("seg").unwrap(), b"one");
        // Only ring 1 makes its file and its name durable; the crash of the disk (through
        // the top handle) loses ring 2's file.
        r1.sync("seg").unwrap();
        r1.sync_dir().unwrap();
        r2.sync("seg").unwrap();
        root.crash_machine(|path, _| {
            assert!(path.starts_with("ring-"), "{path}");
            keep_none(path, 0)
        });
        assert_eq!(r1.read("seg").unwrap(), b"one");
        assert!(r2.list().unwrap().is_empty());
        // Removing in one does not touch the other.
        r2.create("seg").unwrap();
        r1.remove("seg").unwrap();
        assert_eq!(r2.list().unwrap(), vec!["seg".to_string()]);
        assert!(r1.list().unwrap().is_empty());
    }

    /// `torn_unsynced`: a file whose name never became durable may survive a machine crash
    /// with a prefix of its bytes (the journal of ext4 or xfs committed the name, not all
    /// the data), where `crash_machine` takes it away; and every crash is a new boot.
    #[test]
    fn a_file_never_synced_may_survive_a_crash_with_a_prefix_of_its_bytes() {
        let mut d = MemDir::new("t");
        let boot = d.boot_id().unwrap();
        d.create("new").unwrap();
        d.append("new", &[b"abcdef"]).unwrap();
        d.create("gone").unwrap();
        d.append("gone", &[b"xyz"]).unwrap();
        let mut seen = Vec::new();
        d.crash_machine_fate(|name, n, named| {
            seen.push((name.to_string(), n, named));
            (name == "new").then_some(Tear {
                keep: 4,
                flip: None,
            })
        });
        assert_eq!(
            seen,
            vec![
                ("gone".to_string(), 3, false),
                ("new".to_string(), 6, false)
            ]
        );
        assert_eq!(d.list().unwrap(), vec!["new".to_string()]);
        assert_eq!(d.read("new").unwrap(), b"abcd");
        assert_ne!(d.boot_id().unwrap(), boot, "a new boot");
        // What survived is durable.
        d.crash_machine(keep_none);
        assert_eq!(d.read("new").unwrap(), b"abcd");
    }

    /// `disk_error`: the injected failure fires at its turn and keeps failing its class of
    /// operations until cleared; a failed sync loses the file's unsynced writes.
    #[test]
    fn injected_failures_fire_at_their_turn_and_a_failed_sync_loses_the_unsynced_writes() {
        let mut d = MemDir::new("e");
        d.create("a").unwrap();
        d.append("a", &[b"12"]).unwrap();
        d.sync("a").unwrap();
        d.sync_dir().unwrap();
        d.inject(1, DiskFault::WriteNoSpace);
        d.append("a", &[b"34"]).unwrap();
        let e = d.append("a", &[b"56"]).unwrap_err();
        assert_eq!(e.raw_os_error(), None, "wrapped with the name");
        assert!(e.to_string().contains("ENOSPC"), "{e}");
        assert_eq!(d.injected_fired(), Some(DiskFault::WriteNoSpace));
        assert!(d.create("b").is_err(), "the disk stays full");
        d.sync("a").unwrap();
        assert_eq!(d.read("a").unwrap(), b"1234");
        d.clear_injection();
        d.inject(0, DiskFault::SyncEio);
        d.append("a", &[b"78"]).unwrap();
        assert!(d.sync("a").is_err());
        assert_eq!(d.read("a").unwrap(), b"1234", "the unsynced write is gone");
        d.clear_injection();
        d.sync("a").unwrap();
        assert_eq!(d.injected_fired(), None);
    }

    #[test]
    fn a_wiped_disk_has_no_file_in_any_directory() {
        let root = MemDir::new("w");
        let mut r1 = root.subdir("ring-1");
        let mut top = root.clone();
        r1.create("seg").unwrap();
        top.create("marker").unwrap();
        r1.sync_dir().unwrap();
        top.sync_dir().unwrap();
        root.wipe();
        assert!(r1.list().unwrap().is_empty() && top.list().unwrap().is_empty());
        root.crash_machine(keep_none);
        assert!(r1.list().unwrap().is_empty(), "durably");
    }
}
