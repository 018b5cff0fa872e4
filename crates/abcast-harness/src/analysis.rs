//! From the raw records of a cluster run to figures and verdicts: throughput per learner
//! after the warm-up, latency, CPU and memory, a per-second timeline, the longest stall, and
//! the checks (agreement, nothing lost, no duplicates, no node failed).

use crate::cluster::{ClusterRun, Ended, KillEvent, NodeRecord, STOP_GRACE, Sample};
use crate::format::group;
use abcast_node::stats::{self, LatencySummary, LineKind, StatsLine};
use std::collections::{BTreeMap, BTreeSet};
use std::path::PathBuf;

/// One node's figures in the summary.
#[derive(Debug, Clone)]
pub struct NodeReport {
    pub id: u32,
    pub values_per_s: f64,
    pub mbit_per_s: f64,
    /// user + sys CPU time over wall time, all incarnations; 100 = one core busy.
    pub cpu_pct: f64,
    pub rss_kib_max: u64,
    pub delivered_values: u64,
    pub order_hash: String,
    pub incarnations: usize,
    pub final_seen: bool,
    /// How the last incarnation ended, in words.
    pub exit: String,
    pub bad_lines: u64,
}

/// One second of the timeline: values/s delivered at each node (`None`: no line from it).
#[derive(Debug, Clone)]
pub struct TimelineRow {
    pub second: u64,
    pub values_per_s: Vec<Option<f64>>,
    /// Latency of the proposals delivered in this second: the median of the nodes'
    /// interval medians, and the worst interval's p99 (intervals of [`STATS_MS`]).
    pub latency_us_p50: Option<f64>,
    pub latency_us_p99: Option<f64>,
    pub events: Vec<String>,
}

/// The longest time a learner delivered nothing during the load phase.
#[derive(Debug, Clone, Copy)]
pub struct Stall {
    pub node: u32,
    pub from_s: f64,
    pub to_s: f64,
}

/// The figures and verdicts of one run.
#[derive(Debug, Clone)]
pub struct Report {
    pub nodes: u32,
    pub value_size_bytes: u64,
    pub duration_s: f64,
    pub rate_values_per_s: u64,
    pub window_values: Option<u64>,
    pub kill: bool,
    /// Median over learners of each learner's delivery rate in the load phase.
    pub values_per_s: f64,
    pub mbit_per_s: f64,
    pub latency: LatencySummary,
    pub per_node: Vec<NodeReport>,
    pub learners_agree: bool,
    /// Instances compared one by one across learners (from the delivery logs), 0 if the
    /// comparison was by whole-sequence hash.
    pub instances_compared: u64,
    /// Instances restarted in-memory learners passed over (trimmed at every acceptor).
    pub trimmed_skipped: u64,
    /// Values delivered by the most advanced learner.
    pub delivered: u64,
    pub agreement: Vec<String>,
    pub duplicates_total: u64,
    pub duplicates: Vec<String>,
    /// Empty when every acknowledged value was delivered by every learner.
    pub lost: Vec<String>,
    pub acked_total: u64,
    /// Anything else that went wrong: crashes, bad lines, nodes that would not stop.
    pub problems: Vec<String>,
    pub timeline: Vec<TimelineRow>,
    pub kills: Vec<KillEvent>,
    pub longest_stall: Option<Stall>,
    pub kept_dir: Option<PathBuf>,
    /// Ctrl-C ended the load at this many seconds.
    pub interrupted_at_s: Option<f64>,
    /// The token ring: its learners held to Extended Virtual Synchrony ([`evs_verdict`])
    /// instead of instance by instance.
    pub evs: Option<EvsVerdict>,
}

impl Report {
    /// The demo's verdict: learners agree, nothing lost, nothing duplicated, no node failed.
    pub fn ok(&self) -> bool {
        self.learners_agree
            && self.lost.is_empty()
            && self.duplicates_total == 0
            && self.problems.is_empty()
    }
}

/// Throughput of one node over the load phase: the sum over its incarnations of what it
/// delivered between its first line after the warm-up and its last line before the stop,
/// over the sum of those times (node clock). Returns (values/s, Mbit/s).
fn node_rate(record: &NodeRecord, warmup_s: f64, stop_at_s: f64) -> Option<(f64, f64)> {
    let mut values = 0u64;
    let mut bytes = 0u64;
    let mut time_us = 0u64;
    for inc in &record.incarnations {
        let window: Vec<&Sample> = inc
            .samples
            .iter()
            .filter(|s| s.at_s >= warmup_s && s.at_s <= stop_at_s && s.line.kind == LineKind::Stats)
            .collect();
        if let (Some(a), Some(b)) = (window.first(), window.last()) {
            values += b
                .line
                .delivered_values
                .saturating_sub(a.line.delivered_values);
            bytes += b
                .line
                .delivered_bytes
                .saturating_sub(a.line.delivered_bytes);
            time_us += b.line.t_us.saturating_sub(a.line.t_us);
        }
    }
    if time_us == 0 {
        return None;
    }
    let secs = time_us as f64 / 1e6;
    Some((values as f64 / secs, bytes as f64 * 8.0 / 1e6 / secs))
}

fn timeline(run: &ClusterRun) -> Vec<TimelineRow> {
    // Whole seconds only, so every row is a rate; a last partial second is left out.
    let seconds = run.stop_at_s.floor().max(1.0) as usize;
    let mut rows: Vec<TimelineRow> = (0..seconds)
        .map(|s| TimelineRow {
            second: s as u64,
            values_per_s: vec![None; run.nodes.len()],
            latency_us_p50: None,
            latency_us_p99: None,
            events: Vec::new(),
        })
        .collect();
    let mut p50s: Vec<Vec<f64>> = vec![Vec::new(); seconds];
    for (col, record) in run.nodes.iter().enumerate() {
        for inc in &record.incarnations {
            let mut prev: Option<&Sample> = None;
            for s in inc.samples.iter().filter(|s| s.at_s < seconds as f64) {
                let bin = (s.at_s as usize).min(seconds - 1);
                if let Some(l) = s.interval_latency {
                    p50s[bin].push(l.p50_us);
                    let worst = rows[bin].latency_us_p99.get_or_insert(0.0);
                    *worst = worst.max(l.p99_us);
                }
                let cell = rows[bin].values_per_s[col].get_or_insert(0.0);
                if let Some(p) = prev {
                    *cell +=
                        s.line
                            .delivered_values
                            .saturating_sub(p.line.delivered_values) as f64;
                }
                prev = Some(s);
            }
        }
    }
    for (row, p) in rows.iter_mut().zip(&p50s) {
        row.latency_us_p50 = stats::median(p);
    }
    for k in &run.kills {
        let bin = (k.at_s as usize).min(seconds - 1);
        rows[bin]
            .events
            .push(format!("kill -9 node {} ({})", k.node, k.role));
        if let Some(r) = k.restarted_at_s {
            let bin = (r as usize).min(seconds - 1);
            rows[bin].events.push(format!("restart node {}", k.node));
        }
    }
    rows
}

/// The longest stretch of the load phase in which one learner's delivered count did not
/// move, from the last line before the stall to the first line after it (or to its last
/// line in the load phase, for a stall that never ended).
fn longest_stall(run: &ClusterRun, warmup_s: f64) -> Option<Stall> {
    let mut best: Option<Stall> = None;
    let mut consider = |stall: Stall| {
        if best.is_none_or(|x| stall.to_s - stall.from_s > x.to_s - x.from_s) {
            best = Some(stall);
        }
    };
    for record in &run.nodes {
        for inc in &record.incarnations {
            let window: Vec<&Sample> = inc
                .samples
                .iter()
                .filter(|s| s.at_s >= warmup_s && s.at_s <= run.stop_at_s)
                .collect();
            let mut since: Option<&Sample> = None;
            for pair in window.windows(2) {
                let (a, b) = (pair[0], pair[1]);
                if b.line.delivered_values == a.line.delivered_values {
                    since.get_or_insert(a);
                } else if let Some(from) = since.take() {
                    consider(Stall {
                        node: record.id,
                        from_s: from.at_s,
                        to_s: b.at_s,
                    });
                }
            }
            if let (Some(from), Some(last)) = (since, window.last()) {
                consider(Stall {
                    node: record.id,
                    from_s: from.at_s,
                    to_s: last.at_s,
                });
            }
        }
    }
    best
}

/// Turns the raw lines of a run into figures and verdicts.
/// Seconds at the start of a run left out of the throughput figures (the ring fills its
/// windows and connections first): a fifth of the run, at most one second.
pub fn warmup_s(duration_s: f64) -> f64 {
    (duration_s / 5.0).min(1.0)
}

pub fn analyse(run: &ClusterRun) -> Report {
    analyse_from(run, warmup_s(run.spec.duration_s))
}

/// [`analyse`] with the throughput figures taken from `warmup_s` on (a benchmark whose
/// back-end needs longer to reach its steady state than the ring does).
pub fn analyse_from(run: &ClusterRun, warmup_s: f64) -> Report {
    let spec = &run.spec;
    let mut problems = Vec::new();
    let per_node: Vec<NodeReport> = run
        .nodes
        .iter()
        .map(|record| node_report(record, warmup_s, run.stop_at_s, &mut problems))
        .collect();
    let values: Vec<f64> = per_node.iter().map(|n| n.values_per_s).collect();
    let mbits: Vec<f64> = per_node.iter().map(|n| n.mbit_per_s).collect();

    // Latency: the last line of every incarnation covers that incarnation's whole life.
    let last_lines: Vec<&StatsLine> = run
        .nodes
        .iter()
        .flat_map(|r| r.incarnations.iter().filter_map(|i| i.last()))
        .collect();
    let latency = stats::merge_latency(last_lines.iter().copied());

    let (mut learners_agree, mut agreement, delivered) = agreement_by_counts(&per_node);
    let (mut duplicates_total, mut duplicates) = duplicates_by_counts(run);
    let acked_by_origin = acked_by_origin(run);
    let mut lost = lost_by_counts(run, &acked_by_origin);
    // With delivery logs, compare learners instance by instance: a learner restarted on
    // in-memory storage starts from the oldest instance still held, so whole-sequence counts
    // and hashes cannot match, but every instance it delivered must.
    let mut instances_compared = 0;
    let mut trimmed_skipped = 0;
    let evs = (runs_token_ring(spec) && !run.delivery_logs.is_empty()).then(|| evs_verdict(run));
    if let Some(e) = &evs {
        agreement.retain(|a| a.contains("printed no final stats line"));
        learners_agree = agreement.is_empty() && e.disagreements.is_empty();
        agreement.extend(e.disagreements.iter().cloned());
        duplicates.extend(e.duplicates.iter().cloned());
        duplicates_total += e.duplicates.len() as u64;
        lost = e.lost.clone();
    } else if !run.delivery_logs.is_empty() {
        let verdict = abcast_node::deliverylog::compare(&run.delivery_logs, &acked_by_origin);
        instances_compared = verdict.instances_compared;
        trimmed_skipped = verdict.trimmed_skipped;
        agreement.retain(|a| a.contains("printed no final stats line"));
        learners_agree = agreement.is_empty() && verdict.disagreements.is_empty();
        agreement.extend(verdict.disagreements);
        duplicates.extend(verdict.duplicates.iter().cloned());
        duplicates_total += verdict.duplicates.len() as u64;
        lost = verdict.lost;
    } else if let Some(e) = &run.delivery_log_error {
        agreement.push(format!(
            "delivery logs unreadable ({e}); compared whole sequences only"
        ));
    }
    Report {
        nodes: spec.nodes,
        value_size_bytes: spec.value_size_bytes,
        duration_s: spec.duration_s,
        rate_values_per_s: spec.rate_values_per_s,
        window_values: spec.window_values,
        kill: spec.kill,
        values_per_s: stats::median(&values).unwrap_or(0.0),
        mbit_per_s: stats::median(&mbits).unwrap_or(0.0),
        latency,
        per_node,
        learners_agree,
        instances_compared,
        trimmed_skipped,
        delivered,
        agreement,
        duplicates_total,
        duplicates,
        lost,
        acked_total: acked_by_origin.values().sum(),
        problems,
        timeline: timeline(run),
        kills: run.kills.clone(),
        longest_stall: longest_stall(run, warmup_s),
        kept_dir: run.kept_dir.clone(),
        interrupted_at_s: run.interrupted.then_some(run.stop_at_s),
        evs,
    }
}

/// One node's figures over all its incarnations; what went wrong with it goes to `problems`.
fn node_report(
    record: &NodeRecord,
    warmup_s: f64,
    stop_at_s: f64,
    problems: &mut Vec<String>,
) -> NodeReport {
    let rate = node_rate(record, warmup_s, stop_at_s);
    let mut cpu_ms = 0u64;
    let mut wall_s = 0.0;
    let mut rss_kib_max = 0u64;
    let mut bad_lines = 0u64;
    for (n, inc) in record.incarnations.iter().enumerate() {
        if let Some(last) = inc.samples.last() {
            cpu_ms += last.line.cpu_user_ms + last.line.cpu_sys_ms;
            wall_s += (last.at_s - inc.spawned_at_s).max(0.0);
        }
        rss_kib_max = inc
            .samples
            .iter()
            .map(|s| s.line.rss_kib)
            .max()
            .unwrap_or(0)
            .max(rss_kib_max);
        bad_lines += inc.bad_lines;
        if let Some(first) = &inc.first_bad_line {
            problems.push(format!(
                "node {} (life {}): {} unreadable stdout line(s), first: {first}",
                record.id,
                n + 1,
                inc.bad_lines
            ));
        }
        match &inc.ended {
            Ended::Unexpected { status, log_tail } => {
                let tail = if log_tail.is_empty() {
                    String::new()
                } else {
                    format!("; log ends:\n{log_tail}")
                };
                problems.push(format!(
                    "node {} (life {}) stopped unexpectedly: {status}{tail}",
                    record.id,
                    n + 1
                ));
            }
            Ended::KilledAfterTimeout => problems.push(format!(
                "node {} did not exit within {} s of SIGTERM and was killed",
                record.id,
                STOP_GRACE.as_secs()
            )),
            _ => {}
        }
        if inc.samples.iter().any(|s| s.line.node != record.id) {
            problems.push(format!(
                "node {} printed stats lines with another node id",
                record.id
            ));
        }
    }
    let last_inc = record.incarnations.last();
    let last = last_inc.and_then(|i| i.last());
    let exit = match last_inc.map(|i| &i.ended) {
        Some(Ended::Clean) => "ok".to_string(),
        Some(Ended::KilledAfterTimeout) => "hung, killed".to_string(),
        Some(Ended::KilledByDemo) => "killed".to_string(),
        Some(Ended::Unexpected { status, .. }) => status.clone(),
        Some(Ended::Running) | None => "?".to_string(),
    };
    NodeReport {
        id: record.id,
        values_per_s: rate.map_or(0.0, |r| r.0),
        mbit_per_s: rate.map_or(0.0, |r| r.1),
        cpu_pct: if wall_s > 0.0 {
            cpu_ms as f64 / 10.0 / wall_s
        } else {
            0.0
        },
        rss_kib_max,
        delivered_values: last.map_or(0, |l| l.delivered_values),
        order_hash: last.map_or_else(String::new, |l| l.order_hash.clone()),
        incarnations: record.incarnations.len(),
        final_seen: last_inc.is_some_and(|i| i.final_seen()),
        exit,
        bad_lines,
    }
}

/// Agreement by whole sequences: every learner printed its final line, and the learners
/// with the most values report one order hash. Returns (agree, notes, most delivered).
fn agreement_by_counts(per_node: &[NodeReport]) -> (bool, Vec<String>, u64) {
    let mut agreement = Vec::new();
    let delivered = per_node
        .iter()
        .map(|n| n.delivered_values)
        .max()
        .unwrap_or(0);
    let mut learners_agree = !per_node.is_empty();
    for n in per_node {
        if !n.final_seen {
            learners_agree = false;
            agreement.push(format!("node {} printed no final stats line", n.id));
        }
        if n.delivered_values < delivered {
            learners_agree = false;
            agreement.push(format!(
                "node {} is behind: {} values delivered, {} at the most advanced learner",
                n.id,
                group(n.delivered_values),
                group(delivered)
            ));
        }
    }
    let leaders: Vec<&NodeReport> = per_node
        .iter()
        .filter(|n| n.delivered_values == delivered)
        .collect();
    let hashes: BTreeSet<&str> = leaders.iter().map(|n| n.order_hash.as_str()).collect();
    if hashes.len() > 1 {
        learners_agree = false;
        agreement.push(format!(
            "ORDER DIFFERS: learners with {} values report different order hashes: {}",
            group(delivered),
            leaders
                .iter()
                .map(|n| format!("node {} {}", n.id, n.order_hash))
                .collect::<Vec<_>>()
                .join(", ")
        ));
    }

    (learners_agree, agreement, delivered)
}

/// Values a learner reported delivering twice, any learner, any incarnation.
fn duplicates_by_counts(run: &ClusterRun) -> (u64, Vec<String>) {
    let mut duplicates_total = 0;
    let mut duplicates = Vec::new();
    for record in &run.nodes {
        let d: u64 = record
            .incarnations
            .iter()
            .filter_map(|i| i.last())
            .map(|l| l.duplicate_deliveries)
            .sum();
        if d > 0 {
            duplicates.push(format!(
                "node {} delivered {} value(s) twice",
                record.id,
                group(d)
            ));
        }
        duplicates_total += d;
    }

    (duplicates_total, duplicates)
}

/// Values acknowledged to each origin, summed over its incarnations (each counts from zero).
fn acked_by_origin(run: &ClusterRun) -> BTreeMap<u32, u64> {
    let mut acked_by_origin: BTreeMap<u32, u64> = BTreeMap::new();
    for record in &run.nodes {
        for last in record.incarnations.iter().filter_map(|i| i.last()) {
            for (&origin, &acked) in &last.acked_by_origin {
                *acked_by_origin.entry(origin).or_default() += acked;
            }
        }
    }
    acked_by_origin
}

/// Loss: for every origin, each learner's final `delivered_by_origin` must cover what
/// that origin's incarnations reported acknowledged.
fn lost_by_counts(run: &ClusterRun, acked_by_origin: &BTreeMap<u32, u64>) -> Vec<String> {
    let mut lost = Vec::new();
    for record in &run.nodes {
        let Some(last) = record.incarnations.last().and_then(|i| i.last()) else {
            continue;
        };
        for (&origin, &acked) in acked_by_origin {
            let got = last.delivered_by_origin.get(&origin).copied().unwrap_or(0);
            if got < acked {
                lost.push(format!(
                    "node {} delivered {} values from origin {origin}, but {} were acknowledged",
                    record.id,
                    group(got),
                    group(acked)
                ));
            }
        }
    }
    lost
}

// ---- Extended Virtual Synchrony (the token ring with kills) ----------------------------

/// What Extended Virtual Synchrony promises a token ring whose members are killed and
/// restarted (`abcast demo --protocol token --kill`), checked from the delivery logs.
/// A restarted member starts a new life in a new regular configuration (Totem's
/// membership): it delivers what the ring orders from its join on, not what the others
/// delivered while it was down, so learners are not compared instance by instance but
/// against one total order:
///
/// * the members that stayed up deliver one order (the reference);
/// * a restarted member's new life delivers a contiguous run of that order, from its join
///   to the end;
/// * a killed life delivered a prefix of it (less values nobody else delivered, which EVS
///   allows a member that crashed: Agreed delivery does not wait for the others, and
///   none of them may be acknowledged);
/// * nothing acknowledged is lost at the members that stayed up;
/// * no life delivers a value twice.
#[derive(Debug, Clone, Default)]
pub struct EvsVerdict {
    /// Nodes whose one life lasted the whole run.
    pub stayed_up: Vec<u32>,
    /// Values in the reference order (the longest of theirs).
    pub order_values: u64,
    /// One line per node life: what it delivered of the order.
    pub lives: Vec<String>,
    /// Values acknowledged to their proposers (every life), all checked at the members that
    /// stayed up.
    pub acked_checked: u64,
    pub disagreements: Vec<String>,
    pub duplicates: Vec<String>,
    pub lost: Vec<String>,
}

impl EvsVerdict {
    pub fn ok(&self) -> bool {
        self.disagreements.is_empty() && self.duplicates.is_empty() && self.lost.is_empty()
    }
}

/// Whether the run's nodes ran the token ring (`protocol = "token"`).
pub fn runs_token_ring(spec: &crate::cluster::ClusterSpec) -> bool {
    spec.config_edits
        .iter()
        .any(|(k, v)| k == "protocol" && v.as_str() == Some("token"))
}

/// One delivered batch of a life's log: (origin, first value seq, values).
type Batch = (u32, u64, u64);

/// The EVS checks of [`EvsVerdict`] over `run`'s delivery logs and stats lines.
pub fn evs_verdict(run: &ClusterRun) -> EvsVerdict {
    use abcast_node::deliverylog::LearnerLog;
    let mut v = EvsVerdict::default();
    let values = |b: &[Batch]| b.iter().map(|e| e.2).sum::<u64>();
    // Each life: its batches, whether it was killed, whether it is its node's last.
    struct Life<'a> {
        log: &'a LearnerLog,
        batches: Vec<Batch>,
        killed: bool,
        last: bool,
        restarted_at_s: Option<f64>,
    }
    let mut lives: Vec<Life> = Vec::new();
    for log in &run.delivery_logs {
        let record = run.nodes.iter().find(|r| r.id == log.node);
        let incs = record.map_or(&[][..], |r| &r.incarnations[..]);
        // The record's lives in start order; the log's incarnation number is its index
        // there (the node's marker counts its starts), else matched by its stats lines.
        let inc = incs
            .iter()
            .position(|i| {
                i.samples
                    .iter()
                    .any(|s| s.line.incarnation == log.incarnation)
            })
            .or_else(|| {
                usize::try_from(log.incarnation)
                    .ok()
                    .filter(|&k| k < incs.len())
            });
        let killed = inc.is_some_and(|k| incs[k].ended == Ended::KilledByDemo);
        let last = inc.is_some_and(|k| k + 1 == incs.len());
        let restarted_at_s = inc.filter(|&k| k > 0).map(|k| incs[k].spawned_at_s);
        lives.push(Life {
            log,
            batches: log
                .entries
                .iter()
                .map(|e| (e.origin, e.first_seq, e.count))
                .collect(),
            killed,
            last,
            restarted_at_s,
        });
    }
    // No value twice within one life.
    for l in &lives {
        let mut spans: Vec<(u32, u64, u64)> = l
            .batches
            .iter()
            .map(|&(o, f, c)| (o, f, f.saturating_add(c)))
            .collect();
        spans.sort_unstable();
        if let Some(w) = spans
            .windows(2)
            .find(|w| w[0].0 == w[1].0 && w[1].1 < w[0].2)
        {
            v.duplicates.push(format!(
                "node {} (life {}) delivered values of origin {} from seq {} twice",
                l.log.node, l.log.incarnation, w[1].0, w[1].1
            ));
        }
    }
    // The members that stayed up: one life, never killed, there to the end.
    let up: Vec<&Life> = lives
        .iter()
        .filter(|l| {
            l.last
                && !l.killed
                && run
                    .nodes
                    .iter()
                    .find(|r| r.id == l.log.node)
                    .is_some_and(|r| r.incarnations.len() == 1)
        })
        .collect();
    v.stayed_up = up.iter().map(|l| l.log.node).collect();
    let Some(reference) = up.iter().max_by_key(|l| values(&l.batches)) else {
        v.disagreements
            .push("no member stayed up the whole run: nothing to compare the lives with".into());
        return v;
    };
    let order = &reference.batches;
    v.order_values = values(order);
    let position: std::collections::HashMap<(u32, u64), usize> = order
        .iter()
        .enumerate()
        .map(|(i, &(o, f, _))| ((o, f), i))
        .collect();
    if position.len() != order.len() {
        // A batch twice in the reference: reported as a duplicate above.
        return v;
    }
    let range_values = |from: usize, to: usize| values(&order[from..to]);
    for l in &lives {
        let who = format!("node {} (life {})", l.log.node, l.log.incarnation);
        // Where each batch of this life is in the order; batches the order lacks.
        let mut at: Vec<usize> = Vec::with_capacity(l.batches.len());
        let mut foreign = 0u64;
        let mut first_foreign: Option<Batch> = None;
        for b in &l.batches {
            match position.get(&(b.0, b.1)) {
                Some(&i) if order[i].2 == b.2 => at.push(i),
                Some(&i) => v.disagreements.push(format!(
                    "{who} delivered {}:{}+{}, the order has {}:{}+{}",
                    b.0, b.1, b.2, order[i].0, order[i].1, order[i].2
                )),
                None => {
                    foreign += b.2;
                    first_foreign.get_or_insert(*b);
                }
            }
        }
        if let Some(w) = at.windows(2).find(|w| w[1] != w[0] + 1) {
            let (a, b) = (&order[w[0]], &order[w[1]]);
            v.disagreements.push(format!(
                "ORDER DIFFERS: {who} delivered {}:{}+{} right after {}:{}+{}, which are {} \
                 apart in the order of the members that stayed up",
                b.0,
                b.1,
                b.2,
                a.0,
                a.1,
                a.2,
                w[1] as i64 - w[0] as i64
            ));
            continue;
        }
        let (from, to) = match (at.first(), at.last()) {
            (Some(&f), Some(&t)) => (f, t + 1),
            _ => (0, 0),
        };
        if foreign > 0 && !l.killed {
            let b = first_foreign.unwrap_or_default();
            v.disagreements.push(format!(
                "{who} delivered {foreign} values the members that stayed up never delivered \
                 (first {}:{}+{}), and it was not killed",
                b.0, b.1, b.2
            ));
        }
        let extra = if foreign > 0 {
            format!(
                ", and {} values of its own last moments nobody else delivered",
                group(foreign)
            )
        } else {
            String::new()
        };
        if l.restarted_at_s.is_none() && from != 0 {
            v.disagreements.push(format!(
                "{who} started at value {} of the order, not at its start",
                range_values(0, from) + 1
            ));
        }
        let reaches_end = to == order.len();
        if l.last && !l.killed && !reaches_end {
            v.disagreements.push(format!(
                "{who} is behind: it delivered up to value {} of the order's {}",
                group(range_values(0, to)),
                group(v.order_values)
            ));
        }
        let what = match (l.restarted_at_s, l.killed) {
            (Some(t), _) => format!(
                "restarted at {t:.1} s: values {} to {} of the order, from its join{}",
                group(range_values(0, from) + 1),
                group(range_values(0, to)),
                if reaches_end { " to the end" } else { "" }
            ),
            (None, true) => format!(
                "killed: values 1 to {} of the order (its log up to the kill){extra}",
                group(range_values(0, to))
            ),
            (None, false) => format!(
                "stayed up: all {} values of the order",
                group(range_values(0, to))
            ),
        };
        let what = if l.restarted_at_s.is_some() {
            what + &extra
        } else {
            what
        };
        v.lives.push(format!("{who}: {what}"));
    }
    // Nothing acknowledged lost at the members that stayed up: a life's acknowledged
    // values are its first ones (the ring acknowledges a member's messages in the order it
    // stamped them: when every member has them).
    let mut acked: Vec<(u32, u64, u64, u64)> = Vec::new(); // node, life, first seq, values
    for record in &run.nodes {
        for last in record.incarnations.iter().filter_map(|i| i.last()) {
            let n = last.acked_by_origin.get(&record.id).copied().unwrap_or(0);
            if let Some(start) = abcast_core::config::StartInfo::start_seq_for(last.incarnation)
                && n > 0
            {
                acked.push((record.id, last.incarnation, start, n));
            }
        }
    }
    v.acked_checked = acked.iter().map(|a| a.3).sum();
    for u in &up {
        let mut have: BTreeMap<u32, Vec<(u64, u64)>> = BTreeMap::new();
        for &(o, f, c) in &u.batches {
            have.entry(o).or_default().push((f, f.saturating_add(c)));
        }
        for spans in have.values_mut() {
            spans.sort_unstable();
        }
        let covered = |o: u32, from: u64, to: u64| -> u64 {
            let mut n = 0;
            for &(f, t) in have.get(&o).map_or(&[][..], |s| &s[..]) {
                let (a, b) = (f.max(from), t.min(to));
                if a < b {
                    n += b - a;
                }
            }
            n
        };
        for &(node, life, start, n) in &acked {
            let got = covered(node, start, start.saturating_add(n));
            if got < n {
                v.lost.push(format!(
                    "node {} (stayed up) delivered {got} of the {n} values acknowledged to \
                     node {node} (life {life})",
                    u.log.node
                ));
            }
        }
    }
    v
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::cluster::test_support::{LINE, record, run_of, sample};

    #[test]
    fn a_learner_behind_and_an_acknowledged_value_missing_are_reported() {
        let a = record(0, vec![sample(3.5, 10, LINE)]);
        let b = record(
            1,
            vec![sample(3.5, 9, &LINE.replace("\"node\":0", "\"node\":1"))],
        );
        let report = analyse(&run_of(vec![a, b]));
        assert!(!report.learners_agree);
        assert!(
            report
                .agreement
                .iter()
                .any(|m| m.contains("node 1 is behind")),
            "{:?}",
            report.agreement
        );
        // Origin 0 acknowledged 7 (reported by both nodes: 14), learners delivered 5.
        assert_eq!(report.lost.len(), 2, "{:?}", report.lost);
        assert!(!report.ok());
    }

    #[test]
    fn different_order_at_equal_counts_is_a_disagreement() {
        let a = record(0, vec![sample(3.5, 10, LINE)]);
        let other = LINE
            .replace("\"node\":0", "\"node\":1")
            .replace("\"ab\"", "\"cd\"");
        let b = record(1, vec![sample(3.5, 10, &other)]);
        let report = analyse(&run_of(vec![a, b]));
        assert!(!report.learners_agree);
        assert!(report.agreement.iter().any(|m| m.contains("ORDER DIFFERS")));
    }

    /// A token ring run with kills: node 1 stayed up; node 2 and then node 0 were killed and
    /// restarted (lives 0 and 1). `logs` per (node, life); `acked` per (node, life).
    fn token_run(logs: &[(u32, u64, &str)], acked: &[(u32, u64, u64)]) -> ClusterRun {
        use crate::cluster::Incarnation;
        let line = |node: u32, inc: u64| {
            let a = acked
                .iter()
                .find(|x| x.0 == node && x.1 == inc)
                .map_or(0, |x| x.2);
            LINE.replace("\"node\":0", &format!("\"node\":{node}"))
                .replace("\"incarnation\":0", &format!("\"incarnation\":{inc}"))
                .replace(
                    "\"acked_by_origin\":{\"0\":7}",
                    &format!("\"acked_by_origin\":{{\"{node}\":{a}}}"),
                )
        };
        let life = |node: u32, inc: u64, ended: Ended, at: f64| Incarnation {
            spawned_at_s: at,
            ended_at_s: Some(at + 1.0),
            ended,
            samples: vec![sample(at + 0.5, 1, &line(node, inc))],
            bad_lines: 0,
            first_bad_line: None,
        };
        let nodes = vec![
            NodeRecord {
                id: 0,
                incarnations: vec![
                    life(0, 0, Ended::KilledByDemo, 0.0),
                    life(0, 1, Ended::Clean, 7.0),
                ],
            },
            NodeRecord {
                id: 1,
                incarnations: vec![life(1, 0, Ended::Clean, 0.0)],
            },
            NodeRecord {
                id: 2,
                incarnations: vec![
                    life(2, 0, Ended::KilledByDemo, 0.0),
                    life(2, 1, Ended::Clean, 4.0),
                ],
            },
        ];
        let mut run = run_of(nodes);
        run.spec.kill = true;
        run.spec
            .config_edits
            .push(("protocol".into(), toml::Value::String("token".into())));
        run.delivery_logs = logs
            .iter()
            .map(|&(node, incarnation, text)| {
                let p = abcast_node::deliverylog::parse_log(text).expect("parses");
                abcast_node::deliverylog::LearnerLog {
                    node,
                    incarnation,
                    entries: p.entries,
                    skipped: Vec::new(),
                    installed: Vec::new(),
                }
            })
            .collect();
        run
    }

    /// The order node 1 (up all the time) delivered: batches of 5 from nodes 0, 1, 2 and
    /// their second lives (seqs from 2^40).
    const ORDER: &str = "1 0 1 5\n2 1 1 5\n3 2 1 5\n4 0 6 5\n5 1 6 5\n\
                         6 2 1099511627776 5\n7 1 11 5\n8 0 1099511627776 5\n9 1 16 5\n";

    #[test]
    fn token_lives_that_restarted_deliver_a_run_of_the_order_and_evs_holds() {
        let logs = [
            (1, 0, ORDER),
            // Killed after the third batch, with one of its own nobody else got.
            (2, 0, "1 0 1 5\n2 1 1 5\n3 2 1 5\n4 2 6 3\n"),
            (
                2,
                1,
                "1 0 6 5\n2 1 6 5\n3 2 1099511627776 5\n4 1 11 5\n5 0 1099511627776 5\n6 1 16 5\n",
            ),
            (
                0,
                0,
                "1 0 1 5\n2 1 1 5\n3 2 1 5\n4 0 6 5\n5 1 6 5\n6 2 1099511627776 5\n",
            ),
            (0, 1, "1 0 1099511627776 5\n2 1 16 5\n"),
        ];
        let acked = [(0, 0, 10), (1, 0, 20), (2, 0, 5), (2, 1, 5), (0, 1, 5)];
        let report = analyse(&token_run(&logs, &acked));
        let e = report.evs.as_ref().expect("a token run is held to EVS");
        assert!(e.ok() && report.ok(), "{e:?} {:?}", report.agreement);
        assert_eq!(e.stayed_up, vec![1]);
        assert_eq!(e.order_values, 45);
        assert_eq!(e.acked_checked, 45);
        assert!(
            e.lives
                .iter()
                .any(|l| l.starts_with("node 2 (life 1): restarted")
                    && l.contains("values 16 to 45")),
            "{:?}",
            e.lives
        );
    }

    #[test]
    fn token_lives_out_of_order_behind_or_missing_acknowledged_values_fail_evs() {
        // The restarted node 2 skips a batch of the order.
        let gap = [
            (1, 0, ORDER),
            (
                2,
                1,
                "1 0 6 5\n2 2 1099511627776 5\n3 1 11 5\n4 0 1099511627776 5\n5 1 16 5\n",
            ),
        ];
        let e = evs_verdict(&token_run(&gap, &[]));
        assert!(
            e.disagreements.iter().any(|d| d.contains("ORDER DIFFERS")),
            "{e:?}"
        );
        // Node 0's last life never caught up; its first had a batch the order lacks and
        // was not killed... (life 1 of node 0 is its last, not killed).
        let behind = [(1, 0, ORDER), (0, 1, "1 0 1099511627776 5\n2 9 1 1\n")];
        let e = evs_verdict(&token_run(&behind, &[]));
        assert!(
            e.disagreements
                .iter()
                .any(|d| d.contains("never delivered")),
            "{e:?}"
        );
        // Node 1 (up all the time) misses values acknowledged to node 0.
        let lost = [(1, 0, ORDER)];
        let e = evs_verdict(&token_run(&lost, &[(0, 0, 11)]));
        assert_eq!(e.lost.len(), 1, "{e:?}");
        // A value twice in one life.
        let dup = [(1, 0, "1 0 1 5\n2 0 3 5\n")];
        let e = evs_verdict(&token_run(&dup, &[]));
        assert_eq!(e.duplicates.len(), 1, "{e:?}");
    }

    #[test]
    fn the_timeline_carries_each_seconds_latency() {
        let lat = |p50: f64, p99: f64| {
            Some(stats::IntervalLatency {
                count: 10,
                p50_us: p50,
                p99_us: p99,
            })
        };
        let with = |at_s: f64, delivered: u64, l| Sample {
            interval_latency: l,
            ..sample(at_s, delivered, LINE)
        };
        let a = record(
            0,
            vec![
                with(0.2, 0, lat(100.0, 900.0)),
                with(0.7, 50, lat(300.0, 400.0)),
                with(1.5, 100, None),
            ],
        );
        let b = record(1, vec![with(0.5, 0, lat(200.0, 2_000.0))]);
        let rows = timeline(&run_of(vec![a, b]));
        assert_eq!(
            rows[0].latency_us_p50,
            Some(200.0),
            "the median of 100, 300, 200"
        );
        assert_eq!(rows[0].latency_us_p99, Some(2_000.0), "the worst interval");
        assert_eq!(rows[1].latency_us_p50, None, "no interval with samples");
    }
}
