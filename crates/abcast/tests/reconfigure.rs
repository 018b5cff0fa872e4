//! Reconfiguration on real processes (issue 17, "what it must show" 3): a 3-node cluster of
//! `abcast node` processes plus one spare (`spare = true`), under load from a client that
//! proposes continuously; through the client API (`reconfigure_and_wait`, what `abcast
//! reconfigure` runs) first a follower is replaced by the spare, then the leader by the
//! follower removed before (a removed node taken back). Every value the client saw
//! decided must be delivered exactly once at every member of the final configuration, and
//! the three deliver one and the same sequence. Sequence Paxos (stop-sign, the new members
//! fetch the log) and Raft (joint consensus, learners first) alike.
//!
//! The request goes to a follower each time, so the `NotLeader` hint is followed too. The
//! temporary directory is removed when the test passes, kept (and named) when it fails.

use abcast_core::{NodeId, ValueId};
use abcast_node::client::{
    Client, LoadEvent, LoadSpec, configuration_of, reconfigure_and_wait, run_load, same_members,
};
use abcast_node::deliverylog;
use std::collections::HashSet;
use std::path::{Path, PathBuf};
use std::process::{Child, Command};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

/// Nodes 0..3 form the first configuration; node 3 is the spare.
mod ports;

const NODES: u32 = 4;
const SPARE: u32 = 3;

fn temp_dir(name: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!("abcast-{name}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).expect("temp dir");
    dir
}

/// The config: `protocol`, four members with client ports, the last a spare, in-memory
/// logs (the durable path is crash_restart.rs's).
fn write_config(dir: &Path, protocol: &str) -> (PathBuf, Vec<String>) {
    let mut text = format!("cluster_id = 71\nprotocol = \"{protocol}\"\n");
    let mut clients = Vec::new();
    for id in 0..NODES {
        let client = ports::addr();
        text += &format!(
            "[[members]]\nid = {id}\naddr = \"{}\"\nclient_addr = \"{client}\"\n",
            ports::addr()
        );
        if id == SPARE {
            text += "spare = true\n";
        }
        clients.push(client);
    }
    text += "[storage]\nkind = \"memory\"\ndir = \"data\"\n";
    let path = dir.join("cluster.toml");
    std::fs::write(&path, text).expect("config");
    (path, clients)
}

/// The node processes; dropping the guard (a failed assertion too) kills them.
struct Nodes(Vec<Child>);

impl Nodes {
    /// SIGTERM to every node; each must exit successfully (flushing its delivery log).
    fn stop_cleanly(&mut self, dir: &Path) {
        for c in &mut self.0 {
            // SAFETY: kill(2) with the pid of our own child and a standard signal.
            unsafe {
                libc::kill(c.id() as libc::pid_t, libc::SIGTERM);
            }
        }
        for c in &mut self.0 {
            let st = c.wait().expect("wait");
            assert!(st.success(), "node exited with {st}\n{}", logs(dir));
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

fn spawn(config: &Path, dir: &Path, id: u32) -> Child {
    let log = std::fs::File::create(dir.join(format!("node-{id}.log"))).expect("log");
    Command::new(env!("CARGO_BIN_EXE_abcast"))
        .args(["node", "--config"])
        .arg(config)
        .args(["--id", &id.to_string(), "--stats-ms", "0", "--delivery-log"])
        .stdout(std::process::Stdio::null())
        .stderr(log)
        .spawn()
        .expect("spawn abcast node")
}

fn logs(dir: &Path) -> String {
    let mut s = String::new();
    for id in 0..NODES {
        let p = dir.join(format!("node-{id}.log"));
        let text = std::fs::read_to_string(&p).unwrap_or_default();
        let lines: Vec<&str> = text.lines().collect();
        let from = lines.len().saturating_sub(15);
        s += &format!("--- {} ---\n{}\n", p.display(), lines[from..].join("\n"));
    }
    s
}

/// The leader once a node names it and the leader says it leads.
fn wait_for_leader(clients: &[String], dir: &Path) -> u32 {
    let deadline = Instant::now() + Duration::from_secs(20);
    while Instant::now() < deadline {
        if let Ok(mut c) = Client::connect(&clients[0])
            && let Ok(r) = c.status(Duration::from_secs(2))
            && let Some(l) = r.leader
            && let Ok(mut lc) = Client::connect(&clients[l.0 as usize])
            && lc.status(Duration::from_secs(2)).is_ok_and(|s| s.leading)
        {
            return l.0;
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    panic!("no leader within 20 s\n{}", logs(dir));
}

/// Waits until every node of `members` shows them as the configuration in effect, no
/// change pending, and the same delivered index for a few polls in a row.
fn wait_converged(clients: &[String], members: &[u32], dir: &Path) {
    let want = configuration_of(members, &[]).expect("configuration");
    let deadline = Instant::now() + Duration::from_secs(30);
    let mut stable = 0;
    let mut last = None;
    let mut seen = Vec::new();
    while Instant::now() < deadline {
        seen.clear();
        for &m in members {
            let r = Client::connect(&clients[m as usize])
                .and_then(|mut c| c.status(Duration::from_secs(2)));
            seen.push(r.map_or_else(
                |e| format!("node {m}: {e}"),
                |r| {
                    let ok = r.configuration_pending.is_none()
                        && r.configuration
                            .as_ref()
                            .is_some_and(|c| same_members(c, &want));
                    format!("{}:{}:{}", r.node.0, ok, r.delivered_upto)
                },
            ));
        }
        let all_ok = seen.iter().all(|s| s.contains(":true:"));
        let uptos: HashSet<&str> = seen.iter().filter_map(|s| s.rsplit(':').next()).collect();
        if all_ok && uptos.len() == 1 {
            let upto: u64 = uptos
                .iter()
                .next()
                .and_then(|u| u.parse().ok())
                .unwrap_or(0);
            if last == Some(upto) {
                stable += 1;
                if stable >= 3 {
                    return;
                }
            } else {
                stable = 0;
                last = Some(upto);
            }
        }
        std::thread::sleep(Duration::from_millis(100));
    }
    panic!(
        "the final members did not converge within 30 s: {seen:?}\n{}",
        logs(dir)
    );
}

/// A member's delivered value ids, in delivery order, from its delivery log.
fn delivered_ids(dir: &Path, id: u32) -> Vec<(u64, ValueId)> {
    let logs = deliverylog::read_node(id, &dir.join(format!("data/node-{id}")))
        .unwrap_or_else(|e| panic!("node {id}: {e}"));
    assert_eq!(logs.len(), 1, "node {id}: one life, one delivery log");
    logs[0]
        .entries
        .iter()
        .flat_map(|e| {
            (e.first_seq..e.first_seq + e.count).map(move |seq| {
                (
                    e.instance,
                    ValueId {
                        node: NodeId(e.origin),
                        seq,
                    },
                )
            })
        })
        .collect()
}

fn replace_follower_then_leader_under_load(protocol: &str) {
    let dir = temp_dir(&format!("reconfigure-{protocol}"));
    let (config, clients) = write_config(&dir, protocol);
    let mut nodes = Nodes((0..NODES).map(|id| spawn(&config, &dir, id)).collect());
    let leader = wait_for_leader(&clients, &dir);
    let followers: Vec<u32> = (0..SPARE).filter(|&n| n != leader).collect();
    // `stays` is in every configuration: the load goes there and the requests start there.
    let (replaced, stays) = (followers[0], followers[1]);

    let stop = Arc::new(AtomicBool::new(false));
    let acked: Arc<Mutex<Vec<ValueId>>> = Arc::default();
    let load = {
        let (addr, stop, acked) = (clients[stays as usize].clone(), stop.clone(), acked.clone());
        std::thread::spawn(move || {
            let spec = LoadSpec {
                window_values: 2_000,
                value_bytes: 16,
                drain: Duration::from_secs(20),
                stall_max: Duration::from_secs(20),
            };
            run_load(&addr, &spec, &stop, |_, ev| {
                if let LoadEvent::Decided(ids) = ev {
                    acked.lock().expect("acked").extend_from_slice(ids);
                }
            })
        })
    };
    let acked_now = || acked.lock().expect("acked").len();
    let wait_for_more = |n: usize| {
        let deadline = Instant::now() + Duration::from_secs(20);
        while acked_now() < n + 1000 {
            assert!(
                Instant::now() < deadline,
                "the load stalled at {} values\n{}",
                acked_now(),
                logs(&dir)
            );
            std::thread::sleep(Duration::from_millis(20));
        }
    };
    wait_for_more(0);

    // 1. A follower replaced by the spare.
    let first = [leader, stays, SPARE];
    let want = configuration_of(&first, &[]).expect("configuration");
    let o = reconfigure_and_wait(&clients[stays as usize], &want, Duration::from_secs(30))
        .unwrap_or_else(|e| panic!("replacing follower {replaced}: {e}\n{}", logs(&dir)));
    assert_eq!(o.redirects.len(), 1, "asked a follower: one hint followed");
    assert_eq!(o.redirects[0].0, Some(NodeId(leader)));
    wait_for_more(acked_now());

    // 2. The leader replaced by the follower removed in step 1.
    let last = [stays, SPARE, replaced];
    let want = configuration_of(&last, &[]).expect("configuration");
    reconfigure_and_wait(&clients[stays as usize], &want, Duration::from_secs(30))
        .unwrap_or_else(|e| panic!("replacing leader {leader}: {e}\n{}", logs(&dir)));
    wait_for_more(acked_now());

    stop.store(true, Ordering::Relaxed);
    let report = load
        .join()
        .expect("load thread")
        .unwrap_or_else(|e| panic!("the load failed: {e}\n{}", logs(&dir)));
    assert!(
        report.undecided.is_empty(),
        "{} values taken and never decided (first {:?})\n{}",
        report.undecided.len(),
        report.undecided.first(),
        logs(&dir)
    );
    let acked: Vec<ValueId> = acked.lock().expect("acked").clone();
    assert_eq!(acked.len() as u64, report.proposed);

    wait_converged(&clients, &last, &dir);
    nodes.stop_cleanly(&dir);

    // One sequence at every member of the final configuration, with every acknowledged
    // value exactly once.
    let sequences: Vec<Vec<(u64, ValueId)>> =
        last.iter().map(|&id| delivered_ids(&dir, id)).collect();
    for (i, &id) in last.iter().enumerate() {
        assert_eq!(
            sequences[i], sequences[0],
            "node {id} delivered another sequence than node {}",
            last[0]
        );
    }
    let mut seen = HashSet::new();
    for (_, id) in &sequences[0] {
        assert!(seen.insert(*id), "{id:?} delivered twice");
    }
    let missing: Vec<&ValueId> = acked.iter().filter(|id| !seen.contains(id)).collect();
    assert!(
        missing.is_empty(),
        "{} acknowledged values never delivered (first {:?})",
        missing.len(),
        missing.first()
    );
    drop(nodes);
    std::fs::remove_dir_all(&dir).expect("remove the test's directory");
}

#[test]
fn seqpaxos_replaces_a_follower_then_the_leader_under_load_and_delivers_every_acked_value() {
    replace_follower_then_leader_under_load("seqpaxos");
}

#[test]
fn raft_replaces_a_follower_then_the_leader_under_load_and_delivers_every_acked_value() {
    replace_follower_then_leader_under_load("raft");
}
