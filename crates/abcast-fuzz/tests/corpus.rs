//! Writes the committed seed corpus `fuzz/corpus/<target>/` (docs/fuzzing.md). Ignored in
//! the test run; regenerate with
//!
//! ```text
//! cargo test -p abcast-fuzz --release --test corpus -- --ignored
//! ```
//!
//! Seeds come from the crates themselves: protocol messages as the simulator's runs of each
//! protocol (three nodes, with crashes) sent them, framed and cut into datagrams as the
//! runtime does; client frames from the client wire's encoder; the repository's config
//! files; directories written by the two durable stores; a journal written by the history.
//! Each file is small; the whole corpus stays under a few MB.

use abcast_core::storage::{
    Accepted, AcceptorStore, DurableLogStore, DurableStore, Entry, LogDir, LogStore, MemDir, seglog,
};
use abcast_core::types::{Ballot, Batch, Decree, NodeId, ValueId};
use abcast_core::{Delivery, GroupId};
use abcast_fuzz::input::put_string16;
use abcast_fuzz::targets::{history as history_target, storage as storage_target};
use abcast_runtime::clientwire::ClientFrame;
use abcast_runtime::frame;
use abcast_runtime::history::{GapReason, History, Journal};
use abcast_runtime::multicast::{self, Sender};
use abcast_runtime::transport::tcp::Hello;
use abcast_sim::FaultMix;
use abcast_sim::suites::{self, Proto, Variant};
use bytes::Bytes;
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

fn corpus_dir(target: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../../fuzz/corpus")
        .join(target)
}

struct Writer {
    target: &'static str,
    n: usize,
}

impl Writer {
    fn new(target: &'static str) -> Writer {
        let dir = corpus_dir(target);
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        Writer { target, n: 0 }
    }
    fn put(&mut self, what: &str, bytes: &[u8]) {
        let p = corpus_dir(self.target).join(format!("{:03}-{what}", self.n));
        std::fs::write(p, bytes).unwrap();
        self.n += 1;
    }
}

/// Messages of one protocol's simulated run: (kind, group, body), a few per kind, of
/// different sizes, none over 4 KiB.
type Msg = (u8, u16, Bytes);

fn pick(msgs: Vec<(u8, Bytes)>, per_kind: usize) -> Vec<Msg> {
    let mut by_kind: BTreeMap<(u8, u16), Vec<Bytes>> = BTreeMap::new();
    for (kind, b) in msgs {
        if b.len() < 2 || b.len() > 4096 + 2 {
            continue;
        }
        let group = u16::from_le_bytes([b[0], b[1]]);
        by_kind.entry((kind, group)).or_default().push(b.slice(2..));
    }
    let mut out = Vec::new();
    for ((kind, group), mut v) in by_kind {
        v.sort_by_key(|b| b.len());
        v.dedup();
        let step = (v.len() / per_kind).max(1);
        for b in v.into_iter().step_by(step).take(per_kind) {
            out.push((kind, group, b));
        }
    }
    out
}

fn sim_messages(proto: Proto) -> Vec<Msg> {
    let mut cfg = suites::config(proto, FaultMix::Crash, Variant::CORRECT);
    cfg.seed = 3;
    let (r, msgs) = abcast_sim::capture_messages(|| suites::run_one(proto, &cfg, Variant::CORRECT));
    assert!(r.is_ok(), "{proto:?}: {:?}", r.err());
    pick(msgs, 4)
}

fn token_messages() -> Vec<Msg> {
    let mut cfg = abcast_sim::evs::EvsConfig::new(FaultMix::Crash);
    cfg.seed = 3;
    let (r, msgs) = abcast_sim::capture_messages(|| abcast_sim::evs::token::run_token(&cfg, None));
    assert!(r.is_ok(), "token: {:?}", r.err());
    pick(msgs, 4)
}

fn group_values() -> Vec<Bytes> {
    use abcast_core::groups::wire;
    vec![
        wire::encode_message("orders", "alice", b"hello"),
        wire::encode_messages("orders", "", &[&b"a"[..], &b"bc"[..], &b""[..]]),
        wire::encode_join("orders", "bob"),
        wire::encode_leave("orders", "bob"),
        wire::encode_state(7, [("orders", "alice"), ("stock", "bob")].into_iter()),
    ]
}

fn client_frames() -> Vec<ClientFrame> {
    let id = ValueId {
        node: NodeId(2),
        seq: 9,
    };
    vec![
        ClientFrame::Propose {
            payloads: vec![Bytes::from_static(b"x"), Bytes::from(vec![7u8; 300])],
        },
        ClientFrame::Proposed { ids: vec![id] },
        ClientFrame::Decided { ids: vec![id, id] },
        ClientFrame::Busy,
        ClientFrame::Error {
            text: "refused".into(),
        },
        ClientFrame::Subscribe { from_instance: 5 },
        ClientFrame::Delivered {
            instance: 4,
            batch: Batch::single(id, Bytes::from_static(b"value")),
        },
        ClientFrame::Follow { group: 1, on: true },
        ClientFrame::FollowAsked,
        ClientFrame::GetStatus,
        ClientFrame::ReconfigureAsked,
        ClientFrame::NotLeader {
            hint: Some(NodeId(3)),
            client_addr: Some("127.0.0.1:7003".parse().unwrap()),
        },
        ClientFrame::ReadBarrier,
        ClientFrame::ReadPoint { upto: 77 },
        ClientFrame::GroupJoin {
            group: "orders".into(),
            member: "alice".into(),
            bound: true,
        },
        ClientFrame::GroupLeave {
            group: "orders".into(),
            member: "alice".into(),
        },
        ClientFrame::GroupListen {
            group: String::new(),
        },
        ClientFrame::GroupAsked,
        ClientFrame::GetGroups,
        ClientFrame::ShmOpen,
        ClientFrame::ShmReady {
            ring_bytes: 1 << 16,
        },
    ]
}

fn framed(kind: u8, group: u16, body: &Bytes) -> Vec<u8> {
    frame::encode_to_bytes(kind, group, std::slice::from_ref(body))
        .unwrap()
        .to_vec()
}

fn hello(node: u32) -> Vec<u8> {
    let h = Hello {
        cluster_id: 7,
        node: NodeId(node),
        incarnation: 1,
    };
    framed(frame::KIND_HELLO, 0, &h.encode())
}

#[test]
#[ignore = "writes the corpus; run with --ignored"]
fn write_corpus() {
    let protos: Vec<(usize, Vec<Msg>)> = vec![
        (0, sim_messages(Proto::URing)),
        (1, sim_messages(Proto::RingPaxos)),
        (2, sim_messages(Proto::MultiRing)),
        (3, sim_messages(Proto::MultiRingPaxos)),
        (4, sim_messages(Proto::SeqPaxos)),
        (5, sim_messages(Proto::Raft)),
        (6, token_messages()),
    ];
    let names = abcast_fuzz::targets::peer_message::PROTOCOLS;

    // peer_message: selector, group, kind, body.
    let mut w = Writer::new("peer_message");
    for (sel, msgs) in &protos {
        for (kind, group, body) in msgs {
            let mut v = vec![*sel as u8];
            v.extend_from_slice(&group.to_le_bytes());
            v.push(*kind);
            v.extend_from_slice(body);
            w.put(&format!("{}-k{kind}", names[*sel]), &v);
        }
    }
    for g in group_values() {
        let mut v = vec![7u8, 0, 0, 0];
        v.extend_from_slice(&g);
        w.put("groups", &v);
    }

    // frame: a peer connection's stream (Hello, then messages), per protocol, cut in
    // chunks of different sizes; and client streams, checked and unchecked.
    let mut w = Writer::new("frame");
    let mut streams: Vec<(String, Vec<u8>)> = Vec::new();
    for (sel, msgs) in &protos {
        for (k, part) in msgs.chunks(6).enumerate().take(4) {
            let mut s = hello(2);
            for (kind, group, body) in part {
                s.extend_from_slice(&framed(*kind, *group, body));
            }
            streams.push((format!("{}-{k}", names[*sel]), s));
        }
    }
    let mut client = Vec::new();
    let mut unchecked = Vec::new();
    for f in client_frames() {
        let chunks = f.encode();
        client.extend_from_slice(&frame::encode_to_bytes(f.kind(), 0, &chunks).unwrap());
        let h = frame::encode_client_header_unchecked(f.kind(), &chunks).unwrap();
        unchecked.extend_from_slice(&h);
        chunks.iter().for_each(|c| unchecked.extend_from_slice(c));
    }
    streams.push(("client".into(), client));
    streams.push(("client-unchecked".into(), unchecked));
    for (i, (name, s)) in streams.iter().enumerate() {
        let mut v = vec![[255u8, 0, 15, 99][i % 4]];
        v.extend_from_slice(s);
        w.put(name, &v);
    }

    // intake: the same streams offered in pieces by two connections.
    let mut w = Writer::new("intake");
    for (i, (name, s)) in streams.iter().enumerate().step_by(3) {
        let mut v = vec![(i as u8 % 4) << 1 | u8::from(!name.starts_with("client"))];
        for (k, piece) in s.chunks(700 + i * 50).enumerate() {
            v.push((k % 2) as u8 | 2);
            put_string16(&mut v, piece);
        }
        w.put(name, &v);
    }

    // client_frame: kind, body.
    let mut w = Writer::new("client_frame");
    for f in client_frames() {
        let mut v = vec![f.kind()];
        f.encode().iter().for_each(|c| v.extend_from_slice(c));
        w.put(&format!("k{}", f.kind()), &v);
    }

    // datagram: whole datagrams (raw, and to be checksummed), and split ones.
    let mut w = Writer::new("datagram");
    for (sel, msgs) in &protos {
        let mut raw = Vec::new();
        let mut fixed = Vec::new();
        for (kind, group, body) in msgs.iter().take(8) {
            let from = Sender {
                cluster_id: 7,
                node: NodeId(2),
                incarnation: 1,
            };
            if let Some(d) =
                multicast::encode_to_bytes(&from, *kind, *group, std::slice::from_ref(body))
            {
                raw.push(0x80);
                put_string16(&mut raw, &d);
            }
            let mut spec = vec![2u8, 1, *kind];
            spec.extend_from_slice(&group.to_le_bytes());
            spec.extend_from_slice(body);
            fixed.push(1);
            put_string16(&mut fixed, &spec);
            if body.len() > 64 {
                let mut split = vec![15u8, 0];
                split.extend_from_slice(&spec);
                fixed.push(3);
                put_string16(&mut fixed, &split);
            }
        }
        w.put(&format!("{}-raw", names[*sel]), &raw);
        w.put(&format!("{}-fixed", names[*sel]), &fixed);
    }

    // shm_ring: writes and reads at both ends, some across the ring's wrap.
    let mut w = Writer::new("shm_ring");
    let mut v = Vec::new();
    for k in 0..6u8 {
        v.push(0);
        put_string16(&mut v, &vec![k; 20_000]);
        v.extend_from_slice(&[3, 0x40, 0x1f]);
        v.push(4);
        put_string16(&mut v, &vec![k + 100; 9_000]);
        v.extend_from_slice(&[1, 0x40, 0x1f, 5, 6, 7]);
    }
    w.put("traffic", &v);
    let mut v = Vec::new();
    v.push(0);
    put_string16(&mut v, b"hello node");
    v.extend_from_slice(&[2, 0]);
    v.extend_from_slice(&(1u64 << 17).to_le_bytes());
    v.extend_from_slice(&[3, 0x10, 0, 6, 5]);
    w.put("hostile-head", &v);

    // node_config: the repository's config files, and generated clusters.
    let mut w = Writer::new("node_config");
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("../..");
    let mut seen = std::collections::HashSet::new();
    for dir in ["docs", "examples", "crates"] {
        for p in toml_files(&root.join(dir)) {
            let text = std::fs::read(&p).unwrap();
            if text.len() <= 16 << 10 && seen.insert(text.clone()) {
                let mut v = vec![3u8]; // --id 1
                v.extend_from_slice(&text);
                w.put(&p.file_name().unwrap().to_string_lossy(), &v);
            }
        }
    }
    let base = abcast_node::nodeconfig::local_cluster(3, 7000);
    for proto in [
        "uring",
        "ringpaxos",
        "multiring",
        "seqpaxos",
        "raft",
        "token",
    ] {
        let mut v = vec![5u8]; // --id 2
        v.extend_from_slice(format!("protocol = \"{proto}\"\n").as_bytes());
        v.extend_from_slice(base.as_bytes());
        w.put(&format!("local-{proto}"), &v);
    }

    // durable_store and durable_log_store: directories the stores wrote.
    let mut w = Writer::new("durable_store");
    for (opts, n) in [(0u8, 40u64), (1, 300), (2, 120)] {
        let dir = acceptor_dir(opts, n);
        w.put(
            &format!("acceptor-{n}"),
            &dir_script(opts, &dir, storage_target::Store::Acceptor),
        );
    }
    let mut w = Writer::new("durable_log_store");
    for (opts, n) in [(0u8, 40u64), (1, 300), (2, 120)] {
        let dir = log_dir(opts, n);
        w.put(
            &format!("log-{n}"),
            &dir_script(opts, &dir, storage_target::Store::Log),
        );
    }

    // history: a journal the history wrote.
    let mut w = Writer::new("history");
    for n in [5u64, 60, 400] {
        w.put(&format!("journal-{n}"), &journal_script(n));
    }
}

fn toml_files(dir: &Path) -> Vec<PathBuf> {
    let mut out = Vec::new();
    let Ok(rd) = std::fs::read_dir(dir) else {
        return out;
    };
    for e in rd.flatten() {
        let p = e.path();
        if p.is_dir() {
            out.extend(toml_files(&p));
        } else if p.extension().is_some_and(|x| x == "toml")
            && p.file_name().is_some_and(|n| n != "Cargo.toml")
        {
            out.push(p);
        }
    }
    out.sort();
    out
}

fn value(i: u64) -> Decree {
    let id = ValueId {
        node: NodeId(1),
        seq: i,
    };
    Decree::Values(Batch::single(
        id,
        Bytes::from(vec![i as u8; (i % 50) as usize + 1]),
    ))
}

fn acceptor_dir(opts: u8, n: u64) -> MemDir {
    let dir = MemDir::new("corpus");
    let (mut s, _) = DurableStore::open(dir.clone(), storage_target::options(opts)).unwrap();
    for i in 1..=n {
        let b = Ballot::new(1 + (i / 50) as u32, NodeId(1), 0);
        s.set_promised(b);
        // A full window refuses a vote (not voting is safe): decide as we go.
        let _ = s.put(
            i,
            Accepted {
                ballot: b,
                decree: value(i),
                decided: false,
            },
        );
        if i % 5 != 0 {
            s.mark_decided(i);
        }
        if i % 7 == 0 {
            s.sync().unwrap();
        }
        if i % 97 == 0 {
            s.trim(i / 2);
        }
    }
    s.sync().unwrap();
    dir
}

fn log_dir(opts: u8, n: u64) -> MemDir {
    let dir = MemDir::new("corpus");
    let (mut s, _) = DurableLogStore::open(dir.clone(), storage_target::options(opts)).unwrap();
    s.set_promised(Ballot::new(1, NodeId(1), 0)).unwrap();
    s.set_accepted_round(Ballot::new(1, NodeId(1), 0)).unwrap();
    for i in 1..=n {
        let e = Entry {
            index: i,
            ballot: Ballot::new(1, NodeId(1), 0),
            payload: Bytes::from(vec![i as u8; (i % 40) as usize + 1]),
        };
        s.append(&[e]).unwrap();
        if i % 5 == 0 {
            s.set_decided_idx(i - 2).unwrap();
            s.sync().unwrap();
        }
        if i % 90 == 0 {
            s.trim(i / 3).unwrap();
        }
    }
    s.sync().unwrap();
    dir
}

/// A directory as the storage targets' steps: each record framed for its segment is a
/// "framed record" step (its checksum is made again when the target runs), zeros a zeros
/// step, anything else raw bytes.
fn dir_script(opts: u8, dir: &MemDir, store: storage_target::Store) -> Vec<u8> {
    let magic = match store {
        storage_target::Store::Acceptor => abcast_core::storage::record::MAGIC,
        storage_target::Store::Log => storage_target::LOG_MAGIC,
    };
    let mut v = vec![opts];
    let mut names = dir.list().unwrap();
    names.sort();
    for name in names {
        let bytes = dir.read(&name).unwrap();
        let (kind, num) = if let Some(n) = number(&name, "seg-") {
            (0u8, n)
        } else if let Some(n) = number(&name, "spare-") {
            (2u8, n)
        } else {
            continue;
        };
        let Ok(num8) = u8::try_from(num) else {
            continue;
        };
        assert_eq!(storage_target::file_name(kind, num8), name);
        v.extend_from_slice(&[0, kind, num8]);
        let mut at = 0;
        while at < bytes.len() {
            let rest = &bytes[at..];
            if rest.iter().all(|&b| b == 0) {
                for c in rest.chunks(u16::MAX as usize) {
                    v.push(4);
                    v.extend_from_slice(&(c.len() as u16).to_le_bytes());
                }
                break;
            }
            if rest.len() >= 12 {
                let len = u32::from_le_bytes(rest[4..8].try_into().unwrap()) as usize;
                if rest.len() >= 12 + len && len <= u16::MAX as usize {
                    let body = &rest[12..12 + len];
                    let (chunks, n) = seglog::frame(vec![Bytes::copy_from_slice(body)], num, magic);
                    let again: Vec<u8> = chunks.iter().flat_map(|c| c.iter().copied()).collect();
                    if n == 12 + len && again == rest[..n] {
                        v.push(2);
                        put_string16(&mut v, body);
                        at += n;
                        continue;
                    }
                }
            }
            v.push(1);
            put_string16(&mut v, &rest[..1]);
            at += 1;
        }
    }
    v
}

fn number(name: &str, prefix: &str) -> Option<u64> {
    name.strip_prefix(prefix)?
        .strip_suffix(".log")?
        .parse()
        .ok()
}

fn journal_script(n: u64) -> Vec<u8> {
    let dir = std::env::temp_dir().join(format!("abcast-fuzz-corpus-{}-{n}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    let mut h = History::new(0, Some(Journal::open(&dir, 1 << 16).unwrap()));
    for i in 1..=n {
        if i % 13 == 0 {
            h.record_gap(i, i + 2, GapReason::Skipped).unwrap();
            continue;
        }
        let id = ValueId {
            node: NodeId(1),
            seq: i,
        };
        let mut d = Delivery::new(
            i + 2 * (i / 13),
            Batch::single(id, Bytes::from(vec![b'v'; 40])),
        );
        d.group = GroupId(0);
        h.record_delivery(&d).unwrap();
    }
    h.sync().unwrap();
    drop(h);
    let mut files: Vec<(u8, Vec<u8>)> = std::fs::read_dir(&dir)
        .unwrap()
        .flatten()
        .filter_map(|e| {
            let name = e.file_name().to_string_lossy().into_owned();
            let seq: u8 = name
                .strip_prefix("history-")?
                .strip_suffix(".log")?
                .parse()
                .ok()?;
            Some((seq, std::fs::read(e.path()).ok()?))
        })
        .collect();
    files.sort();
    let _ = std::fs::remove_dir_all(&dir);
    let mut v = vec![2u8]; // a subscriber from instance 1
    for (seq, bytes) in files {
        v.extend_from_slice(&[0, seq]);
        let mut at = 0;
        while at + 12 <= bytes.len() {
            let len = u32::from_le_bytes(bytes[at + 4..at + 8].try_into().unwrap()) as usize;
            let body = &bytes[at + 12..(at + 12 + len).min(bytes.len())];
            assert_eq!(
                history_target::record(body),
                bytes[at..at + 12 + body.len()]
            );
            v.push(2);
            put_string16(&mut v, body);
            at += 12 + len;
        }
    }
    v
}
