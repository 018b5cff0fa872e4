//! The chaos suite's load phase (`abcast chaos`, issue 33): the cluster of
//! [`super::run_cluster`] (same config, same node processes, same clients and delivery
//! logs, same quiesce and stop), with a seeded nemesis instead of the demo's two kills.
//!
//! The nemesis carries out a schedule of faults one at a time ([`NemesisPlan`]): kill -9
//! of a node or of the coordinator (restarted after a while), kill -9 of every node at once,
//! a SIGSTOP pause, a node cut off from the others (both ways) or one link cut one way (nft
//! rules on the emulated LAN's bridge, `bench::lan`), and a kill -9 whose restart finds an
//! empty directory. After each fault heals it waits until every node delivered again (the
//! victim repaired) before the next, so never more than one node is down or unrepaired at
//! once (issue 33: "as long as no two are down or unrepaired at once"); that wait, bounded,
//! is the liveness-within-a-bound check. Every action is recorded with its time.

use super::{ClusterRun, ClusterSpec, Ended, quiesce, read_delivery_logs_from, start, stop_all};
use crate::error::HarnessError;
use abcast_node::stats::LineKind;
use std::fs;
use std::io::Write;
use std::net::Ipv4Addr;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

/// One kind of fault; the names are the ones `--json` counts.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum FaultKind {
    /// kill -9 of one node, restarted after the hold time.
    Kill,
    /// kill -9 of the node most nodes name coordinator (leader, representative).
    KillLeader,
    /// kill -9 of every node at once, all restarted after the hold time.
    KillAll,
    /// SIGSTOP, SIGCONT after the hold time.
    Pause,
    /// One node cut off from every other, both ways.
    Partition,
    /// One link cut one way: what one node sends another is dropped.
    OneWay,
    /// kill -9, the node's directory removed, restarted on an empty one.
    WipedRestart,
}

impl FaultKind {
    pub const ALL: [FaultKind; 7] = [
        FaultKind::Kill,
        FaultKind::KillLeader,
        FaultKind::KillAll,
        FaultKind::Pause,
        FaultKind::Partition,
        FaultKind::OneWay,
        FaultKind::WipedRestart,
    ];

    pub fn name(self) -> &'static str {
        match self {
            FaultKind::Kill => "kill",
            FaultKind::KillLeader => "kill_leader",
            FaultKind::KillAll => "kill_all",
            FaultKind::Pause => "pause",
            FaultKind::Partition => "partition",
            FaultKind::OneWay => "one_way",
            FaultKind::WipedRestart => "wiped_restart",
        }
    }

    pub fn parse(name: &str) -> Option<FaultKind> {
        FaultKind::ALL.into_iter().find(|k| k.name() == name.trim())
    }

    /// Whether the fault needs the network cut (nft on the emulated LAN).
    pub fn cuts_links(self) -> bool {
        matches!(self, FaultKind::Partition | FaultKind::OneWay)
    }
}

/// One planned fault. `node` and `peer` are drawn from the seed; `KillLeader` picks its
/// victim when it fires (the coordinator most nodes name then).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Fault {
    pub kind: FaultKind,
    pub node: u32,
    /// The other end of a one-way cut (`node` sends, `peer` does not receive).
    pub peer: u32,
    /// How long the fault lasts: down, paused or cut.
    pub hold_ms: u64,
    /// Quiet time after the victim has recovered, before the next fault.
    pub gap_ms: u64,
}

impl Fault {
    pub fn describe(&self) -> String {
        match self.kind {
            FaultKind::Kill => format!("kill -9 node {}, down {} ms", self.node, self.hold_ms),
            FaultKind::KillLeader => format!("kill -9 the coordinator, down {} ms", self.hold_ms),
            FaultKind::KillAll => format!("kill -9 every node, down {} ms", self.hold_ms),
            FaultKind::Pause => format!("SIGSTOP node {} for {} ms", self.node, self.hold_ms),
            FaultKind::Partition => format!(
                "node {} cut off from the others for {} ms",
                self.node, self.hold_ms
            ),
            FaultKind::OneWay => format!(
                "node {} -> node {} dropped for {} ms",
                self.node, self.peer, self.hold_ms
            ),
            FaultKind::WipedRestart => format!(
                "kill -9 node {}, its directory wiped, down {} ms",
                self.node, self.hold_ms
            ),
        }
    }
}

/// What the nemesis does, and its bounds.
#[derive(Debug, Clone)]
pub struct NemesisPlan {
    pub faults: Vec<Fault>,
    /// Seconds from the start within which faults begin (the rest of the run heals).
    pub fault_window_s: f64,
    /// Longest wait, after a fault healed, for every node to deliver again.
    pub recover_max: Duration,
    /// Load that runs after the last fault has healed and every node recovered.
    pub heal_load: Duration,
}

/// One fault as carried out.
#[derive(Debug, Clone)]
pub struct FaultRecord {
    pub kind: FaultKind,
    pub nodes: Vec<u32>,
    pub at_s: f64,
    pub healed_at_s: Option<f64>,
    /// When every node had delivered again after the heal; `None`: not within the bound.
    pub recovered_at_s: Option<f64>,
    pub what: String,
}

/// A node restarted on an empty directory: its former directory's delivery logs are kept
/// under `archive` (read with the rest).
#[derive(Debug, Clone)]
pub struct Wipe {
    pub node: u32,
    pub at_s: f64,
    pub archive: PathBuf,
    /// How many lives the node had before this wipe (its record's incarnations).
    pub lives_before: usize,
}

/// A chaos run: the cluster run, and the faults.
#[derive(Debug, Clone)]
pub struct ChaosRun {
    pub run: ClusterRun,
    pub faults: Vec<FaultRecord>,
    pub wipes: Vec<Wipe>,
    /// When the last fault healed (0: no fault).
    pub last_heal_s: f64,
    /// Faults of the plan not started: the fault window ended first.
    pub not_started: usize,
}

/// The network cut: one nft table in the emulated LAN's switch namespace, on its bridge.
#[derive(Debug, Clone)]
pub struct NetCut {
    /// The switch's namespace (`EmulatedLan::switch_netns`).
    pub switch_netns: String,
    /// The LAN's bridge ports, as an nft interface-name pattern (`abTAGh*`).
    pub ports: String,
    pub table: String,
    /// Each node's address, by id.
    pub addrs: Vec<Ipv4Addr>,
}

impl NetCut {
    /// Replaces the cut with exactly these directed links (from, to), in one nft
    /// transaction.
    pub fn apply(&self, links: &[(u32, u32)]) -> Result<(), String> {
        let t = &self.table;
        let mut s = format!(
            "add table bridge {t}\n\
             add chain bridge {t} cut {{ type filter hook forward priority 0; policy accept; }}\n\
             flush chain bridge {t} cut\n"
        );
        for &(a, b) in links {
            let (Some(from), Some(to)) = (self.addrs.get(a as usize), self.addrs.get(b as usize))
            else {
                continue;
            };
            s += &format!(
                "add rule bridge {t} cut iifname \"{}\" ip saddr {from} ip daddr {to} drop\n",
                self.ports
            );
        }
        run_nft(&self.switch_netns, &s)
    }

    pub fn remove(&self) {
        let t = &self.table;
        let _ = run_nft(
            &self.switch_netns,
            &format!("add table bridge {t}\ndelete table bridge {t}\n"),
        );
    }
}

/// `nft -f -` in namespace `ns`.
pub fn run_nft(ns: &str, script: &str) -> Result<(), String> {
    let mut child = Command::new("ip")
        .args(["netns", "exec", ns, "nft", "-f", "-"])
        .stdin(Stdio::piped())
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .map_err(|e| format!("cannot run nft in {ns} ({e}); it comes with the nftables package"))?;
    if let Some(mut stdin) = child.stdin.take() {
        stdin
            .write_all(script.as_bytes())
            .map_err(|e| format!("cannot write the nft script: {e}"))?;
    }
    let out = child
        .wait_with_output()
        .map_err(|e| format!("nft in {ns}: {e}"))?;
    if out.status.success() {
        Ok(())
    } else {
        Err(format!(
            "nft in {ns} refused the rules: {}\nscript:\n{script}",
            String::from_utf8_lossy(&out.stderr).trim()
        ))
    }
}

/// What is under way.
enum Phase {
    /// Waiting for the next fault's time.
    Gap {
        until: Instant,
    },
    /// A fault holds until `heal_at`.
    Active {
        rec: usize,
        heal_at: Instant,
        undo: Undo,
    },
    /// Healed; waiting until every node delivered again.
    Recover {
        rec: usize,
        since: Instant,
        /// Per slot: (life index, delivered count) when the fault healed.
        marks: Vec<(usize, u64)>,
        gap: Duration,
    },
    Done,
}

/// How a fault is lifted.
enum Undo {
    Restart(Vec<usize>),
    Resume(usize),
    Uncut,
}

/// Per slot: its current life and delivered count (from its latest line).
fn marks(cluster: &super::process::Cluster) -> Vec<(usize, u64)> {
    cluster
        .slots
        .iter()
        .map(|s| {
            let life = s.record.incarnations.len().saturating_sub(1);
            let delivered = s
                .record
                .incarnations
                .last()
                .and_then(|i| i.last())
                .map_or(0, |l| l.delivered_values);
            (life, delivered)
        })
        .collect()
}

/// Every node delivered since `marks` (a new life: delivered anything).
fn all_progressed(cluster: &super::process::Cluster, marks: &[(usize, u64)]) -> bool {
    cluster.slots.iter().zip(marks).all(|(s, &(life, d))| {
        let n = s.record.incarnations.len().saturating_sub(1);
        let now = s
            .record
            .incarnations
            .last()
            .and_then(|i| {
                i.samples
                    .iter()
                    .rev()
                    .find(|x| x.line.kind == LineKind::Stats)
            })
            .map_or(0, |x| x.line.delivered_values);
        s.child.is_some() && if n == life { now > d } else { now > 0 }
    })
}

fn signal(cluster: &super::process::Cluster, slot: usize, sig: libc::c_int) {
    if let Some(child) = &cluster.slots[slot].child
        && let Ok(pid) = libc::pid_t::try_from(child.id())
    {
        // SAFETY: kill(2) on a child we have not waited for (its pid cannot be reused).
        unsafe {
            libc::kill(pid, sig);
        }
    }
}

/// Runs the cluster of `spec` under the nemesis of `plan`. `net` cuts links; without it
/// the plan must hold no fault that [`FaultKind::cuts_links`]. `log` gets one line per
/// action (the run's narrative, for a person watching).
pub fn run_chaos_cluster(
    spec: &ClusterSpec,
    plan: &NemesisPlan,
    net: Option<&NetCut>,
    log: &mut dyn FnMut(String),
) -> Result<ChaosRun, HarnessError> {
    spec.validate()?;
    if net.is_none() && plan.faults.iter().any(|f| f.kind.cuts_links()) {
        return Err(HarnessError::Usage(
            "partitions and one-way cuts need the emulated LAN".to_string(),
        ));
    }
    let (mut dir, data_dir, mut cluster, rx) = start(spec)?;
    let result = nemesis_phase(&mut cluster, &rx, plan, net, &data_dir, log);
    // Whatever happened, nobody stays paused or cut off for the stop.
    for i in 0..cluster.slots.len() {
        signal(&cluster, i, libc::SIGCONT);
    }
    if let Some(n) = net {
        let _ = n.apply(&[]);
    }
    let (faults, wipes, last_heal_s, not_started) = match result {
        Ok(r) => r,
        Err(e) => {
            dir.keep = true;
            return Err(HarnessError::Runtime(format!(
                "{e}\n(node logs kept in {})",
                dir.path.display()
            )));
        }
    };
    let stop = Instant::now();
    let stop_at_s = cluster.elapsed_s(stop);
    quiesce(&mut cluster, &rx, stop, stop_at_s);
    stop_all(&mut cluster, &rx);
    let end_at_s = cluster.elapsed_s(Instant::now());
    let (delivery_logs, delivery_log_error) =
        read_delivery_logs_from(&cluster.slots, &data_dir, &wipes);
    let kept_dir = dir.keep.then(|| dir.path.clone());
    let nodes = cluster.slots.iter().map(|s| s.record.clone()).collect();
    Ok(ChaosRun {
        run: ClusterRun {
            spec: spec.clone(),
            nodes,
            kills: Vec::new(),
            stop_at_s,
            end_at_s,
            kept_dir,
            interrupted: false,
            delivery_logs,
            delivery_log_error,
        },
        faults,
        wipes,
        last_heal_s,
        not_started,
    })
}

type PhaseOut = (Vec<FaultRecord>, Vec<Wipe>, f64, usize);

fn nemesis_phase(
    cluster: &mut super::process::Cluster,
    rx: &std::sync::mpsc::Receiver<super::process::Event>,
    plan: &NemesisPlan,
    net: Option<&NetCut>,
    data_dir: &Path,
    log: &mut dyn FnMut(String),
) -> Result<PhaseOut, HarnessError> {
    let duration = Duration::from_secs_f64(cluster.spec.duration_s);
    let window = Duration::from_secs_f64(plan.fault_window_s);
    // The first fault after the ring has formed and carries load.
    let first_at = cluster.start + Duration::from_secs(3).min(window);
    let mut phase = Phase::Gap { until: first_at };
    let mut next = 0usize;
    let mut records: Vec<FaultRecord> = Vec::new();
    let mut wipes: Vec<Wipe> = Vec::new();
    let mut last_heal: Option<Instant> = None;
    loop {
        let now = Instant::now();
        let elapsed = now.saturating_duration_since(cluster.start);
        if !cluster.any_line_yet() {
            let all_dead = cluster.slots.iter().all(|s| s.eof);
            if all_dead || elapsed >= super::FIRST_LINE_TIMEOUT {
                cluster.reap(false);
                return Err(HarnessError::Runtime(cluster.startup_failure()));
            }
        }
        match &mut phase {
            Phase::Gap { until } if now >= *until => {
                if next >= plan.faults.len() || elapsed >= window {
                    phase = Phase::Done;
                } else {
                    let f = plan.faults[next].clone();
                    next += 1;
                    phase = begin(cluster, &f, net, data_dir, &mut records, &mut wipes, log)?;
                }
            }
            Phase::Active { rec, heal_at, undo } if now >= *heal_at => {
                let rec = *rec;
                match undo {
                    Undo::Restart(slots) => {
                        for &s in slots.iter() {
                            cluster.spawn(s)?;
                        }
                    }
                    Undo::Resume(s) => signal(cluster, *s, libc::SIGCONT),
                    Undo::Uncut => {
                        if let Some(n) = net {
                            n.apply(&[]).map_err(HarnessError::Runtime)?;
                        }
                    }
                }
                let at = Instant::now();
                records[rec].healed_at_s = Some(cluster.elapsed_s(at));
                log(format!(
                    "{:>6.1} s  healed: {}",
                    cluster.elapsed_s(at),
                    records[rec].what
                ));
                last_heal = Some(at);
                let gap = Duration::from_millis(plan.faults[next - 1].gap_ms);
                phase = Phase::Recover {
                    rec,
                    since: at,
                    marks: marks(cluster),
                    gap,
                };
            }
            Phase::Recover {
                rec,
                since,
                marks,
                gap,
            } => {
                if all_progressed(cluster, marks) {
                    let t = cluster.elapsed_s(Instant::now());
                    records[*rec].recovered_at_s = Some(t);
                    log(format!("{t:>6.1} s  every node delivers again"));
                    phase = Phase::Gap {
                        until: Instant::now() + *gap,
                    };
                } else if since.elapsed() >= plan.recover_max {
                    let t = cluster.elapsed_s(Instant::now());
                    log(format!(
                        "{t:>6.1} s  NOT every node delivered within {} s of the heal",
                        plan.recover_max.as_secs()
                    ));
                    phase = Phase::Gap {
                        until: Instant::now() + *gap,
                    };
                }
            }
            Phase::Done => {
                let healed_long_enough = last_heal.is_none_or(|t| t.elapsed() >= plan.heal_load);
                if elapsed >= duration && healed_long_enough {
                    break;
                }
            }
            _ => {}
        }
        if let Ok(ev) = rx.recv_timeout(Duration::from_millis(50)) {
            cluster.handle(ev);
            while let Ok(ev) = rx.try_recv() {
                cluster.handle(ev);
            }
        }
        cluster.reap(false);
    }
    let last_heal_s = last_heal.map_or(0.0, |t| cluster.elapsed_s(t));
    Ok((records, wipes, last_heal_s, plan.faults.len() - next))
}

/// Starts fault `f`; returns the phase that lifts it.
fn begin(
    cluster: &mut super::process::Cluster,
    f: &Fault,
    net: Option<&NetCut>,
    data_dir: &Path,
    records: &mut Vec<FaultRecord>,
    wipes: &mut Vec<Wipe>,
    log: &mut dyn FnMut(String),
) -> Result<Phase, HarnessError> {
    let n = cluster.slots.len();
    let slot_of = |id: u32| (id as usize).min(n.saturating_sub(1));
    let mut nodes = vec![f.node];
    let mut what = f.describe();
    let undo = match f.kind {
        FaultKind::Kill => {
            let s = slot_of(f.node);
            cluster.kill(s, Ended::KilledByDemo);
            Undo::Restart(vec![s])
        }
        FaultKind::KillLeader => {
            let victim = cluster
                .coordinator()
                .filter(|&c| (c as usize) < n)
                .unwrap_or(f.node);
            nodes = vec![victim];
            what = format!(
                "kill -9 node {victim} (the coordinator), down {} ms",
                f.hold_ms
            );
            let s = slot_of(victim);
            cluster.kill(s, Ended::KilledByDemo);
            Undo::Restart(vec![s])
        }
        FaultKind::KillAll => {
            nodes = cluster.slots.iter().map(|s| s.id).collect();
            for s in 0..n {
                cluster.kill(s, Ended::KilledByDemo);
            }
            Undo::Restart((0..n).collect())
        }
        FaultKind::Pause => {
            let s = slot_of(f.node);
            signal(cluster, s, libc::SIGSTOP);
            Undo::Resume(s)
        }
        FaultKind::Partition => {
            let mut links = Vec::new();
            for other in (0..n as u32).filter(|&o| o != f.node) {
                links.push((f.node, other));
                links.push((other, f.node));
            }
            if let Some(net) = net {
                net.apply(&links).map_err(HarnessError::Runtime)?;
            }
            Undo::Uncut
        }
        FaultKind::OneWay => {
            nodes.push(f.peer);
            if let Some(net) = net {
                net.apply(&[(f.node, f.peer)])
                    .map_err(HarnessError::Runtime)?;
            }
            Undo::Uncut
        }
        FaultKind::WipedRestart => {
            let s = slot_of(f.node);
            cluster.kill(s, Ended::KilledByDemo);
            let lives_before = cluster.slots[s].record.incarnations.len();
            let node_dir = data_dir.join(format!("node-{}", f.node));
            let archive = data_dir.join(format!("wiped-{}-{}", f.node, wipes.len()));
            archive_logs(&node_dir, &archive)?;
            if let Err(e) = fs::remove_dir_all(&node_dir) {
                return Err(HarnessError::Runtime(format!(
                    "cannot wipe {}: {e}",
                    node_dir.display()
                )));
            }
            wipes.push(Wipe {
                node: f.node,
                at_s: cluster.elapsed_s(Instant::now()),
                archive,
                lives_before,
            });
            Undo::Restart(vec![s])
        }
    };
    let at = Instant::now();
    let at_s = cluster.elapsed_s(at);
    log(format!("{at_s:>6.1} s  {what}"));
    records.push(FaultRecord {
        kind: f.kind,
        nodes,
        at_s,
        healed_at_s: None,
        recovered_at_s: None,
        what,
    });
    Ok(Phase::Active {
        rec: records.len() - 1,
        heal_at: at + Duration::from_millis(f.hold_ms),
        undo,
    })
}

/// Moves the delivery logs of a node's directory into `archive` before the directory is
/// wiped: they are the record of what its lives delivered.
fn archive_logs(node_dir: &Path, archive: &Path) -> Result<(), HarnessError> {
    let err = |what: String| HarnessError::Runtime(what);
    fs::create_dir_all(archive)
        .map_err(|e| err(format!("cannot create {}: {e}", archive.display())))?;
    let Ok(rd) = fs::read_dir(node_dir) else {
        return Ok(());
    };
    for item in rd.flatten() {
        let name = item.file_name();
        if name.to_string_lossy().starts_with("deliveries-") {
            fs::rename(item.path(), archive.join(&name))
                .map_err(|e| err(format!("cannot keep {}: {e}", item.path().display())))?;
        }
    }
    Ok(())
}
