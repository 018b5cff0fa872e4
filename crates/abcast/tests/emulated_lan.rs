//! The emulated LAN of `abcast bench multicast --link-mbit` (`bench::lan`): nodes in
//! network namespaces of their own, joined by veth pairs to a bridge, each link shaped by
//! `tc tbf`. These tests build one (they need root and `ip`/`tc`; without them they say so
//! and pass) and check what the benchmark relies on: multicast crosses the bridge to every
//! other node, the shapers are in place, a real cluster runs there and orders values, and
//! everything is removed afterwards. Nothing here asserts on timing or rates.

use abcast_harness::analysis::analyse;
use abcast_harness::bench::lan::{self, EmulatedLan};
use abcast_harness::cluster::{ClusterSpec, NodePlace, run_cluster};
use socket2::{Domain, Protocol, SockAddr, Socket, Type};
use std::mem::MaybeUninit;
use std::net::{Ipv4Addr, SocketAddr, SocketAddrV4};
use std::path::PathBuf;
use std::time::{Duration, Instant};

/// Why this machine cannot build a LAN, or `None` when it can.
fn cannot_build() -> Option<String> {
    // SAFETY: geteuid has no preconditions.
    if unsafe { libc::geteuid() } != 0 {
        return Some("not running as root".into());
    }
    for tool in ["ip", "tc"] {
        match std::process::Command::new(tool).arg("-V").output() {
            Ok(o) if o.status.success() => {}
            _ => return Some(format!("no working `{tool}`")),
        }
    }
    None
}

/// A tag of at most 6 characters, distinct per test and per process.
fn tag(k: u32) -> String {
    format!("t{k}{:04x}", std::process::id() % 0x1_0000)
}

fn in_netns<T: Send + 'static>(
    path: PathBuf,
    body: impl FnOnce() -> T + Send + 'static,
) -> std::thread::JoinHandle<T> {
    std::thread::spawn(move || {
        lan::enter_netns(&path).expect("enter the namespace");
        body()
    })
}

#[test]
fn multicast_crosses_the_bridge_to_every_other_node_and_the_lan_is_removed_on_drop() {
    if let Some(why) = cannot_build() {
        eprintln!("skipping: {why}");
        return;
    }
    let lan = EmulatedLan::create(&tag(1), 3, 1000).expect("build the LAN");
    for n in &lan.nodes {
        let out = std::process::Command::new("tc")
            .args(["-n", &n.netns, "qdisc", "show", "dev", "eth0"])
            .output()
            .expect("tc");
        let text = String::from_utf8_lossy(&out.stdout);
        assert!(
            text.contains("tbf"),
            "{}: no shaper on eth0: {text}",
            n.netns
        );
    }
    let group = SocketAddrV4::new(
        Ipv4Addr::new(239, 255, 78, 1),
        41_000 + (std::process::id() % 1000) as u16,
    );
    // Datagrams larger than one 9000-byte frame: they cross the bridge as IP fragments.
    const DATAGRAM_BYTES: usize = 20_000;
    let (ready_tx, ready_rx) = std::sync::mpsc::channel();
    let receivers: Vec<_> = lan.nodes[1..]
        .iter()
        .map(|n| {
            let ready = ready_tx.clone();
            in_netns(n.netns_path(), move || {
                let s = Socket::new(Domain::IPV4, Type::DGRAM, Some(Protocol::UDP)).unwrap();
                s.set_reuse_address(true).unwrap();
                s.bind(&SockAddr::from(SocketAddr::V4(group))).unwrap();
                s.join_multicast_v4(group.ip(), &Ipv4Addr::UNSPECIFIED)
                    .unwrap();
                s.set_read_timeout(Some(Duration::from_millis(200)))
                    .unwrap();
                ready.send(()).unwrap();
                let mut buf = vec![MaybeUninit::<u8>::uninit(); 1 << 16];
                let deadline = Instant::now() + Duration::from_secs(20);
                while Instant::now() < deadline {
                    if let Ok(n) = s.recv(&mut buf) {
                        return n;
                    }
                }
                0
            })
        })
        .collect();
    for _ in &receivers {
        ready_rx.recv().unwrap();
    }
    let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    let sender = {
        let stop = std::sync::Arc::clone(&stop);
        in_netns(lan.nodes[0].netns_path(), move || {
            let s = Socket::new(Domain::IPV4, Type::DGRAM, Some(Protocol::UDP)).unwrap();
            s.set_multicast_if_v4(&Ipv4Addr::UNSPECIFIED).unwrap();
            let payload = vec![7u8; DATAGRAM_BYTES];
            // Until every receiver has one: a join may take a moment to take effect.
            while !stop.load(std::sync::atomic::Ordering::Relaxed) {
                let _ = s.send_to(&payload, &SockAddr::from(SocketAddr::V4(group)));
                std::thread::sleep(Duration::from_millis(20));
            }
        })
    };
    let got: Vec<usize> = receivers.into_iter().map(|h| h.join().unwrap()).collect();
    stop.store(true, std::sync::atomic::Ordering::Relaxed);
    sender.join().unwrap();
    assert_eq!(
        got,
        vec![DATAGRAM_BYTES; 2],
        "every other node hears the datagram whole"
    );
    let paths: Vec<PathBuf> = lan.nodes.iter().map(|n| n.netns_path()).collect();
    drop(lan);
    for p in paths {
        assert!(!p.exists(), "{} outlived the LAN", p.display());
    }
}

#[test]
fn an_unshaped_lan_has_no_shaper_or_firewall_and_is_removed_on_drop() {
    if let Some(why) = cannot_build() {
        eprintln!("skipping: {why}");
        return;
    }
    let t = tag(3);
    let lan = EmulatedLan::create_unshaped(&t, 2).expect("build the LAN");
    assert_eq!(lan.rate_mbit, None);
    for (i, n) in lan.nodes.iter().enumerate() {
        for args in [
            vec!["-n", n.netns.as_str(), "qdisc", "show", "dev", "eth0"],
            vec![
                "-n",
                lan.switch_netns(),
                "qdisc",
                "show",
                "dev",
                &format!("ab{t}h{i}"),
            ],
        ] {
            let out = std::process::Command::new("tc")
                .args(&args)
                .output()
                .expect("tc");
            assert!(out.status.success(), "tc {args:?}");
            let text = String::from_utf8_lossy(&out.stdout);
            assert!(!text.contains("tbf"), "tc {args:?}: a shaper: {text}");
        }
    }
    // The switch does not run the host's firewall on bridged frames (where the kernel has
    // br_netfilter, whose keys these are; without it nothing calls netfilter anyway).
    for table in ["iptables", "ip6tables", "arptables"] {
        let key = format!("net.bridge.bridge-nf-call-{table}");
        let out = std::process::Command::new("ip")
            .args(["netns", "exec", lan.switch_netns(), "sysctl", "-n", &key])
            .output()
            .expect("ip netns exec sysctl");
        if out.status.success() {
            assert_eq!(String::from_utf8_lossy(&out.stdout).trim(), "0", "{key}");
        }
    }
    let mut paths: Vec<PathBuf> = lan.nodes.iter().map(|n| n.netns_path()).collect();
    paths.push(PathBuf::from("/var/run/netns").join(lan.switch_netns()));
    assert!(paths.iter().all(|p| p.exists()));
    drop(lan);
    for p in paths {
        assert!(!p.exists(), "{} outlived the LAN", p.display());
    }
}

#[test]
fn a_ring_paxos_cluster_on_the_lan_orders_values_over_multicast() {
    if let Some(why) = cannot_build() {
        eprintln!("skipping: {why}");
        return;
    }
    let lan = EmulatedLan::create(&tag(2), 4, 1000).expect("build the LAN");
    let port = 31_000 + (std::process::id() % 1000) as u16;
    let spec = ClusterSpec {
        nodes: 4,
        value_size_bytes: 8192,
        duration_s: 3.0,
        rate_values_per_s: 0,
        window_values: Some(16),
        kill: false,
        config_edits: vec![
            (
                "members[3].roles".into(),
                toml::Value::Array(vec![toml::Value::String("learner".into())]),
            ),
            ("protocol".into(), toml::Value::String("ringpaxos".into())),
            (
                "multicast.group".into(),
                toml::Value::String(format!("239.255.78.2:{port}")),
            ),
            (
                "multicast.interface".into(),
                toml::Value::String("0.0.0.0".into()),
            ),
        ],
        keep_dir: true,
        progress: false,
        label: "lan".into(),
        program: Some(PathBuf::from(env!("CARGO_BIN_EXE_abcast"))),
        load_rates: None,
        learners_differ: false,
        placement: lan
            .nodes
            .iter()
            .map(|n| NodePlace {
                netns_path: n.netns_path(),
                addr: n.addr,
            })
            .collect(),
        load_at_leader: false,
        stamp_values: false,
    };
    let run = run_cluster(&spec).expect("the cluster runs");
    let report = analyse(&run);
    let dir = report.kept_dir.clone();
    let read = |name: &str| {
        dir.as_ref()
            .map(|d| std::fs::read_to_string(d.join(name)).unwrap_or_default())
            .unwrap_or_default()
    };
    let log = read("node-3.log");
    let config = read("cluster.toml");
    if let Some(d) = &dir {
        let _ = std::fs::remove_dir_all(d);
    }
    assert!(
        report.ok(),
        "checks failed: {:?} {:?} {:?}",
        report.agreement,
        report.lost,
        report.problems
    );
    let learner = report.per_node.iter().find(|n| n.id == 3).unwrap();
    assert!(
        learner.delivered_values > 0,
        "the learner delivered nothing"
    );
    // The learner-only node heard phase 2A by multicast across the bridge.
    let received: u64 = log
        .split("datagrams_received: ")
        .nth(1)
        .and_then(|t| t.split(|c: char| !c.is_ascii_digit()).next())
        .and_then(|n| n.parse().ok())
        .unwrap_or(0);
    assert!(received > 0, "node 3 received no datagram; its log:\n{log}");
    // Every member's address is its LAN address, not the loopback.
    for n in &lan.nodes {
        assert!(
            config.contains(&format!("\"{}:", n.addr)),
            "{} is not in the config:\n{config}",
            n.addr
        );
    }
    assert!(
        !config.contains("127.0.0.1"),
        "a member kept the loopback:\n{config}"
    );
}
