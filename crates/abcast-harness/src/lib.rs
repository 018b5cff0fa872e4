//! abcast-harness: the applications of the toolkit. `demo` runs a local cluster of
//! `abcast node` processes under load and reports on it; `bench` reproduces the seeds'
//! figures with the same cluster runner.

pub mod bench;
pub mod demo;
