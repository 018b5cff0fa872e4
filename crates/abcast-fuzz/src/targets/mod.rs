//! One module per target; each `pub fn NAME(data: &[u8])`.

pub mod client_frame;
pub mod datagram;
pub mod frame;
pub mod history;
pub mod intake;
pub mod node_config;
pub mod peer_message;
pub mod shm_ring;
pub mod storage;

/// The bytes of chunks, in one buffer.
pub(crate) fn concat(chunks: &[bytes::Bytes]) -> Vec<u8> {
    chunks.iter().flat_map(|c| c.iter().copied()).collect()
}
