//! The one directory a durable store writes to, as a trait, so the log format and its recovery
//! live in this I/O-free crate and run unchanged over real files (`abcast::disk::OsDir`) and
//! over the simulator's disk ([`super::MemDir`], one per node in `abcast_sim`), which loses
//! unsynced writes, tears the last write and flips bytes when a node's machine crashes.
//!
//! The contract is POSIX's, kept small: `append` writes through the OS (a process crash
//! keeps it), `sync` makes a file's data durable (a machine crash keeps it: fdatasync), and
//! `sync_dir` makes created and removed names durable.

use std::io;

pub trait LogDir: Send {
    /// The names of the files in the directory, in any order.
    fn list(&self) -> io::Result<Vec<String>>;
    /// A whole file.
    fn read(&self, name: &str) -> io::Result<Vec<u8>>;
    /// Exactly `buf.len()` bytes at `offset` (an error if the file is shorter).
    fn read_at(&self, name: &str, offset: u64, buf: &mut [u8]) -> io::Result<()>;
    /// Creates an empty file; an error if it exists.
    fn create(&mut self, name: &str) -> io::Result<()>;
    /// Appends the chunks, in order, at the end of the file (one vectored write where the
    /// OS allows).
    fn append(&mut self, name: &str, chunks: &[&[u8]]) -> io::Result<()>;
    /// Makes the file's data durable.
    fn sync(&mut self, name: &str) -> io::Result<()>;
    /// Makes the names created and removed so far durable.
    fn sync_dir(&mut self) -> io::Result<()>;
    /// Cuts the file to `len` bytes.
    fn truncate(&mut self, name: &str, len: u64) -> io::Result<()>;
    fn remove(&mut self, name: &str) -> io::Result<()>;
    /// Where the directory is, for error messages.
    fn describe(&self) -> String;
}
