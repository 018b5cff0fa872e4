//! The cluster's node processes: spawning `PROGRAM node ...` (in a network namespace when
//! the spec places it in one), a reader thread per stdout turning stats lines into events,
//! planned kills, signals, reaping, and the records of every incarnation.

use super::{
    ClusterSpec, Ended, Incarnation, KillEvent, LOG_TAIL_LINES, NodeRecord, STATS_MS, Sample,
};
use crate::error::{HarnessError, runtime};
use abcast_node::stats::{self, StatsError, StatsLine};
use std::collections::BTreeMap;
use std::fs;
use std::io::{BufRead, BufReader, Read, Write};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitStatus, Stdio};
use std::sync::mpsc;
use std::time::Instant;

pub(super) enum Event {
    Line {
        slot: usize,
        life: usize,
        at: Instant,
        line: Box<Result<StatsLine, StatsError>>,
    },
    Eof {
        slot: usize,
        life: usize,
    },
}

/// Reads one child's stdout into the channel, one event per line, then `Eof`. Lines longer
/// than [`stats::LINE_BYTES_MAX`] are cut and reported bad rather than buffered. Every raw
/// line is also appended to `raw_path`, so a kept directory shows exactly what a node said.
pub(super) fn spawn_reader(
    slot: usize,
    life: usize,
    out: impl Read + Send + 'static,
    raw_path: PathBuf,
    tx: mpsc::SyncSender<Event>,
) {
    let spawned = std::thread::Builder::new()
        .name(format!("stats-reader-{slot}"))
        .spawn(move || {
            let mut raw = fs::OpenOptions::new()
                .create(true)
                .append(true)
                .open(raw_path)
                .ok();
            let mut reader = BufReader::new(out);
            let mut buf = Vec::new();
            let limit = (stats::LINE_BYTES_MAX + 1) as u64;
            loop {
                buf.clear();
                match (&mut reader).take(limit).read_until(b'\n', &mut buf) {
                    Ok(0) | Err(_) => break,
                    Ok(_) => {}
                }
                let line = if buf.len() > stats::LINE_BYTES_MAX {
                    // Skip the rest of this over-long line, a bounded chunk at a time.
                    let mut sink = Vec::new();
                    while !sink.ends_with(b"\n") {
                        sink.clear();
                        match (&mut reader).take(limit).read_until(b'\n', &mut sink) {
                            Ok(0) | Err(_) => break,
                            Ok(_) => {}
                        }
                    }
                    Err(StatsError {
                        reason: format!("line longer than {} bytes", stats::LINE_BYTES_MAX),
                    })
                } else {
                    if let Some(f) = raw.as_mut()
                        && f.write_all(&buf).is_err()
                    {
                        raw = None;
                    }
                    stats::parse_line(&String::from_utf8_lossy(&buf))
                };
                if tx
                    .send(Event::Line {
                        slot,
                        life,
                        at: Instant::now(),
                        line: Box::new(line),
                    })
                    .is_err()
                {
                    return;
                }
            }
            let _ = tx.send(Event::Eof { slot, life });
        });
    // A reader that cannot start leaves the slot without lines; the start-up timeout and the
    // final-line wait report it, so there is nothing more to do here.
    drop(spawned);
}

pub(super) struct Slot {
    pub(super) id: u32,
    pub(super) config_path: PathBuf,
    pub(super) log_path: PathBuf,
    pub(super) child: Option<Child>,
    /// Stdout reached end of file for the current child.
    pub(super) eof: bool,
    pub(super) record: NodeRecord,
}

/// The cluster's processes. Dropping it kills whatever is still running, so an early
/// return never leaves orphans behind.
pub(super) struct Cluster {
    pub(super) slots: Vec<Slot>,
    pub(super) program: PathBuf,
    pub(super) spec: ClusterSpec,
    pub(super) start: Instant,
    pub(super) tx: mpsc::SyncSender<Event>,
}

impl Drop for Cluster {
    fn drop(&mut self) {
        for slot in &mut self.slots {
            if let Some(mut child) = slot.child.take() {
                let _ = child.kill();
                let _ = child.wait();
            }
        }
    }
}

fn describe_status(status: ExitStatus) -> String {
    use std::os::unix::process::ExitStatusExt;
    match (status.code(), status.signal()) {
        (Some(code), _) => format!("exit status {code}"),
        (None, Some(sig)) => format!("killed by signal {sig}"),
        _ => "unknown exit".to_string(),
    }
}

pub(super) fn log_tail(path: &Path) -> String {
    let text = fs::read_to_string(path).unwrap_or_default();
    let lines: Vec<&str> = text.lines().collect();
    let from = lines.len().saturating_sub(LOG_TAIL_LINES);
    lines[from..].join("\n")
}

impl Cluster {
    pub(super) fn elapsed_s(&self, at: Instant) -> f64 {
        at.saturating_duration_since(self.start).as_secs_f64()
    }

    pub(super) fn spawn(&mut self, slot_idx: usize) -> Result<(), HarnessError> {
        // The offered rate split in whole values/s; the first `rate % nodes` nodes take one
        // more so the total is exact. 0 stays 0: unlimited.
        let nodes = u64::from(self.spec.nodes.max(1));
        let total = self.spec.rate_values_per_s;
        let id = self.slots[slot_idx].id;
        let per_node_rate = match &self.spec.load_rates {
            None => Some(total / nodes + u64::from(u64::from(id) < total % nodes)),
            Some(rates) => rates.iter().find(|(n, _)| *n == id).map(|&(_, r)| r),
        };
        let now_s = self.elapsed_s(Instant::now());
        let slot = &mut self.slots[slot_idx];
        let log = match fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(&slot.log_path)
        {
            Ok(f) => f,
            Err(e) => return runtime(format!("cannot open {}", slot.log_path.display()), e),
        };
        let mut cmd = Command::new(&self.program);
        cmd.arg("node")
            .arg("--config")
            .arg(&slot.config_path)
            .arg("--id")
            .arg(slot.id.to_string())
            .arg("--json-stats")
            .arg("--delivery-log")
            .arg("--stats-ms")
            .arg(STATS_MS.to_string())
            .args(
                per_node_rate
                    .map(|r| ["--load-rate".to_string(), r.to_string()])
                    .into_iter()
                    .flatten(),
            )
            .arg("--load-value-size")
            .arg(self.spec.value_size_bytes.to_string())
            .args(
                self.spec
                    .window_values
                    .map(|w| ["--load-window".to_string(), w.to_string()])
                    .into_iter()
                    .flatten(),
            )
            .args(self.spec.load_at_leader.then_some("--load-at-leader"))
            .args(self.spec.stamp_values.then_some("--load-stamp"))
            // The first life of a slot runs on the directory this harness just created: the
            // node is new, and the members start together, as before the wiped-directory
            // question (docs/design/amnesia-detection.md) made each wait for all the others
            // to answer (the omnipaxos core did not take in a member that started late: 2
            // demos in 7). A restart, on a wiped directory too, asks.
            .args(
                slot.record
                    .incarnations
                    .is_empty()
                    .then_some("--first-start"),
            )
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::from(log));
        // The namespace to enter, held open until `spawn` has returned (the child has
        // exec'd by then).
        let mut _netns: Option<fs::File> = None;
        if let Some(place) = self.spec.placement.get(slot_idx) {
            // Opened here, in the parent (close-on-exec, so the node does not inherit it),
            // and entered in the child between fork and exec.
            let ns = match fs::File::open(&place.netns_path) {
                Ok(f) => f,
                Err(e) => {
                    return runtime(
                        format!(
                            "cannot open network namespace {}",
                            place.netns_path.display()
                        ),
                        e,
                    );
                }
            };
            let fd = std::os::fd::AsRawFd::as_raw_fd(&ns);
            // SAFETY: the closure runs in the child after fork and only makes the setns
            // system call, which is async-signal-safe; `ns` lives in `_netns` until after
            // `spawn` below, so the descriptor is open in the child.
            unsafe {
                std::os::unix::process::CommandExt::pre_exec(&mut cmd, move || {
                    if libc::setns(fd, libc::CLONE_NEWNET) == 0 {
                        Ok(())
                    } else {
                        Err(std::io::Error::last_os_error())
                    }
                });
            }
            _netns = Some(ns);
        }
        let mut child = match cmd.spawn() {
            Ok(c) => c,
            Err(e) => return runtime(format!("cannot start {} node", self.program.display()), e),
        };
        let life = slot.record.incarnations.len();
        if let Some(out) = child.stdout.take() {
            let raw_path = slot.log_path.with_extension("stats.jsonl");
            spawn_reader(slot_idx, life, out, raw_path, self.tx.clone());
        }
        slot.record.incarnations.push(Incarnation {
            spawned_at_s: now_s,
            ended_at_s: None,
            ended: Ended::Running,
            samples: Vec::new(),
            bad_lines: 0,
            first_bad_line: None,
        });
        slot.child = Some(child);
        slot.eof = false;
        Ok(())
    }

    /// SIGKILL on purpose; the exit is recorded as `how`.
    pub(super) fn kill(&mut self, slot_idx: usize, how: Ended) {
        let now_s = self.elapsed_s(Instant::now());
        let slot = &mut self.slots[slot_idx];
        if let Some(mut child) = slot.child.take() {
            let _ = child.kill();
            let _ = child.wait();
            if let Some(inc) = slot.record.incarnations.last_mut() {
                inc.ended = how;
                inc.ended_at_s = Some(now_s);
            }
        }
    }

    pub(super) fn terminate_all(&mut self) {
        self.signal_all(libc::SIGTERM);
    }

    pub(super) fn signal_all(&mut self, sig: libc::c_int) {
        for slot in &self.slots {
            if let Some(child) = &slot.child {
                // The pid of a child we have not yet waited for cannot have been reused.
                if let Ok(pid) = libc::pid_t::try_from(child.id()) {
                    // SAFETY: kill(2) with a valid signal number has no memory effects.
                    unsafe {
                        libc::kill(pid, sig);
                    }
                }
            }
        }
    }

    /// Reaps children that have exited, recording how.
    pub(super) fn reap(&mut self, stopping: bool) {
        let now_s = self.elapsed_s(Instant::now());
        for slot in &mut self.slots {
            let Some(child) = slot.child.as_mut() else {
                continue;
            };
            let Ok(Some(status)) = child.try_wait() else {
                continue;
            };
            slot.child = None;
            let Some(inc) = slot.record.incarnations.last_mut() else {
                continue;
            };
            inc.ended_at_s = Some(now_s);
            // A clean exit's final line may still be in the pipe: `run_cluster` checks
            // for it once stdout is drained.
            inc.ended = if stopping && status.success() {
                Ended::Clean
            } else {
                Ended::Unexpected {
                    status: describe_status(status),
                    log_tail: log_tail(&slot.log_path),
                }
            };
        }
    }

    pub(super) fn handle(&mut self, ev: Event) {
        match ev {
            Event::Line {
                slot,
                life,
                at,
                line,
            } => {
                let at_s = self.elapsed_s(at);
                let Some(inc) = self.slots[slot].record.incarnations.get_mut(life) else {
                    return;
                };
                match *line {
                    Ok(line) => {
                        let prev_hist = inc.samples.last_mut().and_then(|prev| {
                            prev.line.lat_all_hist = None;
                            prev.line.lat_hist.take()
                        });
                        let interval_latency = line
                            .lat_hist
                            .as_deref()
                            .and_then(|h| stats::interval_latency(prev_hist.as_deref(), h));
                        inc.samples.push(Sample {
                            at_s,
                            line,
                            interval_latency,
                        });
                    }
                    Err(e) => {
                        inc.bad_lines += 1;
                        if inc.first_bad_line.is_none() {
                            inc.first_bad_line = Some(e.to_string());
                        }
                    }
                }
            }
            Event::Eof { slot, life } => {
                let s = &mut self.slots[slot];
                if life + 1 == s.record.incarnations.len() {
                    s.eof = true;
                }
            }
        }
    }

    /// The coordinator most live nodes name in their latest line.
    pub(super) fn coordinator(&self) -> Option<u32> {
        let mut votes: BTreeMap<u32, usize> = BTreeMap::new();
        for slot in self.slots.iter().filter(|s| s.child.is_some()) {
            let latest = slot.record.incarnations.last().and_then(|i| i.last());
            if let Some(c) = latest.and_then(|l| l.coordinator) {
                *votes.entry(c).or_default() += 1;
            }
        }
        votes
            .into_iter()
            .max_by_key(|&(id, n)| (n, std::cmp::Reverse(id)))
            .map(|(id, _)| id)
    }

    /// A node this run killed that is down (`pending`: slots whose restart is due) or back
    /// and not repaired: its new life printed no line yet, or its latest line says amnesic.
    pub(super) fn unrepaired(&self, mut pending: impl Iterator<Item = usize>) -> Option<u32> {
        if let Some(slot) = pending.next() {
            return self.slots.get(slot).map(|s| s.id);
        }
        self.slots
            .iter()
            .filter(|s| s.record.incarnations.len() > 1)
            .find(|s| {
                let latest = s.record.incarnations.last().and_then(|i| i.last());
                latest.is_none_or(|l| l.amnesic)
            })
            .map(|s| s.id)
    }

    pub(super) fn slot_of(&self, id: u32) -> Option<usize> {
        self.slots.iter().position(|s| s.id == id)
    }

    /// `--kill`: SIGKILL a live follower (`what` 0, the highest id that is not the
    /// coordinator) or the coordinator most nodes name (`what` 1).
    pub(super) fn kill_planned(&mut self, what: u8) -> Option<(usize, KillEvent)> {
        let coordinator = self.coordinator();
        let live: Vec<u32> = self
            .slots
            .iter()
            .filter(|s| s.child.is_some())
            .map(|s| s.id)
            .collect();
        let (victim, role, note) = if what == 0 {
            let v = live
                .iter()
                .rev()
                .copied()
                .find(|&id| Some(id) != coordinator);
            (v, "follower", String::new())
        } else {
            match coordinator.filter(|c| live.contains(c)) {
                Some(c) => (Some(c), "coordinator", String::new()),
                None => (
                    live.first().copied(),
                    "coordinator",
                    "no live coordinator reported; killed the first live node".to_string(),
                ),
            }
        };
        let slot = self.slot_of(victim?)?;
        self.kill(slot, Ended::KilledByDemo);
        let event = KillEvent {
            at_s: self.elapsed_s(Instant::now()),
            node: self.slots[slot].id,
            role: role.to_string(),
            restarted_at_s: None,
            note,
            amnesic: false,
            repaired_at_s: None,
        };
        Some((slot, event))
    }

    /// Current throughput over all learners, for the progress bar: the median of each live
    /// node's rate between its last two lines.
    pub(super) fn live_rate(&self) -> (f64, f64) {
        let mut values = Vec::new();
        let mut mbits = Vec::new();
        for slot in self.slots.iter().filter(|s| s.child.is_some()) {
            let Some(inc) = slot.record.incarnations.last() else {
                continue;
            };
            let n = inc.samples.len();
            if n < 2 {
                continue;
            }
            let (a, b) = (&inc.samples[n - 2].line, &inc.samples[n - 1].line);
            let dt_s = b.t_us.saturating_sub(a.t_us) as f64 / 1e6;
            if dt_s > 0.0 {
                values.push(b.delivered_values.saturating_sub(a.delivered_values) as f64 / dt_s);
                mbits.push(
                    b.delivered_bytes.saturating_sub(a.delivered_bytes) as f64 * 8.0 / 1e6 / dt_s,
                );
            }
        }
        (
            stats::median(&values).unwrap_or(0.0),
            stats::median(&mbits).unwrap_or(0.0),
        )
    }

    pub(super) fn any_line_yet(&self) -> bool {
        self.slots
            .iter()
            .any(|s| s.record.incarnations.iter().any(|i| !i.samples.is_empty()))
    }

    pub(super) fn startup_failure(&self) -> String {
        let mut msg = String::from("no node printed a stats line; node logs:");
        for s in &self.slots {
            let tail = log_tail(&s.log_path);
            let tail = if tail.is_empty() {
                "(empty)".to_string()
            } else {
                tail
            };
            msg.push_str(&format!("\n--- node {} ---\n{tail}", s.id));
        }
        msg
    }
}
