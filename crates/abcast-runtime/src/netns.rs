//! Network namespaces: a node (or a test's cluster) runs its sockets inside one, for the
//! emulated LAN of the benchmarks (`abcast-harness`, `bench/lan.rs`) and the multicast tests.

use std::fs::File;
use std::path::Path;

/// Moves the calling thread into the network namespace at `path`: sockets it opens from
/// then on live there. Other threads are not affected.
pub fn enter_netns(path: &Path) -> Result<(), String> {
    let f = File::open(path).map_err(|e| format!("cannot open {}: {e}", path.display()))?;
    // SAFETY: `f` is an open namespace file for the duration of the call; setns only reads
    // the descriptor.
    let rc = unsafe { libc::setns(std::os::fd::AsRawFd::as_raw_fd(&f), libc::CLONE_NEWNET) };
    if rc != 0 {
        return Err(format!(
            "cannot enter network namespace {}: {}",
            path.display(),
            std::io::Error::last_os_error()
        ));
    }
    Ok(())
}
