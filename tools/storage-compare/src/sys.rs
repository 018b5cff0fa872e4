//! The few system calls the benchmark needs: CPU time, allocated bytes of a directory,
//! dropping a directory's files from the page cache, and a crash.

use std::fs;
use std::io;
use std::os::unix::fs::MetadataExt;
use std::os::unix::io::AsRawFd;
use std::os::unix::process::ExitStatusExt;
use std::path::Path;
use std::process::ExitStatus;

/// User + system CPU seconds of this process, all threads (getrusage RUSAGE_SELF).
pub fn cpu_seconds() -> f64 {
    // SAFETY: getrusage writes into the struct we pass and reads nothing else.
    let mut ru: libc::rusage = unsafe { std::mem::zeroed() };
    let rc = unsafe { libc::getrusage(libc::RUSAGE_SELF, &mut ru) };
    if rc != 0 {
        return f64::NAN;
    }
    let tv = |t: libc::timeval| t.tv_sec as f64 + t.tv_usec as f64 / 1e6;
    tv(ru.ru_utime) + tv(ru.ru_stime)
}

/// Bytes allocated on disk by the files under `dir` (st_blocks × 512), recursively.
pub fn disk_bytes(dir: &Path) -> u64 {
    let Ok(rd) = fs::read_dir(dir) else {
        return 0;
    };
    let mut total = 0;
    for e in rd.flatten() {
        let Ok(md) = e.metadata() else { continue };
        if md.is_dir() {
            total += disk_bytes(&e.path());
        } else {
            total += md.blocks() * 512;
        }
    }
    total
}

/// Writes back and drops the page cache of every file under `dir`, so that the next open
/// reads from the disk (posix_fadvise DONTNEED: only these files, not the whole cache).
pub fn drop_cache(dir: &Path) -> io::Result<()> {
    for e in fs::read_dir(dir)? {
        let e = e?;
        let md = e.metadata()?;
        if md.is_dir() {
            drop_cache(&e.path())?;
        } else if md.is_file() {
            let f = fs::File::open(e.path())?;
            f.sync_all()?;
            // SAFETY: a valid open descriptor; the call only advises the kernel.
            let rc = unsafe { libc::posix_fadvise(f.as_raw_fd(), 0, 0, libc::POSIX_FADV_DONTNEED) };
            if rc != 0 {
                return Err(io::Error::from_raw_os_error(rc));
            }
        }
    }
    Ok(())
}

/// Ends this process as a crash would: no destructor runs, nothing is closed cleanly.
pub fn kill_self() -> ! {
    // SAFETY: signals our own process.
    unsafe {
        libc::kill(libc::getpid(), libc::SIGKILL);
    }
    std::process::abort()
}

pub fn killed(status: &ExitStatus) -> bool {
    status.signal() == Some(libc::SIGKILL)
}

/// Whether `path` is on tmpfs (where fdatasync costs nothing).
pub fn is_tmpfs(path: &Path) -> bool {
    let Ok(c) = std::ffi::CString::new(path.as_os_str().as_encoded_bytes()) else {
        return false;
    };
    // SAFETY: statfs fills the struct; the path is a valid C string.
    let mut st: libc::statfs = unsafe { std::mem::zeroed() };
    let rc = unsafe { libc::statfs(c.as_ptr(), &mut st) };
    rc == 0 && st.f_type == libc::TMPFS_MAGIC
}
