//! The harness's one error type, split by who has to act: the user (exit status 2) or the
//! system (exit status 1). The demo, the benchmarks and the cluster runner all return it.

use std::fmt;

/// An error, split by who has to act: the user (exit status 2) or the system (exit status 1).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum HarnessError {
    /// Bad input from the command line; the message names the flag.
    Usage(String),
    /// A runtime failure: a node that would not start, an unwritable directory, ...
    Runtime(String),
}

impl HarnessError {
    pub fn exit_code(&self) -> u8 {
        match self {
            HarnessError::Usage(_) => 2,
            HarnessError::Runtime(_) => 1,
        }
    }
}

impl fmt::Display for HarnessError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            HarnessError::Usage(m) | HarnessError::Runtime(m) => f.write_str(m),
        }
    }
}

impl std::error::Error for HarnessError {}

pub(crate) fn runtime<T>(what: impl fmt::Display, e: impl fmt::Display) -> Result<T, HarnessError> {
    Err(HarnessError::Runtime(format!("{what}: {e}")))
}
