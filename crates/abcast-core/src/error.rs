//! Errors of the core layer. Every input from the network is decoded into a `Result`;
//! nothing here panics on bad bytes.

use std::fmt;

/// Why a message body could not be decoded. The runtime closes the connection that sent it
/// and logs this reason; the protocol recovers through its ordinary retransmissions.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum DecodeError {
    /// The body ended before the field named here.
    Truncated { what: &'static str },
    /// A field holds a value outside its space.
    Invalid { what: &'static str, detail: String },
    /// The message type byte is not one this protocol knows.
    UnknownKind(u8),
    /// Bytes were left over after the message.
    Trailing { left: usize },
}

impl fmt::Display for DecodeError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            DecodeError::Truncated { what } => write!(f, "message truncated while reading {what}"),
            DecodeError::Invalid { what, detail } => write!(f, "invalid {what}: {detail}"),
            DecodeError::UnknownKind(k) => write!(f, "unknown message kind {k}"),
            DecodeError::Trailing { left } => write!(f, "{left} trailing bytes after message"),
        }
    }
}

impl std::error::Error for DecodeError {}

/// Why `propose` did not take a value.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ProposeError {
    /// The proposer's window of values in flight is full: wait for deliveries and retry.
    Busy,
    /// The value is larger than the configured maximum (`max_value_bytes`).
    TooLarge { bytes: usize, max_bytes: usize },
    /// This node does not have the proposer role.
    NotProposer,
    /// This process life handed out every value id of its range (`batcher::LIFE_SEQ_BITS`:
    /// 2^40 values per life); the next seq, `seq_end`, belongs to the next life. Permanent:
    /// only a restart (a new incarnation, a new range) lets the node propose again.
    IdsExhausted { seq_end: u64 },
    /// Only the leader takes proposals (or reads) and this node is not it (leader-based
    /// protocols, seed 001). `hint`: the leader this node believes in, if any; a client
    /// retries there.
    NotLeader { hint: Option<crate::types::NodeId> },
    /// The protocol does not offer this input (e.g. a read barrier or a reconfiguration on
    /// a protocol that has none yet); `what` names the input.
    Unsupported { what: &'static str },
}

impl fmt::Display for ProposeError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            ProposeError::Busy => write!(f, "proposer window full (busy), retry later"),
            ProposeError::TooLarge { bytes, max_bytes } => {
                write!(
                    f,
                    "value of {bytes} bytes exceeds the maximum of {max_bytes} bytes"
                )
            }
            ProposeError::NotProposer => write!(f, "this node is not a proposer"),
            ProposeError::IdsExhausted { seq_end } => write!(
                f,
                "this process life used every value id below {seq_end}: restart the node \
                 to get a new id range"
            ),
            ProposeError::NotLeader { hint: Some(l) } => {
                write!(f, "this node is not the leader; the leader is {l}")
            }
            ProposeError::NotLeader { hint: None } => {
                write!(f, "this node is not the leader, and knows of none yet")
            }
            ProposeError::Unsupported { what } => {
                write!(f, "this protocol does not support {what}")
            }
        }
    }
}

impl std::error::Error for ProposeError {}
