//! The node process as a library call: config errors of every class name their field,
//! stats lines follow docs/CONTRACTS.md, and the incarnation marker counts restarts.

mod ports;
// The runtime tests' support module, shared rather than copied.
#[path = "../../abcast-runtime/tests/runtime_support/mod.rs"]
mod runtime_support;

use abcast_core::storage::MemoryStore;
use abcast_core::uring::URing;
use abcast_node::node::{NodeArgs, NodeError, run_node_with};
use abcast_node::nodeconfig::{self, NodeConfigError};
use base64::Engine;
use runtime_support::SeqBcast;
use std::path::{Path, PathBuf};
use std::sync::atomic::AtomicBool;

fn temp_dir(name: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!("abcast-{name}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    dir
}

fn write_config(dir: &Path, text: &str) -> PathBuf {
    let path = dir.join("cluster.toml");
    std::fs::write(&path, text).unwrap();
    path
}

/// One node on ports free for this test (`ports`).
fn single_node_config() -> String {
    format!(
        "cluster_id = 3\n[[members]]\nid = 0\naddr = \"127.0.0.1:{}\"\nclient_addr = \"127.0.0.1:{}\"\n[storage]\ndir = \"data\"\n",
        ports::port(),
        ports::port()
    )
}

fn config_error(text: &str) -> String {
    let dir = temp_dir("cfgerr");
    let path = write_config(&dir, text);
    let err = nodeconfig::load(&path, Some(0)).unwrap_err();
    // The node reports the same error before it binds anything.
    let stop = AtomicBool::new(false);
    let mut out = Vec::new();
    let node_err = run_node_with(
        &NodeArgs {
            id: Some(0),
            ..NodeArgs::new(path)
        },
        &stop,
        &mut out,
        |_, _| {
            Ok(SeqBcast::new(
                abcast_core::NodeId(0),
                vec![abcast_core::NodeId(0)],
                1,
            ))
        },
    )
    .unwrap_err();
    assert!(matches!(node_err, NodeError::Config(_)), "{node_err}");
    assert_eq!(node_err.to_string(), err.to_string());
    let _ = std::fs::remove_dir_all(&dir);
    err.to_string()
}

const BASE: &str = "cluster_id = 1\n[[members]]\nid = 0\naddr = \"127.0.0.1:7400\"\n[[members]]\nid = 1\naddr = \"127.0.0.1:7401\"\n";

#[test]
fn every_config_error_class_names_its_field() {
    let cases = [
        (
            BASE.replace("cluster_id = 1", "cluster_id = 1\ncolour = 2"),
            "colour",
        ),
        (
            BASE.replace("\nid = 1\n", "\nid = 1\nroles = [\"leader\"]\n"),
            "members[1].roles",
        ),
        (BASE.replace("\nid = 1\n", "\nid = 0\n"), "members[1].id"),
        (
            BASE.replace("127.0.0.1:7401", "127.0.0.1:port"),
            "members[1].addr",
        ),
        (BASE.replace("\nid = 0\n", "\nid = 5\n"), "node_id"),
        (
            format!("{BASE}[ring]\nwindow_values = 0\n"),
            "ring.window_values",
        ),
        (
            format!("{BASE}[ring]\nheartbeat_interval_ms = 100\nfailure_timeout_ms = 150\n"),
            "ring.failure_timeout_ms",
        ),
        (
            format!("{BASE}[storage]\nkind = \"rocksdb\"\n"),
            "expected \"memory\", \"durable\" or \"none\"",
        ),
        (
            format!("{BASE}[transport]\nsend_queue_bytes = 0\n"),
            "transport.send_queue_bytes",
        ),
        (
            BASE.replace("cluster_id = 1", "cluster_id = -1"),
            "cluster_id",
        ),
    ];
    for (text, needle) in cases {
        let msg = config_error(&text);
        assert!(msg.contains(needle), "error {msg:?} should name {needle:?}");
    }
    let missing = nodeconfig::load(Path::new("/nonexistent/abcast.toml"), Some(0)).unwrap_err();
    assert!(matches!(missing, NodeConfigError::Io { .. }), "{missing}");
}

#[test]
fn a_uring_node_prints_contract_stats_lines_and_a_final_line() {
    let dir = temp_dir("node-stats");
    let path = write_config(&dir, &single_node_config());
    let args = NodeArgs {
        json_stats: true,
        stats_ms: 100,
        load_rate: Some(2000),
        load_value_size: 64,
        duration_s: Some(0.5),
        drain_ms: 2000,
        id: Some(0),
        ..NodeArgs::new(path)
    };
    let stop = AtomicBool::new(false);
    let mut out = Vec::new();
    let report = run_node_with(&args, &stop, &mut out, |cfg, start| {
        let store = MemoryStore::new(
            cfg.ring.store_capacity_instances,
            cfg.ring.store_capacity_bytes,
        );
        URing::new(cfg.ring.clone(), cfg.node_id, start, Box::new(store))
    })
    .unwrap();
    let text = String::from_utf8(out).unwrap();
    let lines: Vec<serde_json::Value> = text
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    assert!(lines.len() >= 2, "{text}");
    let last = lines.last().unwrap();
    assert_eq!(last["type"], "final");
    for key in [
        "node",
        "incarnation",
        "t_us",
        "delivered_values",
        "delivered_bytes",
        "delivered_instance",
        "order_hash",
        "proposed_values",
        "acked_values",
        "busy_rejections",
        "coordinator",
        "cpu_user_ms",
        "cpu_sys_ms",
        "rss_kib",
        "lat_count",
        "lat_us_p50",
        "lat_us_p99",
        "lat_us_p999",
        "lat_hist",
        "delivered_by_origin",
        "acked_by_origin",
        "duplicate_deliveries",
    ] {
        assert!(last.get(key).is_some(), "final line lacks {key}: {last}");
    }
    assert!(
        lines[..lines.len() - 1]
            .iter()
            .all(|l| l["type"] == "stats")
    );
    let delivered = last["delivered_values"].as_u64().unwrap();
    assert!(delivered > 0);
    assert_eq!(last["proposed_values"].as_u64().unwrap(), delivered);
    assert_eq!(last["acked_values"].as_u64().unwrap(), delivered);
    assert_eq!(last["lat_count"].as_u64().unwrap(), delivered);
    assert_eq!(last["duplicate_deliveries"], 0);
    assert_eq!(
        last["delivered_by_origin"]["0"].as_u64().unwrap(),
        delivered
    );
    assert_eq!(last["order_hash"].as_str().unwrap().len(), 16);
    assert_eq!(
        format!("{:016x}", report.order_hash),
        last["order_hash"].as_str().unwrap()
    );
    let hist = base64::engine::general_purpose::STANDARD
        .decode(last["lat_hist"].as_str().unwrap())
        .unwrap();
    let h: hdrhistogram::Histogram<u64> = hdrhistogram::serialization::Deserializer::new()
        .deserialize(&mut &hist[..])
        .unwrap();
    assert_eq!(h.len(), delivered);
    let _ = std::fs::remove_dir_all(&dir);
}

/// `--load-stamp`: every delivered value's latency, from its proposer's stamp, in
/// `lat_all_*`; a node without it prints none of those fields.
#[test]
fn a_node_with_load_stamps_measures_every_delivered_value() {
    let dir = temp_dir("node-stamps");
    let path = write_config(&dir, &single_node_config());
    let args = NodeArgs {
        json_stats: true,
        stats_ms: 100,
        load_rate: Some(2000),
        load_value_size: 64,
        load_stamp: true,
        duration_s: Some(0.5),
        drain_ms: 2000,
        id: Some(0),
        ..NodeArgs::new(path)
    };
    let stop = AtomicBool::new(false);
    let mut out = Vec::new();
    run_node_with(&args, &stop, &mut out, |cfg, start| {
        let store = MemoryStore::new(
            cfg.ring.store_capacity_instances,
            cfg.ring.store_capacity_bytes,
        );
        URing::new(cfg.ring.clone(), cfg.node_id, start, Box::new(store))
    })
    .unwrap();
    let text = String::from_utf8(out).unwrap();
    let last = abcast_node::stats::parse_line(text.lines().last().unwrap()).unwrap();
    assert!(last.delivered_values > 0);
    assert_eq!(last.lat_all_count, last.delivered_values, "{text}");
    let h = abcast_node::stats::decode_histogram(last.lat_all_hist.as_deref().unwrap()).unwrap();
    assert_eq!(h.len(), last.delivered_values);
    // A stamp is the propose time: no latency is negative or an hour long.
    assert!(h.max() < 60_000_000, "{}", h.max());
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn a_restarted_node_has_the_next_incarnation() {
    let dir = temp_dir("node-restart");
    let path = write_config(&dir, &single_node_config());
    let args = NodeArgs {
        duration_s: Some(0.0),
        drain_ms: 0,
        stats_ms: 0,
        json_stats: true,
        id: Some(0),
        ..NodeArgs::new(path)
    };
    let stop = AtomicBool::new(false);
    let mut starts = Vec::new();
    for _ in 0..3 {
        let mut out = Vec::new();
        let report = run_node_with(&args, &stop, &mut out, |cfg, start| {
            starts.push(start);
            Ok(SeqBcast::new(
                cfg.node_id,
                vec![cfg.node_id],
                start.start_seq,
            ))
        })
        .unwrap();
        let line: serde_json::Value =
            serde_json::from_str(String::from_utf8(out).unwrap().trim()).unwrap();
        assert_eq!(line["incarnation"].as_u64().unwrap(), report.incarnation);
    }
    assert_eq!(
        starts
            .iter()
            .map(|s| (s.incarnation, s.amnesic))
            .collect::<Vec<_>>(),
        [(0, false), (1, true), (2, true)]
    );
    assert!(starts.windows(2).all(|w| w[1].start_seq > w[0].start_seq));
    assert_eq!(
        std::fs::read_to_string(dir.join("data/node-0/incarnation"))
            .unwrap()
            .trim(),
        "2"
    );
    let _ = std::fs::remove_dir_all(&dir);
}
