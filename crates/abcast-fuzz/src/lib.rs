//! abcast's fuzz targets, as plain functions of a byte string (docs/fuzzing.md).
//!
//! Each target feeds its bytes to one decoder of what comes from outside the process (a
//! peer, a client, a datagram, a config file, a disk) and checks what every decoder
//! promises: it refuses bad input with an error and never panics, allocates within a
//! bound, and ends. Where a decoder has an encoder, a target also checks that what it
//! accepted encodes back to something that decodes to the same value (a node must
//! understand what it sends). A target panics, and so fails, only when a promise is
//! broken.
//!
//! The targets run two ways: under libFuzzer (`fuzz/fuzz_targets/<name>.rs`, one line
//! each, `cargo +nightly fuzz run <name>`), and on the stable toolchain over the committed
//! corpus plus generated variants (`tests/smoke.rs`, CI's smoke). `tests/corpus.rs`
//! writes the seed corpus from the crates' own encoders, stores and simulated runs.

pub mod input;
pub mod targets;

/// A fuzz target: a function of the input bytes that panics only on a broken promise.
pub type Target = fn(&[u8]);

/// Every target: its name (the file `fuzz/fuzz_targets/<name>.rs` and the corpus folder
/// `fuzz/corpus/<name>/`) and its function.
pub const TARGETS: &[(&str, Target)] = &[
    ("frame", targets::frame::frame),
    ("intake", targets::intake::intake),
    ("peer_message", targets::peer_message::peer_message),
    ("client_frame", targets::client_frame::client_frame),
    ("shm_ring", targets::shm_ring::shm_ring),
    ("datagram", targets::datagram::datagram),
    ("node_config", targets::node_config::node_config),
    ("durable_store", targets::storage::durable_store),
    ("durable_log_store", targets::storage::durable_log_store),
    ("history", targets::history::history),
];

/// The target named `name`.
pub fn target(name: &str) -> Option<Target> {
    TARGETS.iter().find(|(n, _)| *n == name).map(|(_, f)| *f)
}
