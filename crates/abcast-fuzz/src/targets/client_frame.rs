//! The client wire protocol (`abcast_runtime::clientwire::ClientFrame::decode`): every body
//! of every kind a client or a node may send.
//!
//! Input: the kind byte, then the body.
//! Checks: a frame that decodes has that kind, and encodes to a body that decodes to the
//! same frame.

use super::concat;
use abcast_runtime::clientwire::ClientFrame;
use bytes::Bytes;

pub fn client_frame(data: &[u8]) {
    let Some((&kind, body)) = data.split_first() else {
        return;
    };
    let Ok(f) = ClientFrame::decode(kind, Bytes::copy_from_slice(body)) else {
        return;
    };
    assert_eq!(f.kind(), kind, "decoded as another kind");
    let again = Bytes::from(concat(&f.encode()));
    match ClientFrame::decode(kind, again) {
        Ok(g) => assert_eq!(f, g, "encode then decode changed the frame"),
        Err(e) => panic!("a decoded frame encodes to a body its decoder refuses: {e}; {f:?}"),
    }
}
