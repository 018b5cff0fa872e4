//! Durable storage for real (issue 4, "what it must show" 2): a 3-node U-Ring Paxos cluster
//! of `abcast node` processes on loopback with `kind = "durable"`, `sync = true`, under load
//! from three clients; all three processes killed with SIGKILL at once; restarted on the same
//! directories. Every value a client saw acknowledged (decided) before the kill must be
//! delivered exactly once, in one order, at every learner: learners restart from their
//! snapshots (taken every second), so a learner's sequence is its first life's deliveries up
//! to the snapshot, then its second life's.
//!
//! A second test keeps one node down while the others snapshot and trim their logs past
//! it: restarted, it finds its instances trimmed at every acceptor, installs a peer's
//! snapshot transferred in chunks, and goes on from the log (issue 4, "a learner that
//! falls behind the trim point installs a snapshot transferred from a peer"); for U-Ring
//! Paxos, Ring Paxos and Multi-Ring Paxos (issue 33: a snapshot of the merge, each ring
//! trimmed at its own point).

use abcast_core::{NodeId, ValueId};
use abcast_node::client::Client;
use abcast_node::deliverylog::{self, Entry};
use bytes::Bytes;
use std::collections::{HashMap, HashSet};
use std::path::{Path, PathBuf};
use std::process::{Child, Command};
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

mod ports;

const NODES: u32 = 3;
/// The bound on every wait for a condition: never reached on a healthy run, even on a
/// loaded 2-core machine. The tests wait for what they need, never for a fixed time.
const PATIENCE: Duration = Duration::from_secs(120);

fn temp_dir(name: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!("abcast-{name}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).expect("temp dir");
    dir
}

/// The cluster config: durable storage with fdatasync, client ports on every node, and
/// `storage_extra` lines in the `[storage]` table.
fn write_config(dir: &Path, storage_extra: &str) -> (PathBuf, Vec<String>) {
    write_config_with(dir, "", storage_extra)
}

/// `top_extra`: top-level keys (`protocol = ...`), before the tables.
fn write_config_with(dir: &Path, top_extra: &str, storage_extra: &str) -> (PathBuf, Vec<String>) {
    let mut text = String::from("cluster_id = 44\n");
    text += top_extra;
    let mut clients = Vec::new();
    for id in 0..NODES {
        let client = ports::addr();
        text += &format!(
            "[[members]]\nid = {id}\naddr = \"{}\"\nclient_addr = \"{client}\"\n",
            ports::addr()
        );
        clients.push(client);
    }
    text += "[storage]\nkind = \"durable\"\nsync = true\ndir = \"data\"\n";
    text += storage_extra;
    let path = dir.join("cluster.toml");
    std::fs::write(&path, text).expect("config");
    (path, clients)
}

/// The node processes of one life; dropping it (a failed assertion too) kills them, so a
/// failing run leaves no process behind.
struct Nodes(Vec<Child>);

impl Nodes {
    /// SIGTERM to every node (a clean stop flushes the delivery logs and prints the final
    /// stats line), and each must exit successfully.
    fn stop_cleanly(&mut self, dir: &Path) {
        for c in &mut self.0 {
            // SAFETY: kill(2) with a valid pid of our own child and a standard signal.
            unsafe {
                libc::kill(c.id() as libc::pid_t, libc::SIGTERM);
            }
        }
        for c in &mut self.0 {
            let st = c.wait().expect("wait");
            assert!(
                st.success(),
                "node exited with {st}\n{}",
                node_log_tail(dir)
            );
        }
    }
}

impl Drop for Nodes {
    fn drop(&mut self) {
        for c in &mut self.0 {
            let _ = c.kill();
            let _ = c.wait();
        }
    }
}

fn spawn(config: &Path, dir: &Path, id: u32, life: u32) -> Child {
    let log = std::fs::File::create(dir.join(format!("node-{id}-{life}.log"))).expect("log");
    let stats = std::fs::File::create(dir.join(format!("node-{id}-{life}.stats"))).expect("stats");
    Command::new(env!("CARGO_BIN_EXE_abcast"))
        .args(["node", "--config"])
        .arg(config)
        .args([
            "--id",
            &id.to_string(),
            "--stats-ms",
            "1000",
            "--delivery-log",
        ])
        .stdout(stats)
        .stderr(log)
        .spawn()
        .expect("spawn abcast node")
}

fn connect(addr: &str) -> Client {
    let deadline = Instant::now() + PATIENCE;
    loop {
        match Client::connect(addr) {
            Ok(c) => return c,
            Err(e) if Instant::now() > deadline => panic!("cannot reach {addr}: {e}"),
            Err(_) => std::thread::sleep(Duration::from_millis(50)),
        }
    }
}

fn ids_of(entries: &[Entry]) -> Vec<ValueId> {
    entries
        .iter()
        .flat_map(|e| {
            (e.first_seq..e.first_seq + e.count).map(move |seq| ValueId {
                node: NodeId(e.origin),
                seq,
            })
        })
        .collect()
}

/// Every node's delivery logs; `killed(node, incarnation)` names the lives killed with
/// SIGKILL, whose logs may end in a torn line (dropped: `deliverylog::read_node_lives`).
fn node_logs(dir: &Path, killed: impl Fn(u32, u64) -> bool) -> Vec<Vec<deliverylog::LearnerLog>> {
    (0..NODES)
        .map(|id| {
            deliverylog::read_node_lives(id, &dir.join(format!("data/node-{id}")), |inc, _| {
                killed(id, inc)
            })
            .map(|(logs, _torn)| logs)
            .unwrap_or_else(|e| panic!("node {id}: {e}"))
        })
        .collect()
}

/// Waits until `cond` holds, checking every 50 ms; fails with `what` (and the nodes' logs)
/// after [`PATIENCE`].
fn wait_for(dir: &Path, what: &str, mut cond: impl FnMut() -> bool) {
    let deadline = Instant::now() + PATIENCE;
    while !cond() {
        assert!(
            Instant::now() < deadline,
            "{what}: not within {PATIENCE:?}\n{}",
            node_log_tail(dir)
        );
        std::thread::sleep(Duration::from_millis(50));
    }
}

/// Node `id`'s delivery log of `life` as written so far (its unfinished last line is not
/// read). The log reaches the file at each snapshot, so what a learner delivered shows
/// there within a snapshot interval.
fn log_so_far(dir: &Path, id: u32, life: u64) -> deliverylog::ParsedLog {
    let path = dir.join(format!("data/node-{id}/deliveries-{life}.log"));
    let text = std::fs::read_to_string(path).unwrap_or_default();
    deliverylog::parse_killed_log(&text)
        .map(|(p, _)| p)
        .unwrap_or_default()
}

/// The instance at which some node's log of its life `lives[node]` shows the batch
/// carrying `value`.
fn instance_of(dir: &Path, lives: [u64; NODES as usize], value: ValueId) -> Option<u64> {
    (0..NODES).find_map(|id| {
        log_so_far(dir, id, lives[id as usize])
            .entries
            .iter()
            .find(|e| {
                e.origin == value.node.0
                    && e.first_seq <= value.seq
                    && value.seq < e.first_seq.saturating_add(e.count)
            })
            .map(|e| e.instance)
    })
}

/// Whether node `id`'s log of `life` reached `instance`: delivered it or later, or
/// installed a peer's snapshot covering it.
fn log_reached(dir: &Path, id: u32, life: u64, instance: u64) -> bool {
    let log = log_so_far(dir, id, life);
    log.entries.last().is_some_and(|e| e.instance >= instance)
        || log.installed.iter().any(|&(_, end)| end > instance)
}

/// Waits until every node's log of its life `lives[node]` reached the instance that
/// carries `value` (found in any of those logs first).
fn wait_until_all_delivered(dir: &Path, lives: [u64; NODES as usize], value: ValueId) {
    let mut at = None;
    wait_for(dir, &format!("{value:?} delivered by every node"), || {
        at = at.or_else(|| instance_of(dir, lives, value));
        at.is_some_and(|i| (0..NODES).all(|id| log_reached(dir, id, lives[id as usize], i)))
    });
}

/// The snapshot node `id` last wrote: its instance and when it was written.
fn snapshot_of(dir: &Path, id: u32) -> Option<(u64, std::time::SystemTime)> {
    let path = dir.join(format!("data/node-{id}/snapshot"));
    let written = std::fs::metadata(&path).and_then(|m| m.modified()).ok()?;
    let snap = abcast_runtime::driver::read_snapshot(&path).ok()??;
    Some((snap.upto, written))
}

/// Lines printed so far to a node's stats file in one life.
fn stats_lines(dir: &Path, id: u32, life: u32) -> usize {
    std::fs::read_to_string(dir.join(format!("node-{id}-{life}.stats")))
        .map(|t| t.lines().count())
        .unwrap_or(0)
}

/// A field (`instance=`, `hash=`) of a node's last stats line in one life (`None` before
/// the first line).
fn last_stat(dir: &Path, id: u32, life: u32, field: &str) -> Option<String> {
    let text =
        std::fs::read_to_string(dir.join(format!("node-{id}-{life}.stats"))).unwrap_or_default();
    text.lines().rev().find_map(|l| {
        l.split_whitespace()
            .find_map(|w| w.strip_prefix(field))
            .map(str::to_string)
    })
}

/// The `instance=` of a node's last stats line after the restart (0 before the first).
fn delivered_instance(dir: &Path, id: u32) -> u64 {
    last_stat(dir, id, 1, "instance=")
        .and_then(|v| v.parse().ok())
        .unwrap_or(0)
}

/// What every node's last life says at its clean exit (its `final` line): the instance it
/// delivered up to and the order hash over every value id up to there. A learner that
/// installed a peer's snapshot took the peer's hash with it and went on hashing, so equal
/// hashes at an equal instance mean one and the same sequence.
fn assert_same_final_state(dir: &Path, last_life: &[u32]) {
    let states: Vec<(String, String)> = (0..NODES)
        .map(|id| {
            let life = last_life[id as usize];
            let text = std::fs::read_to_string(dir.join(format!("node-{id}-{life}.stats")))
                .unwrap_or_default();
            assert!(
                text.lines().last().is_some_and(|l| l.starts_with("final")),
                "node {id} printed no final stats line\n{}",
                node_log_tail(dir)
            );
            (
                last_stat(dir, id, life, "instance=").unwrap_or_default(),
                last_stat(dir, id, life, "hash=").unwrap_or_default(),
            )
        })
        .collect();
    assert!(
        states.iter().all(|s| *s == states[0]),
        "learners end in different states (instance, order hash): {states:?}\n{}",
        node_log_tail(dir)
    );
}

/// The instance a node's second life restored its snapshot at (0: none).
fn snapshot_restored_at(dir: &Path, id: u32) -> u64 {
    let text = std::fs::read_to_string(dir.join(format!("node-{id}-1.log"))).unwrap_or_default();
    text.lines()
        .find_map(|l| {
            l.split("restored snapshot at instance ")
                .nth(1)
                .and_then(|r| r.split_whitespace().next())
                .and_then(|v| v.parse().ok())
        })
        .unwrap_or(0)
}

fn node_log_tail(dir: &Path) -> String {
    let mut s = String::new();
    for id in 0..NODES {
        for life in 0..2 {
            for ext in ["log", "stats"] {
                let p = dir.join(format!("node-{id}-{life}.{ext}"));
                let text = std::fs::read_to_string(&p).unwrap_or_default();
                let lines: Vec<&str> = text.lines().collect();
                let from = lines.len().saturating_sub(12);
                s += &format!("--- {} ---\n{}\n", p.display(), lines[from..].join("\n"));
            }
        }
    }
    s
}

#[test]
fn acknowledged_values_survive_sigkill_of_every_node_with_sync_storage() {
    let dir = temp_dir("crash-restart");
    let (config, clients) = write_config(&dir, "");
    let mut children = Nodes((0..NODES).map(|id| spawn(&config, &dir, id, 0)).collect());

    // Load: one client per node, proposing until the processes die under it. Every
    // decision a client sees is recorded as acknowledged.
    let acked: Arc<Mutex<HashSet<ValueId>>> = Arc::default();
    let killed = Arc::new(AtomicBool::new(false));
    let mut loaders = Vec::new();
    for (n, addr) in clients.iter().enumerate() {
        let mut c = connect(addr);
        let acked = Arc::clone(&acked);
        let killed = Arc::clone(&killed);
        loaders.push(std::thread::spawn(move || {
            // Chunks until the node dies under the client (an error ends the loop).
            for chunk in 0..1000u32 {
                let payloads: Vec<Bytes> = (0..50_000u32)
                    .map(|i| Bytes::from(format!("n{n}-c{chunk}-v{i}-{}", "x".repeat(100))))
                    .collect();
                let r = c.propose_all(payloads, Duration::from_secs(30), |id| {
                    // Nothing decided can reach a client once the processes are dead; the
                    // flag only guards the test's own bookkeeping.
                    if !killed.load(Ordering::SeqCst)
                        && let Ok(mut a) = acked.lock()
                    {
                        a.insert(id);
                    }
                });
                if r.is_err() {
                    return true;
                }
            }
            false
        }));
    }
    // Load until more than 1000 values are acknowledged and every node wrote a snapshot
    // of delivered instances (every second), so every learner restarts from one.
    let started = std::time::SystemTime::now();
    wait_for(&dir, "1000 values acknowledged", || {
        acked.lock().is_ok_and(|a| a.len() > 1000)
    });
    wait_for(&dir, "a snapshot at every node", || {
        (0..NODES).all(|id| snapshot_of(&dir, id).is_some_and(|(u, at)| u > 0 && at > started))
    });
    // SIGKILL, all three back to back.
    for c in &mut children.0 {
        c.kill().expect("SIGKILL");
    }
    killed.store(true, Ordering::SeqCst);
    for c in &mut children.0 {
        let _ = c.wait();
    }
    for l in loaders {
        assert!(
            l.join().expect("loader thread"),
            "a loader finished all its values before the kill: make the load longer"
        );
    }
    let acked: HashSet<ValueId> = acked.lock().expect("acked").clone();
    assert!(
        acked.len() > 1000,
        "only {} values acknowledged before the kill\n{}",
        acked.len(),
        node_log_tail(&dir)
    );

    // Restart on the same directories.
    let mut children = Nodes((0..NODES).map(|id| spawn(&config, &dir, id, 1)).collect());
    // A marker proposed after the restart: once every learner delivered it, it delivered
    // everything decided before it.
    let mut c = connect(&clients[0]);
    let marker = c
        .propose_all(
            vec![Bytes::from_static(b"marker")],
            Duration::from_secs(60),
            |_| {},
        )
        .unwrap_or_else(|e| {
            panic!(
                "marker not decided after restart: {e}\n{}",
                node_log_tail(&dir)
            )
        })[0];
    // Every learner that reaches the marker's instance delivered the marker and everything
    // before it.
    wait_until_all_delivered(&dir, [1; NODES as usize], marker);
    children.stop_cleanly(&dir);

    // Check the logs. A learner restarted from its snapshot at instance U delivers from
    // U + 1 on; its sequence is what its first life delivered up to U, then what the second
    // delivered (the first life's log reached U before the snapshot was written).
    // Every first life was killed: its log may end in a torn line.
    let logs = node_logs(&dir, |_, inc| inc == 0);
    let mut after: Vec<Option<Vec<ValueId>>> = Vec::new();
    let mut restored_from = Vec::new();
    let mut installed = Vec::new();
    for (id, lives) in logs.iter().enumerate() {
        let upto = snapshot_restored_at(&dir, id as u32);
        restored_from.push(upto);
        let first = lives.iter().find(|l| l.incarnation == 0);
        let last = lives
            .iter()
            .find(|l| l.incarnation == 1)
            .unwrap_or_else(|| panic!("node {id} has no delivery log after the restart"));
        assert!(last.skipped.is_empty(), "node {id} skipped instances");
        if let Some(&(_, end)) = last.installed.last() {
            // Its own snapshot was older than the trim point (acceptors trim below what a
            // quorum of learners' snapshots cover): it installed a peer's snapshot up to
            // `end - 1` and went on after it. Its state is checked through the final
            // order hashes below; its value ids before `end` are in the peer's state.
            assert!(
                last.entries.first().is_none_or(|e| e.instance == end),
                "node {id} installed a snapshot up to {} but delivered {:?} first",
                end - 1,
                last.entries.first()
            );
            installed.push((id, end - 1));
            after.push(None);
            continue;
        }
        let mut entries: Vec<Entry> = first
            .map(|f| {
                f.entries
                    .iter()
                    .filter(|e| e.instance <= upto)
                    .copied()
                    .collect()
            })
            .unwrap_or_default();
        if upto > 0 {
            assert_eq!(
                entries.last().map(|e| e.instance),
                Some(upto),
                "node {id}: its first life's log does not reach its snapshot at {upto}"
            );
        }
        assert!(
            last.entries.first().is_none_or(|e| e.instance == upto + 1),
            "node {id} restarted from {upto} but delivered {:?} first",
            last.entries.first()
        );
        entries.extend(last.entries.iter().copied());
        let ids = ids_of(&entries);
        let mut seen: HashMap<ValueId, usize> = HashMap::new();
        for id in &ids {
            *seen.entry(*id).or_default() += 1;
        }
        let dups: Vec<_> = seen.iter().filter(|(_, n)| **n > 1).take(5).collect();
        assert!(
            dups.is_empty(),
            "node {id} delivered values twice: {dups:?}"
        );
        let lost: Vec<_> = acked
            .iter()
            .filter(|v| !seen.contains_key(v))
            .take(5)
            .collect();
        assert!(
            lost.is_empty(),
            "node {id} lost acknowledged values (of {}): {lost:?}\n{}",
            acked.len(),
            node_log_tail(&dir)
        );
        after.push(Some(ids));
    }
    // One order: every learner's sequence up to the marker is the same.
    let upto = |ids: &Vec<ValueId>| -> Vec<ValueId> {
        let end = ids
            .iter()
            .position(|i| *i == marker)
            .map_or(ids.len(), |p| p + 1);
        ids[..end].to_vec()
    };
    let whole: Vec<(usize, &Vec<ValueId>)> = after
        .iter()
        .enumerate()
        .filter_map(|(n, a)| a.as_ref().map(|a| (n, a)))
        .collect();
    assert!(
        !whole.is_empty(),
        "every learner installed a peer's snapshot: the learner whose snapshot was the \
         newest cannot have been behind the trim point"
    );
    for (n, ids) in &whole[1..] {
        assert!(
            upto(ids) == upto(whole[0].1),
            "node {n} delivered another order than node {}",
            whole[0].0
        );
    }
    // What each learner's first life delivered (its log may have lost an unflushed tail to
    // the SIGKILL) is a prefix of that order.
    let order = whole[0].1;
    for (id, lives) in logs.iter().enumerate() {
        if let Some(first) = lives.iter().find(|l| l.incarnation == 0) {
            let before = ids_of(&first.entries);
            assert!(
                order.starts_with(&before),
                "node {id}: what it delivered before the kill is not a prefix of the order"
            );
        }
    }
    assert_same_final_state(&dir, &[1; NODES as usize]);
    assert!(
        restored_from.iter().all(|&u| u > 0),
        "every learner took a snapshot before the kill (every second): {restored_from:?}"
    );
    eprintln!(
        "{} values acknowledged before the SIGKILL, all delivered once, in one order, by {NODES} learners restarted from their snapshots at instances {restored_from:?}; installed from a peer (node, up to): {installed:?}",
        acked.len()
    );
    let _ = std::fs::remove_dir_all(&dir);
}

/// Proposes from one client in chunks until `stop` is set, counting acknowledgements into
/// `count`; returns the ids acknowledged.
fn load_until(
    addr: String,
    n: usize,
    stop: Arc<AtomicBool>,
    count: Arc<AtomicUsize>,
) -> std::thread::JoinHandle<Vec<ValueId>> {
    std::thread::spawn(move || {
        let mut c = connect(&addr);
        let mut acked = Vec::new();
        let mut chunk = 0u32;
        while !stop.load(Ordering::SeqCst) {
            let payloads: Vec<Bytes> = (0..2_000u32)
                .map(|i| Bytes::from(format!("n{n}-c{chunk}-v{i}-{}", "y".repeat(200))))
                .collect();
            c.propose_all(payloads, Duration::from_secs(30), |id| {
                acked.push(id);
                count.fetch_add(1, Ordering::SeqCst);
            })
            .unwrap_or_else(|e| panic!("client of node {n}: {e}"));
            chunk += 1;
        }
        acked
    })
}

#[test]
fn a_learner_down_past_the_trim_point_installs_a_peers_snapshot_and_catches_up() {
    learner_down_past_the_trim_point("install", "");
}

#[test]
fn a_ring_paxos_learner_down_past_the_trim_point_installs_a_peers_snapshot_and_catches_up() {
    // Ring Paxos over TCP (no [multicast]): the same trim and install rules on its messages.
    learner_down_past_the_trim_point("install-rp", "protocol = \"ringpaxos\"\n");
}

/// Issue 33, "Bounded on disk too": Multi-Ring Paxos over two U-Ring rings (every node in
/// both, proposals round robin), snapshots of the merge every 200 ms, each ring trimmed
/// below its learners' snapshots. Node 2, down while the others trim both rings, finds
/// its instances trimmed in a ring, installs a peer's merge snapshot and delivers the rest
/// of the merged sequence: its delivery log numbers values by merge position, so the same
/// checks hold as for one ring (no gap outside the install, one sequence, equal hashes).
#[test]
fn a_multiring_learner_down_past_a_rings_trim_point_installs_a_peers_snapshot_and_catches_up() {
    learner_down_past_the_trim_point(
        "install-mr",
        "[multiring]\npropose_to = \"round-robin\"\n\
         [[rings]]\ngroup = 1\n[[rings]]\ngroup = 2\n",
    );
}

fn learner_down_past_the_trim_point(name: &str, top_extra: &str) {
    let dir = temp_dir(name);
    // Snapshots every 200 ms, so the two live learners move the trim point well past the
    // down node's last snapshot within a few seconds.
    let (config, clients) = write_config_with(&dir, top_extra, "snapshot_interval_ms = 200\n");
    let mut children = Nodes((0..NODES).map(|id| spawn(&config, &dir, id, 0)).collect());
    let stop = Arc::new(AtomicBool::new(false));
    let count = Arc::new(AtomicUsize::new(0));
    let loaders: Vec<_> = (0..2)
        .map(|n| load_until(clients[n].clone(), n, Arc::clone(&stop), Arc::clone(&count)))
        .collect();
    // Node 2 delivers and snapshots before it dies, so it restarts from a snapshot of its
    // own, which the others then leave behind.
    let started = std::time::SystemTime::now();
    wait_for(&dir, "a snapshot at node 2", || {
        snapshot_of(&dir, 2).is_some_and(|(u, at)| u > 0 && at > started)
    });
    // Node 2 dies; nodes 0 and 1 (a quorum of acceptors and of learners) go on, snapshot,
    // and the coordinator trims the acceptors below what both their snapshots cover.
    children.0[2].kill().expect("SIGKILL node 2");
    let _ = children.0[2].wait();
    let killed_at = std::time::SystemTime::now();
    // Node 2 knows of nothing decided after its kill. Node 0, under load, delivers within
    // milliseconds of a decision: its snapshot of a second later covers all that.
    let mut known = 0;
    wait_for(&dir, "a snapshot of node 0 a second after the kill", || {
        snapshot_of(&dir, 0).is_some_and(|(u, at)| {
            known = u;
            at >= killed_at + Duration::from_secs(1)
        })
    });
    // Both live learners snapshot past that point, then once more, so the coordinator
    // heard of the first two (heartbeats carry them) and trimmed below them.
    let mut past_at = None;
    wait_for(
        &dir,
        "snapshots of nodes 0 and 1 past node 2's knowledge",
        || {
            let snaps = [snapshot_of(&dir, 0), snapshot_of(&dir, 1)];
            if !snaps.iter().all(|s| s.is_some_and(|(u, _)| u > known)) {
                return false;
            }
            let at = *past_at.get_or_insert_with(std::time::SystemTime::now);
            snaps
                .iter()
                .all(|s| s.is_some_and(|(_, written)| written > at))
        },
    );
    wait_for(&dir, "1000 values acknowledged", || {
        count.load(Ordering::SeqCst) > 1000
    });
    stop.store(true, Ordering::SeqCst);
    let acked: Vec<ValueId> = loaders
        .into_iter()
        .flat_map(|l| l.join().expect("loader"))
        .collect();

    // Node 2 comes back on its directory.
    children.0[2] = spawn(&config, &dir, 2, 1);
    let mut c = connect(&clients[0]);
    let marker = c
        .propose_all(
            vec![Bytes::from_static(b"marker")],
            Duration::from_secs(60),
            |_| {},
        )
        .unwrap_or_else(|e| panic!("marker not decided: {e}\n{}", node_log_tail(&dir)))[0];
    wait_until_all_delivered(&dir, [0, 0, 1], marker);
    children.stop_cleanly(&dir);

    let log2 = std::fs::read_to_string(dir.join("node-2-1.log")).unwrap_or_default();
    let installed_line = log2
        .lines()
        .find(|l| l.contains("installed a peer's snapshot"))
        .unwrap_or_else(|| {
            panic!(
                "node 2 did not install a peer's snapshot\n{}",
                node_log_tail(&dir)
            )
        });
    let logs = node_logs(&dir, |id, inc| id == 2 && inc == 0);
    let second = logs[2]
        .iter()
        .find(|l| l.incarnation == 1)
        .expect("node 2's second life logged deliveries");
    let &(from, end) = second
        .installed
        .last()
        .expect("node 2's delivery log marks the install");
    assert!(second.skipped.is_empty(), "node 2 skipped instances");
    // It may first deliver what its own log still held decided (a learner behind takes its
    // own acceptor's decisions before asking its peers), then installs what nobody serves
    // any more; nothing it delivered lies inside the install.
    assert!(
        second
            .entries
            .iter()
            .all(|e| e.instance < from || e.instance >= end),
        "node 2 installed a snapshot of instances {from}..{end} and delivered inside it: {:?}",
        second
            .entries
            .iter()
            .find(|e| e.instance >= from && e.instance < end)
    );
    let own_snapshot = snapshot_restored_at(&dir, 2);
    assert!(
        own_snapshot < end - 1,
        "node 2's own snapshot ({own_snapshot}) already covered the install ({})",
        end - 1
    );
    // Node 0 never stopped: it delivered every acknowledged value, once.
    let node0 = ids_of(&logs[0][0].entries);
    let delivered: HashSet<ValueId> = node0.iter().copied().collect();
    assert_eq!(
        delivered.len(),
        node0.len(),
        "node 0 delivered a value twice"
    );
    let lost: Vec<_> = acked
        .iter()
        .filter(|v| !delivered.contains(v))
        .take(5)
        .collect();
    assert!(lost.is_empty(), "acknowledged values lost: {lost:?}");
    // Instance by instance, every learner's log agrees where they overlap, and node 2's
    // second life has no gap outside what the installed snapshot covers.
    let all: Vec<deliverylog::LearnerLog> = logs.into_iter().flatten().collect();
    let v = deliverylog::compare(&all, &Default::default());
    assert!(
        v.disagreements.is_empty() && v.duplicates.is_empty(),
        "{v:?}"
    );
    // And the installed state plus what followed is the same sequence as everyone's.
    assert_same_final_state(&dir, &[0, 0, 1]);
    eprintln!(
        "{} values acknowledged; node 2 restarted from its own snapshot at {own_snapshot}, \
         found it trimmed everywhere, and installed a peer's up to {}: {installed_line}",
        acked.len(),
        end - 1,
    );
    let _ = std::fs::remove_dir_all(&dir);
}

/// Must-show 5 of issue 16, with real processes: a learn client follows node 2 while a
/// client loads node 0; node 2 is killed with SIGKILL under load and restarted on its
/// directory; the client resubscribes from the last instance it saw + 1. Every instance from
/// 1 to where node 0 ended is either delivered to the client or inside a `Gap` marker, none
/// twice, and each delivered batch is the one node 0 delivered at that instance.
#[test]
fn a_subscriber_of_a_node_killed_under_load_resumes_without_a_silent_gap() {
    use abcast_node::client::LearnEvent;
    let dir = temp_dir("subscribe-kill");
    let (config, clients) = write_config(&dir, "");
    let mut children = Nodes((0..NODES).map(|id| spawn(&config, &dir, id, 0)).collect());

    // Load on node 0 until told to stop.
    let stop = Arc::new(AtomicBool::new(false));
    let loader = {
        let stop = Arc::clone(&stop);
        let mut c = connect(&clients[0]);
        std::thread::spawn(move || {
            let mut chunk = 0u32;
            while !stop.load(Ordering::SeqCst) {
                let payloads: Vec<Bytes> = (0..2_000u32)
                    .map(|i| Bytes::from(format!("c{chunk}-v{i}-{}", "x".repeat(200))))
                    .collect();
                c.propose_all(payloads, Duration::from_secs(60), |_| {})
                    .expect("node 0 stays up");
                chunk += 1;
            }
        })
    };

    // (instance, (origin, first_seq, count)) per delivery, (from, to, reason) per gap.
    type Seen = (Vec<(u64, (u32, u64, u64))>, Vec<(u64, u64, String)>);
    // `seen`: the highest instance delivered or passed in a gap so far, for the test.
    let follow = |addr: String, from: u64, until: Option<u64>, seen: Arc<AtomicU64>| -> Seen {
        let mut c = connect(&addr);
        c.subscribe(from).expect("subscribe");
        let (mut delivered, mut gaps) = (Vec::new(), Vec::new());
        loop {
            match c.next_event(Some(Duration::from_secs(20))) {
                Ok(LearnEvent::Delivered(i, b)) => {
                    seen.fetch_max(i, Ordering::SeqCst);
                    delivered.push((i, (b.origin().0, b.first_seq(), b.len() as u64)));
                    if until.is_some_and(|u| i >= u) {
                        break;
                    }
                }
                Ok(LearnEvent::Gap(g)) => {
                    seen.fetch_max(g.to.saturating_sub(1), Ordering::SeqCst);
                    gaps.push((g.from, g.to, format!("{:?}", g.reason)));
                    if until.is_some_and(|u| g.to > u) {
                        break;
                    }
                }
                // The node died under the client (first life), or the test's bound.
                Err(_) => break,
            }
        }
        (delivered, gaps)
    };
    let seen = Arc::new(AtomicU64::new(0));
    let first = {
        let addr = clients[2].clone();
        let seen = Arc::clone(&seen);
        std::thread::spawn(move || follow(addr, 1, None, seen))
    };
    wait_for(&dir, "the subscriber saw more than 10 instances", || {
        seen.load(Ordering::SeqCst) > 10
    });
    children.0[2].kill().expect("SIGKILL node 2");
    let _ = children.0[2].wait();
    let (mut delivered, mut gaps) = first.join().expect("first subscriber");
    let last_seen = delivered
        .iter()
        .map(|d| d.0)
        .chain(gaps.iter().map(|g| g.1.saturating_sub(1)))
        .max()
        .unwrap_or(0);
    assert!(
        last_seen > 10,
        "the subscriber saw only {last_seen} instances before the kill\n{}",
        node_log_tail(&dir)
    );

    children.0[2] = spawn(&config, &dir, 2, 1);
    // The restarted node delivers past what the subscriber saw, under load.
    wait_for(&dir, "node 2 delivering again", || {
        delivered_instance(&dir, 2) > last_seen
    });
    stop.store(true, Ordering::SeqCst);
    loader.join().expect("loader");
    // Node 0's delivered instance once the load stopped: from a stats line printed a whole
    // interval after the stop (the second line after it).
    let lines_at_stop = stats_lines(&dir, 0, 0);
    wait_for(&dir, "two stats lines of node 0 after the load", || {
        stats_lines(&dir, 0, 0) >= lines_at_stop + 2
    });
    let end: u64 = last_stat(&dir, 0, 0, "instance=")
        .and_then(|v| v.parse().ok())
        .expect("node 0 stats");
    let (more, more_gaps) = follow(
        clients[2].clone(),
        last_seen + 1,
        Some(end),
        Arc::new(AtomicU64::new(0)),
    );
    delivered.extend(more);
    gaps.extend(more_gaps);
    children.stop_cleanly(&dir);

    // Every instance 1..=end exactly once, delivered or inside a gap.
    let mut covered: HashMap<u64, &str> = HashMap::new();
    for (i, _) in &delivered {
        assert!(
            covered.insert(*i, "delivered").is_none(),
            "instance {i} twice"
        );
    }
    for &(from, to, _) in &gaps {
        for i in from..to {
            assert!(
                covered.insert(i, "gap").is_none(),
                "instance {i} in a gap and more"
            );
        }
    }
    let missing: Vec<u64> = (1..=end).filter(|i| !covered.contains_key(i)).collect();
    assert!(
        missing.is_empty(),
        "instances passed over silently: {:?} (of 1..={end}; resumed at {})",
        &missing[..missing.len().min(20)],
        last_seen + 1
    );
    // What the client got is what node 0 delivered at the same instances.
    let reference: HashMap<u64, (u32, u64, u64)> = node_logs(&dir, |id, inc| id == 2 && inc == 0)
        [0]
    .iter()
    .flat_map(|l| l.entries.iter())
    .map(|e| (e.instance, (e.origin, e.first_seq, e.count)))
    .collect();
    let mut compared = 0;
    for (i, b) in &delivered {
        if let Some(r) = reference.get(i) {
            assert_eq!(
                r, b,
                "instance {i}: node 2's subscriber and node 0 disagree"
            );
            compared += 1;
        }
    }
    assert!(
        compared > 10,
        "only {compared} instances compared with node 0"
    );
    eprintln!(
        "subscriber: resumed at {}, covered 1..={end}: {} delivered, gaps {:?}, {compared} compared with node 0",
        last_seen + 1,
        delivered.len(),
        gaps
    );
    // About a gigabyte of logs: a passing run leaves nothing behind.
    let _ = std::fs::remove_dir_all(&dir);
}
