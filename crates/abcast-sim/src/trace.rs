//! The event log of a run: a bounded ring of the last events (printed with a violation), an
//! optional live print of every event (the replay mode), and a fingerprint of the whole run
//! (two runs of one seed must have the same fingerprint, or something is not deterministic).
//!
//! Events are kept as small structs and formatted only when printed, so tracing costs little
//! in the sweeps, where nobody reads the log unless a seed fails.

use abcast_core::{BatchKey, Instance, Micros, NodeId, ValueId};
use std::collections::VecDeque;
use std::fmt;

/// Why the network did not deliver a message.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum DropReason {
    /// Random loss of the fault phase.
    Loss,
    /// The directed link was blocked when the message was sent or when it arrived.
    Partition,
    /// The destination was down when the message arrived, or restarted since it was sent.
    DestinationDown,
    /// The destination is not a node of the simulation.
    UnknownDestination,
    /// Over the transport's frame limit (`SimConfig::max_message_bytes`).
    TooLarge,
}

/// One thing that happened in a run.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum TraceEvent {
    Send {
        from: NodeId,
        to: NodeId,
        kind: u8,
        bytes: usize,
    },
    Drop {
        from: NodeId,
        to: NodeId,
        kind: u8,
        why: DropReason,
    },
    Duplicate {
        from: NodeId,
        to: NodeId,
        kind: u8,
    },
    Receive {
        from: NodeId,
        to: NodeId,
        kind: u8,
        bytes: usize,
    },
    Propose {
        node: NodeId,
        id: ValueId,
        bytes: usize,
    },
    Busy {
        node: NodeId,
    },
    Deliver {
        node: NodeId,
        incarnation: u64,
        instance: Instance,
        key: BatchKey,
        count: usize,
    },
    Ack {
        node: NodeId,
        key: BatchKey,
        count: u32,
    },
    Start {
        node: NodeId,
        incarnation: u64,
        amnesic: bool,
    },
    Crash {
        node: NodeId,
        incarnation: u64,
    },
    Partition {
        blocked: Vec<(NodeId, NodeId)>,
    },
    Heal,
    Converged,
    /// A line from the protocol's `Outbox::events`.
    Protocol {
        node: NodeId,
        text: String,
    },
    Note(String),
}

/// An event and when it happened.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct TraceRecord {
    pub at_us: Micros,
    pub event: TraceEvent,
}

impl fmt::Display for TraceRecord {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "[{:>10}us] ", self.at_us)?;
        match &self.event {
            TraceEvent::Send {
                from,
                to,
                kind,
                bytes,
            } => write!(f, "send    {from}->{to} kind={kind} {bytes}B"),
            TraceEvent::Drop {
                from,
                to,
                kind,
                why,
            } => write!(f, "drop    {from}->{to} kind={kind} ({why:?})"),
            TraceEvent::Duplicate { from, to, kind } => {
                write!(f, "dup     {from}->{to} kind={kind}")
            }
            TraceEvent::Receive {
                from,
                to,
                kind,
                bytes,
            } => write!(f, "recv    {from}->{to} kind={kind} {bytes}B"),
            TraceEvent::Propose { node, id, bytes } => {
                write!(f, "propose at {node}: {id} ({bytes}B)")
            }
            TraceEvent::Busy { node } => write!(f, "busy    at {node}"),
            TraceEvent::Deliver {
                node,
                incarnation,
                instance,
                key,
                count,
            } => {
                write!(
                    f,
                    "deliver {node}#{incarnation} instance {instance}: batch {key} x{count}"
                )
            }
            TraceEvent::Ack { node, key, count } => {
                write!(f, "ack     at {node}: batch {key} x{count}")
            }
            TraceEvent::Start {
                node,
                incarnation,
                amnesic,
            } => {
                write!(
                    f,
                    "start   {node}#{incarnation}{}",
                    if *amnesic { " (amnesic)" } else { "" }
                )
            }
            TraceEvent::Crash { node, incarnation } => write!(f, "crash   {node}#{incarnation}"),
            TraceEvent::Partition { blocked } => {
                write!(f, "links   blocked:")?;
                if blocked.is_empty() {
                    write!(f, " none")?;
                }
                for (a, b) in blocked {
                    write!(f, " {a}->{b}")?;
                }
                Ok(())
            }
            TraceEvent::Heal => write!(f, "HEAL    all links up, no loss, every node started"),
            TraceEvent::Converged => write!(f, "CONVERGED"),
            TraceEvent::Protocol { node, text } => write!(f, "event   {node}: {text}"),
            TraceEvent::Note(s) => write!(f, "note    {s}"),
        }
    }
}

/// The run's event log.
#[derive(Debug)]
pub struct Trace {
    ring: VecDeque<TraceRecord>,
    capacity_events: usize,
    verbose: bool,
    fingerprint: u64,
    recorded_events: u64,
}

const FNV_OFFSET: u64 = 0xcbf2_9ce4_8422_2325;
const FNV_PRIME: u64 = 0x0000_0100_0000_01b3;

impl Trace {
    /// Keeps the last `capacity_events` events; prints every event to stderr if `verbose`.
    pub fn new(capacity_events: usize, verbose: bool) -> Trace {
        Trace {
            ring: VecDeque::with_capacity(capacity_events.min(4096)),
            capacity_events,
            verbose,
            fingerprint: FNV_OFFSET,
            recorded_events: 0,
        }
    }

    pub fn is_verbose(&self) -> bool {
        self.verbose
    }

    pub fn record(&mut self, at_us: Micros, event: TraceEvent) {
        self.fold(at_us);
        self.fold_event(&event);
        self.recorded_events += 1;
        let rec = TraceRecord { at_us, event };
        if self.verbose {
            eprintln!("{rec}");
        }
        if self.capacity_events == 0 {
            return;
        }
        if self.ring.len() == self.capacity_events {
            self.ring.pop_front();
        }
        self.ring.push_back(rec);
    }

    /// Prints a detail line in verbose mode (the caller builds it only when verbose).
    pub fn detail(&self, line: impl FnOnce() -> String) {
        if self.verbose {
            eprintln!("               {}", line());
        }
    }

    /// The kept events, oldest first, formatted.
    pub fn tail(&self) -> Vec<String> {
        self.ring.iter().map(|r| r.to_string()).collect()
    }

    /// FNV-1a over every event recorded: equal for two runs that did the same things.
    pub fn fingerprint(&self) -> u64 {
        self.fingerprint
    }

    pub fn recorded_events(&self) -> u64 {
        self.recorded_events
    }

    fn fold(&mut self, word: u64) {
        for b in word.to_le_bytes() {
            self.fingerprint ^= u64::from(b);
            self.fingerprint = self.fingerprint.wrapping_mul(FNV_PRIME);
        }
    }

    fn fold_event(&mut self, e: &TraceEvent) {
        let n = |x: &NodeId| u64::from(x.0);
        let key = |k: &BatchKey| (u64::from(k.origin.0) << 48) ^ k.first_seq;
        match e {
            TraceEvent::Send {
                from,
                to,
                kind,
                bytes,
            } => self.fold_all(&[1, n(from), n(to), u64::from(*kind), *bytes as u64]),
            TraceEvent::Drop {
                from,
                to,
                kind,
                why,
            } => self.fold_all(&[2, n(from), n(to), u64::from(*kind), *why as u64]),
            TraceEvent::Duplicate { from, to, kind } => {
                self.fold_all(&[3, n(from), n(to), u64::from(*kind)])
            }
            TraceEvent::Receive {
                from,
                to,
                kind,
                bytes,
            } => self.fold_all(&[4, n(from), n(to), u64::from(*kind), *bytes as u64]),
            TraceEvent::Propose { node, id, bytes } => {
                self.fold_all(&[5, n(node), n(&id.node), id.seq, *bytes as u64])
            }
            TraceEvent::Busy { node } => self.fold_all(&[6, n(node)]),
            TraceEvent::Deliver {
                node,
                incarnation,
                instance,
                key: k,
                count,
            } => self.fold_all(&[7, n(node), *incarnation, *instance, key(k), *count as u64]),
            TraceEvent::Ack {
                node,
                key: k,
                count,
            } => self.fold_all(&[8, n(node), key(k), u64::from(*count)]),
            TraceEvent::Start {
                node,
                incarnation,
                amnesic,
            } => self.fold_all(&[9, n(node), *incarnation, u64::from(*amnesic)]),
            TraceEvent::Crash { node, incarnation } => self.fold_all(&[10, n(node), *incarnation]),
            TraceEvent::Partition { blocked } => {
                self.fold(11);
                for (a, b) in blocked {
                    self.fold_all(&[n(a), n(b)]);
                }
            }
            TraceEvent::Heal => self.fold(12),
            TraceEvent::Converged => self.fold(13),
            TraceEvent::Protocol { node, text } => {
                self.fold_all(&[14, n(node)]);
                self.fold_bytes(text.as_bytes());
            }
            TraceEvent::Note(s) => {
                self.fold(15);
                self.fold_bytes(s.as_bytes());
            }
        }
    }

    fn fold_all(&mut self, words: &[u64]) {
        for w in words {
            self.fold(*w);
        }
    }

    fn fold_bytes(&mut self, bytes: &[u8]) {
        for b in bytes {
            self.fingerprint ^= u64::from(*b);
            self.fingerprint = self.fingerprint.wrapping_mul(FNV_PRIME);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ring_keeps_the_last_events_and_fingerprint_sees_all() {
        let mut t = Trace::new(2, false);
        let mut u = Trace::new(0, false);
        for i in 0..5u64 {
            let e = TraceEvent::Busy {
                node: NodeId(i as u32),
            };
            t.record(i, e.clone());
            u.record(i, e);
        }
        let tail = t.tail();
        assert_eq!(tail.len(), 2);
        assert!(tail[0].contains("n3") && tail[1].contains("n4"), "{tail:?}");
        assert_eq!(t.fingerprint(), u.fingerprint());
        assert!(u.tail().is_empty());
        u.record(9, TraceEvent::Heal);
        assert_ne!(t.fingerprint(), u.fingerprint());
    }
}
