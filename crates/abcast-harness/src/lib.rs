//! abcast-harness: the applications of the toolkit. `cluster` runs a local cluster of
//! `abcast node` processes and records what they print; `analysis` turns the records into
//! figures and verdicts; `demo` (`abcast demo`) and `bench` (`abcast bench`) are built on
//! those two and never on each other; `format` and `plot` show the results.

pub mod analysis;
pub mod bench;
pub mod chaos;
pub mod cluster;
pub mod demo;
pub mod error;
pub mod format;
pub mod plot;
