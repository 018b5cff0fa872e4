//! IP-multicast Ring Paxos (seed 003 §4, §6) from abcast-core, unchanged, over the real
//! runtime with real UDP multicast on loopback: 3 acceptors that propose and learn (PAL)
//! and 3 learner-only nodes. Each test uses its own group port, so tests running in
//! parallel do not hear each other (and would drop each other's datagrams by cluster id if
//! they did). Nothing here asserts on timing: waits are generous bounds on conditions.

mod runtime_support;

use abcast_core::NodeId;
use abcast_core::config::StartInfo;
use abcast_core::ringpaxos::{RingPaxos, RingPaxosConfig};
use abcast_core::storage::MemoryStore;
use abcast_runtime::transport::TransportConfig;
use abcast_runtime::{LinkFault, MulticastConfig, TransportStats};
use runtime_support::*;
use std::net::SocketAddrV4;

const PAL: [u32; 3] = [0, 1, 2];
const LEARNERS: [u32; 3] = [3, 4, 5];

/// A group port for test `k` of this process: distinct per test, and per process as far as
/// the pid spreads them.
fn group_for(k: u16) -> SocketAddrV4 {
    let base = 30_000 + (std::process::id() % 500) as u16 * 8;
    SocketAddrV4::new([239, 255, 77, 1].into(), base + k)
}

fn ring_config() -> RingPaxosConfig {
    RingPaxosConfig {
        // A batch and its phase 2A fit one datagram.
        batch_max_bytes: 32 << 10,
        max_value_bytes: 32 << 10,
        ..RingPaxosConfig::with_roles(&PAL, &LEARNERS)
    }
}

/// Starts the 6 nodes; each PAL node proposes `values_per_proposer` values.
fn start_cluster(
    transport: TransportConfig,
    values_per_proposer: u64,
    value_bytes: usize,
) -> Vec<RunningNode<RingPaxos>> {
    let cfg = ring_config();
    let n = PAL.len() + LEARNERS.len();
    local_specs(n, transport, false, |_, _, a| a)
        .into_iter()
        .map(|(dcfg, listeners)| {
            let me = dcfg.me;
            let store = MemoryStore::new(cfg.store_capacity_instances, cfg.store_capacity_bytes);
            let protocol =
                RingPaxos::new(cfg.clone(), me, StartInfo::FRESH, Box::new(store)).unwrap();
            let proposer = PAL.contains(&me.0);
            start(NodeSpec {
                cfg: dcfg,
                protocol,
                listeners,
                load: if proposer {
                    load_of(values_per_proposer, value_bytes, 64)
                } else {
                    None
                },
            })
        })
        .collect()
}

fn multicast_transport(k: u16) -> TransportConfig {
    TransportConfig {
        multicast: Some(MulticastConfig::new(group_for(k))),
        ..TransportConfig::default()
    }
}

/// Runs the cluster to completion and checks agreement, exactly-once delivery of every
/// value, and acknowledgements; returns every node's transport counters.
fn run_to_agreement(
    transport: TransportConfig,
    values_per_proposer: u64,
    value_bytes: usize,
) -> Vec<TransportStats> {
    let nodes = start_cluster(transport, values_per_proposer, value_bytes);
    let total = (values_per_proposer as usize) * PAL.len();
    assert!(
        wait_until(PATIENCE, || all_delivered(&nodes, total)),
        "not all values delivered in time: {:?}",
        nodes
            .iter()
            .map(|n| n.recorder.delivered_count())
            .collect::<Vec<_>>()
    );
    // Every learner (the PAL nodes learn too) delivered the same sequence of `total`
    // distinct values: each broadcast value exactly once, in one order.
    assert_agreement(&nodes, total);
    // Every value was acknowledged to its proposer, once.
    assert!(
        wait_until(PATIENCE, || nodes
            .iter()
            .map(|n| n.recorder.0.lock().unwrap().acked)
            .sum::<u64>()
            >= total as u64),
        "not every value was acknowledged"
    );
    let acked: u64 = nodes
        .iter()
        .map(|n| n.recorder.0.lock().unwrap().acked)
        .sum();
    assert_eq!(
        acked, total as u64,
        "acknowledgements must name each value once"
    );
    // And every proposer's values are all there, from the right origin.
    let ids = nodes[LEARNERS[0] as usize].recorder.ids();
    for p in PAL {
        let from_p = ids.iter().filter(|id| id.node == NodeId(p)).count();
        assert_eq!(from_p, values_per_proposer as usize, "values of node {p}");
    }
    nodes
        .into_iter()
        .map(|n| n.stop().transport_stats())
        .collect()
}

fn totals(stats: &[TransportStats]) -> (TransportStats, u64, u64, u64, u64, u64) {
    let t = sum_stats(stats);
    let sent: u64 = stats.iter().map(|s| s.multicast.datagrams_sent).sum();
    let received: u64 = stats.iter().map(|s| s.multicast.datagrams_received).sum();
    let rejected: u64 = stats.iter().map(|s| s.multicast.datagrams_rejected).sum();
    let by_tcp: u64 = stats.iter().map(|s| s.multicasts_by_tcp).sum();
    let lost: u64 = stats.iter().map(|s| s.multicast.datagrams_lost).sum();
    eprintln!("per node: {stats:?}");
    (t, sent, received, rejected, by_tcp, lost)
}

#[test]
fn learners_agree_over_real_ip_multicast() {
    let stats = run_to_agreement(multicast_transport(0), 2000, 2000);
    let (t, sent, received, rejected, by_tcp, _) = totals(&stats);
    assert!(sent > 0, "no multicast datagram was sent");
    assert!(received > 0, "no multicast datagram was received");
    assert_eq!(by_tcp, 0, "multicasts went by TCP fan-out");
    assert_eq!(rejected, 0, "datagrams of our own cluster were rejected");
    assert_eq!(t.bad_input_closes, 0);
    // Learner-only nodes send no 2A or decision: only acceptors (the coordinator) do.
    for l in LEARNERS {
        assert_eq!(stats[l as usize].multicast.datagrams_sent, 0, "learner {l}");
        assert!(
            stats[l as usize].multicast.datagrams_received > 0,
            "learner {l}"
        );
    }
}

#[test]
fn learners_agree_with_two_percent_loss_on_every_link_and_datagram() {
    let mut transport = multicast_transport(1);
    // 2 % of every datagram each node receives, and of every TCP frame, is dropped.
    transport.link_faults = vec![LinkFault::everywhere(0, 20_000)];
    let stats = run_to_agreement(transport, 1500, 2000);
    let (_, sent, received, _, by_tcp, lost) = totals(&stats);
    assert!(sent > 0 && received > 0);
    assert_eq!(by_tcp, 0);
    assert!(lost > 0, "the injected loss dropped no datagram");
}

#[test]
fn without_a_multicast_socket_multicasts_go_by_tcp() {
    let stats = run_to_agreement(TransportConfig::default(), 200, 500);
    let (_, sent, _, _, by_tcp, _) = totals(&stats);
    assert_eq!(sent, 0);
    assert!(by_tcp > 0);
}

#[test]
fn a_multicast_too_large_for_a_datagram_falls_back_to_tcp() {
    // A value of 65 000 bytes travels alone in its batch, and its phase 2A (value plus
    // message fields plus both headers) does not fit a datagram of 65 000 bytes: it must
    // take TCP, not vanish.
    let mut cfg = ring_config();
    cfg.max_value_bytes = 1 << 20;
    let transport = multicast_transport(2);
    let n = PAL.len() + LEARNERS.len();
    let nodes: Vec<RunningNode<RingPaxos>> = local_specs(n, transport, false, |_, _, a| a)
        .into_iter()
        .map(|(dcfg, listeners)| {
            let me = dcfg.me;
            let store = MemoryStore::new(cfg.store_capacity_instances, cfg.store_capacity_bytes);
            let protocol =
                RingPaxos::new(cfg.clone(), me, StartInfo::FRESH, Box::new(store)).unwrap();
            start(NodeSpec {
                cfg: dcfg,
                protocol,
                listeners,
                load: (me == NodeId(0)).then(|| load_of(50, 65_000, 8)).flatten(),
            })
        })
        .collect();
    assert!(
        wait_until(PATIENCE, || all_delivered(&nodes, 50)),
        "values too large for a datagram were not delivered"
    );
    assert_agreement(&nodes, 50);
    let stats: Vec<TransportStats> = nodes
        .into_iter()
        .map(|n| n.stop().transport_stats())
        .collect();
    let too_large: u64 = stats.iter().map(|s| s.multicasts_too_large).sum();
    assert!(too_large > 0, "no multicast fell back to TCP");
}

/// Runs `body` in a fresh network namespace whose only interface is `lo` (up, multicast
/// on), in a thread of its own so no other test's sockets move. Returns `None`, with the
/// reason printed, when namespaces cannot be made here (not root, no `ip`).
fn in_netns<T: Send + 'static>(body: impl FnOnce() -> T + Send + 'static) -> Option<T> {
    // SAFETY: geteuid has no preconditions.
    if unsafe { libc::geteuid() } != 0 {
        eprintln!("skipping the network-namespace variant: not running as root");
        return None;
    }
    let ip = |args: &[&str]| std::process::Command::new("ip").args(args).output();
    match ip(&["-V"]) {
        Ok(o) if o.status.success() => {}
        Ok(o) => {
            eprintln!(
                "skipping the network-namespace variant: `ip -V` failed: {}",
                String::from_utf8_lossy(&o.stderr)
            );
            return None;
        }
        Err(e) => {
            eprintln!("skipping the network-namespace variant: no `ip` command ({e})");
            return None;
        }
    }
    let name = format!("abcast-mc-{}", std::process::id());
    let _ = ip(&["netns", "del", &name]);
    let run = |args: &[&str]| {
        let o = ip(args).unwrap_or_else(|e| panic!("ip {args:?}: {e}"));
        assert!(
            o.status.success(),
            "ip {args:?}: {}",
            String::from_utf8_lossy(&o.stderr)
        );
    };
    run(&["netns", "add", &name]);
    struct Cleanup(String);
    impl Drop for Cleanup {
        fn drop(&mut self) {
            let _ = std::process::Command::new("ip")
                .args(["netns", "del", &self.0])
                .output();
        }
    }
    let _cleanup = Cleanup(name.clone());
    run(&["-n", &name, "link", "set", "lo", "up"]);
    run(&["-n", &name, "link", "set", "lo", "multicast", "on"]);
    let path = format!("/var/run/netns/{name}");
    let handle = std::thread::spawn(move || {
        // Moves only this thread (and threads it spawns later) into the namespace.
        abcast_runtime::netns::enter_netns(std::path::Path::new(&path))
            .unwrap_or_else(|e| panic!("{e}"));
        body()
    });
    Some(handle.join().expect("the namespaced cluster panicked"))
}

#[test]
fn learners_agree_over_multicast_inside_a_network_namespace() {
    let Some(stats) = in_netns(|| run_to_agreement(multicast_transport(3), 300, 2000)) else {
        return;
    };
    let (_, sent, received, _, by_tcp, _) = totals(&stats);
    assert!(sent > 0 && received > 0);
    assert_eq!(by_tcp, 0);
}
