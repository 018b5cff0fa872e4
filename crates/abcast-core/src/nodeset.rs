//! Sets of nodes named by id, as messages carry them (issue 16 item 2: membership by node
//! id, not ring position).
//!
//! Until frame version 4, U-Ring Paxos' phase 2 and decision messages carried their voter,
//! visited and payload sets as 64-bit masks of *ring positions*. A position means something
//! only in one configuration: after a member is added or removed, bit 2 names another node,
//! and a vote counted under the old configuration would be credited to the wrong acceptor.
//! A [`NodeSet`] names nodes by [`NodeId`], which never changes meaning; a receiver counts
//! only the ids its own configuration knows (`count_in`). Positions remain, but only as
//! local indexes into a node's own arrays; none leaves the node.
//!
//! Representation: ids sorted ascending without duplicates, inline up to
//! [`NodeSet::INLINE`] members (a ring of up to seven nodes never allocates; rings are
//! three to five nodes in every experiment of the seeds), on the heap beyond. Wire form: a
//! `u8` count, then each id as a `u32`; a decoder refuses an unsorted or repeated list and
//! one longer than the largest ring.

use smallvec::SmallVec;

use crate::codec::{Decoder, Encoder};
use crate::error::DecodeError;
use crate::types::NodeId;

/// The largest set a message may carry (the largest ring).
pub const MAX_NODE_SET: usize = 64;

/// A set of node ids, sorted ascending (see the module comment).
#[derive(Clone, Default, PartialEq, Eq, Hash)]
pub struct NodeSet {
    ids: SmallVec<[NodeId; NodeSet::INLINE]>,
}

impl NodeSet {
    /// Members held without a heap allocation.
    pub const INLINE: usize = 7;

    pub fn new() -> NodeSet {
        NodeSet::default()
    }

    pub fn one(id: NodeId) -> NodeSet {
        let mut s = NodeSet::new();
        s.ids.push(id);
        s
    }

    /// Adds `id`; returns whether it was new.
    pub fn insert(&mut self, id: NodeId) -> bool {
        match self.ids.binary_search(&id) {
            Ok(_) => false,
            Err(at) => {
                self.ids.insert(at, id);
                true
            }
        }
    }

    pub fn contains(&self, id: NodeId) -> bool {
        // Linear: the sets are a handful of ids, and this is on the per-instance path.
        self.ids.contains(&id)
    }

    pub fn len(&self) -> usize {
        self.ids.len()
    }

    pub fn is_empty(&self) -> bool {
        self.ids.is_empty()
    }

    pub fn iter(&self) -> impl Iterator<Item = NodeId> + '_ {
        self.ids.iter().copied()
    }

    /// How many members of this set are also in `other` (a vote count among a
    /// configuration's acceptors: ids the receiver does not know do not count).
    pub fn count_in(&self, other: &NodeSet) -> usize {
        let (mut a, mut b, mut n) = (0, 0, 0);
        while a < self.ids.len() && b < other.ids.len() {
            match self.ids[a].cmp(&other.ids[b]) {
                std::cmp::Ordering::Less => a += 1,
                std::cmp::Ordering::Greater => b += 1,
                std::cmp::Ordering::Equal => {
                    n += 1;
                    a += 1;
                    b += 1;
                }
            }
        }
        n
    }

    pub fn encode(&self, e: &mut Encoder) {
        assert!(
            self.ids.len() <= MAX_NODE_SET,
            "a node set of {} ids is larger than the largest ring ({MAX_NODE_SET})",
            self.ids.len()
        );
        e.put_u8(self.ids.len() as u8);
        for id in &self.ids {
            e.put_u32(id.0);
        }
    }

    pub fn decode(d: &mut Decoder, what: &'static str) -> Result<NodeSet, DecodeError> {
        let n = usize::from(d.u8(what)?);
        if n > MAX_NODE_SET {
            return Err(DecodeError::Invalid {
                what,
                detail: format!("{n} node ids, at most {MAX_NODE_SET}"),
            });
        }
        let mut ids = SmallVec::with_capacity(n);
        for _ in 0..n {
            let id = NodeId(d.u32(what)?);
            if ids.last().is_some_and(|last: &NodeId| *last >= id) {
                return Err(DecodeError::Invalid {
                    what,
                    detail: format!("node ids not strictly ascending at {}", id.0),
                });
            }
            ids.push(id);
        }
        Ok(NodeSet { ids })
    }
}

impl FromIterator<NodeId> for NodeSet {
    fn from_iter<I: IntoIterator<Item = NodeId>>(iter: I) -> NodeSet {
        let mut s = NodeSet::new();
        for id in iter {
            s.insert(id);
        }
        s
    }
}

impl std::fmt::Debug for NodeSet {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_set().entries(self.ids.iter().map(|i| i.0)).finish()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ids(v: &[u32]) -> NodeSet {
        v.iter().map(|&i| NodeId(i)).collect()
    }

    #[test]
    fn a_set_stays_sorted_and_counts_only_known_members() {
        let mut s = NodeSet::new();
        assert!(s.insert(NodeId(9)));
        assert!(s.insert(NodeId(2)));
        assert!(!s.insert(NodeId(9)), "a node counted twice");
        assert_eq!(s.iter().map(|i| i.0).collect::<Vec<_>>(), vec![2, 9]);
        // Votes from 2, 9 and 40; this configuration's acceptors are 1, 2, 9.
        s.insert(NodeId(40));
        assert_eq!(s.count_in(&ids(&[1, 2, 9])), 2);
        assert!(s.contains(NodeId(40)) && !s.contains(NodeId(1)));
    }

    #[test]
    fn a_set_round_trips_and_bad_lists_are_refused() {
        let s = ids(&[1, 5, 70_000, 3, 8, 13, 21, 34, 55]);
        assert!(s.len() > NodeSet::INLINE);
        let mut e = Encoder::new();
        s.encode(&mut e);
        let bytes = e.to_bytes();
        let back = NodeSet::decode(&mut Decoder::new(bytes.clone()), "votes").unwrap();
        assert_eq!(back, s);

        for bad in [&[2u32, 1][..], &[4, 4]] {
            let mut e = Encoder::new();
            e.put_u8(bad.len() as u8);
            for &i in bad {
                e.put_u32(i);
            }
            let bytes = e.to_bytes();
            let err = NodeSet::decode(&mut Decoder::new(bytes.clone()), "votes").unwrap_err();
            assert!(err.to_string().contains("ascending"), "{err}");
        }
        let mut e = Encoder::new();
        e.put_u8(65);
        let bytes = e.to_bytes();
        assert!(NodeSet::decode(&mut Decoder::new(bytes.clone()), "votes").is_err());
    }
}
