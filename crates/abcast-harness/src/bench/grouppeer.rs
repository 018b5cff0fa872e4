//! `abcast bench group-peer` (issue 18): the same 3-member group workload through abcast's
//! token ring with process groups and through Corosync 3 CPG (`corosync.rs`), side by
//! side: 1 KB agreed messages, one and three senders, messages per second and latency.
//!
//! Both run on the same kind of network: three network namespaces on one bridge, no
//! shaping (`lan::EmulatedLan::create_unshaped`), one member per namespace, as separate
//! processes the way their users run them: a daemon per member (`abcast node`,
//! `corosync`), and client processes that talk to their member's daemon (`abcast
//! multicast` / `abcast listen` over the client port; cpgbench over libcpg's IPC). Every
//! member has a receiving client; with one sender member 0's client also sends, with three
//! every member's does. Each message carries its sender's tag, sequence number and send
//! time (CLOCK_MONOTONIC, one clock for every namespace of the host); each receiver counts
//! the messages of the measured window, their latency, per-sender order and a digest of
//! the order it delivered them in.
//!
//! Corosync runs twice per point: tuned for throughput (`CorosyncTuning::tuned`: udpu,
//! jumbo totem packets, a larger token window) and as installed (`defaults`: knet); the
//! ratios are given against both. The runs are interleaved (abcast, Corosync tuned,
//! Corosync defaults, abcast, ...), so the drift of a shared machine spreads over all;
//! medians of `--runs` are reported. Without root, or
//! without the corosync packages, the abcast side runs alone and the summary says how to
//! install the peer.

use super::BenchArgs;
use super::corosync::{self, CorosyncTuning, CpgFigures, CpgSpec, Proc, spawn_in_netns};
use super::lan::{EmulatedLan, LAN_MTU_BYTES};
use super::output::{command_line, create_out_dir, finish, write_file};
use crate::error::HarnessError;
use crate::format::{group, utc_now};
use crate::plot::{self, Line, LinePanel};
use abcast_core::NodeId;
use abcast_node::client::Client;
use abcast_node::stats::median;
use serde_json::{Value, json};
use std::ffi::OsStr;
use std::fmt::Write as _;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

/// Members of the group, as the issue asks.
pub const MEMBERS: usize = 3;
/// Bytes per message.
pub const MESSAGE_BYTES: usize = 1024;
/// The sender counts compared.
pub const SENDERS: [usize; 2] = [1, 3];
const GROUP: &str = "bench";
const PEER_PORT: u16 = 7400;
const CLIENT_PORT: u16 = 7500;
const MULTICAST_GROUP: &str = "239.255.78.1:31800";
/// The LAN tags, apart from Corosync's.
const LAN_TAG: &str = "agp";
/// The nodes' bound on what waits for one client (`[transport] client_queue_bytes`, 16 MiB
/// by default): 64 MiB.
const LISTENER_QUEUE_BYTES: usize = 64 << 20;
/// `[multicast] segment_bytes`: a jumbo frame's UDP payload (the LAN's MTU less 28 bytes of
/// IP and UDP header), so a 60,000-byte value leaves as 7 segments in one GSO send.
const SEGMENT_BYTES: usize = LAN_MTU_BYTES as usize - 28;
/// How long the ring may take to form before a run fails.
const FORM_TIMEOUT: Duration = Duration::from_secs(20);

/// One abcast run.
#[derive(Debug, Clone)]
pub struct AbcastSpec {
    pub senders: usize,
    pub message_bytes: usize,
    pub duration_s: f64,
    pub warmup_s: f64,
    /// The ring's data message payload (`[token] max_message_bytes`): a client's messages
    /// are packed into values of this size.
    pub max_message_bytes: usize,
    /// Where the config, the logs and the clients' output go.
    pub out_dir: PathBuf,
    /// How the clients reach their member.
    pub channel: ClientChannel,
    /// `[multicast] segment_bytes`: 0 sends each value whole, for IP to fragment.
    pub segment_bytes: usize,
}

/// How a bench client reaches its member's daemon.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ClientChannel {
    /// The member's client port.
    Tcp,
    /// Its Unix client socket (`client_path`, `unix:PATH`).
    Unix,
    /// The shared-memory rings behind that socket (`shm:PATH`; `runtime::shm`), the
    /// counterpart of Corosync's IPC through libqb's shared memory.
    Shm,
}

impl AbcastSpec {
    /// Member `i`'s client socket: in the temporary directory, whose path is short (a
    /// Unix socket path holds at most 107 bytes), named by this process.
    pub fn client_path(&self, i: usize) -> PathBuf {
        std::env::temp_dir().join(format!("abcast-gp-{}-{i}.sock", std::process::id()))
    }
}

/// What one abcast run measured (the receivers' medians).
#[derive(Debug, Clone, PartialEq)]
pub struct AbcastFigures {
    pub msgs_per_s: f64,
    pub mbit_per_s: f64,
    pub latency_us_p50: f64,
    pub latency_us_p99: f64,
    pub sent_msgs_per_s: f64,
    pub order_violations: u64,
    /// Every receiver delivered the messages in one order (equal digests).
    pub total_order_agrees: bool,
}

/// The receivers' JSON lines (`abcast listen --stats`) and the senders' (`abcast
/// multicast --json`) as figures.
pub fn abcast_figures(
    listeners: &[Value],
    senders: &[Value],
    secs: f64,
) -> Result<AbcastFigures, String> {
    let num = |v: &Value, k: &str| -> Result<f64, String> {
        v.get(k)
            .and_then(Value::as_f64)
            .ok_or_else(|| format!("a listener's line lacks {k}: {v}"))
    };
    let mut rate = Vec::new();
    let mut mbit = Vec::new();
    let mut p50 = Vec::new();
    let mut p99 = Vec::new();
    let mut violations = 0u64;
    let mut digests = Vec::new();
    for l in listeners {
        rate.push(num(l, "msgs_per_s")?);
        mbit.push(num(l, "mbit_per_s")?);
        p50.push(num(l, "latency_us_p50")?);
        p99.push(num(l, "latency_us_p99")?);
        violations += l
            .get("order_violations")
            .and_then(Value::as_u64)
            .unwrap_or(0);
        digests.push(l.get("order_digest").cloned().unwrap_or(Value::Null));
    }
    let sent: f64 = senders
        .iter()
        .filter_map(|s| s.get("sent").and_then(Value::as_f64))
        .sum();
    let m = |v: &[f64]| median(v).ok_or_else(|| "no listener reported".to_string());
    Ok(AbcastFigures {
        msgs_per_s: m(&rate)?,
        mbit_per_s: m(&mbit)?,
        latency_us_p50: m(&p50)?,
        latency_us_p99: m(&p99)?,
        sent_msgs_per_s: sent / secs.max(1e-9),
        order_violations: violations,
        total_order_agrees: digests.windows(2).all(|w| w[0] == w[1]),
    })
}

/// The cluster config of the three members on `lan`.
pub fn abcast_config(lan: &EmulatedLan, spec: &AbcastSpec) -> String {
    let mut s = format!(
        "cluster_id = 2718\nprotocol = \"token\"\n[storage]\ndir = \"{}\"\n",
        spec.out_dir.join("data").display()
    );
    for (i, n) in lan.nodes.iter().enumerate() {
        let _ = write!(
            s,
            "[[members]]\nid = {i}\naddr = \"{}:{PEER_PORT}\"\nclient_addr = \"{}:{CLIENT_PORT}\"\n\
             client_path = \"{}\"\n",
            n.addr,
            n.addr,
            spec.client_path(i).display()
        );
    }
    let _ = write!(
        s,
        "[token]\nprocess_groups = true\nmax_message_bytes = {}\n\
         [multicast]\ngroup = \"{MULTICAST_GROUP}\"\ninterface = \"0.0.0.0\"\n\
         # Each member has a namespace (a host) of its own: no copy need loop back.\n\
         loop = false\n\
         # Values of 60,000 bytes leave as jumbo-frame segments in one GSO send.\n\
         segment_bytes = {}\n\
         # A listener the scheduler leaves behind for a moment (nine busy processes on\n\
         # two cores) has room to catch up before its node closes it as too slow.\n\
         [transport]\nclient_queue_bytes = {}\n",
        spec.max_message_bytes, spec.segment_bytes, LISTENER_QUEUE_BYTES
    );
    s
}

fn os(s: &str) -> &OsStr {
    OsStr::new(s)
}

/// Runs the workload once through three fresh `abcast node`s and returns the figures.
pub fn run_abcast_workload(spec: &AbcastSpec) -> Result<AbcastFigures, String> {
    std::fs::create_dir_all(&spec.out_dir)
        .map_err(|e| format!("cannot create {}: {e}", spec.out_dir.display()))?;
    let exe = std::env::current_exe().map_err(|e| format!("cannot find this program: {e}"))?;
    let exe = exe.as_os_str();
    let lan = EmulatedLan::create_unshaped(LAN_TAG, MEMBERS)?;
    let config = spec.out_dir.join("cluster.toml");
    std::fs::write(&config, abcast_config(&lan, spec))
        .map_err(|e| format!("cannot write {}: {e}", config.display()))?;
    let log = |what: &str, i: usize, ext: &str| spec.out_dir.join(format!("{what}-{i}.{ext}"));
    let mut nodes: Vec<Proc> = Vec::new();
    for (i, n) in lan.nodes.iter().enumerate() {
        let id = i.to_string();
        nodes.push(spawn_in_netns(
            format!("abcast node {i}"),
            &n.netns,
            &[
                exe,
                os("node"),
                os("--config"),
                config.as_os_str(),
                os("--id"),
                os(&id),
            ],
            &log("node", i, "out"),
            &log("node", i, "err"),
        )?);
    }
    let tcp_client = |i: usize| format!("{}:{CLIENT_PORT}", lan.nodes[i].addr);
    wait_for_ring(
        &(0..MEMBERS).map(tcp_client).collect::<Vec<_>>(),
        &mut nodes,
    )?;
    let client = |i: usize| match spec.channel {
        ClientChannel::Tcp => tcp_client(i),
        ClientChannel::Unix => format!("unix:{}", spec.client_path(i).display()),
        ClientChannel::Shm => format!("shm:{}", spec.client_path(i).display()),
    };
    let listen_s = format!("{:.3}", spec.warmup_s + spec.duration_s + 3.0);
    let send_s = format!("{:.3}", spec.warmup_s + spec.duration_s);
    let warmup = format!("{:.3}", spec.warmup_s);
    let size = spec.message_bytes.to_string();
    let mut listeners = Vec::new();
    for (i, n) in lan.nodes.iter().enumerate() {
        let node = client(i);
        listeners.push(spawn_in_netns(
            format!("abcast listen at member {i}"),
            &n.netns,
            &[
                exe,
                os("listen"),
                os("--node"),
                os(&node),
                os("--group"),
                os(GROUP),
                os("--stats"),
                os("--duration"),
                os(&listen_s),
                os("--warmup"),
                os(&warmup),
            ],
            &log("listen", i, "json"),
            &log("listen", i, "err"),
        )?);
    }
    // The listeners are on before the first message.
    std::thread::sleep(Duration::from_millis(300));
    let mut senders = Vec::new();
    for (i, n) in lan.nodes.iter().enumerate().take(spec.senders) {
        let node = client(i);
        let tag = i.to_string();
        senders.push(spawn_in_netns(
            format!("abcast multicast at member {i}"),
            &n.netns,
            &[
                exe,
                os("multicast"),
                os("--node"),
                os(&node),
                os("--group"),
                os(GROUP),
                os("--duration"),
                os(&send_s),
                os("--size"),
                os(&size),
                // The CLI's default: 4 MiB of messages in flight per sender. The whole
                // ring's in-flight messages reach every listener, whose queue at its node
                // is bounded (16 MiB, then it is closed as too slow): with 64 MiB per
                // sender three senders outran the listeners' flow control.
                os("--window"),
                os("4096"),
                os("--tag"),
                os(&tag),
                os("--json"),
            ],
            &log("multicast", i, "json"),
            &log("multicast", i, "err"),
        )?);
    }
    let limit = Instant::now() + Duration::from_secs_f64(spec.warmup_s + spec.duration_s + 60.0);
    for (what, procs) in [("sender", &mut senders), ("listener", &mut listeners)] {
        for (i, p) in procs.iter_mut().enumerate() {
            loop {
                if let Some(st) = p.poll() {
                    if !st.success() {
                        let kind = if what == "sender" {
                            "multicast"
                        } else {
                            "listen"
                        };
                        return Err(format!(
                            "the {what} at member {i} failed ({st}); see {}",
                            log(kind, i, "err").display()
                        ));
                    }
                    break;
                }
                if Instant::now() > limit || corosync::interrupted() {
                    return Err(format!("the {what} at member {i} did not finish"));
                }
                std::thread::sleep(Duration::from_millis(50));
            }
        }
    }
    let last_line = |path: PathBuf| -> Result<Value, String> {
        let text = std::fs::read_to_string(&path)
            .map_err(|e| format!("cannot read {}: {e}", path.display()))?;
        let line = text.lines().last().unwrap_or("");
        serde_json::from_str(line).map_err(|e| format!("{}: {e}: {line:?}", path.display()))
    };
    let l: Vec<Value> = (0..MEMBERS)
        .map(|i| last_line(log("listen", i, "json")))
        .collect::<Result<_, _>>()?;
    let s: Vec<Value> = (0..spec.senders)
        .map(|i| last_line(log("multicast", i, "json")))
        .collect::<Result<_, _>>()?;
    let secs = s
        .iter()
        .filter_map(|v| v.get("seconds").and_then(Value::as_f64))
        .fold(0.0, f64::max);
    // Stop the daemons before the LAN goes (drop order: nodes, then the LAN).
    drop(nodes);
    drop(lan);
    abcast_figures(&l, &s, secs)
}

/// Waits until every member's status names member 0 as the ring's representative: the
/// ring of all three is formed.
fn wait_for_ring(clients: &[String], nodes: &mut [Proc]) -> Result<(), String> {
    let end = Instant::now() + FORM_TIMEOUT;
    loop {
        for (i, p) in nodes.iter_mut().enumerate() {
            if let Some(st) = p.poll() {
                return Err(format!(
                    "abcast node {i} exited ({st}) before the ring formed"
                ));
            }
        }
        let formed = clients.iter().all(|a| {
            Client::connect(a)
                .and_then(|mut c| c.status(Duration::from_secs(2)))
                .is_ok_and(|r| r.leader == Some(NodeId(0)))
        });
        if formed {
            return Ok(());
        }
        if Instant::now() > end {
            return Err(format!(
                "the ring of {MEMBERS} did not form within {} s",
                FORM_TIMEOUT.as_secs()
            ));
        }
        std::thread::sleep(Duration::from_millis(100));
    }
}

/// One sitting's figures of both systems at one sender count.
#[derive(Debug, Default, Clone)]
struct Point {
    senders: usize,
    abcast: Vec<Result<AbcastFigures, String>>,
    /// Corosync tuned for throughput, and as installed.
    corosync: Vec<Result<CpgFigures, String>>,
    corosync_default: Vec<Result<CpgFigures, String>>,
}

fn med(v: impl Iterator<Item = f64>) -> Option<f64> {
    let v: Vec<f64> = v.collect();
    median(&v)
}

impl Point {
    fn abcast_med(&self, f: impl Fn(&AbcastFigures) -> f64) -> Option<f64> {
        med(self.abcast.iter().filter_map(|r| r.as_ref().ok()).map(f))
    }
    fn corosync_med(&self, f: impl Fn(&CpgFigures) -> f64) -> Option<f64> {
        med(self.corosync.iter().filter_map(|r| r.as_ref().ok()).map(f))
    }
    fn default_med(&self, f: impl Fn(&CpgFigures) -> f64) -> Option<f64> {
        med(self
            .corosync_default
            .iter()
            .filter_map(|r| r.as_ref().ok())
            .map(f))
    }
    /// abcast's msgs/s over tuned Corosync's.
    fn ratio(&self) -> Option<f64> {
        Some(self.abcast_med(|f| f.msgs_per_s)? / self.corosync_med(|f| f.msgs_per_s)?)
    }
    /// abcast's msgs/s over Corosync's as installed.
    fn ratio_default(&self) -> Option<f64> {
        Some(self.abcast_med(|f| f.msgs_per_s)? / self.default_med(|f| f.msgs_per_s)?)
    }
}

fn opt(v: Option<f64>, f: impl Fn(f64) -> String) -> String {
    v.map_or("-".to_string(), f)
}

/// `abcast bench group-peer`.
pub fn run(args: &BenchArgs) -> Result<u8, HarnessError> {
    // SAFETY: geteuid(2) has no preconditions.
    if unsafe { libc::geteuid() } != 0 {
        return Err(HarnessError::Usage(
            "bench group-peer runs each member in a network namespace: run it as root".into(),
        ));
    }
    let (stamp, date) = utc_now();
    let out = create_out_dir(args, "group-peer", &stamp)?;
    let peer = corosync::cpg_available();
    if let Err(why) = &peer {
        eprintln!("group-peer: Corosync CPG is not available, abcast runs alone: {why}");
    }
    let max_message_bytes = 60_000;
    let mut points: Vec<Point> = SENDERS
        .iter()
        .map(|&s| Point {
            senders: s,
            ..Point::default()
        })
        .collect();
    let warmup_s = 1.0;
    'runs: for run in 1..=args.runs {
        for p in points.iter_mut() {
            if corosync::interrupted() {
                break 'runs;
            }
            let label = format!("run {run}, {} sender(s)", p.senders);
            let spec = AbcastSpec {
                senders: p.senders,
                message_bytes: MESSAGE_BYTES,
                duration_s: args.duration_s,
                warmup_s,
                max_message_bytes,
                out_dir: out.join(format!("abcast-s{}-r{run}", p.senders)),
                channel: ClientChannel::Shm,
                segment_bytes: SEGMENT_BYTES,
            };
            let a = run_abcast_workload(&spec);
            match &a {
                Ok(f) => eprintln!(
                    "{label}: abcast {} msgs/s, p50 {:.1} ms",
                    group(f.msgs_per_s.round() as u64),
                    f.latency_us_p50 / 1000.0
                ),
                Err(e) => eprintln!("{label}: abcast failed: {e}"),
            }
            p.abcast.push(a);
            if peer.is_ok() {
                for (name, tuning) in [
                    ("tuned", CorosyncTuning::tuned()),
                    ("defaults", CorosyncTuning::defaults()),
                ] {
                    let mut cs = CpgSpec::new(
                        p.senders,
                        args.duration_s,
                        out.join(format!("corosync-{name}-s{}-r{run}", p.senders)),
                    );
                    cs.warmup_s = warmup_s;
                    cs.tuning = tuning;
                    let c = corosync::run_cpg_workload(&cs);
                    match &c {
                        Ok(f) => eprintln!(
                            "{label}: corosync ({name}) {} msgs/s, p50 {:.1} ms",
                            group(f.msgs_per_s.round() as u64),
                            f.latency_us_p50 / 1000.0
                        ),
                        Err(e) => eprintln!("{label}: corosync ({name}) failed: {e}"),
                    }
                    if name == "tuned" {
                        p.corosync.push(c);
                    } else {
                        p.corosync_default.push(c);
                    }
                }
            }
        }
    }
    write_csv(&out.join("results.csv"), &points)?;
    write_plot(&out.join("plot.png"), &points);
    let summary = summary(args, &points, &date, &peer, max_message_bytes);
    write_file(&out.join("summary.md"), &summary)?;
    let all_ok = points.iter().all(|p| {
        p.abcast.iter().all(|r| {
            r.as_ref()
                .is_ok_and(|f| f.order_violations == 0 && f.total_order_agrees)
        }) && p
            .corosync
            .iter()
            .chain(&p.corosync_default)
            .all(Result::is_ok)
    });
    let one = &points[0];
    finish(
        args,
        || {
            json!({
                "bench": "group-peer",
                "runs": args.runs,
                "duration_s": args.duration_s,
                "message_bytes": MESSAGE_BYTES,
                "abcast_msgs_per_s": one.abcast_med(|f| f.msgs_per_s),
                "corosync_msgs_per_s": one.corosync_med(|f| f.msgs_per_s),
                "corosync_default_msgs_per_s": one.default_med(|f| f.msgs_per_s),
                "ratio": one.ratio(),
                "ratio_default": one.ratio_default(),
                "points": points.iter().map(|p| json!({
                    "senders": p.senders,
                    "abcast_msgs_per_s": p.abcast_med(|f| f.msgs_per_s),
                    "corosync_msgs_per_s": p.corosync_med(|f| f.msgs_per_s),
                    "corosync_default_msgs_per_s": p.default_med(|f| f.msgs_per_s),
                    "ratio": p.ratio(),
                    "ratio_default": p.ratio_default(),
                    "abcast_latency_us_p50": p.abcast_med(|f| f.latency_us_p50),
                    "corosync_latency_us_p50": p.corosync_med(|f| f.latency_us_p50),
                    "abcast_latency_us_p99": p.abcast_med(|f| f.latency_us_p99),
                    "corosync_latency_us_p99": p.corosync_med(|f| f.latency_us_p99),
                    "abcast_runs_ok": p.abcast.iter().filter(|r| r.is_ok()).count(),
                    "corosync_runs_ok": p.corosync.iter().filter(|r| r.is_ok()).count(),
                    "corosync_default_runs_ok":
                        p.corosync_default.iter().filter(|r| r.is_ok()).count(),
                })).collect::<Vec<_>>(),
                "peer_available": peer.is_ok(),
                "out_dir": out.display().to_string(),
                "all_runs_ok": all_ok,
            })
        },
        || format!("{summary}\nResults in {}\n", out.display()),
        all_ok,
    )
}

/// The figures one CSV row holds, whichever system measured them.
struct Row {
    msgs_per_s: f64,
    mbit_per_s: f64,
    latency_us_p50: f64,
    latency_us_p99: f64,
    order_violations: u64,
    total_order_agrees: bool,
}

/// A CSV row from either system's figures, which name these fields alike.
macro_rules! row_from {
    ($($figures:ty),*) => {$(
        impl From<&$figures> for Row {
            fn from(f: &$figures) -> Row {
                Row {
                    msgs_per_s: f.msgs_per_s,
                    mbit_per_s: f.mbit_per_s,
                    latency_us_p50: f.latency_us_p50,
                    latency_us_p99: f.latency_us_p99,
                    order_violations: f.order_violations,
                    total_order_agrees: f.total_order_agrees,
                }
            }
        }
    )*};
}
row_from!(AbcastFigures, CpgFigures);

fn csv_row(s: &mut String, system: &str, senders: usize, run: usize, r: Result<Row, &String>) {
    let _ = match r {
        Ok(f) => writeln!(
            s,
            "{system},{senders},{run},{:.1},{:.1},{:.0},{:.0},{},{},",
            f.msgs_per_s,
            f.mbit_per_s,
            f.latency_us_p50,
            f.latency_us_p99,
            f.order_violations,
            f.total_order_agrees
        ),
        Err(e) => writeln!(s, "{system},{senders},{run},,,,,,,{e:?}"),
    };
}

fn write_csv(path: &Path, points: &[Point]) -> Result<(), HarnessError> {
    let mut s = String::from(
        "system,senders,run,msgs_per_s,mbit_per_s,latency_us_p50,latency_us_p99,\
         order_violations,total_order_agrees,error\n",
    );
    for p in points {
        for (k, r) in p.abcast.iter().enumerate() {
            csv_row(
                &mut s,
                "abcast",
                p.senders,
                k + 1,
                r.as_ref().map(Row::from),
            );
        }
        for (system, runs) in [
            ("corosync-tuned", &p.corosync),
            ("corosync-defaults", &p.corosync_default),
        ] {
            for (k, r) in runs.iter().enumerate() {
                csv_row(&mut s, system, p.senders, k + 1, r.as_ref().map(Row::from));
            }
        }
    }
    write_file(path, &s)
}

fn write_plot(path: &Path, points: &[Point]) {
    let line = |label: &str, f: &dyn Fn(&Point) -> Option<f64>| Line {
        label: label.to_string(),
        points: points
            .iter()
            .filter_map(|p| Some((p.senders as f64, f(p)?)))
            .collect(),
        markers: true,
    };
    let panels = vec![
        LinePanel {
            caption: "messages per second delivered (median of the members)".into(),
            x_desc: "senders".into(),
            y_desc: "msgs/s".into(),
            lines: vec![
                line("abcast token ring", &|p| p.abcast_med(|f| f.msgs_per_s)),
                line("Corosync CPG, tuned", &|p| p.corosync_med(|f| f.msgs_per_s)),
                line("Corosync CPG, defaults", &|p| {
                    p.default_med(|f| f.msgs_per_s)
                }),
            ],
        },
        LinePanel {
            caption: "latency, send to delivery, p50 (ms)".into(),
            x_desc: "senders".into(),
            y_desc: "ms".into(),
            lines: vec![
                line("abcast token ring", &|p| {
                    p.abcast_med(|f| f.latency_us_p50 / 1000.0)
                }),
                line("Corosync CPG, tuned", &|p| {
                    p.corosync_med(|f| f.latency_us_p50 / 1000.0)
                }),
                line("Corosync CPG, defaults", &|p| {
                    p.default_med(|f| f.latency_us_p50 / 1000.0)
                }),
            ],
        },
    ];
    let title = format!(
        "group-peer: {MEMBERS} members, {} B agreed messages, abcast vs Corosync CPG",
        MESSAGE_BYTES
    );
    if let Err(e) = plot::draw_lines(path, &title, &panels) {
        eprintln!("group-peer: no plot: {e}");
    }
}

fn summary(
    args: &BenchArgs,
    points: &[Point],
    date: &str,
    peer: &Result<(), String>,
    max_message_bytes: usize,
) -> String {
    let mut s = String::from("# abcast bench group-peer\n\n");
    let _ = writeln!(
        s,
        "The same {MEMBERS}-member workload through abcast's token ring (process groups) and \
         Corosync 3 CPG: {MESSAGE_BYTES}-byte agreed messages, one and three senders.\n"
    );
    let _ = writeln!(s, "- Command: `{}`", command_line());
    let _ = writeln!(s, "- Date: {date}");
    let _ = writeln!(s, "- Machine: {}", super::machine());
    let _ = writeln!(
        s,
        "- Each member in a network namespace of its own on one bridge (no shaping, {LAN_MTU_BYTES}-byte \
         MTU, the host's netfilter not called for bridged frames); a daemon \
         and a receiving client per member, sending clients at the first one or all three; \
         {} s measured after 1 s of warm-up, {} run(s) per point, abcast and Corosync \
         interleaved; medians below.",
        args.duration_s, args.runs
    );
    let _ = writeln!(
        s,
        "- abcast: `protocol = \"token\"`, `process_groups = true`, `max_message_bytes = \
         {max_message_bytes}` (a client's messages packed into values of that size), data by \
         IP multicast (`loop = false`: a member per host; `segment_bytes = {SEGMENT_BYTES}`: a \
         value leaves as jumbo-frame segments in one UDP GSO send), `abcast multicast` / \
         `abcast listen --stats` through shared-memory rings behind each member's Unix \
         client socket (`shm:` + `client_path`, rings of `client_shm_bytes` = 4 MiB: the \
         counterpart of Corosync's shared-memory IPC; no body checksum on one host), \
         `client_queue_bytes = {LISTENER_QUEUE_BYTES}`."
    );
    match peer {
        Ok(()) => {
            let tuning = points
                .iter()
                .flat_map(|p| p.corosync.iter())
                .find_map(|r| r.as_ref().ok().map(|f| f.tuning.clone()))
                .unwrap_or_default();
            let _ = writeln!(
                s,
                "- Corosync: tuned ({tuning}) and as installed ({}); cpgbench \
                 (tools/cpg-bench) over libcpg, `CPG_TYPE_AGREED`.\n",
                CorosyncTuning::defaults().describe()
            );
        }
        Err(why) => {
            let _ = writeln!(
                s,
                "- Corosync CPG did not run: {why}. Install it with `{}` and run the bench \
                 again.\n",
                corosync::CPG_INSTALL_HINT
            );
        }
    }
    s.push_str(
        "| senders | abcast msgs/s | Corosync tuned | ratio | Corosync defaults | ratio | \
         p50 abcast / tuned / defaults | p99 abcast / tuned / defaults | runs ok |\n\
         | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |\n",
    );
    let ms = |v: f64| format!("{:.1}", v / 1000.0);
    let rate = |v: f64| group(v.round() as u64);
    let ok = |v: &[Result<CpgFigures, String>]| v.iter().filter(|r| r.is_ok()).count();
    for p in points {
        let _ = writeln!(
            s,
            "| {} | {} | {} | {} | {} | {} | {} / {} / {} ms | {} / {} / {} ms | {}, {}, {} of {} |",
            p.senders,
            opt(p.abcast_med(|f| f.msgs_per_s), rate),
            opt(p.corosync_med(|f| f.msgs_per_s), rate),
            opt(p.ratio(), |v| format!("{v:.1}x")),
            opt(p.default_med(|f| f.msgs_per_s), rate),
            opt(p.ratio_default(), |v| format!("{v:.1}x")),
            opt(p.abcast_med(|f| f.latency_us_p50), ms),
            opt(p.corosync_med(|f| f.latency_us_p50), ms),
            opt(p.default_med(|f| f.latency_us_p50), ms),
            opt(p.abcast_med(|f| f.latency_us_p99), ms),
            opt(p.corosync_med(|f| f.latency_us_p99), ms),
            opt(p.default_med(|f| f.latency_us_p99), ms),
            p.abcast.iter().filter(|r| r.is_ok()).count(),
            ok(&p.corosync),
            ok(&p.corosync_default),
            p.abcast.len(),
        );
    }
    let failures: Vec<String> = points
        .iter()
        .flat_map(|p| {
            let a = p.abcast.iter().enumerate().filter_map(move |(k, r)| {
                r.as_ref()
                    .err()
                    .map(|e| format!("abcast, {} sender(s), run {}: {}", p.senders, k + 1, e))
            });
            let c = p.corosync.iter().enumerate().filter_map(move |(k, r)| {
                r.as_ref().err().map(|e| {
                    format!(
                        "Corosync tuned, {} sender(s), run {}: {}",
                        p.senders,
                        k + 1,
                        e
                    )
                })
            });
            let d = p
                .corosync_default
                .iter()
                .enumerate()
                .filter_map(move |(k, r)| {
                    r.as_ref().err().map(|e| {
                        format!(
                            "Corosync defaults, {} sender(s), run {}: {}",
                            p.senders,
                            k + 1,
                            e
                        )
                    })
                });
            a.chain(c).chain(d)
        })
        .collect();
    if !failures.is_empty() {
        s.push_str("\n## Failed runs\n\n");
        for f in failures {
            let _ = writeln!(s, "- {}", f.lines().next().unwrap_or(""));
        }
    }
    let bad_order = points.iter().flat_map(|p| p.abcast.iter()).any(|r| {
        r.as_ref()
            .is_ok_and(|f| f.order_violations > 0 || !f.total_order_agrees)
    });
    if bad_order {
        s.push_str(
            "\n**An abcast run broke per-sender order or the receivers' total order** (see \
             results.csv).\n",
        );
    }
    s
}

#[cfg(test)]
mod tests {
    use super::*;

    fn listener(rate: f64, p50: f64, digest: &str) -> Value {
        json!({"msgs_per_s": rate, "mbit_per_s": rate * 8192.0 / 1e6, "latency_us_p50": p50,
               "latency_us_p99": p50 * 3.0, "order_violations": 0, "order_digest": digest})
    }

    #[test]
    fn figures_are_the_receivers_medians_and_the_order_is_compared() {
        let l = [
            listener(100.0, 10.0, "a"),
            listener(300.0, 30.0, "a"),
            listener(200.0, 20.0, "a"),
        ];
        let s = [json!({"sent": 1000.0, "seconds": 5.0})];
        let f = abcast_figures(&l, &s, 5.0).unwrap();
        assert_eq!(f.msgs_per_s, 200.0);
        assert_eq!(f.latency_us_p50, 20.0);
        assert_eq!(f.sent_msgs_per_s, 200.0);
        assert!(f.total_order_agrees);
        let mut l2 = l.clone();
        l2[1] = listener(300.0, 30.0, "b");
        assert!(!abcast_figures(&l2, &s, 5.0).unwrap().total_order_agrees);
        assert!(abcast_figures(&[json!({})], &s, 5.0).is_err());
        assert!(abcast_figures(&[], &s, 5.0).is_err());
    }

    #[test]
    fn the_ratio_needs_both_systems() {
        let mut p = Point {
            senders: 1,
            ..Point::default()
        };
        p.abcast.push(Ok(AbcastFigures {
            msgs_per_s: 400_000.0,
            mbit_per_s: 0.0,
            latency_us_p50: 0.0,
            latency_us_p99: 0.0,
            sent_msgs_per_s: 0.0,
            order_violations: 0,
            total_order_agrees: true,
        }));
        assert_eq!(p.ratio(), None);
    }
}
