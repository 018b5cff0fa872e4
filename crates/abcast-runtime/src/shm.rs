//! The shared-memory client channel: a client on the node's host trades bytes with its node
//! through two rings in one shared memory region instead of through the kernel's socket
//! buffers, as Corosync's clients do through libqb's IPC. The frames are the client port's,
//! unchanged; only the bytes under them move differently.
//!
//! A client connects to the node's Unix client socket (`client_path`) and sends `ShmOpen`
//! as its first frame. The node creates the region (a sealed `memfd`: it cannot shrink or
//! grow, so a client can never make the node's next access fault), answers `ShmReady` with
//! the region's descriptor attached (`SCM_RIGHTS`), and from then on both ends write their
//! frames into their ring and read the other's. The socket stays open: it carries doorbells
//! (any byte: "look at the rings") and its closing ends the connection.
//!
//! ```text
//! offset 0      magic u64 "ABSHM\0\0\1", ring_bytes u64
//! offset 1024   ring 0 (client -> node) control: head, tail, consumer_waiting, producer_waiting
//! offset 2048   ring 1 (node -> client) control, the same
//! offset 4096   ring 0 data, ring_bytes
//! then          ring 1 data, ring_bytes
//! ```
//!
//! `head` and `tail` count bytes written and read since the start (u64, never wrap); the
//! byte at count `c` lives at `c % ring_bytes`. Each control word sits on a cache line of its
//! own. A producer writes, publishes `head` (release), then looks at `consumer_waiting`; a
//! consumer that found the ring empty sets `consumer_waiting`, then looks at `head` again
//! before it sleeps on the socket. With a sequentially consistent fence between the store
//! and the load on both sides, at least one of them sees the other (Dekker), so a wakeup is
//! never lost; the flag is taken (swapped to 0) by the side that rings, so one sleep costs
//! one doorbell. A full ring works the same way with `producer_waiting` and `tail`.
//!
//! The other end is another process: every count it publishes is checked (`head - tail` at
//! most `ring_bytes`), a violation is an error that closes the connection, and the node
//! copies what it reads into its own memory before it decodes it, so a client that writes
//! into the ring while the node reads it can only hand the node bytes that fail to decode.
//! The node never reads the ring it writes.
//!
//! Cost (docs/benchmarks/group-peer/README.md): per byte, one copy into the ring and one
//! out of it, both in user space; a Unix socket costs a copy into a kernel buffer and one
//! out of it, each with its syscall and socket-buffer bookkeeping.

use bytes::BytesMut;
use std::fmt;
use std::io::{self, IoSlice};
use std::os::fd::{AsFd, AsRawFd, BorrowedFd, FromRawFd, OwnedFd};
use std::ptr::NonNull;
use std::sync::atomic::{AtomicU32, AtomicU64, Ordering, fence};

/// The region's first eight bytes.
pub const SHM_MAGIC: u64 = u64::from_le_bytes(*b"ABSHM\0\0\x01");
/// A ring's size, least and most; a power of two in between.
pub const RING_BYTES_MIN: usize = 64 << 10;
pub const RING_BYTES_MAX: usize = 1 << 30;
/// The header page: the magic, the size, and the two rings' control words.
const HEADER_BYTES: usize = 4096;
const RING_CONTROL: [usize; 2] = [1024, 2048];
const HEAD: usize = 0;
const TAIL: usize = 64;
const CONSUMER_WAITING: usize = 128;
const PRODUCER_WAITING: usize = 192;
/// Ring 0 carries the client's frames to the node, ring 1 the node's to the client.
const TO_NODE: usize = 0;
const TO_CLIENT: usize = 1;

/// What went wrong with a region or its rings.
#[derive(Debug)]
pub enum ShmError {
    /// Creating, sealing, sizing or mapping the region failed.
    Io {
        what: &'static str,
        source: io::Error,
    },
    /// The region handed over is not one (size, magic).
    BadRegion(String),
    /// The other end published a count that breaks the ring's invariant.
    Corrupt(String),
}

impl fmt::Display for ShmError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            ShmError::Io { what, source } => write!(f, "shared memory: {what}: {source}"),
            ShmError::BadRegion(s) => write!(f, "shared memory region refused: {s}"),
            ShmError::Corrupt(s) => write!(f, "shared memory ring broken by the other end: {s}"),
        }
    }
}

impl std::error::Error for ShmError {}

impl From<ShmError> for io::Error {
    fn from(e: ShmError) -> io::Error {
        let kind = match &e {
            ShmError::Io { source, .. } => source.kind(),
            _ => io::ErrorKind::InvalidData,
        };
        io::Error::new(kind, e.to_string())
    }
}

/// Whether `bytes` is a ring size this module takes.
pub fn valid_ring_bytes(bytes: usize) -> bool {
    bytes.is_power_of_two() && (RING_BYTES_MIN..=RING_BYTES_MAX).contains(&bytes)
}

fn os_err(what: &'static str) -> ShmError {
    ShmError::Io {
        what,
        source: io::Error::last_os_error(),
    }
}

/// One mapping of a region: the node's (created) or the client's (received).
struct Region {
    ptr: NonNull<u8>,
    len: usize,
    ring_bytes: usize,
    fd: OwnedFd,
}

// SAFETY: the mapping is plain memory owned by this value; the raw pointer is only used
// through `&self`/`&mut self` methods of `ShmLink`, which owns the region.
unsafe impl Send for Region {}

impl Region {
    /// A new sealed region with two rings of `ring_bytes` each.
    fn create(ring_bytes: usize) -> Result<Region, ShmError> {
        if !valid_ring_bytes(ring_bytes) {
            return Err(ShmError::BadRegion(format!(
                "ring size {ring_bytes} is not a power of two in \
                 {RING_BYTES_MIN}..={RING_BYTES_MAX}"
            )));
        }
        let len = HEADER_BYTES + 2 * ring_bytes;
        // SAFETY: memfd_create takes a NUL-terminated name and flags; it returns a new
        // descriptor or -1.
        let raw = unsafe {
            libc::memfd_create(
                c"abcast-client-rings".as_ptr(),
                libc::MFD_CLOEXEC | libc::MFD_ALLOW_SEALING,
            )
        };
        if raw < 0 {
            return Err(os_err("memfd_create"));
        }
        // SAFETY: `raw` is a descriptor just returned to us and owned by nobody else.
        let fd = unsafe { OwnedFd::from_raw_fd(raw) };
        // SAFETY: ftruncate and fcntl on a descriptor we own.
        if unsafe { libc::ftruncate(fd.as_raw_fd(), len as libc::off_t) } != 0 {
            return Err(os_err("sizing the region"));
        }
        let seals = libc::F_SEAL_SHRINK | libc::F_SEAL_GROW | libc::F_SEAL_SEAL;
        // SAFETY: as above.
        if unsafe { libc::fcntl(fd.as_raw_fd(), libc::F_ADD_SEALS, seals) } != 0 {
            return Err(os_err("sealing the region"));
        }
        let region = Region::map(fd, len, ring_bytes)?;
        // SAFETY: offset 0 and 8 lie in the header page of a fresh mapping nobody else has.
        unsafe {
            region.ptr.as_ptr().cast::<u64>().write(SHM_MAGIC.to_le());
            region
                .ptr
                .as_ptr()
                .add(8)
                .cast::<u64>()
                .write((ring_bytes as u64).to_le());
        }
        Ok(region)
    }

    /// Maps a region received from a node, after checking its size, seals and magic.
    fn open(fd: OwnedFd, ring_bytes: usize) -> Result<Region, ShmError> {
        if !valid_ring_bytes(ring_bytes) {
            return Err(ShmError::BadRegion(format!("ring size {ring_bytes}")));
        }
        let len = HEADER_BYTES + 2 * ring_bytes;
        // SAFETY: fstat fills the struct we own.
        let mut st: libc::stat = unsafe { std::mem::zeroed() };
        if unsafe { libc::fstat(fd.as_raw_fd(), &mut st) } != 0 {
            return Err(os_err("fstat of the region"));
        }
        if st.st_size as u64 != len as u64 {
            return Err(ShmError::BadRegion(format!(
                "{} bytes, expected {len}",
                st.st_size
            )));
        }
        // SAFETY: fcntl on a descriptor we own.
        let seals = unsafe { libc::fcntl(fd.as_raw_fd(), libc::F_GET_SEALS) };
        let want = libc::F_SEAL_SHRINK | libc::F_SEAL_GROW;
        if seals < 0 || seals & want != want {
            return Err(ShmError::BadRegion("not sealed against resizing".into()));
        }
        let region = Region::map(fd, len, ring_bytes)?;
        // SAFETY: the mapping is `len` > 16 bytes long.
        let (magic, size) = unsafe {
            (
                u64::from_le(region.ptr.as_ptr().cast::<u64>().read()),
                u64::from_le(region.ptr.as_ptr().add(8).cast::<u64>().read()),
            )
        };
        if magic != SHM_MAGIC || size != ring_bytes as u64 {
            return Err(ShmError::BadRegion(format!(
                "magic {magic:#x}, ring size {size}"
            )));
        }
        Ok(region)
    }

    fn map(fd: OwnedFd, len: usize, ring_bytes: usize) -> Result<Region, ShmError> {
        // SAFETY: a shared read-write mapping of `len` bytes of a descriptor we own; the
        // kernel picks the address.
        let p = unsafe {
            libc::mmap(
                std::ptr::null_mut(),
                len,
                libc::PROT_READ | libc::PROT_WRITE,
                libc::MAP_SHARED,
                fd.as_raw_fd(),
                0,
            )
        };
        if p == libc::MAP_FAILED {
            return Err(os_err("mmap of the region"));
        }
        let ptr = NonNull::new(p.cast::<u8>()).ok_or_else(|| os_err("mmap returned null"))?;
        Ok(Region {
            ptr,
            len,
            ring_bytes,
            fd,
        })
    }

    fn word64(&self, ring: usize, at: usize) -> &AtomicU64 {
        // SAFETY: the offset lies in the header page, 8-byte aligned (the mapping is
        // page-aligned); the page lives as long as `self`, and atomics are address-free,
        // so another process using the same word is sound.
        unsafe {
            &*self
                .ptr
                .as_ptr()
                .add(RING_CONTROL[ring] + at)
                .cast::<AtomicU64>()
        }
    }

    fn word32(&self, ring: usize, at: usize) -> &AtomicU32 {
        // SAFETY: as in `word64`, 4-byte aligned.
        unsafe {
            &*self
                .ptr
                .as_ptr()
                .add(RING_CONTROL[ring] + at)
                .cast::<AtomicU32>()
        }
    }

    fn data(&self, ring: usize) -> *mut u8 {
        // SAFETY: both rings' data lie inside the mapping.
        unsafe { self.ptr.as_ptr().add(HEADER_BYTES + ring * self.ring_bytes) }
    }
}

impl Drop for Region {
    fn drop(&mut self) {
        // SAFETY: unmapping the mapping this value made; nothing refers to it after drop.
        unsafe {
            libc::munmap(self.ptr.as_ptr().cast::<libc::c_void>(), self.len);
        }
    }
}

impl fmt::Debug for Region {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "Region({} bytes, rings of {})",
            self.len, self.ring_bytes
        )
    }
}

/// One end of the channel: writes into its ring, reads the other's. The counts this end
/// publishes are kept here too, so nothing the other end writes into them is believed.
#[derive(Debug)]
pub struct ShmLink {
    region: Region,
    tx: usize,
    rx: usize,
    /// Bytes this end wrote into `tx` (its `head`).
    tx_head: u64,
    /// Bytes this end read from `rx` (its `tail`).
    rx_tail: u64,
    /// The other end asked to be woken (it waited on an empty or full ring) and this end
    /// just gave it reason: ring the doorbell.
    owe_doorbell: bool,
}

impl ShmLink {
    /// The node's end of a new region; hand [`ShmLink::fd`] to the client.
    pub fn create_for_node(ring_bytes: usize) -> Result<ShmLink, ShmError> {
        Ok(ShmLink::new(
            Region::create(ring_bytes)?,
            TO_CLIENT,
            TO_NODE,
        ))
    }

    /// The client's end of the region the node handed over.
    pub fn open_for_client(fd: OwnedFd, ring_bytes: usize) -> Result<ShmLink, ShmError> {
        Ok(ShmLink::new(
            Region::open(fd, ring_bytes)?,
            TO_NODE,
            TO_CLIENT,
        ))
    }

    fn new(region: Region, tx: usize, rx: usize) -> ShmLink {
        // Counts start where the region has them: zero for a fresh region.
        let tx_head = region.word64(tx, HEAD).load(Ordering::Acquire);
        let rx_tail = region.word64(rx, TAIL).load(Ordering::Acquire);
        ShmLink {
            region,
            tx,
            rx,
            tx_head,
            rx_tail,
            owe_doorbell: false,
        }
    }

    /// The region's descriptor, to pass to the client.
    pub fn fd(&self) -> BorrowedFd<'_> {
        self.region.fd.as_fd()
    }

    /// Each ring's size.
    pub fn ring_bytes(&self) -> usize {
        self.region.ring_bytes
    }

    /// Bytes of `tx` the other end has not read yet.
    pub fn unread_bytes(&self) -> Result<usize, ShmError> {
        let tail = self.region.word64(self.tx, TAIL).load(Ordering::Acquire);
        self.check(self.tx_head, tail, "tail of the ring this end writes")
    }

    /// `head - tail`, checked against the ring's size.
    fn check(&self, head: u64, tail: u64, what: &str) -> Result<usize, ShmError> {
        let used = head.wrapping_sub(tail);
        if used > self.region.ring_bytes as u64 {
            return Err(ShmError::Corrupt(format!(
                "{what}: head {head} and tail {tail} are {used} bytes apart, more than the \
                 ring's {}",
                self.region.ring_bytes
            )));
        }
        Ok(used as usize)
    }

    /// Copies as much of `bufs` as `tx` has room for, in order; the count copied (0: the
    /// ring is full; see [`ShmLink::wait_for_room`]).
    pub fn write_vectored(&mut self, bufs: &[IoSlice<'_>]) -> Result<usize, ShmError> {
        let cap = self.region.ring_bytes;
        let mut room = cap - self.unread_bytes()?;
        let data = self.region.data(self.tx);
        let mut head = self.tx_head;
        for b in bufs {
            if room == 0 {
                break;
            }
            let mut src: &[u8] = b;
            while !src.is_empty() && room > 0 {
                let at = (head % cap as u64) as usize;
                let n = src.len().min(room).min(cap - at);
                // SAFETY: `at + n <= cap`: inside this ring's data; the other end does not
                // read these bytes before `head` is published below.
                unsafe { std::ptr::copy_nonoverlapping(src.as_ptr(), data.add(at), n) };
                src = &src[n..];
                room -= n;
                head += n as u64;
            }
        }
        let n = (head - self.tx_head) as usize;
        if n > 0 {
            self.tx_head = head;
            self.region
                .word64(self.tx, HEAD)
                .store(head, Ordering::Release);
            fence(Ordering::SeqCst);
            if self
                .region
                .word32(self.tx, CONSUMER_WAITING)
                .swap(0, Ordering::SeqCst)
                != 0
            {
                self.owe_doorbell = true;
            }
        }
        Ok(n)
    }

    /// Copies up to `max` bytes of `rx` onto the end of `dst`; the count (0: empty; see
    /// [`ShmLink::wait_for_data`]).
    pub fn read_into(&mut self, dst: &mut BytesMut, max: usize) -> Result<usize, ShmError> {
        let head = self.region.word64(self.rx, HEAD).load(Ordering::Acquire);
        let avail = self.check(head, self.rx_tail, "head of the ring this end reads")?;
        let n = avail.min(max);
        if n == 0 {
            return Ok(0);
        }
        let cap = self.region.ring_bytes;
        let data = self.region.data(self.rx);
        dst.reserve(n);
        let mut tail = self.rx_tail;
        let mut left = n;
        while left > 0 {
            let at = (tail % cap as u64) as usize;
            let k = left.min(cap - at);
            let spare = dst.spare_capacity_mut();
            // SAFETY: `at + k <= cap` lies inside the ring's data, published by the
            // acquire load of `head`; `spare` has room for `k` (reserved above), and
            // `set_len` covers exactly the bytes copied.
            unsafe {
                std::ptr::copy_nonoverlapping(data.add(at), spare.as_mut_ptr().cast::<u8>(), k);
                dst.set_len(dst.len() + k);
            }
            tail += k as u64;
            left -= k;
        }
        self.rx_tail = tail;
        self.region
            .word64(self.rx, TAIL)
            .store(tail, Ordering::Release);
        fence(Ordering::SeqCst);
        if self
            .region
            .word32(self.rx, PRODUCER_WAITING)
            .swap(0, Ordering::SeqCst)
            != 0
        {
            self.owe_doorbell = true;
        }
        Ok(n)
    }

    /// The ring this end reads was empty: asks the other end for a doorbell with its next
    /// write. True if data came meanwhile (read again instead of sleeping).
    pub fn wait_for_data(&mut self) -> Result<bool, ShmError> {
        let waiting = self.region.word32(self.rx, CONSUMER_WAITING);
        waiting.store(1, Ordering::SeqCst);
        fence(Ordering::SeqCst);
        let head = self.region.word64(self.rx, HEAD).load(Ordering::Acquire);
        let avail = self.check(head, self.rx_tail, "head of the ring this end reads")?;
        Ok(avail > 0)
    }

    /// The ring this end writes was full: asks the other end for a doorbell when it reads.
    /// True if room came meanwhile (write again instead of sleeping).
    pub fn wait_for_room(&mut self) -> Result<bool, ShmError> {
        let waiting = self.region.word32(self.tx, PRODUCER_WAITING);
        waiting.store(1, Ordering::SeqCst);
        fence(Ordering::SeqCst);
        Ok(self.unread_bytes()? < self.region.ring_bytes)
    }

    /// Whether the other end is owed a doorbell since the last call (then ring it once).
    pub fn take_doorbell(&mut self) -> bool {
        std::mem::take(&mut self.owe_doorbell)
    }
}

/// Rings the doorbell on `sock`: one byte, without waiting. A full socket buffer already
/// holds doorbells the other end has not read, so it is not an error; nor is an end that
/// hung up (reading the socket tells that).
pub fn ring_doorbell(sock: BorrowedFd<'_>) -> io::Result<()> {
    loop {
        // SAFETY: send of one byte from a local on a descriptor the caller holds open.
        let n = unsafe {
            libc::send(
                sock.as_raw_fd(),
                [1u8].as_ptr().cast::<libc::c_void>(),
                1,
                libc::MSG_DONTWAIT | libc::MSG_NOSIGNAL,
            )
        };
        if n >= 0 {
            return Ok(());
        }
        let e = io::Error::last_os_error();
        match e.kind() {
            io::ErrorKind::WouldBlock
            | io::ErrorKind::BrokenPipe
            | io::ErrorKind::ConnectionReset => return Ok(()),
            io::ErrorKind::Interrupted => continue,
            _ => return Err(e),
        }
    }
}

/// Reads and discards the doorbells waiting on `sock`, without waiting. `Ok(false)`: the
/// other end closed the socket.
pub fn drain_doorbells(sock: BorrowedFd<'_>) -> io::Result<bool> {
    let mut buf = [0u8; 256];
    loop {
        // SAFETY: recv into a local buffer of its length.
        let n = unsafe {
            libc::recv(
                sock.as_raw_fd(),
                buf.as_mut_ptr().cast::<libc::c_void>(),
                buf.len(),
                libc::MSG_DONTWAIT,
            )
        };
        if n == 0 {
            return Ok(false);
        }
        if n < 0 {
            let e = io::Error::last_os_error();
            match e.kind() {
                io::ErrorKind::WouldBlock => return Ok(true),
                io::ErrorKind::Interrupted => continue,
                _ => return Err(e),
            }
        }
    }
}

/// Sends `data` with `fd` attached (`SCM_RIGHTS`), without waiting; the bytes sent.
pub fn send_with_fd(sock: BorrowedFd<'_>, data: &[u8], fd: BorrowedFd<'_>) -> io::Result<usize> {
    let mut iov = libc::iovec {
        iov_base: data.as_ptr() as *mut libc::c_void,
        iov_len: data.len(),
    };
    // u64 words keep the control buffer aligned for `cmsghdr`.
    let mut cbuf = [0u64; 8];
    // SAFETY: CMSG_SPACE is a pure computation.
    let space = unsafe { libc::CMSG_SPACE(std::mem::size_of::<libc::c_int>() as u32) } as usize;
    debug_assert!(space <= std::mem::size_of_val(&cbuf));
    // SAFETY: an all-zero msghdr is valid; the pointers set below outlive the call.
    let mut msg: libc::msghdr = unsafe { std::mem::zeroed() };
    msg.msg_iov = &mut iov;
    msg.msg_iovlen = 1;
    msg.msg_control = cbuf.as_mut_ptr().cast::<libc::c_void>();
    msg.msg_controllen = space as _;
    // SAFETY: the control buffer holds one cmsghdr with room for one int (CMSG_SPACE
    // above); CMSG_FIRSTHDR points into it.
    unsafe {
        let c = libc::CMSG_FIRSTHDR(&msg);
        (*c).cmsg_level = libc::SOL_SOCKET;
        (*c).cmsg_type = libc::SCM_RIGHTS;
        (*c).cmsg_len = libc::CMSG_LEN(std::mem::size_of::<libc::c_int>() as u32) as _;
        libc::CMSG_DATA(c)
            .cast::<libc::c_int>()
            .write_unaligned(fd.as_raw_fd());
    }
    loop {
        // SAFETY: `msg` is fully set up and its buffers live through the call.
        let n = unsafe {
            libc::sendmsg(
                sock.as_raw_fd(),
                &msg,
                libc::MSG_DONTWAIT | libc::MSG_NOSIGNAL,
            )
        };
        if n >= 0 {
            return Ok(n as usize);
        }
        let e = io::Error::last_os_error();
        if e.kind() != io::ErrorKind::Interrupted {
            return Err(e);
        }
    }
}

/// Receives into `buf`, waiting as the socket does, and takes the one descriptor that may
/// come with the bytes (any other is closed). `(0, _)`: the other end closed.
pub fn recv_with_fd(sock: BorrowedFd<'_>, buf: &mut [u8]) -> io::Result<(usize, Option<OwnedFd>)> {
    let mut iov = libc::iovec {
        iov_base: buf.as_mut_ptr().cast::<libc::c_void>(),
        iov_len: buf.len(),
    };
    let mut cbuf = [0u64; 16];
    // SAFETY: as in `send_with_fd`.
    let mut msg: libc::msghdr = unsafe { std::mem::zeroed() };
    msg.msg_iov = &mut iov;
    msg.msg_iovlen = 1;
    msg.msg_control = cbuf.as_mut_ptr().cast::<libc::c_void>();
    msg.msg_controllen = std::mem::size_of_val(&cbuf) as _;
    let n = loop {
        // SAFETY: `msg` points at buffers that live through the call.
        let n = unsafe { libc::recvmsg(sock.as_raw_fd(), &mut msg, libc::MSG_CMSG_CLOEXEC) };
        if n >= 0 {
            break n as usize;
        }
        let e = io::Error::last_os_error();
        if e.kind() != io::ErrorKind::Interrupted {
            return Err(e);
        }
    };
    let mut got: Option<OwnedFd> = None;
    // SAFETY: walking the control messages the kernel wrote, with the CMSG macros, inside
    // `msg_controllen`; each SCM_RIGHTS payload is an array of ints that are now ours.
    unsafe {
        let mut c = libc::CMSG_FIRSTHDR(&msg);
        while !c.is_null() {
            if (*c).cmsg_level == libc::SOL_SOCKET && (*c).cmsg_type == libc::SCM_RIGHTS {
                let head = libc::CMSG_LEN(0) as usize;
                let count = ((*c).cmsg_len as usize).saturating_sub(head)
                    / std::mem::size_of::<libc::c_int>();
                let p = libc::CMSG_DATA(c).cast::<libc::c_int>();
                for i in 0..count {
                    let fd = OwnedFd::from_raw_fd(p.add(i).read_unaligned());
                    if got.is_none() {
                        got = Some(fd);
                    }
                    // Any further descriptor drops (closes) here.
                }
            }
            c = libc::CMSG_NXTHDR(&msg, c);
        }
    }
    Ok((n, got))
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::net::UnixStream;

    fn pair(ring_bytes: usize) -> (ShmLink, ShmLink) {
        let node = ShmLink::create_for_node(ring_bytes).unwrap();
        let fd = node.fd().try_clone_to_owned().unwrap();
        let client = ShmLink::open_for_client(fd, ring_bytes).unwrap();
        (node, client)
    }

    #[test]
    fn bytes_written_at_one_end_are_read_at_the_other_in_order_across_the_wrap() {
        let (mut node, mut client) = pair(RING_BYTES_MIN);
        let mut sent = Vec::new();
        let mut got = BytesMut::new();
        let mut x = 7u32;
        for round in 0..200 {
            // Sizes from 1 byte to more than the ring, so writes wrap and stop at full.
            let len = 1 + (round * 977) % (RING_BYTES_MIN + 5000);
            let chunk: Vec<u8> = (0..len)
                .map(|_| {
                    x = x.wrapping_mul(1_103_515_245).wrapping_add(12345);
                    (x >> 16) as u8
                })
                .collect();
            let (a, b) = chunk.split_at(len / 3);
            let n = client
                .write_vectored(&[IoSlice::new(a), IoSlice::new(b)])
                .unwrap();
            assert!(n <= RING_BYTES_MIN);
            sent.extend_from_slice(&chunk[..n]);
            let max = 1 + (round * 131) % RING_BYTES_MIN;
            while node.read_into(&mut got, max).unwrap() > 0 {}
        }
        assert_eq!(&got[..], &sent[..]);
        // And the other way.
        let mut back = BytesMut::new();
        assert_eq!(node.write_vectored(&[IoSlice::new(b"pong")]).unwrap(), 4);
        assert_eq!(client.read_into(&mut back, 100).unwrap(), 4);
        assert_eq!(&back[..], b"pong");
    }

    #[test]
    fn a_full_ring_takes_nothing_and_a_sleeping_end_is_owed_one_doorbell() {
        let (mut node, mut client) = pair(RING_BYTES_MIN);
        let big = vec![9u8; RING_BYTES_MIN + 1];
        assert_eq!(
            node.write_vectored(&[IoSlice::new(&big)]).unwrap(),
            RING_BYTES_MIN
        );
        assert_eq!(node.write_vectored(&[IoSlice::new(b"x")]).unwrap(), 0);
        assert!(!node.wait_for_room().unwrap(), "still full");
        assert!(!node.take_doorbell(), "nobody slept yet");
        let mut got = BytesMut::new();
        assert_eq!(client.read_into(&mut got, 10).unwrap(), 10);
        assert!(client.take_doorbell(), "the node waits for room");
        assert_eq!(client.read_into(&mut got, 10).unwrap(), 10);
        assert!(!client.take_doorbell(), "one doorbell per wait");
        while client.read_into(&mut got, usize::MAX).unwrap() > 0 {}
        assert!(!client.wait_for_data().unwrap(), "empty: the client sleeps");
        assert_eq!(node.write_vectored(&[IoSlice::new(b"y")]).unwrap(), 1);
        assert!(node.take_doorbell(), "the client sleeps on an empty ring");
        assert!(client.wait_for_data().unwrap(), "data came");
    }

    #[test]
    fn counts_the_other_end_breaks_are_refused() {
        let (mut node, client) = pair(RING_BYTES_MIN);
        // The client claims to have written more than the ring holds.
        client
            .region
            .word64(TO_NODE, HEAD)
            .store(RING_BYTES_MIN as u64 + 1, Ordering::SeqCst);
        let e = node.read_into(&mut BytesMut::new(), 10).unwrap_err();
        assert!(matches!(e, ShmError::Corrupt(_)), "{e}");
        assert!(node.wait_for_data().is_err());
        // The client moves the tail of the ring the node writes past its head.
        client
            .region
            .word64(TO_CLIENT, TAIL)
            .store(5, Ordering::SeqCst);
        let e = node.write_vectored(&[IoSlice::new(b"z")]).unwrap_err();
        assert!(e.to_string().contains("tail"), "{e}");
    }

    #[test]
    fn a_region_cannot_be_resized_and_a_foreign_one_is_refused() {
        let (node, _client) = pair(RING_BYTES_MIN);
        let fd = node.fd();
        // SAFETY: ftruncate on a descriptor the test holds.
        let shrink = unsafe { libc::ftruncate(fd.as_raw_fd(), 4096) };
        assert_ne!(shrink, 0, "a sealed region must refuse to shrink");
        assert!(ShmLink::open_for_client(fd.try_clone_to_owned().unwrap(), 1 << 17).is_err());
        assert!(ShmLink::create_for_node(100_000).is_err());
        // An unsealed file of the right size is refused: the node could shrink it.
        let f = tempfile_of(HEADER_BYTES + 2 * RING_BYTES_MIN);
        let e = ShmLink::open_for_client(f, RING_BYTES_MIN).unwrap_err();
        assert!(e.to_string().contains("sealed"), "{e}");
    }

    fn tempfile_of(len: usize) -> OwnedFd {
        // SAFETY: as in `Region::create`, without sealing.
        let raw = unsafe { libc::memfd_create(c"t".as_ptr(), libc::MFD_CLOEXEC) };
        assert!(raw >= 0);
        // SAFETY: a fresh descriptor.
        let fd = unsafe { OwnedFd::from_raw_fd(raw) };
        assert_eq!(unsafe { libc::ftruncate(raw, len as libc::off_t) }, 0);
        fd
    }

    #[test]
    fn a_descriptor_travels_with_its_bytes_and_doorbells_drain() {
        let (a, b) = UnixStream::pair().unwrap();
        let node = ShmLink::create_for_node(RING_BYTES_MIN).unwrap();
        assert_eq!(send_with_fd(a.as_fd(), b"hello", node.fd()).unwrap(), 5);
        let mut buf = [0u8; 16];
        let (n, fd) = recv_with_fd(b.as_fd(), &mut buf).unwrap();
        assert_eq!(&buf[..n], b"hello");
        let mut client = ShmLink::open_for_client(fd.unwrap(), RING_BYTES_MIN).unwrap();
        let mut node = node;
        node.write_vectored(&[IoSlice::new(b"ring")]).unwrap();
        let mut got = BytesMut::new();
        client.read_into(&mut got, 64).unwrap();
        assert_eq!(&got[..], b"ring");
        ring_doorbell(a.as_fd()).unwrap();
        ring_doorbell(a.as_fd()).unwrap();
        assert!(drain_doorbells(b.as_fd()).unwrap());
        drop(a);
        assert!(!drain_doorbells(b.as_fd()).unwrap(), "closed");
    }

    #[test]
    fn two_threads_stream_through_the_rings_without_losing_a_wakeup() {
        let (mut node, mut client) = pair(RING_BYTES_MIN);
        let (sa, sb) = UnixStream::pair().unwrap();
        const TOTAL: u64 = 8 << 20;
        let writer = std::thread::spawn(move || {
            let mut sent = 0u64;
            let chunk: Vec<u8> = (0..3000u32).map(|i| i as u8).collect();
            while sent < TOTAL {
                let off = (sent % 3000) as usize;
                let end = (off as u64 + (TOTAL - sent)).min(3000) as usize;
                let n = client
                    .write_vectored(&[IoSlice::new(&chunk[off..end])])
                    .unwrap();
                if client.take_doorbell() {
                    ring_doorbell(sa.as_fd()).unwrap();
                }
                if n == 0 && !client.wait_for_room().unwrap() {
                    wait_readable(&sa);
                    drain_doorbells(sa.as_fd()).unwrap();
                }
                sent += n as u64;
            }
            sa
        });
        let mut got = BytesMut::new();
        let mut total = 0u64;
        while total < TOTAL {
            let n = node.read_into(&mut got, 5000).unwrap();
            if node.take_doorbell() {
                ring_doorbell(sb.as_fd()).unwrap();
            }
            for (i, b) in got.iter().enumerate() {
                assert_eq!(*b, ((total + i as u64) % 3000) as u8);
            }
            got.clear();
            total += n as u64;
            if n == 0 && !node.wait_for_data().unwrap() {
                wait_readable(&sb);
                drain_doorbells(sb.as_fd()).unwrap();
            }
        }
        assert_eq!(total, TOTAL);
        writer.join().unwrap();
    }

    /// Sleeps until `s` is readable; a lost wakeup hangs here, so the wait is bounded and
    /// fails the test.
    fn wait_readable(s: &UnixStream) {
        let mut p = libc::pollfd {
            fd: s.as_raw_fd(),
            events: libc::POLLIN,
            revents: 0,
        };
        // SAFETY: poll on one pollfd we own.
        let r = unsafe { libc::poll(&mut p, 1, 10_000) };
        assert!(r > 0, "no doorbell within 10 s: a wakeup was lost");
    }
}
