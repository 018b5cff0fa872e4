//! What the token-ring tests on real sockets share: a ring of `abcast node`s, each on a
//! thread of the test, on 127.0.0.1 with free ports (the token's UDP port included).
#![allow(dead_code)]

#[path = "../ports/mod.rs"]
mod ports;

use abcast_core::NodeId;
use abcast_node::client::Client;
use abcast_node::node::{NodeArgs, NodeReport, run_node_with};
use abcast_node::token::{TOKEN_PORT_OFFSET_DEFAULT, token_protocol};
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

pub const PATIENCE: Duration = Duration::from_secs(60);
pub const CLUSTER_ID: u64 = 17;

pub fn temp_dir(name: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!("abcast-{name}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    dir
}

/// A peer port whose TCP and UDP ports and token port (UDP, + the offset) are free for this
/// test: fixed, in a network namespace of the test's own (`ports`).
pub fn free_peer_port() -> u16 {
    ports::peer_port(TOKEN_PORT_OFFSET_DEFAULT)
}

/// A client port free for this test (`ports`).
pub fn free_port() -> u16 {
    ports::port()
}

/// The config of a token ring of `peer_ports.len()` members (client ports for the first
/// `clients` of them), with `token` as its `[token]` body.
pub fn token_config(peer_ports: &[u16], clients: &[u16], token: &str) -> String {
    let mut s = format!("cluster_id = {CLUSTER_ID}\nprotocol = \"token\"\n");
    for (i, p) in peer_ports.iter().enumerate() {
        s += &format!("[[members]]\nid = {i}\naddr = \"127.0.0.1:{p}\"\n");
        if let Some(c) = clients.get(i) {
            s += &format!("client_addr = \"127.0.0.1:{c}\"\n");
        }
    }
    s += &format!("[token]\n{token}\n[storage]\ndir = \"data\"\n");
    s
}

pub struct Node {
    pub client: SocketAddr,
    pub peer_port: u16,
    pub stop: Arc<AtomicBool>,
    pub thread: JoinHandle<(NodeReport, Vec<u8>)>,
}

impl Node {
    /// Stops the node; its report and JSON stats lines.
    pub fn stop(self) -> (NodeReport, Vec<serde_json::Value>) {
        self.stop.store(true, Ordering::Relaxed);
        let (report, out) = self.thread.join().unwrap();
        let lines = String::from_utf8(out)
            .unwrap()
            .lines()
            .map(|l| serde_json::from_str(l).unwrap())
            .collect();
        (report, lines)
    }
}

/// Starts nodes `0..running` of the config at `path`, each `abcast node` on a thread.
pub fn start(path: &Path, peer_ports: &[u16], clients: &[u16], running: usize) -> Vec<Node> {
    (0..running)
        .map(|i| {
            let stop = Arc::new(AtomicBool::new(false));
            let args = NodeArgs {
                id: Some(i as u32),
                json_stats: true,
                stats_ms: 200,
                drain_ms: 100,
                // Some tests configure a member that never runs: nobody could say whether
                // a node lived before, and each of these starts new anyway.
                first_start: true,
                ..NodeArgs::new(path.to_path_buf())
            };
            let flag = Arc::clone(&stop);
            let thread = std::thread::spawn(move || {
                let mut out = Vec::new();
                let report = run_node_with(&args, &flag, &mut out, token_protocol).unwrap();
                (report, out)
            });
            Node {
                client: SocketAddr::from(([127, 0, 0, 1], clients[i])),
                peer_port: peer_ports[i],
                stop,
                thread,
            }
        })
        .collect()
}

pub fn connect(addr: SocketAddr) -> Client {
    let end = Instant::now() + PATIENCE;
    loop {
        match Client::connect(&addr.to_string()) {
            Ok(c) => return c,
            Err(e) if Instant::now() > end => panic!("cannot connect to {addr}: {e}"),
            Err(_) => std::thread::sleep(Duration::from_millis(20)),
        }
    }
}

/// Waits until every node is in the ring whose representative is node 0 (the lowest id)
/// and every member belongs: values proposed before would be ordered in a smaller ring.
pub fn wait_for_the_whole_ring(nodes: &[Node]) {
    wait_for_rings(nodes, &vec![0; nodes.len()]);
}

/// Waits until node `i` is in an installed ring whose representative is node
/// `representatives[i]`, for every `i`, and whose members are exactly the nodes naming the
/// same one (its status's `leader` and `configuration`). The leader alone is not enough:
/// a member names the representative of a ring it is still committing, which may fail and
/// leave it alone, so a value proposed then would be delivered in a smaller ring (EVS).
pub fn wait_for_rings(nodes: &[Node], representatives: &[u32]) {
    let end = Instant::now() + PATIENCE;
    let mut clients: Vec<Client> = nodes.iter().map(|n| connect(n.client)).collect();
    let want: Vec<_> = representatives
        .iter()
        .map(|&r| {
            let members: Vec<NodeId> = (0..representatives.len())
                .filter(|&j| representatives[j] == r)
                .map(|j| NodeId(j as u32))
                .collect();
            (Some(NodeId(r)), Some(members))
        })
        .collect();
    loop {
        let got: Vec<_> = clients
            .iter_mut()
            .map(|c| {
                let s = c.status(PATIENCE).unwrap();
                let members = s
                    .configuration
                    .map(|c| c.members.iter().map(|m| m.id).collect::<Vec<_>>());
                (s.leader, members)
            })
            .collect();
        if got == want {
            return;
        }
        assert!(
            Instant::now() < end,
            "rings never settled as {want:?}: {got:?}"
        );
        std::thread::sleep(Duration::from_millis(20));
    }
}
