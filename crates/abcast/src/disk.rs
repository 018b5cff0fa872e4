//! Real files under the durable acceptor log: [`OsDir`] implements `abcast_core`'s
//! [`LogDir`] over one directory. A write is one `pwritev` at the store's offset (payloads
//! are not copied into a buffer first), `preallocate` is `fallocate` (a segment's space is
//! reserved when it is created, so writes into it change no file size), `sync` is
//! `fdatasync`, `sync_dir` fsyncs the directory so created and removed segments are
//! durable. Open files are kept (one per segment in use).

use abcast_core::storage::LogDir;
use std::collections::HashMap;
use std::fs::{self, File, OpenOptions};
use std::io::{self, IoSlice};
use std::os::fd::AsRawFd;
use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};
use std::sync::Mutex;

pub struct OsDir {
    path: PathBuf,
    /// Open segment files; `read_at` takes `&self`, hence the lock (never contended: one
    /// event loop owns the store).
    files: Mutex<HashMap<String, File>>,
}

impl OsDir {
    /// Opens (creating if needed) the directory.
    pub fn open(path: &Path) -> io::Result<OsDir> {
        fs::create_dir_all(path)?;
        Ok(OsDir {
            path: path.to_path_buf(),
            files: Mutex::new(HashMap::new()),
        })
    }

    fn with_file<T>(
        &self,
        name: &str,
        f: impl FnOnce(&mut File) -> io::Result<T>,
    ) -> io::Result<T> {
        check_name(name)?;
        let mut files = self.files.lock().unwrap_or_else(|p| p.into_inner());
        if !files.contains_key(name) {
            let file = OpenOptions::new()
                .read(true)
                .write(true)
                .open(self.path.join(name))?;
            files.insert(name.to_string(), file);
        }
        match files.get_mut(name) {
            Some(file) => f(file),
            None => Err(io::ErrorKind::NotFound.into()),
        }
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
        fs::read(self.path.join(name))
    }
    fn read_at(&self, name: &str, offset: u64, buf: &mut [u8]) -> io::Result<()> {
        self.with_file(name, |f| f.read_exact_at(buf, offset))
    }
    fn create(&mut self, name: &str) -> io::Result<()> {
        check_name(name)?;
        let file = OpenOptions::new()
            .read(true)
            .write(true)
            .create_new(true)
            .open(self.path.join(name))?;
        self.files
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .insert(name.to_string(), file);
        Ok(())
    }
    fn write_at(&mut self, name: &str, offset: u64, chunks: &[&[u8]]) -> io::Result<()> {
        self.with_file(name, |f| {
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
        self.with_file(name, |f| f.sync_data())
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
                let f = self.with_file(n, |f| f.try_clone())?;
                Box::new(move || f.sync_data())
            }
            None => {
                let d = File::open(&self.path)?;
                Box::new(move || d.sync_all())
            }
        }))
    }
    fn truncate(&mut self, name: &str, len: u64) -> io::Result<()> {
        self.with_file(name, |f| f.set_len(len))
    }
    fn remove(&mut self, name: &str) -> io::Result<()> {
        check_name(name)?;
        self.files
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .remove(name);
        fs::remove_file(self.path.join(name))
    }
    fn rename(&mut self, from: &str, to: &str) -> io::Result<()> {
        check_name(from)?;
        check_name(to)?;
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
                decree: Decree::Skip(i as u32),
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
            decree: Decree::Skip(1),
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
}
