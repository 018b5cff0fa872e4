//! Real files under the durable acceptor log: [`OsDir`] implements `abcast_core`'s
//! [`LogDir`] over one directory. A write is one `pwritev` at the store's offset (payloads
//! are not copied into a buffer first), `preallocate` is `fallocate` (a segment's space is
//! reserved when it is created, so writes into it change no file size), `sync` is
//! `fdatasync`, `sync_dir` fsyncs the directory so created and removed segments are
//! durable. Open files are kept (one per segment in use).
//!
//! With direct writes ([`OsDir::with_direct_writes`], what a `sync = true` store uses
//! unless `storage.direct_io = false`), the log goes around the page cache (`O_DIRECT`). A
//! write is only copied, once, into a block-aligned staging buffer, behind the bytes of the
//! file's last partial block (kept from the write before); the sync step writes the buffer,
//! padded with zeros to a whole block (the log reads zeros as its end), with one `pwrite`
//! straight to the device and then fdatasyncs, both on the driver's sync thread. Reads see
//! staged bytes, and wait for a write in flight to the same file (it may share their
//! block). Why: a synced log is written once and read back almost never, so the page cache
//! only costs here: the kernel copies every byte into it, writes it back, and reclaims it
//! once memory fills, on the cores the nodes run on, and ext4 writes back a buffered
//! fallocated range far slower than a direct write of it. fio on the project machine (two
//! writers, fdatasync after each write; `docs/benchmarks/storage/summary.md`): 4 MiB
//! writes into fresh fallocated files 585 MiB/s buffered (69 % system CPU) against 2008
//! MiB/s direct (4 %); over written blocks 1958 against 2042 MiB/s, 54 % against 5 % CPU.
//! A process crash loses what was not synced, as a machine crash does, which a store that
//! syncs before it relies on a write never notices. Where the file system refuses
//! `O_DIRECT` (tmpfs), the directory writes through the page cache as before.

use abcast_core::storage::LogDir;
use std::collections::HashMap;
use std::fs::{self, File, OpenOptions};
use std::io::{self, IoSlice};
use std::os::fd::AsRawFd;
use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Condvar, Mutex};

pub struct OsDir {
    path: PathBuf,
    /// Open segment files; `read_at` takes `&self`, hence the lock (never contended: one
    /// event loop owns the store).
    files: Mutex<HashMap<String, Open>>,
    /// Write around the page cache (see the module comment).
    direct: bool,
    /// Direct writes handed to sync steps and not yet written.
    in_flight: Arc<InFlight>,
    /// Staging buffers back from written steps, to be filled again (allocating megabytes
    /// per group would fault in fresh pages every time).
    pool: Arc<Mutex<Vec<AlignedBuf>>>,
}

/// One open file of the directory.
struct Open {
    /// Buffered: reads, buffered writes, fallocate, fdatasync, truncate.
    file: File,
    /// The same file opened `O_DIRECT`, when direct writes are on and the file system
    /// takes them.
    direct: Option<Arc<File>>,
    /// Direct mode: what was written since the last sync step, in memory.
    staged: Option<Staged>,
    /// Direct mode: the file's last partial block as the writes so far leave it: its
    /// offset (a multiple of `BLOCK`) and its bytes up to the end of the last write (fewer
    /// than `BLOCK`). The next write, which starts there, rewrites them in front of its own.
    tail: Option<(u64, Vec<u8>)>,
}

/// Bytes written to a file in direct mode and not yet on their way to it: `buf[..len]`
/// belongs at `at` (a multiple of `BLOCK`); it starts with the bytes of that block that were
/// there before.
struct Staged {
    at: u64,
    buf: AlignedBuf,
    len: usize,
}

impl Staged {
    fn end(&self) -> u64 {
        self.at + self.len as u64
    }

    /// The whole blocks to write: the bytes, then zeros to the block's end (the log reads
    /// zeros as its end).
    fn padded(&mut self) -> &[u8] {
        let padded = self.len.div_ceil(BLOCK) * BLOCK;
        self.buf.reserve(padded);
        let b = self.buf.as_mut();
        b[self.len..padded].fill(0);
        &b[..padded]
    }

    /// Copies the part of `[offset, offset + out.len())` this holds into `out`.
    fn overlay(&self, offset: u64, out: &mut [u8]) {
        let from = offset.max(self.at);
        let to = (offset + out.len() as u64).min(self.end());
        if from < to {
            let src = &self.buf.as_ref()[(from - self.at) as usize..(to - self.at) as usize];
            out[(from - offset) as usize..(to - offset) as usize].copy_from_slice(src);
        }
    }
}

/// Direct writes on the sync thread, by file name: a reader or an in-place write of the
/// same file waits until they are on the file (they may share its last block).
#[derive(Default)]
struct InFlight {
    names: Mutex<Vec<String>>,
    written: Condvar,
}

impl InFlight {
    fn wait_idle(&self, name: &str) {
        let mut names = self.names.lock().unwrap_or_else(|p| p.into_inner());
        while names.iter().any(|n| n == name) {
            names = self.written.wait(names).unwrap_or_else(|p| p.into_inner());
        }
    }
}

/// Takes a file's name off the in-flight list when its write is done, or dropped unrun.
struct InFlightGuard {
    in_flight: Arc<InFlight>,
    name: String,
}

impl Drop for InFlightGuard {
    fn drop(&mut self) {
        let mut names = self
            .in_flight
            .names
            .lock()
            .unwrap_or_else(|p| p.into_inner());
        if let Some(i) = names.iter().position(|n| *n == self.name) {
            names.swap_remove(i);
        }
        self.in_flight.written.notify_all();
    }
}

/// Direct writes are aligned to this (the device's physical block; a multiple of every
/// logical block size in use).
const BLOCK: usize = 4096;

/// A file's staged bytes are written in place beyond this (bounds the memory a store that
/// syncs rarely holds).
const STAGED_BYTES_MAX: usize = 64 << 20;

/// Staging buffers kept for reuse.
const POOL_MAX: usize = 4;

impl OsDir {
    /// Opens (creating if needed) the directory.
    pub fn open(path: &Path) -> io::Result<OsDir> {
        fs::create_dir_all(path)?;
        Ok(OsDir {
            path: path.to_path_buf(),
            files: Mutex::new(HashMap::new()),
            direct: false,
            in_flight: Arc::default(),
            pool: Arc::default(),
        })
    }

    /// Writes go around the page cache from now on, and reach the file in the sync step
    /// (files the file system lets us open `O_DIRECT`; the others as before). For a store
    /// that syncs before it relies on a write (`sync = true`): a process crash loses what
    /// was not synced, as a machine crash does.
    pub fn with_direct_writes(mut self) -> OsDir {
        self.direct = true;
        self
    }

    fn open_file(&self, name: &str, create: bool) -> io::Result<Open> {
        let path = self.path.join(name);
        let mut o = OpenOptions::new();
        o.read(true).write(true);
        if create {
            o.create_new(true);
        }
        let file = o.open(&path)?;
        let direct = if self.direct {
            use std::os::unix::fs::OpenOptionsExt;
            match OpenOptions::new()
                .write(true)
                .custom_flags(libc::O_DIRECT)
                .open(&path)
            {
                Ok(f) => Some(Arc::new(f)),
                // The file system does not do direct I/O (tmpfs): buffered writes.
                Err(e) if e.raw_os_error() == Some(libc::EINVAL) => None,
                Err(e) => return Err(e),
            }
        } else {
            None
        };
        Ok(Open {
            file,
            direct,
            staged: None,
            tail: None,
        })
    }

    fn with_open<T>(
        &self,
        name: &str,
        f: impl FnOnce(&mut Open) -> io::Result<T>,
    ) -> io::Result<T> {
        check_name(name)?;
        let mut files = self.files.lock().unwrap_or_else(|p| p.into_inner());
        if !files.contains_key(name) {
            let open = self.open_file(name, false)?;
            files.insert(name.to_string(), open);
        }
        match files.get_mut(name) {
            Some(open) => f(open),
            None => Err(io::ErrorKind::NotFound.into()),
        }
    }

    fn with_file<T>(
        &self,
        name: &str,
        f: impl FnOnce(&mut File) -> io::Result<T>,
    ) -> io::Result<T> {
        self.with_open(name, |o| f(&mut o.file))
    }

    fn buffer(&self) -> AlignedBuf {
        self.pool
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .pop()
            .unwrap_or_default()
    }

    /// Direct mode: stages `chunks` for `offset`, behind what is staged when it ends there;
    /// otherwise writes that out first and starts with the bytes of `offset`'s block
    /// before it.
    fn stage(&self, name: &str, o: &mut Open, offset: u64, chunks: &[&[u8]]) -> io::Result<()> {
        let body: usize = chunks.iter().map(|c| c.len()).sum();
        if o.staged.as_ref().is_some_and(|s| s.end() != offset) {
            self.write_staged(name, o)?;
        }
        if o.staged.is_none() {
            let at = offset - offset % BLOCK as u64;
            let prefix = (offset - at) as usize;
            let mut buf = self.buffer();
            buf.reserve(prefix + body);
            match &o.tail {
                Some((t, bytes)) if *t == at && bytes.len() >= prefix => {
                    buf.as_mut()[..prefix].copy_from_slice(&bytes[..prefix]);
                }
                _ if prefix > 0 => {
                    // Nothing kept (a reopened file, a truncate): read it back, once
                    // the writes in flight are on the file.
                    self.in_flight.wait_idle(name);
                    o.file.read_exact_at(&mut buf.as_mut()[..prefix], at)?;
                }
                _ => {}
            }
            o.staged = Some(Staged {
                at,
                buf,
                len: prefix,
            });
        }
        let Some(st) = o.staged.as_mut() else {
            return Err(io::Error::other("nothing staged"));
        };
        st.buf.reserve(st.len + body);
        for c in chunks {
            st.buf.as_mut()[st.len..st.len + c.len()].copy_from_slice(c);
            st.len += c.len();
        }
        let end = st.end();
        let last = end - end % BLOCK as u64;
        let from = (last - st.at) as usize;
        o.tail = Some((last, st.buf.as_ref()[from..st.len].to_vec()));
        if st.len > STAGED_BYTES_MAX {
            self.write_staged(name, o)?;
        }
        Ok(())
    }

    /// Direct mode: writes what is staged for the file now, in place, after the writes in
    /// flight.
    fn write_staged(&self, name: &str, o: &mut Open) -> io::Result<()> {
        let (Some(mut st), Some(direct)) = (o.staged.take(), o.direct.as_ref()) else {
            return Ok(());
        };
        self.in_flight.wait_idle(name);
        let at = st.at;
        let r = pwrite_all(direct, st.padded(), at);
        self.recycle(st.buf);
        r
    }

    fn recycle(&self, buf: AlignedBuf) {
        recycle(&self.pool, buf);
    }
}

fn recycle(pool: &Mutex<Vec<AlignedBuf>>, buf: AlignedBuf) {
    let mut pool = pool.lock().unwrap_or_else(|p| p.into_inner());
    if pool.len() < POOL_MAX {
        pool.push(buf);
    }
}

/// One aligned `pwrite` (looped over short writes, which stay whole blocks).
fn pwrite_all(f: &File, buf: &[u8], at: u64) -> io::Result<()> {
    let mut done = 0;
    while done < buf.len() {
        match f.write_at(&buf[done..], at + done as u64) {
            Ok(0) => return Err(io::ErrorKind::WriteZero.into()),
            Ok(n) if n % BLOCK != 0 => {
                return Err(io::Error::other(format!(
                    "a direct write stopped after {n} bytes, not a whole block"
                )));
            }
            Ok(n) => done += n,
            Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
            Err(e) => return Err(e),
        }
    }
    Ok(())
}

/// A growable byte buffer whose start is aligned to `BLOCK` (what `O_DIRECT` asks of the
/// memory it writes from).
#[derive(Default)]
struct AlignedBuf {
    /// Over-allocated by `BLOCK` bytes; the aligned part starts at `start`.
    raw: Vec<u8>,
    start: usize,
}

impl AlignedBuf {
    fn capacity(&self) -> usize {
        self.raw.len().saturating_sub(BLOCK)
    }

    /// Grows to at least `len` bytes, keeping the bytes it holds.
    fn reserve(&mut self, len: usize) {
        if self.capacity() >= len {
            return;
        }
        let mut raw = vec![0; (len + BLOCK).next_power_of_two().max(1 << 20)];
        let start = raw.as_ptr().align_offset(BLOCK);
        let keep = self.capacity();
        raw[start..start + keep].copy_from_slice(&self.raw[self.start..self.start + keep]);
        self.raw = raw;
        self.start = start;
    }

    fn as_ref(&self) -> &[u8] {
        &self.raw[self.start..self.start + self.capacity()]
    }

    fn as_mut(&mut self) -> &mut [u8] {
        let cap = self.capacity();
        &mut self.raw[self.start..self.start + cap]
    }
}

/// One `pwritev(2)` of as many slices as the OS takes at once (IOV_MAX); returns the bytes
/// written.
fn pwritev(f: &File, slices: &[IoSlice<'_>], offset: u64) -> io::Result<usize> {
    const IOV_MAX: usize = 1024;
    let n = slices.len().min(IOV_MAX);
    let offset = libc::off_t::try_from(offset).map_err(|_| io::ErrorKind::InvalidInput)?;
    // SAFETY: `IoSlice` is ABI-compatible with `struct iovec` on Unix (std guarantees it);
    // the pointer and count describe `n` live slices borrowed for the call, and the file
    // descriptor is owned by `f`, open for the duration of the call.
    let r = unsafe {
        libc::pwritev(
            f.as_raw_fd(),
            slices.as_ptr().cast::<libc::iovec>(),
            n as libc::c_int,
            offset,
        )
    };
    if r < 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(r as usize)
}

/// Only plain names inside the directory.
fn check_name(name: &str) -> io::Result<()> {
    if name.is_empty() || name.contains('/') || name == "." || name == ".." {
        return Err(io::Error::new(
            io::ErrorKind::InvalidInput,
            format!("{name:?} is not a file name"),
        ));
    }
    Ok(())
}

impl LogDir for OsDir {
    fn list(&self) -> io::Result<Vec<String>> {
        let mut out = Vec::new();
        for e in fs::read_dir(&self.path)? {
            let e = e?;
            if e.file_type()?.is_file()
                && let Some(n) = e.file_name().to_str()
            {
                out.push(n.to_string());
            }
        }
        Ok(out)
    }
    fn read(&self, name: &str) -> io::Result<Vec<u8>> {
        check_name(name)?;
        self.in_flight.wait_idle(name);
        let mut v = fs::read(self.path.join(name))?;
        let files = self.files.lock().unwrap_or_else(|p| p.into_inner());
        if let Some(st) = files.get(name).and_then(|o| o.staged.as_ref()) {
            if (v.len() as u64) < st.end() {
                v.resize(st.end() as usize, 0);
            }
            st.overlay(0, &mut v);
        }
        Ok(v)
    }
    fn read_at(&self, name: &str, offset: u64, buf: &mut [u8]) -> io::Result<()> {
        self.with_open(name, |o| {
            let end = offset + buf.len() as u64;
            let Some(st) = &o.staged else {
                self.in_flight.wait_idle(name);
                return o.file.read_exact_at(buf, offset);
            };
            // Staged bytes are newer than the file's; the rest comes from the file once
            // the writes in flight are on it.
            if offset < st.at || end > st.end() {
                self.in_flight.wait_idle(name);
                if offset < st.at {
                    let n = (st.at.min(end) - offset) as usize;
                    o.file.read_exact_at(&mut buf[..n], offset)?;
                }
                if end > st.end() {
                    let from = st.end().max(offset);
                    let i = (from - offset) as usize;
                    o.file.read_exact_at(&mut buf[i..], from)?;
                }
            }
            st.overlay(offset, buf);
            Ok(())
        })
    }
    fn create(&mut self, name: &str) -> io::Result<()> {
        check_name(name)?;
        let open = self.open_file(name, true)?;
        self.files
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .insert(name.to_string(), open);
        Ok(())
    }
    fn write_at(&mut self, name: &str, offset: u64, chunks: &[&[u8]]) -> io::Result<()> {
        self.with_open(name, |o| {
            if o.direct.is_some() {
                return self.stage(name, o, offset, chunks);
            }
            let f = &o.file;
            let mut slices: Vec<IoSlice<'_>> = chunks.iter().map(|c| IoSlice::new(c)).collect();
            let mut rest = &mut slices[..];
            let mut at = offset;
            while !rest.is_empty() {
                match pwritev(f, rest, at) {
                    Ok(0) => return Err(io::ErrorKind::WriteZero.into()),
                    Ok(n) => {
                        IoSlice::advance_slices(&mut rest, n);
                        at += n as u64;
                    }
                    Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                    Err(e) => return Err(e),
                }
            }
            Ok(())
        })
    }
    fn preallocate(&mut self, name: &str, len: u64) -> io::Result<()> {
        let len = libc::off_t::try_from(len).map_err(|_| io::ErrorKind::InvalidInput)?;
        self.with_file(name, |f| {
            // SAFETY: fallocate(2) on a file descriptor this `File` owns and keeps open for
            // the call; mode 0 allocates and extends the size, touching no memory of ours.
            let r = unsafe { libc::fallocate(f.as_raw_fd(), 0, 0, len) };
            if r == 0 {
                return Ok(());
            }
            let e = io::Error::last_os_error();
            match e.raw_os_error() {
                Some(libc::EOPNOTSUPP) | Some(libc::ENOSYS) => {
                    Err(io::Error::new(io::ErrorKind::Unsupported, e))
                }
                _ => Err(e),
            }
        })
    }
    fn sync(&mut self, name: &str) -> io::Result<()> {
        self.with_open(name, |o| {
            self.write_staged(name, o)?;
            self.in_flight.wait_idle(name);
            o.file.sync_data()
        })
    }
    fn sync_dir(&mut self) -> io::Result<()> {
        File::open(&self.path)?.sync_all()
    }
    /// The fdatasync (or directory fsync) on a duplicate of the descriptor, for the
    /// driver's sync thread: it covers every write made before it runs.
    fn sync_step(
        &mut self,
        name: Option<&str>,
    ) -> io::Result<Option<abcast_core::storage::SyncStep>> {
        Ok(Some(match name {
            Some(n) => {
                let (f, staged) = self.with_open(n, |o| {
                    let staged = match (o.staged.take(), &o.direct) {
                        (Some(st), Some(direct)) => Some((st, Arc::clone(direct))),
                        _ => None,
                    };
                    Ok((o.file.try_clone()?, staged))
                })?;
                let Some((mut st, direct)) = staged else {
                    return Ok(Some(Box::new(move || f.sync_data())));
                };
                // The direct write goes with the fdatasync: the loop only copied the bytes.
                self.in_flight
                    .names
                    .lock()
                    .unwrap_or_else(|p| p.into_inner())
                    .push(n.to_string());
                let guard = InFlightGuard {
                    in_flight: Arc::clone(&self.in_flight),
                    name: n.to_string(),
                };
                let pool = Arc::clone(&self.pool);
                Box::new(move || {
                    let at = st.at;
                    pwrite_all(&direct, st.padded(), at)?;
                    drop(guard);
                    recycle(&pool, st.buf);
                    f.sync_data()
                })
            }
            None => {
                let d = File::open(&self.path)?;
                Box::new(move || d.sync_all())
            }
        }))
    }
    fn pads_writes(&self) -> bool {
        self.direct
    }
    fn truncate(&mut self, name: &str, len: u64) -> io::Result<()> {
        self.with_open(name, |o| {
            self.write_staged(name, o)?;
            self.in_flight.wait_idle(name);
            o.tail = None;
            o.file.set_len(len)
        })
    }
    fn remove(&mut self, name: &str) -> io::Result<()> {
        check_name(name)?;
        self.in_flight.wait_idle(name);
        self.files
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .remove(name);
        fs::remove_file(self.path.join(name))
    }
    fn rename(&mut self, from: &str, to: &str) -> io::Result<()> {
        check_name(from)?;
        check_name(to)?;
        self.in_flight.wait_idle(from);
        let dest = self.path.join(to);
        if dest.exists() {
            return Err(io::Error::new(
                io::ErrorKind::AlreadyExists,
                format!("{to} exists"),
            ));
        }
        let mut files = self.files.lock().unwrap_or_else(|p| p.into_inner());
        fs::rename(self.path.join(from), dest)?;
        // The open handle follows the file (same inode): keep it under the new name.
        if let Some(f) = files.remove(from) {
            files.insert(to.to_string(), f);
        }
        Ok(())
    }
    fn describe(&self) -> String {
        self.path.display().to_string()
    }
    /// Linux's boot id: a new random UUID at every boot. `None` where there is none (not
    /// Linux, no procfs): a log without fdatasync then cannot tell a reboot.
    fn boot_id(&self) -> io::Result<Option<String>> {
        match std::fs::read_to_string("/proc/sys/kernel/random/boot_id") {
            Ok(id) => Ok(Some(id.trim().to_string())),
            Err(e) if e.kind() == io::ErrorKind::NotFound => Ok(None),
            Err(e) => Err(e),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use abcast_core::storage::{Accepted, AcceptorStore, DurableOptions, DurableStore};
    use abcast_core::{Ballot, Decree, NodeId};

    fn tmp(name: &str) -> PathBuf {
        let p = std::env::temp_dir().join(format!("abcast-disk-{name}-{}", std::process::id()));
        let _ = fs::remove_dir_all(&p);
        p
    }

    fn opts() -> DurableOptions {
        DurableOptions {
            sync: true,
            segment_bytes: 1 << 20,
            cache_instances: 64,
            cache_bytes: 1 << 20,
        }
    }

    #[test]
    fn a_durable_store_on_real_files_recovers_and_cuts_a_torn_tail() {
        let path = tmp("torn");
        let (mut s, _) = DurableStore::open(OsDir::open(&path).unwrap(), opts()).unwrap();
        s.set_promised(Ballot::new(7, NodeId(2), 0));
        for i in 1..=3 {
            let a = Accepted {
                ballot: Ballot::new(7, NodeId(2), 0),
                decree: Decree::Meta {
                    weight: i as u32,
                    data: bytes::Bytes::new(),
                },
                decided: false,
            };
            assert!(s.put(i, a));
        }
        s.sync().unwrap();
        let (name, end) = s.write_end();
        drop(s);
        // The segment was preallocated: it is a full segment long, zeros after the records.
        let last = path.join(&name);
        assert_eq!(fs::metadata(&last).unwrap().len(), opts().segment_bytes);
        // A torn write: half a record's worth of garbage right after the last record.
        let f = OpenOptions::new().write(true).open(&last).unwrap();
        f.write_all_at(b"ABL1\x40\x00\x00\x00garbage", end).unwrap();
        drop(f);
        let (s, rec) = DurableStore::open(OsDir::open(&path).unwrap(), opts()).unwrap();
        let torn = rec.torn_tail.expect("torn tail found");
        assert_eq!(torn.bytes_cut, 15);
        assert!(
            torn.file
                .contains(last.file_name().unwrap().to_str().unwrap())
        );
        assert_eq!(s.promised(), Ballot::new(7, NodeId(2), 0));
        assert_eq!(s.range(1, 10).len(), 3);
        assert_eq!(
            fs::metadata(&last).unwrap().len(),
            end,
            "cut right after the last whole record, preallocated zeros included"
        );
        drop(s);
        // Reopened again: the cut segment is an old one now, and a clean one.
        let (_, rec) = DurableStore::open(OsDir::open(&path).unwrap(), opts()).unwrap();
        assert_eq!(rec.torn_tail, None);
        let _ = fs::remove_dir_all(&path);
    }

    #[test]
    fn a_preallocated_segment_reopens_without_a_torn_tail_and_gives_its_space_back() {
        let path = tmp("prealloc");
        let (mut s, _) = DurableStore::open(OsDir::open(&path).unwrap(), opts()).unwrap();
        let a = Accepted {
            ballot: Ballot::new(1, NodeId(0), 0),
            decree: Decree::Meta {
                weight: 1,
                data: bytes::Bytes::new(),
            },
            decided: false,
        };
        assert!(s.put(1, a));
        s.sync().unwrap();
        let (name, end) = s.write_end();
        assert_eq!(
            s.log_bytes(),
            opts().segment_bytes,
            "the reserved segment is on disk"
        );
        drop(s);
        let (s, rec) = DurableStore::open(OsDir::open(&path).unwrap(), opts()).unwrap();
        assert_eq!(
            rec.torn_tail, None,
            "zeros after the records are reserved space"
        );
        assert_eq!(s.range(1, 2).len(), 1);
        assert_eq!(
            fs::metadata(path.join(&name)).unwrap().len(),
            end,
            "the old segment's reserved space was given back"
        );
        let _ = fs::remove_dir_all(&path);
    }

    #[test]
    fn direct_writes_of_any_length_at_any_offset_read_back_exactly() {
        let path = tmp("direct-raw");
        let mut d = OsDir::open(&path).unwrap().with_direct_writes();
        d.create("seg").unwrap();
        d.preallocate("seg", 64 << 10).unwrap();
        let mut want: Vec<u8> = Vec::new();
        // Lengths that start and end inside blocks, span several, and end on a boundary.
        for (k, len) in [1usize, 10, 4085, 4096, 5000, 3, 12_000, 7]
            .iter()
            .enumerate()
        {
            let a = vec![k as u8 + 1; len / 2];
            let b = vec![k as u8 + 101; len - len / 2];
            d.write_at("seg", want.len() as u64, &[&a, &b]).unwrap();
            want.extend_from_slice(&a);
            want.extend_from_slice(&b);
            let mut got = vec![0; want.len()];
            d.read_at("seg", 0, &mut got).unwrap();
            assert_eq!(got, want, "after a write of {len} bytes");
        }
        d.sync("seg").unwrap();
        drop(d);
        // A fresh directory has no last block in memory: it reads it back to append.
        let mut d = OsDir::open(&path).unwrap().with_direct_writes();
        d.write_at("seg", want.len() as u64, &[b"after reopen"])
            .unwrap();
        want.extend_from_slice(b"after reopen");
        let all = d.read("seg").unwrap();
        assert_eq!(&all[..want.len()], &want[..]);
        assert!(
            all[want.len()..].iter().all(|b| *b == 0),
            "the padding and the reserved space read as zeros"
        );
        // A truncate forgets the kept block: the next write reads what is left.
        d.truncate("seg", 4100).unwrap();
        want.truncate(4100);
        d.write_at("seg", 4100, &[b"xyz"]).unwrap();
        want.extend_from_slice(b"xyz");
        let mut got = vec![0; want.len()];
        d.read_at("seg", 0, &mut got).unwrap();
        assert_eq!(got, want);
        let _ = fs::remove_dir_all(&path);
    }

    #[test]
    fn a_durable_store_with_direct_writes_recovers_every_synced_value() {
        use abcast_core::{Batch, ValueId};
        use bytes::Bytes;
        let path = tmp("direct-store");
        let vote = |i: u64| Accepted {
            ballot: Ballot::new(3, NodeId(1), 0),
            decree: Decree::Values(Batch::single(
                ValueId {
                    node: NodeId(1),
                    seq: i,
                },
                Bytes::from(vec![i as u8; 100 + (i as usize * 977) % 9000]),
            )),
            decided: i.is_multiple_of(3),
        };
        let o = DurableOptions {
            segment_bytes: 256 << 10,
            cache_instances: 1024,
            cache_bytes: 64 << 20,
            ..opts()
        };
        let (mut s, _) =
            DurableStore::open(OsDir::open(&path).unwrap().with_direct_writes(), o.clone())
                .unwrap();
        for i in 1..=120u64 {
            assert!(s.put(i, vote(i)));
            if i.is_multiple_of(7) {
                s.sync().unwrap();
            }
        }
        s.sync().unwrap();
        drop(s);
        let (mut s, rec) =
            DurableStore::open(OsDir::open(&path).unwrap().with_direct_writes(), o.clone())
                .unwrap();
        assert_eq!(rec.torn_tail, None);
        for i in 121..=200u64 {
            assert!(s.put(i, vote(i)));
        }
        s.sync().unwrap();
        drop(s);
        // Read back through the page cache: what the direct writes left on disk.
        let (s, rec) = DurableStore::open(OsDir::open(&path).unwrap(), o).unwrap();
        assert_eq!(rec.torn_tail, None);
        let got = s.range(1, 201);
        assert_eq!(got.len(), 200);
        for (i, a) in got {
            assert_eq!(a, vote(i), "instance {i}");
        }
        let _ = fs::remove_dir_all(&path);
    }

    #[test]
    fn a_direct_write_reaches_the_file_in_its_sync_step_and_readers_wait_for_it() {
        let path = tmp("direct-step");
        let mut d = OsDir::open(&path).unwrap().with_direct_writes();
        d.create("seg").unwrap();
        d.preallocate("seg", 1 << 20).unwrap();
        let first = vec![7u8; 5000];
        d.write_at("seg", 0, &[&first]).unwrap();
        // Staged only: the file has zeros there, a read sees the write.
        let mut on_disk = vec![1u8; 5000];
        File::open(path.join("seg"))
            .unwrap()
            .read_exact_at(&mut on_disk, 0)
            .unwrap();
        assert!(
            on_disk.iter().all(|b| *b == 0),
            "not written before the step"
        );
        let mut got = vec![0u8; 5000];
        d.read_at("seg", 0, &mut got).unwrap();
        assert_eq!(got, first);
        let step = d.sync_step(Some("seg")).unwrap().expect("a step");
        // The next group stages behind it (sharing its last block) while it is in flight.
        let second = vec![9u8; 3000];
        d.write_at("seg", 5000, &[&second]).unwrap();
        let runner = std::thread::spawn(move || {
            std::thread::sleep(std::time::Duration::from_millis(50));
            step()
        });
        // This read needs the block in flight: it waits for the step's write.
        let mut got = vec![0u8; 8000];
        d.read_at("seg", 0, &mut got).unwrap();
        assert_eq!(&got[..5000], &first[..]);
        assert_eq!(&got[5000..], &second[..]);
        runner.join().unwrap().unwrap();
        d.sync("seg").unwrap();
        let all = fs::read(path.join("seg")).unwrap();
        assert_eq!(&all[..5000], &first[..]);
        assert_eq!(&all[5000..8000], &second[..]);
        assert!(all[8000..].iter().all(|b| *b == 0));
        // A step never run (the sync thread gone) lets readers go on.
        d.write_at("seg", 8000, &[b"lost"]).unwrap();
        drop(d.sync_step(Some("seg")).unwrap());
        let mut got = vec![0u8; 4];
        d.read_at("seg", 8000, &mut got).unwrap();
        let _ = fs::remove_dir_all(&path);
    }
}
