//! Real files under the durable acceptor log: [`OsDir`] implements `abcast_core`'s
//! [`LogDir`] over one directory. Appends are one `writev` (payloads are not copied into a
//! buffer first), `sync` is `fdatasync`, `sync_dir` fsyncs the directory so created and
//! removed segments are durable. Open files are kept (one per segment in use).

use abcast_core::storage::LogDir;
use std::collections::HashMap;
use std::fs::{self, File, OpenOptions};
use std::io::{self, IoSlice, Write};
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
                .append(true)
                .open(self.path.join(name))?;
            files.insert(name.to_string(), file);
        }
        match files.get_mut(name) {
            Some(file) => f(file),
            None => Err(io::ErrorKind::NotFound.into()),
        }
    }
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
            .append(true)
            .create_new(true)
            .open(self.path.join(name))?;
        self.files
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .insert(name.to_string(), file);
        Ok(())
    }
    fn append(&mut self, name: &str, chunks: &[&[u8]]) -> io::Result<()> {
        self.with_file(name, |f| {
            let mut slices: Vec<IoSlice<'_>> = chunks.iter().map(|c| IoSlice::new(c)).collect();
            let mut rest = &mut slices[..];
            while !rest.is_empty() {
                match f.write_vectored(rest) {
                    Ok(0) => return Err(io::ErrorKind::WriteZero.into()),
                    Ok(n) => IoSlice::advance_slices(&mut rest, n),
                    Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                    Err(e) => return Err(e),
                }
            }
            Ok(())
        })
    }
    fn sync(&mut self, name: &str) -> io::Result<()> {
        self.with_file(name, |f| f.sync_data())
    }
    fn sync_dir(&mut self) -> io::Result<()> {
        File::open(&self.path)?.sync_all()
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
        drop(s);
        // A torn write: half a record's worth of garbage at the end of the newest segment.
        let mut names: Vec<_> = fs::read_dir(&path)
            .unwrap()
            .map(|e| e.unwrap().path())
            .collect();
        names.sort();
        let last = names.last().unwrap().clone();
        let mut f = OpenOptions::new().append(true).open(&last).unwrap();
        f.write_all(b"ABL1\x40\x00\x00\x00garbage").unwrap();
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
        let _ = fs::remove_dir_all(&path);
    }
}
