//! The shared-memory rings (`abcast_runtime::shm`) at the node's end, with a client that
//! writes and reads through its own end as it should, and also stores any number it likes
//! into the counts and flags it shares with the node (head, tail, the two waiting flags
//! of each ring): the other end is another process, and nothing it publishes is believed.
//!
//! Input: steps, each an operation byte and its operands.
//! Checks: the node's end answers every call with a count or an error that says the ring
//! is broken (never an I/O error, never a panic); it never reads or writes more than it
//! was asked or than a ring holds; and while the client broke nothing, the node reads
//! exactly the bytes the client wrote, in order, and the client those the node wrote.

use crate::input::Input;
use abcast_runtime::shm::{RING_BYTES_MIN, ShmError, ShmLink};
use bytes::BytesMut;
use std::io::IoSlice;
use std::os::fd::AsRawFd;

/// Steps per input.
const STEPS_MAX: usize = 128;
/// The region's layout (`shm.rs`): ring control words at 1024 and 2048, each word on a
/// cache line of its own: head, tail, consumer_waiting, producer_waiting.
const RING_CONTROL: [usize; 2] = [1024, 2048];
const WORDS: [usize; 4] = [0, 64, 128, 192];
const HEADER_BYTES: usize = 4096;

/// A second mapping of the region, as a hostile client has it.
struct Raw {
    ptr: *mut u8,
    len: usize,
}

impl Raw {
    fn map(fd: i32, len: usize) -> Option<Raw> {
        // SAFETY: a shared mapping of the region's descriptor, `len` bytes (its size);
        // unmapped in `drop`.
        let p = unsafe {
            libc::mmap(
                std::ptr::null_mut(),
                len,
                libc::PROT_READ | libc::PROT_WRITE,
                libc::MAP_SHARED,
                fd,
                0,
            )
        };
        (p != libc::MAP_FAILED).then(|| Raw { ptr: p.cast(), len })
    }
    fn store(&self, ring: usize, word: usize, v: u64) {
        let at = RING_CONTROL[ring % 2] + WORDS[word % 4];
        // SAFETY: `at` lies in the header page; 8-byte aligned (the mapping is
        // page-aligned); the node's end reads these words atomically, as another process
        // would write them.
        unsafe {
            let w = &*(self.ptr.add(at).cast::<std::sync::atomic::AtomicU64>());
            if word % 4 >= 2 {
                // The waiting flags are u32 words.
                let w32 = &*(self.ptr.add(at).cast::<std::sync::atomic::AtomicU32>());
                w32.store(v as u32, std::sync::atomic::Ordering::SeqCst);
            } else {
                w.store(v, std::sync::atomic::Ordering::SeqCst);
            }
        }
    }
}

impl Drop for Raw {
    fn drop(&mut self) {
        // SAFETY: the mapping made in `map`.
        unsafe {
            libc::munmap(self.ptr.cast(), self.len);
        }
    }
}

fn corrupt_only(r: Result<usize, ShmError>) -> Option<usize> {
    match r {
        Ok(n) => Some(n),
        Err(ShmError::Corrupt(_)) => None,
        Err(e) => panic!("the ring answered other than a count or a broken ring: {e}"),
    }
}

pub fn shm_ring(data: &[u8]) {
    let ring = RING_BYTES_MIN;
    let Ok(mut node) = ShmLink::create_for_node(ring) else {
        return; // no memfd here: nothing to test
    };
    let Ok(fd) = node.fd().try_clone_to_owned() else {
        return;
    };
    let raw_fd = fd.as_raw_fd();
    let Some(raw) = Raw::map(raw_fd, HEADER_BYTES + 2 * ring) else {
        return;
    };
    let mut client = ShmLink::open_for_client(fd, ring).expect("the node's own region opens");
    let mut input = Input::new(data);
    let mut broken = false;
    // What each end wrote and the other has not read yet.
    let (mut to_node, mut to_client): (Vec<u8>, Vec<u8>) = (Vec::new(), Vec::new());
    for _ in 0..STEPS_MAX {
        let Some(op) = input.u8() else { break };
        match op % 8 {
            0 => {
                let Some(b) = input.string16() else { break };
                let (a, c) = b.split_at(b.len() / 2);
                let n = corrupt_only(client.write_vectored(&[IoSlice::new(a), IoSlice::new(c)]));
                if let Some(n) = n {
                    assert!(n <= b.len());
                    to_node.extend_from_slice(&b[..n]);
                }
            }
            1 => {
                let max = usize::from(input.u16().unwrap_or(0)) * 4;
                let mut got = BytesMut::new();
                if let Some(n) = corrupt_only(client.read_into(&mut got, max)) {
                    check_read(&got, n, max, ring, &mut to_client, broken);
                }
            }
            2 => {
                let (Some(which), Some(v)) = (input.u8(), input.u64()) else {
                    break;
                };
                raw.store(usize::from(which & 1), usize::from(which >> 1), v);
                broken = true;
            }
            3 => {
                let max = usize::from(input.u16().unwrap_or(0)) * 4;
                let mut got = BytesMut::new();
                if let Some(n) = corrupt_only(node.read_into(&mut got, max)) {
                    check_read(&got, n, max, ring, &mut to_node, broken);
                }
            }
            4 => {
                let Some(b) = input.string16() else { break };
                let (a, c) = b.split_at(b.len() / 3);
                if let Some(n) =
                    corrupt_only(node.write_vectored(&[IoSlice::new(a), IoSlice::new(c)]))
                {
                    assert!(n <= b.len() && n <= ring);
                    to_client.extend_from_slice(&b[..n]);
                }
            }
            5 => {
                let _ = corrupt_only(node.wait_for_data().map(usize::from));
                let _ = corrupt_only(node.wait_for_room().map(usize::from));
            }
            6 => {
                if let Some(n) = corrupt_only(node.unread_bytes()) {
                    assert!(n <= ring);
                }
                let _ = node.take_doorbell();
            }
            _ => {
                let _ = corrupt_only(client.wait_for_data().map(usize::from));
                let _ = client.take_doorbell();
            }
        }
    }
}

/// A read of `n` bytes into `got`: within what was asked and what a ring holds, and, while
/// nothing was broken, the bytes the other end wrote next.
fn check_read(got: &[u8], n: usize, max: usize, ring: usize, sent: &mut Vec<u8>, broken: bool) {
    assert_eq!(got.len(), n);
    assert!(
        n <= max && n <= ring,
        "read {n} bytes, asked {max}, ring {ring}"
    );
    if !broken {
        assert!(
            n <= sent.len(),
            "read {n} bytes, {} were written",
            sent.len()
        );
        assert_eq!(got, &sent[..n], "the bytes read are not the bytes written");
        sent.drain(..n);
    }
}
