//! Issue 33, `disk_error` on a real file system: a node whose disk fills up (ENOSPC) stops
//! with an error that says so, and never goes on ordering values over a log it could not
//! write. The disk is a small tmpfs mounted for the test (root only: elsewhere the test
//! says it did not run). EIO and a failed fdatasync cannot be had from a real file system
//! without a faulty device; the simulator's disks make them (`MemDir::inject`, the
//! `disk_error` fault of every `power_loss` sweep).

mod ports;

use abcast_core::uring::URing;
use abcast_node::node::{NodeArgs, NodeError, open_store, run_node_with};
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::atomic::AtomicBool;
use std::time::Duration;

/// A tmpfs of `size` mounted at `path` while this lives.
struct Mount(PathBuf);

impl Mount {
    fn tmpfs(path: &Path, size: &str) -> Option<Mount> {
        std::fs::create_dir_all(path).ok()?;
        let ok = Command::new("mount")
            .args(["-t", "tmpfs", "-o", &format!("size={size}"), "tmpfs"])
            .arg(path)
            .status()
            .is_ok_and(|s| s.success());
        ok.then(|| Mount(path.to_path_buf()))
    }
}

impl Drop for Mount {
    fn drop(&mut self) {
        let _ = Command::new("umount").arg(&self.0).status();
    }
}

#[test]
fn a_node_whose_disk_fills_up_stops_with_an_error_naming_it() {
    let base = std::env::temp_dir().join(format!("abcast-diskfull-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&base);
    let mnt = base.join("mnt");
    let Some(mount) = Mount::tmpfs(&mnt, "3m") else {
        eprintln!("SKIPPED: cannot mount a tmpfs here (not root?); the test did not run");
        return;
    };
    // One U-Ring node on a durable log of 1 MiB segments, no snapshots (so nothing is
    // trimmed and the log grows until the 3 MiB disk is full).
    let text = format!(
        "cluster_id = 34\n[[members]]\nid = 0\naddr = \"127.0.0.1:{}\"\n\
         client_addr = \"127.0.0.1:{}\"\n[storage]\nkind = \"durable\"\ndir = \"{}\"\n\
         segment_bytes = 1048576\ndirect_io = false\nsnapshot_interval_ms = 0\n",
        ports::port(),
        ports::port(),
        mnt.join("data").display()
    );
    let config = base.join("cluster.toml");
    std::fs::write(&config, text).unwrap();
    let args = NodeArgs {
        id: Some(0),
        stats_ms: 0,
        drain_ms: 0,
        load_rate: Some(20_000),
        load_value_size: 1024,
        // Far longer than the disk lasts: a node that went on after the error would
        // return Ok at the end of it.
        duration_s: Some(60.0),
        ..NodeArgs::new(config)
    };
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        let stop = AtomicBool::new(false);
        let mut out = Vec::new();
        let r = run_node_with(&args, &stop, &mut out, |cfg, start| {
            let store = open_store(
                cfg,
                None,
                cfg.ring.store_capacity_instances,
                cfg.ring.store_capacity_bytes,
            )?;
            URing::new(cfg.ring.clone(), cfg.node_id, start, store)
        });
        let _ = tx.send(r.map(|rep| rep.incarnation));
    });
    let result = rx
        .recv_timeout(Duration::from_secs(120))
        .expect("the node ended");
    match result {
        Ok(inc) => panic!("the node ran to its end (incarnation {inc}) on a full disk"),
        Err(e) => {
            assert!(
                matches!(e, NodeError::Driver(_)),
                "stopped by its driver: {e}"
            );
            let msg = e.to_string();
            assert!(
                msg.contains("No space left on device"),
                "the error names the full disk: {msg}"
            );
            eprintln!("the node stopped: {msg}");
        }
    }
    drop(mount);
    let _ = std::fs::remove_dir_all(&base);
}
