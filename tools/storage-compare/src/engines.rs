//! The engines under test, behind one small trait: append a batch of votes and make it
//! durable (one group commit), trim below an instance, reclaim the space, read one back.
//!
//! Every engine commits with its strongest durability: the call returns only after an
//! fdatasync/fsync that covers the whole batch.

use abcast_runtime::disk::OsDir;
use abcast_core::storage::record::Record;
use abcast_core::storage::{Accepted, AcceptorStore, DurableOptions, DurableStore};
use abcast_core::types::{Ballot, Batch, Decree, Instance, NodeId, ValueId};
use bytes::Bytes;
use std::fmt;
use std::path::Path;

/// The engines this tool knows, by their command-line names.
pub const ALL: &[&str] = &["ours", "raft-engine", "fjall", "redb"];

/// One vote: what an acceptor writes for an instance.
pub struct Vote {
    pub instance: Instance,
    pub ballot: Ballot,
    pub payload: Bytes,
}

impl Vote {
    pub fn decree(&self) -> Decree {
        let id = ValueId {
            node: NodeId(1),
            seq: self.instance,
        };
        Decree::Values(Batch::single(id, self.payload.clone()))
    }

    /// The bytes the crates store as the value: the body of our own `Accept` record
    /// (instance, ballot, decided flag, decree with its value id), without our frame
    /// header, since each crate checksums its own records. Our log writes the same body.
    pub fn encoded(&self) -> Vec<u8> {
        let r = Record::Accept {
            instance: self.instance,
            ballot: self.ballot,
            decided: true,
            decree: self.decree(),
        };
        let (chunks, len) = r.encode(1);
        let mut out = Vec::with_capacity(len);
        for c in chunks.iter().skip(1) {
            out.extend_from_slice(c);
        }
        out
    }
}

/// Decodes what `Vote::encoded` wrote, back to (instance, payload), to check a read.
pub fn decode_value(bytes: &[u8]) -> std::result::Result<(Instance, Bytes), String> {
    match Record::decode(Bytes::copy_from_slice(bytes)).map_err(|e| e.to_string())? {
        Record::Accept {
            instance,
            decree: Decree::Values(b),
            ..
        } => {
            let payload = b
                .values()
                .next()
                .map(|v| v.payload)
                .ok_or_else(|| "empty batch".to_string())?;
            Ok((instance, payload))
        }
        other => Err(format!("not an accept record: {other:?}")),
    }
}

#[derive(Debug)]
pub struct Error(pub String);

impl fmt::Display for Error {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

impl std::error::Error for Error {}

pub type Result<T> = std::result::Result<T, Error>;

fn err<E: fmt::Display>(what: &'static str) -> impl Fn(E) -> Error {
    move |e| Error(format!("{what}: {e}"))
}

pub trait Engine {
    /// Writes the votes and returns once they are durable (one group commit).
    fn commit(&mut self, votes: &[Vote]) -> Result<()>;
    /// Forgets every instance below `below`, durably.
    fn trim(&mut self, below: Instance) -> Result<()>;
    /// Gives the space of trimmed instances back to the file system, if the engine needs a
    /// separate step for that (compaction, purge). A no-op where `trim` already did it.
    fn reclaim(&mut self) -> Result<()>;
    /// Reads one vote back: its instance and payload.
    fn read(&mut self, instance: Instance) -> Result<Option<(Instance, Bytes)>>;
    /// The lowest and highest instance held.
    fn bounds(&mut self) -> Result<Option<(Instance, Instance)>>;
}

pub fn open(name: &str, dir: &Path) -> Result<Box<dyn Engine>> {
    Ok(match name {
        "ours" => Box::new(Ours::open(dir)?),
        "redb" => Box::new(Redb::open(dir)?),
        "fjall" => Box::new(Fjall::open(dir)?),
        "raft-engine" => Box::new(RaftEngine::open(dir)?),
        _ => {
            return Err(Error(format!(
                "unknown engine {name:?} (known: {})",
                ALL.join(", ")
            )));
        }
    })
}

// ---------------------------------------------------------------------------------------
// Ours: DurableStore over OsDir, sync = true (fdatasync per group commit).

pub struct Ours {
    store: DurableStore<OsDir>,
}

/// The segment size of our log, and raft-engine's target file size (the same granularity
/// for the trim).
pub const SEGMENT_BYTES: u64 = 64 << 20;

impl Ours {
    fn open(dir: &Path) -> Result<Ours> {
        let os = OsDir::open(dir).map_err(err("ours: opening the directory"))?;
        let opts = DurableOptions {
            sync: true,
            segment_bytes: SEGMENT_BYTES,
            cache_instances: 1024,
            cache_bytes: 64 << 20,
        };
        let (store, _rec) = DurableStore::open(os, opts).map_err(err("ours: open"))?;
        Ok(Ours { store })
    }
}

impl Engine for Ours {
    fn commit(&mut self, votes: &[Vote]) -> Result<()> {
        for v in votes {
            if v.ballot > self.store.promised() {
                self.store.set_promised(v.ballot);
            }
            let a = Accepted {
                ballot: v.ballot,
                decree: v.decree(),
                decided: true,
            };
            if !self.store.put(v.instance, a) {
                return Err(Error(format!(
                    "ours: put of instance {} refused",
                    v.instance
                )));
            }
        }
        self.store.sync().map_err(err("ours: sync"))
    }
    fn trim(&mut self, below: Instance) -> Result<()> {
        self.store.trim(below);
        self.store.sync().map_err(err("ours: sync after trim"))
    }
    fn reclaim(&mut self) -> Result<()> {
        // `sync` after `trim` already deleted the segments that hold nothing live.
        Ok(())
    }
    fn read(&mut self, instance: Instance) -> Result<Option<(Instance, Bytes)>> {
        Ok(self
            .store
            .range(instance, instance + 1)
            .into_iter()
            .next()
            .and_then(|(i, a)| match a.decree {
                Decree::Values(b) => b.values().next().map(|v| (i, v.payload)),
                _ => None,
            }))
    }
    fn bounds(&mut self) -> Result<Option<(Instance, Instance)>> {
        let max = self.store.max_instance();
        if max == 0 {
            return Ok(None);
        }
        Ok(Some((self.store.log_start(), max)))
    }
}

// ---------------------------------------------------------------------------------------
// redb: one write transaction per batch, Durability::Immediate (the default; set anyway).

const REDB_TABLE: redb::TableDefinition<u64, &[u8]> = redb::TableDefinition::new("votes");

pub struct Redb {
    db: redb::Database,
}

impl Redb {
    fn open(dir: &Path) -> Result<Redb> {
        std::fs::create_dir_all(dir).map_err(err("redb: creating the directory"))?;
        let db = redb::Database::create(dir.join("votes.redb")).map_err(err("redb: open"))?;
        Ok(Redb { db })
    }
}

impl Engine for Redb {
    fn commit(&mut self, votes: &[Vote]) -> Result<()> {
        let mut tx = self.db.begin_write().map_err(err("redb: begin_write"))?;
        tx.set_durability(redb::Durability::Immediate)
            .map_err(err("redb: set_durability"))?;
        {
            let mut t = tx.open_table(REDB_TABLE).map_err(err("redb: open_table"))?;
            for v in votes {
                t.insert(v.instance, v.encoded().as_slice())
                    .map_err(err("redb: insert"))?;
            }
        }
        tx.commit().map_err(err("redb: commit"))
    }
    fn trim(&mut self, below: Instance) -> Result<()> {
        let mut tx = self.db.begin_write().map_err(err("redb: begin_write"))?;
        tx.set_durability(redb::Durability::Immediate)
            .map_err(err("redb: set_durability"))?;
        {
            let mut t = tx.open_table(REDB_TABLE).map_err(err("redb: open_table"))?;
            t.retain_in(..below, |_, _| false)
                .map_err(err("redb: retain_in"))?;
        }
        tx.commit().map_err(err("redb: commit"))
    }
    fn reclaim(&mut self) -> Result<()> {
        // Freed pages are reused by later writes; the file shrinks only through compact().
        self.db.compact().map_err(err("redb: compact"))?;
        Ok(())
    }
    fn read(&mut self, instance: Instance) -> Result<Option<(Instance, Bytes)>> {
        use redb::ReadableDatabase;
        let tx = self.db.begin_read().map_err(err("redb: begin_read"))?;
        let t = tx.open_table(REDB_TABLE).map_err(err("redb: open_table"))?;
        match t.get(instance).map_err(err("redb: get"))? {
            Some(v) => decode_value(v.value()).map(Some).map_err(Error),
            None => Ok(None),
        }
    }
    fn bounds(&mut self) -> Result<Option<(Instance, Instance)>> {
        use redb::{ReadableDatabase, ReadableTable};
        let tx = self.db.begin_read().map_err(err("redb: begin_read"))?;
        let t = tx.open_table(REDB_TABLE).map_err(err("redb: open_table"))?;
        let first = t
            .first()
            .map_err(err("redb: first"))?
            .map(|(k, _)| k.value());
        let last = t.last().map_err(err("redb: last"))?.map(|(k, _)| k.value());
        Ok(first.zip(last))
    }
}

// ---------------------------------------------------------------------------------------
// fjall: one keyspace with key-value separation (values of 1 KiB and more go to blob files,
// the configuration fjall documents for large values), one write batch per group commit
// with PersistMode::SyncData. Compression off: the payloads are incompressible.

pub struct Fjall {
    db: fjall::Database,
    ks: fjall::Keyspace,
}

impl Fjall {
    fn open(dir: &Path) -> Result<Fjall> {
        use fjall::{CompressionType, KeyspaceCreateOptions, KvSeparationOptions};
        let db = fjall::Database::builder(dir)
            .journal_compression(CompressionType::None)
            .open()
            .map_err(err("fjall: open"))?;
        let ks = db
            .keyspace("votes", || {
                KeyspaceCreateOptions::default().with_kv_separation(Some(
                    KvSeparationOptions::default().compression(CompressionType::None),
                ))
            })
            .map_err(err("fjall: keyspace"))?;
        Ok(Fjall { db, ks })
    }
}

impl Engine for Fjall {
    fn commit(&mut self, votes: &[Vote]) -> Result<()> {
        let mut b = self
            .db
            .batch()
            .durability(Some(fjall::PersistMode::SyncData));
        for v in votes {
            b.insert(&self.ks, v.instance.to_be_bytes(), v.encoded());
        }
        b.commit().map_err(err("fjall: commit"))
    }
    fn trim(&mut self, below: Instance) -> Result<()> {
        // No range delete in fjall 3: one tombstone per key, in one durable batch.
        let mut keys = Vec::new();
        for kv in self.ks.range(..below.to_be_bytes()) {
            let k = kv.key().map_err(err("fjall: range"))?;
            keys.push(k);
        }
        let mut b = self
            .db
            .batch()
            .durability(Some(fjall::PersistMode::SyncData));
        for k in keys {
            b.remove(&self.ks, k);
        }
        b.commit().map_err(err("fjall: commit"))
    }
    fn reclaim(&mut self) -> Result<()> {
        self.ks
            .rotate_memtable_and_wait()
            .map_err(err("fjall: rotate_memtable_and_wait"))?;
        self.ks.major_compact().map_err(err("fjall: major_compact"))
    }
    fn read(&mut self, instance: Instance) -> Result<Option<(Instance, Bytes)>> {
        match self
            .ks
            .get(instance.to_be_bytes())
            .map_err(err("fjall: get"))?
        {
            Some(v) => decode_value(&v).map(Some).map_err(Error),
            None => Ok(None),
        }
    }
    fn bounds(&mut self) -> Result<Option<(Instance, Instance)>> {
        let key = |g: fjall::Guard| -> Result<Instance> {
            let k = g.key().map_err(err("fjall: key"))?;
            let a: [u8; 8] = k
                .as_ref()
                .try_into()
                .map_err(|_| Error("fjall: key is not 8 bytes".into()))?;
            Ok(u64::from_be_bytes(a))
        };
        let first = self.ks.first_key_value().map(key).transpose()?;
        let last = self.ks.last_key_value().map(key).transpose()?;
        Ok(first.zip(last))
    }
}

// ---------------------------------------------------------------------------------------
// raft-engine: one raft group, entries (index = instance, term = ballot round, data = the
// encoded vote), one LogBatch per group commit written with sync = true. Compression off
// (the payloads are incompressible); target file size as our segments; purge threshold low
// enough that a purge after the trim can act.

pub struct RaftEngine {
    engine: raft_engine::Engine,
}

const REGION: u64 = 1;

struct EntryExt;

impl raft_engine::MessageExt for EntryExt {
    type Entry = raft_proto::eraftpb::Entry;
    fn index(e: &Self::Entry) -> u64 {
        e.index
    }
}

impl RaftEngine {
    fn open(dir: &Path) -> Result<RaftEngine> {
        let cfg = raft_engine::Config {
            dir: dir.display().to_string(),
            batch_compression_threshold: raft_engine::ReadableSize(0),
            target_file_size: raft_engine::ReadableSize(SEGMENT_BYTES),
            // The default (10 GB) leaves purge_expired_files a no-op below 10 GB of log: the
            // trim could give nothing back in this benchmark.
            purge_threshold: raft_engine::ReadableSize(2 * SEGMENT_BYTES),
            ..raft_engine::Config::default()
        };
        let engine = raft_engine::Engine::open(cfg).map_err(err("raft-engine: open"))?;
        Ok(RaftEngine { engine })
    }
}

impl Engine for RaftEngine {
    fn commit(&mut self, votes: &[Vote]) -> Result<()> {
        let entries: Vec<raft_proto::eraftpb::Entry> = votes
            .iter()
            .map(|v| raft_proto::eraftpb::Entry {
                index: v.instance,
                term: u64::from(v.ballot.round),
                data: v.encoded().into(),
                ..Default::default()
            })
            .collect();
        let mut lb = raft_engine::LogBatch::with_capacity(entries.len());
        lb.add_entries::<EntryExt>(REGION, &entries)
            .map_err(err("raft-engine: add_entries"))?;
        self.engine
            .write(&mut lb, true)
            .map_err(err("raft-engine: write"))?;
        Ok(())
    }
    fn trim(&mut self, below: Instance) -> Result<()> {
        self.engine.compact_to(REGION, below);
        // compact_to writes its command without sync: make it durable.
        self.engine.sync().map_err(err("raft-engine: sync"))
    }
    fn reclaim(&mut self) -> Result<()> {
        self.engine
            .purge_expired_files()
            .map_err(err("raft-engine: purge_expired_files"))?;
        Ok(())
    }
    fn read(&mut self, instance: Instance) -> Result<Option<(Instance, Bytes)>> {
        match self
            .engine
            .get_entry::<EntryExt>(REGION, instance)
            .map_err(err("raft-engine: get_entry"))?
        {
            Some(e) => decode_value(&e.data).map(Some).map_err(Error),
            None => Ok(None),
        }
    }
    fn bounds(&mut self) -> Result<Option<(Instance, Instance)>> {
        Ok(self
            .engine
            .first_index(REGION)
            .zip(self.engine.last_index(REGION)))
    }
}
