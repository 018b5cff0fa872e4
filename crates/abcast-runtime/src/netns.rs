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

/// Moves the calling thread into a new network namespace of its own, whose only interface
/// is the loopback, up and with multicast on: sockets the thread opens from then on, and the threads and
/// processes it starts later, live there and see no other program's ports. Tests that
/// must name every member's port in a config before any node binds (a cluster of `abcast
/// node` processes) use it to pick fixed ports that nothing else can hold, instead of
/// binding a free port, releasing it and hoping nobody takes it before the node binds it
/// (issue 33). Other threads are not affected; the namespace goes away with the last
/// thread or process in it. Needs CAP_SYS_ADMIN (root): otherwise an error, and the
/// caller decides (tests fall back to other ports, saying so).
pub fn isolate_thread_network() -> Result<(), String> {
    // SAFETY: unshare takes flags only; CLONE_NEWNET moves this thread alone.
    if unsafe { libc::unshare(libc::CLONE_NEWNET) } != 0 {
        return Err(format!(
            "cannot make a network namespace: {}",
            std::io::Error::last_os_error()
        ));
    }
    loopback_up()
}

/// Sets `lo` of the calling thread's network namespace up, multicast on (SIOCSIFFLAGS), as
/// `ip link set lo up multicast on` does, so 127.0.0.1 and IP multicast on the loopback
/// work there.
fn loopback_up() -> Result<(), String> {
    use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
    // SAFETY: socket takes plain arguments; a valid descriptor is owned below.
    let fd = unsafe { libc::socket(libc::AF_INET, libc::SOCK_DGRAM | libc::SOCK_CLOEXEC, 0) };
    if fd < 0 {
        return Err(format!(
            "cannot open a socket to set lo up: {}",
            std::io::Error::last_os_error()
        ));
    }
    // SAFETY: `fd` was just returned by socket and is owned by nothing else.
    let sock = unsafe { OwnedFd::from_raw_fd(fd) };
    // SAFETY: ifreq is plain data; all zeros is a valid value.
    let mut req: libc::ifreq = unsafe { std::mem::zeroed() };
    for (dst, src) in req.ifr_name.iter_mut().zip(b"lo\0") {
        *dst = *src as libc::c_char;
    }
    // SAFETY: SIOCGIFFLAGS and SIOCSIFFLAGS read and write the ifreq we own, on an open
    // socket; the flags member of the union is the one these requests use.
    unsafe {
        if libc::ioctl(sock.as_raw_fd(), libc::SIOCGIFFLAGS, &mut req) != 0 {
            return Err(format!(
                "cannot read lo's flags: {}",
                std::io::Error::last_os_error()
            ));
        }
        req.ifr_ifru.ifru_flags |= (libc::IFF_UP | libc::IFF_MULTICAST) as libc::c_short;
        if libc::ioctl(sock.as_raw_fd(), libc::SIOCSIFFLAGS, &req) != 0 {
            return Err(format!(
                "cannot set lo up: {}",
                std::io::Error::last_os_error()
            ));
        }
    }
    Ok(())
}
