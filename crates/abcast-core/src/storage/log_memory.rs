//! The in-memory log store: every entry held in memory, nothing survives a restart (tests,
//! benchmarks, and a replica that rejoins as a new one).

use super::StorageError;
use super::log::{Entry, LogSnapshot, LogStore, Meta, SnapshotCut, check_append};
use crate::types::Ballot;
use bytes::Bytes;
use std::collections::VecDeque;

#[derive(Debug, Default)]
pub struct MemoryLogStore {
    meta: Meta,
    /// Entries `meta.first_index ..= meta.last_index`.
    entries: VecDeque<Entry>,
}

impl MemoryLogStore {
    pub fn new() -> MemoryLogStore {
        MemoryLogStore::default()
    }

    fn held(&self, index: u64) -> Option<&Entry> {
        let at = index.checked_sub(self.meta.first_index)?;
        self.entries.get(usize::try_from(at).ok()?)
    }

    /// Bytes of payload held.
    pub fn bytes_held(&self) -> usize {
        self.entries.iter().map(|e| e.payload.len()).sum()
    }
}

impl LogStore for MemoryLogStore {
    fn promised(&self) -> Ballot {
        self.meta.promised
    }
    fn set_promised(&mut self, ballot: Ballot) -> Result<(), StorageError> {
        self.meta.promised = ballot;
        Ok(())
    }
    fn accepted_round(&self) -> Ballot {
        self.meta.accepted_round
    }
    fn set_accepted_round(&mut self, ballot: Ballot) -> Result<(), StorageError> {
        self.meta.accepted_round = ballot;
        Ok(())
    }
    fn decided_idx(&self) -> u64 {
        self.meta.decided_idx
    }
    fn set_decided_idx(&mut self, idx: u64) -> Result<(), StorageError> {
        if self.meta.check_decided(idx)? {
            self.meta.decided_idx = idx;
        }
        Ok(())
    }
    fn first_index(&self) -> u64 {
        self.meta.first_index
    }
    fn last_index(&self) -> u64 {
        self.meta.last_index
    }
    fn ballot_at(&self, index: u64) -> Option<Ballot> {
        self.meta
            .ballot_at(index, |i| self.held(i).map(|e| e.ballot))
    }
    fn entries(&self, from: u64, to: u64, max_bytes: usize) -> Result<Vec<Entry>, StorageError> {
        let mut out = Vec::new();
        let mut bytes = 0usize;
        let to = to.min(self.meta.last_index + 1);
        let mut i = from.max(self.meta.first_index);
        while i < to {
            let Some(e) = self.held(i) else { break };
            bytes = bytes.saturating_add(e.payload.len());
            if bytes > max_bytes && !out.is_empty() {
                break;
            }
            out.push(e.clone());
            i += 1;
        }
        Ok(out)
    }
    fn append(&mut self, entries: &[Entry]) -> Result<(), StorageError> {
        check_append(self.meta.last_index, entries)?;
        self.entries.extend(entries.iter().cloned());
        self.meta.last_index += entries.len() as u64;
        Ok(())
    }
    fn truncate(&mut self, from: u64) -> Result<(), StorageError> {
        if self.meta.check_truncate(from)? {
            self.entries
                .truncate((from - self.meta.first_index) as usize);
            self.meta.truncate(from);
        }
        Ok(())
    }
    fn stop_sign(&self) -> Option<&Bytes> {
        self.meta.stop_sign.as_ref()
    }
    fn set_stop_sign(&mut self, stop_sign: Option<Bytes>) -> Result<(), StorageError> {
        self.meta.stop_sign = stop_sign;
        Ok(())
    }
    fn snapshot(&self) -> Option<&LogSnapshot> {
        self.meta.snapshot.as_ref()
    }
    fn set_snapshot(&mut self, snapshot: LogSnapshot) -> Result<(), StorageError> {
        let held = self.ballot_at(snapshot.index);
        let cut = self.meta.check_snapshot(&snapshot, held)?;
        match cut {
            SnapshotCut::DropAll => self.entries.clear(),
            SnapshotCut::KeepSuffix => {
                let covered = (snapshot.index + 1).saturating_sub(self.meta.first_index);
                self.entries
                    .drain(..(covered as usize).min(self.entries.len()));
            }
        }
        self.meta.snapshot(snapshot, cut);
        Ok(())
    }
    fn trim(&mut self, below: u64) -> Result<(), StorageError> {
        if self.meta.check_trim(below)? {
            let prev = self.ballot_at(below - 1).unwrap_or(Ballot::ZERO);
            let drop = ((below - self.meta.first_index) as usize).min(self.entries.len());
            self.entries.drain(..drop);
            self.meta.trim(below, prev);
        }
        Ok(())
    }
    fn sync(&mut self) -> Result<(), StorageError> {
        Ok(())
    }
    fn is_durable(&self) -> bool {
        false
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::storage::log::tests as contract;

    #[test]
    fn the_log_store_contract_holds_in_memory() {
        contract::all(&mut || MemoryLogStore::new());
    }
}
