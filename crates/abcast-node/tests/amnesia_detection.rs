//! Issue 33, suspect 2: a node whose directory was wiped lost its incarnation marker with
//! its state, and restarted as a new member (incarnation 0, not amnesic) that votes with
//! empty state. Now a node without a marker asks every other member which life of it they
//! know (`abcast_runtime::lives`) and starts amnesic past it; a node nobody knows starts
//! new. Three U-Ring nodes on memory storage, in this process (docs/design/
//! amnesia-detection.md).

use abcast_core::config::StartInfo;
use abcast_core::storage::MemoryStore;
use abcast_core::uring::URing;
use abcast_node::node::{NodeArgs, run_node_with};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, mpsc};
use std::thread::JoinHandle;
use std::time::Duration;

fn temp_dir(name: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!("abcast-{name}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    dir
}

fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

/// Three members; `extra` is appended (a `[transport]` section).
fn config(dir: &Path, extra: &str) -> PathBuf {
    let mut text = String::from("cluster_id = 33\n");
    for i in 0..3 {
        text.push_str(&format!(
            "[[members]]\nid = {i}\naddr = \"127.0.0.1:{}\"\n",
            free_port()
        ));
    }
    text.push_str(&format!(
        "[storage]\ndir = \"{}\"\n",
        dir.join("data").display()
    ));
    text.push_str(extra);
    let path = dir.join("cluster.toml");
    std::fs::write(&path, text).unwrap();
    path
}

struct Running {
    stop: Arc<AtomicBool>,
    thread: JoinHandle<()>,
}

/// Starts node `id` on its own thread; its `StartInfo` comes back on `starts`.
fn start(path: &Path, id: u32, starts: &mpsc::Sender<(u32, StartInfo)>) -> Running {
    let stop = Arc::new(AtomicBool::new(false));
    let args = NodeArgs {
        id: Some(id),
        stats_ms: 0,
        drain_ms: 0,
        ..NodeArgs::new(path.to_path_buf())
    };
    let flag = Arc::clone(&stop);
    let tx = starts.clone();
    let thread = std::thread::spawn(move || {
        let mut out = Vec::new();
        run_node_with(&args, &flag, &mut out, |cfg, start| {
            let _ = tx.send((id, start));
            let store = MemoryStore::new(
                cfg.ring.store_capacity_instances,
                cfg.ring.store_capacity_bytes,
            );
            URing::new(cfg.ring.clone(), cfg.node_id, start, Box::new(store))
        })
        .unwrap();
    });
    Running { stop, thread }
}

impl Running {
    fn stop(self) {
        self.stop.store(true, Ordering::Relaxed);
        self.thread.join().unwrap();
    }
}

fn next_start(rx: &mpsc::Receiver<(u32, StartInfo)>) -> (u32, StartInfo) {
    rx.recv_timeout(Duration::from_secs(60))
        .expect("a node started")
}

#[test]
fn a_node_whose_directory_was_wiped_starts_amnesic_past_every_life_its_peers_know() {
    wiped_restart_is_amnesic("amnesia", "");
}

/// The same when the ring's frames travel as UDP datagrams (`unicast = "udp"`, as the token
/// ring's and Ring Paxos' multicast do): no `Hello` of a life reaches a peer, so the
/// datagram endpoints record the lives (`transport/datagram.rs`). Before, the peers
/// answered "never" and the wiped node restarted as incarnation 0, reusing the value ids
/// of its first life (`abcast chaos --protocol token --faults wiped_restart`: acknowledged
/// values dropped as duplicates).
#[test]
fn a_node_whose_directory_was_wiped_is_known_by_its_datagrams_too() {
    wiped_restart_is_amnesic("amnesia-udp", "[transport]\nunicast = \"udp\"\n");
}

fn wiped_restart_is_amnesic(name: &str, extra: &str) {
    let dir = temp_dir(name);
    let path = config(&dir, extra);
    let node_dir = dir.join("data").join("node-2");
    let (tx, rx) = mpsc::channel();
    // A new cluster: each node asks the others while they ask it; nobody knows anybody.
    let mut nodes: Vec<Option<Running>> = (0..3).map(|i| Some(start(&path, i, &tx))).collect();
    for _ in 0..3 {
        let (id, s) = next_start(&rx);
        assert_eq!((s.incarnation, s.amnesic), (0, false), "node {id} is new");
    }
    // The ring runs a while (node 2 sends to its successor, node 0, who records its life).
    std::thread::sleep(Duration::from_millis(500));
    // A plain restart: the marker says incarnation 1, amnesic (memory storage).
    nodes[2].take().unwrap().stop();
    nodes[2] = Some(start(&path, 2, &tx));
    let (_, s) = next_start(&rx);
    assert_eq!((s.incarnation, s.amnesic), (1, true));
    std::thread::sleep(Duration::from_millis(500));
    // The directory is wiped: without the marker the node would have started as
    // incarnation 0, not amnesic. Its peers know its life 1.
    nodes[2].take().unwrap().stop();
    std::fs::remove_dir_all(&node_dir).unwrap();
    nodes[2] = Some(start(&path, 2, &tx));
    let (_, s) = next_start(&rx);
    assert!(s.amnesic, "{s:?}");
    assert_eq!(s.incarnation, 2, "past every life a peer took frames from");
    assert!(node_dir.join("incarnation").exists(), "its marker is back");
    assert!(
        dir.join("data/node-0/peer-lives").exists(),
        "node 0 keeps the book of its peers' lives"
    );
    for n in nodes.into_iter().flatten() {
        n.stop();
    }
    let _ = std::fs::remove_dir_all(&dir);
}
