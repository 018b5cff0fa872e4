//! The peer frame decoder (`abcast_runtime::frame::decode`) over a byte stream that arrives
//! in chunks, and the `Hello` every peer connection opens with.
//!
//! Input: one byte that sets the chunk size, then the stream.
//! Checks: `Ok(None)` consumes nothing; a frame consumes its header and body, which are
//! exactly the bytes of the stream there (same kind, group, length and body); a checked
//! frame re-encodes to the same bytes; a `Hello` that decodes re-encodes to its body.

use crate::input::Input;
use abcast_runtime::frame::{self, CLIENT_UNCHECKED, HEADER_BYTES, KIND_CLIENT_MIN, KIND_HELLO};
use abcast_runtime::transport::tcp::Hello;
use bytes::{Bytes, BytesMut};

pub fn frame(data: &[u8]) {
    let mut input = Input::new(data);
    let Some(chunk) = input.u8() else { return };
    let chunk = usize::from(chunk) + 1;
    let stream = input.rest();
    let mut buf = BytesMut::new();
    let mut consumed = 0usize;
    for part in stream.chunks(chunk) {
        buf.extend_from_slice(part);
        loop {
            let before = buf.len();
            match frame::decode(&mut buf) {
                Ok(None) => {
                    assert_eq!(buf.len(), before, "Ok(None) consumed bytes");
                    break;
                }
                Ok(Some(f)) => {
                    let n = HEADER_BYTES + f.body.len();
                    assert_eq!(
                        before - buf.len(),
                        n,
                        "a frame consumed other than its bytes"
                    );
                    let raw = &stream[consumed..consumed + n];
                    consumed += n;
                    check_frame(raw, &f);
                }
                Err(_) => return,
            }
        }
    }
}

fn check_frame(raw: &[u8], f: &frame::Frame) {
    assert_eq!(raw[5], f.kind);
    assert_eq!(&raw[HEADER_BYTES..], &f.body[..]);
    let group = u16::from_le_bytes([raw[6], raw[7]]);
    let unchecked = f.kind >= KIND_CLIENT_MIN && group & CLIENT_UNCHECKED != 0;
    if unchecked {
        assert_eq!(f.group, group & !CLIENT_UNCHECKED);
    } else {
        assert_eq!(f.group, group);
        let again = frame::encode_to_bytes(f.kind, f.group, std::slice::from_ref(&f.body))
            .expect("a decoded frame's body fits a frame");
        assert_eq!(&again[..], raw, "a checked frame re-encodes to other bytes");
    }
    if f.kind == KIND_HELLO
        && let Ok(h) = Hello::decode(f.body.clone())
    {
        assert_eq!(h.encode(), Bytes::copy_from_slice(&f.body));
    }
}
