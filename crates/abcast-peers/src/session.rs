//! Connections over our links, for a protocol core that assumes them (OmniPaxos): what TCP
//! and our runtime give such a core, played over links that lose, duplicate and reorder
//! datagrams without ever saying so (the simulator's).
//!
//! A connection is one direction of one pair of nodes in one *epoch*: the sender numbers
//! its messages `(incarnation, epoch, seq)`, `seq` from 0. The receiver hands them on in
//! `seq` order, holds early ones up to `wait_us` for the gap to fill, and drops duplicates
//! and anything of an older connection. A gap that does not fill in time (a lost message,
//! one held 5 s by the network's heavy tail) breaks the connection, as a TCP connection
//! breaks with data lost: the receiver drops what it held, accepts nothing more of that
//! epoch, and asks the sender, with a `Reset` it repeats every `wait_us` until it is
//! obeyed, to open the next epoch. A new connection (a newer epoch or a new life of the
//! sender) is announced to the core on both ends (`Reconnected`), as our runtime calls
//! `Protocol::peer_reconnected` at every connect, before its first message is handed on.
//!
//! What this guarantees the core, as TCP does: messages of one connection arrive in order,
//! each at most once, with no gap; after a reconnect, nothing of an older connection
//! arrives. Over TCP no gap opens and no `Reset` is ever sent.

use abcast_core::types::{Micros, NodeId};
use std::collections::{BTreeMap, HashMap};

/// One connection: the sender's life and the epoch within it, ordered.
pub(crate) type ConnId = (u64, u64);

#[derive(Debug, Default)]
struct Outbound {
    epoch: u64,
    seq: u64,
}

#[derive(Debug)]
struct Inbound<M> {
    /// The connection being received, or the one asked for after a break.
    conn: ConnId,
    /// Broken, waiting for `conn` to start; with when the `Reset` was last sent.
    reset_sent_us: Option<Micros>,
    next_seq: u64,
    held: BTreeMap<u64, M>,
    gap_since_us: Micros,
}

/// What the core must hear of: a connection with `peer` (re)started.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Reconnected(pub NodeId);

/// Counters of the connections' repairs.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct SessionCounters {
    /// Duplicates, late copies and messages of older connections, dropped.
    pub stale: u64,
    /// Connections broken by a gap that did not fill.
    pub broken: u64,
    /// Connections (re)started, on either end.
    pub reconnects: u64,
    /// `Reset`s sent (repeats included).
    pub resets_sent: u64,
}

/// Every connection of one node (module comment).
#[derive(Debug)]
pub(crate) struct Sessions<M> {
    incarnation: u64,
    wait_us: Micros,
    held_max: usize,
    outbound: HashMap<NodeId, Outbound>,
    inbound: HashMap<NodeId, Inbound<M>>,
    pub(crate) counters: SessionCounters,
}

impl<M> Sessions<M> {
    pub(crate) fn new(incarnation: u64, wait_us: Micros, held_max: usize) -> Sessions<M> {
        Sessions {
            incarnation,
            wait_us,
            held_max: held_max.max(1),
            outbound: HashMap::new(),
            inbound: HashMap::new(),
            counters: SessionCounters::default(),
        }
    }

    /// The header of the next message to `to`: `(incarnation, epoch, seq)`.
    pub(crate) fn stamp(&mut self, to: NodeId) -> (u64, u64, u64) {
        let o = self.outbound.entry(to).or_default();
        let seq = o.seq;
        o.seq += 1;
        (self.incarnation, o.epoch, seq)
    }

    /// `from` asks for epoch `epoch` of our life `incarnation` on our link to it: opens
    /// it (the core hears `Reconnected`) unless this life already opened it or a later one.
    pub(crate) fn on_reset(
        &mut self,
        from: NodeId,
        incarnation: u64,
        epoch: u64,
    ) -> Option<Reconnected> {
        if incarnation != self.incarnation {
            return None;
        }
        let o = self.outbound.entry(from).or_default();
        if epoch <= o.epoch {
            return None;
        }
        o.epoch = epoch;
        o.seq = 0;
        self.counters.reconnects += 1;
        Some(Reconnected(from))
    }

    /// A message of connection `conn` numbered `seq` from `from`. What may be handed on now
    /// goes to `ready`, in order; `Some(Reconnected)` when it started a new connection,
    /// which the core must hear of before `ready`.
    pub(crate) fn on_data(
        &mut self,
        now: Micros,
        from: NodeId,
        conn: ConnId,
        seq: u64,
        msg: M,
        ready: &mut Vec<M>,
    ) -> Option<Reconnected> {
        let mut notice = None;
        let s = match self.inbound.get_mut(&from) {
            Some(s) if conn < s.conn || (conn == s.conn && s.reset_sent_us.is_none()) => {
                if conn < s.conn {
                    self.counters.stale += 1;
                    return None;
                }
                s
            }
            _ => {
                // A connection newer than the one received or asked for (the first
                // contact, the sender's new life, the epoch a Reset asked for).
                self.counters.reconnects += 1;
                notice = Some(Reconnected(from));
                self.inbound.insert(
                    from,
                    Inbound {
                        conn,
                        reset_sent_us: None,
                        next_seq: 0,
                        held: BTreeMap::new(),
                        gap_since_us: now,
                    },
                );
                match self.inbound.get_mut(&from) {
                    Some(s) => s,
                    None => return notice,
                }
            }
        };
        if seq < s.next_seq || s.held.contains_key(&seq) {
            self.counters.stale += 1;
            return notice;
        }
        if seq > s.next_seq {
            if s.held.is_empty() {
                s.gap_since_us = now;
            }
            s.held.insert(seq, msg);
            if s.held.len() > self.held_max {
                Self::break_conn(s, &mut self.counters);
            }
            return notice;
        }
        ready.push(msg);
        s.next_seq += 1;
        while let Some(m) = s.held.remove(&s.next_seq) {
            ready.push(m);
            s.next_seq += 1;
        }
        // What is still held waits from now for the next gap to fill.
        s.gap_since_us = now;
        notice
    }

    fn break_conn(s: &mut Inbound<M>, counters: &mut SessionCounters) {
        counters.broken += 1;
        s.held.clear();
        s.conn = (s.conn.0, s.conn.1 + 1);
        s.next_seq = 0;
        // Sent at the next tick.
        s.reset_sent_us = Some(0);
    }

    /// Breaks the connections whose gap waited `wait_us`, and (re)sends the `Reset`s due:
    /// `(peer, its incarnation, the epoch asked for)` into `resets`.
    pub(crate) fn tick(&mut self, now: Micros, resets: &mut Vec<(NodeId, u64, u64)>) {
        let wait = self.wait_us;
        let mut peers: Vec<NodeId> = self.inbound.keys().copied().collect();
        peers.sort_unstable();
        for p in peers {
            let Some(s) = self.inbound.get_mut(&p) else {
                continue;
            };
            if s.reset_sent_us.is_none()
                && !s.held.is_empty()
                && now >= s.gap_since_us.saturating_add(wait)
            {
                Self::break_conn(s, &mut self.counters);
            }
            if let Some(sent) = s.reset_sent_us
                && (sent == 0 || now >= sent.saturating_add(wait))
            {
                s.reset_sent_us = Some(now.max(1));
                self.counters.resets_sent += 1;
                resets.push((p, s.conn.0, s.conn.1));
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const A: NodeId = NodeId(0);
    const B: NodeId = NodeId(1);

    fn data(s: &mut Sessions<u64>, now: Micros, conn: ConnId, seq: u64) -> (Vec<u64>, bool) {
        let mut ready = Vec::new();
        let n = s.on_data(now, A, conn, seq, seq, &mut ready);
        (ready, n.is_some())
    }

    #[test]
    fn a_connection_hands_messages_on_in_order_once_and_announces_itself() {
        let mut s = Sessions::new(0, 1_000, 16);
        assert_eq!(data(&mut s, 0, (0, 0), 0), (vec![0], true));
        assert_eq!(
            data(&mut s, 1, (0, 0), 2),
            (vec![], false),
            "held: 1 missing"
        );
        assert_eq!(
            data(&mut s, 2, (0, 0), 1),
            (vec![1, 2], false),
            "the gap fills"
        );
        assert_eq!(data(&mut s, 3, (0, 0), 1), (vec![], false), "a duplicate");
        assert_eq!(s.counters.stale, 1);
        let mut resets = Vec::new();
        s.tick(10_000, &mut resets);
        assert!(resets.is_empty(), "no gap, no reset");
    }

    #[test]
    fn a_gap_that_does_not_fill_breaks_the_connection_until_the_sender_opens_the_next() {
        let mut s = Sessions::new(0, 1_000, 16);
        data(&mut s, 0, (0, 0), 0);
        assert_eq!(data(&mut s, 10, (0, 0), 2), (vec![], false));
        let mut resets = Vec::new();
        s.tick(500, &mut resets);
        assert!(resets.is_empty(), "still waiting");
        s.tick(1_010, &mut resets);
        assert_eq!(resets, vec![(A, 0, 1)], "broken: epoch 1 asked for");
        assert_eq!(
            data(&mut s, 1_100, (0, 0), 1),
            (vec![], false),
            "the late message of the broken connection never arrives"
        );
        resets.clear();
        s.tick(1_500, &mut resets);
        assert!(resets.is_empty());
        s.tick(2_011, &mut resets);
        assert_eq!(
            resets,
            vec![(A, 0, 1)],
            "the reset is repeated until obeyed"
        );
        assert_eq!(
            data(&mut s, 2_100, (0, 1), 0),
            (vec![0], true),
            "the new connection"
        );
        resets.clear();
        s.tick(9_000, &mut resets);
        assert!(resets.is_empty());
        assert_eq!(s.counters.broken, 1);
    }

    #[test]
    fn the_sender_opens_an_epoch_once_and_only_for_its_own_life() {
        let mut s: Sessions<u64> = Sessions::new(3, 1_000, 16);
        assert_eq!(s.stamp(B), (3, 0, 0));
        assert_eq!(s.stamp(B), (3, 0, 1));
        assert_eq!(s.on_reset(B, 2, 1), None, "a reset for an earlier life");
        assert_eq!(s.on_reset(B, 3, 1), Some(Reconnected(B)));
        assert_eq!(s.on_reset(B, 3, 1), None, "a repeated reset");
        assert_eq!(s.stamp(B), (3, 1, 0));
    }

    #[test]
    fn a_new_life_of_the_sender_is_a_new_connection_and_its_old_life_is_stale() {
        let mut s = Sessions::new(0, 1_000, 16);
        data(&mut s, 0, (0, 0), 0);
        assert_eq!(data(&mut s, 1, (1, 0), 0), (vec![0], true));
        assert_eq!(data(&mut s, 2, (0, 0), 1), (vec![], false), "the old life");
        assert_eq!(s.counters.stale, 1);
    }

    #[test]
    fn too_many_held_messages_break_the_connection_at_once() {
        let mut s = Sessions::new(0, 1_000_000, 2);
        data(&mut s, 0, (0, 0), 0);
        for seq in 2..5 {
            data(&mut s, 1, (0, 0), seq);
        }
        let mut resets = Vec::new();
        s.tick(2, &mut resets);
        assert_eq!(resets, vec![(A, 0, 1)]);
    }
}
