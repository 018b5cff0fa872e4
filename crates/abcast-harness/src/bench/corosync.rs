//! Corosync 3 CPG under the `group-peer` workload (issue 18): the competitor's half.
//!
//! Three members, each in a network namespace of an unshaped [`EmulatedLan`] (veth pairs to
//! a bridge, jumbo frames), each running its own corosync (`corosync -f -c CONF`) and one
//! `cpgbench` process (`tools/cpg-bench/cpgbench.c`, embedded here and compiled against
//! libcpg into the run's directory). Members `0..senders` multicast `message_bytes`-byte
//! `CPG_TYPE_AGREED` messages as fast as Corosync takes them; every member receives every
//! message, checks per-sender order and measures the delivery latency from the send time
//! in the message (`CLOCK_MONOTONIC`, one clock for every namespace of the host). Rates
//! and latencies count only what is delivered in the measure window, after a warm-up.
//!
//! Several corosync on one host: corosync 3 takes its lock at the fixed path
//! `/var/run/corosync.pid`, so each instance runs in the mount namespace `ip netns exec`
//! makes for it, with a private tmpfs on `/run`; its state directory (`system.state_dir`)
//! and log file are in the member's directory. Its IPC (libqb) listens on abstract unix
//! sockets, which belong to the network namespace, so each member's `cpgbench` reaches its
//! own corosync; libqb's shared-memory files in `/dev/shm` carry process ids, so they do
//! not clash either. A corosync the Debian package started on the host is left alone.
//!
//! Every process and the LAN are removed when the run ends, fails or is interrupted
//! (SIGINT, SIGTERM); the configurations and logs stay in the member directories of
//! `out_dir`, and an error names them. The first run registers SIGINT and SIGTERM handlers
//! that set [`interrupted`] for the rest of the process's life. Should the process be
//! killed outright, its children get SIGTERM from the kernel (`PR_SET_PDEATHSIG`) and the
//! next run with the same LAN tag removes the namespaces left behind.

use super::lan::EmulatedLan;
use abcast_node::stats::median;
use serde_json::Value;
use std::fmt::Write as _;
use std::fs::{self, File};
use std::net::Ipv4Addr;
use std::os::unix::process::CommandExt as _;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitStatus, Stdio};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

/// The benchmark program, built by [`build_cpgbench`].
pub const CPGBENCH_SOURCE: &str = include_str!("../../../../tools/cpg-bench/cpgbench.c");
/// Members of the group, one per network namespace.
pub const CPG_MEMBERS: usize = 3;
/// The size of `cpgbench`'s message header; a message is at least this long.
pub const CPG_MESSAGE_BYTES_MIN: usize = 40;
/// `cpgbench`'s own limit on the message size.
pub const CPG_MESSAGE_BYTES_MAX: usize = 1 << 20;
/// What the issue asks for.
pub const CPG_MESSAGE_BYTES_DEFAULT: usize = 1024;
/// Where a missing piece comes from, said in every error about it.
pub const CPG_INSTALL_HINT: &str = "apt-get install corosync libcpg-dev";
/// The LAN's tag (`abcast-cpg-n0..2`, bridge `abrcpg`) unless the spec says otherwise.
pub const CPG_LAN_TAG_DEFAULT: &str = "cpg";

/// Seconds `cpgbench` keeps sending after the measure window, so the window's end is
/// measured under load too.
const COOLDOWN_S: f64 = 0.5;
/// Seconds a member waits for every sender's DONE message after the sending ended.
const DONE_TIMEOUT_S: f64 = 20.0;
/// Seconds a process has to end after SIGTERM before it is killed.
const STOP_GRACE_S: u64 = 5;
const POLL_INTERVAL: Duration = Duration::from_millis(50);
const CPG_GROUP: &str = "abcast_group_peer";

/// Corosync's transport.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CorosyncTransport {
    /// Kronosnet, corosync 3's default.
    Knet,
    /// Plain UDP unicast to each member, the transport of corosync 2.
    Udpu,
}

impl CorosyncTransport {
    pub fn as_str(self) -> &'static str {
        match self {
            CorosyncTransport::Knet => "knet",
            CorosyncTransport::Udpu => "udpu",
        }
    }
}

/// The `totem` settings a run changes; `None` leaves corosync's default.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CorosyncTuning {
    pub transport: CorosyncTransport,
    /// Largest totem packet in bytes (default: 1500 for udpu, 65536 for knet).
    pub netmtu: Option<u32>,
    /// Messages per token rotation for the whole ring (default 50).
    pub window_size: Option<u32>,
    /// Messages one member sends per token visit (default 17).
    pub max_messages: Option<u32>,
}

impl CorosyncTuning {
    /// Corosync 3's defaults: knet and nothing else set (no crypto and no compression are
    /// its defaults too; the crypto lines are written out all the same).
    pub fn defaults() -> CorosyncTuning {
        CorosyncTuning {
            transport: CorosyncTransport::Knet,
            netmtu: None,
            window_size: None,
            max_messages: None,
        }
    }

    /// The tuned configuration of `docs/benchmarks/group-peer/corosync.md`: UDP unicast,
    /// which costs less per message than knet on this host (about twice knet's rate), with
    /// totem packets as large as the LAN's jumbo frames so that several 1 KB messages share
    /// one packet (without it udpu queues for 70 ms and more), and a larger token window
    /// (300 per rotation, 50 per visit), the best of the settings tried though within the
    /// noise; corosync keeps these values (cmap) and logged no retransmission with them.
    pub fn tuned() -> CorosyncTuning {
        CorosyncTuning {
            transport: CorosyncTransport::Udpu,
            netmtu: Some(8982),
            window_size: Some(300),
            max_messages: Some(50),
        }
    }

    /// One line for reports: "udpu, netmtu 8982, window_size 300, max_messages 50".
    pub fn describe(&self) -> String {
        let mut s = self.transport.as_str().to_string();
        for (key, v) in [
            ("netmtu", self.netmtu),
            ("window_size", self.window_size),
            ("max_messages", self.max_messages),
        ] {
            if let Some(v) = v {
                let _ = write!(s, ", {key} {v}");
            }
        }
        s
    }
}

/// One run of the workload.
#[derive(Debug, Clone)]
pub struct CpgSpec {
    /// Members that send: 1 to [`CPG_MEMBERS`]; the others only receive.
    pub senders: usize,
    pub message_bytes: usize,
    /// The measure window, in seconds.
    pub duration_s: f64,
    /// Seconds of load before the window opens.
    pub warmup_s: f64,
    /// Seconds the group may take to form (corosync's start and first ring included).
    pub join_timeout_s: f64,
    /// The run's directory: `cpgbench` and one directory per member (configuration, logs).
    pub out_dir: PathBuf,
    pub tuning: CorosyncTuning,
    /// Names the LAN's namespaces and bridge (see [`EmulatedLan::create`]).
    pub lan_tag: String,
}

impl CpgSpec {
    /// 1 KB messages, a 1 s warm-up, the tuned configuration.
    pub fn new(senders: usize, duration_s: f64, out_dir: impl Into<PathBuf>) -> CpgSpec {
        CpgSpec {
            senders,
            message_bytes: CPG_MESSAGE_BYTES_DEFAULT,
            duration_s,
            warmup_s: 1.0,
            join_timeout_s: 60.0,
            out_dir: out_dir.into(),
            tuning: CorosyncTuning::tuned(),
            lan_tag: CPG_LAN_TAG_DEFAULT.to_string(),
        }
    }

    fn validate(&self) -> Result<(), String> {
        if !(1..=CPG_MEMBERS).contains(&self.senders) {
            return Err(format!(
                "corosync CPG: {} senders, must be 1 to {CPG_MEMBERS}",
                self.senders
            ));
        }
        if !(CPG_MESSAGE_BYTES_MIN..=CPG_MESSAGE_BYTES_MAX).contains(&self.message_bytes) {
            return Err(format!(
                "corosync CPG: {}-byte messages, must be {CPG_MESSAGE_BYTES_MIN} to \
                 {CPG_MESSAGE_BYTES_MAX} (cpgbench's header is {CPG_MESSAGE_BYTES_MIN} bytes)",
                self.message_bytes
            ));
        }
        for (what, v, min) in [
            ("duration", self.duration_s, 0.1),
            ("warm-up", self.warmup_s, 0.0),
            ("join timeout", self.join_timeout_s, 0.1),
        ] {
            if !(v.is_finite() && (min..=3600.0).contains(&v)) {
                return Err(format!(
                    "corosync CPG: {what} of {v} s, must be {min} to 3600 s"
                ));
            }
        }
        let dir = self.out_dir.to_str().ok_or_else(|| {
            format!(
                "corosync CPG: the output directory {} is not UTF-8, which corosync.conf \
                 cannot hold",
                self.out_dir.display()
            )
        })?;
        if dir.is_empty() || dir.contains(['{', '}', '\n', '\r']) {
            return Err(format!(
                "corosync CPG: the output directory {dir:?} is empty or holds a brace or a \
                 line break, which corosync.conf cannot hold"
            ));
        }
        Ok(())
    }
}

/// What one member's `cpgbench` reported (its JSON line).
#[derive(Debug, Clone, PartialEq)]
pub struct CpgMember {
    pub id: usize,
    pub sender: bool,
    /// Messages delivered in the measure window, per second.
    pub msgs_per_s: f64,
    pub mbit_per_s: f64,
    pub latency_us_p50: u64,
    pub latency_us_p99: u64,
    pub latency_us_max: u64,
    pub received_window: u64,
    pub received_total: u64,
    /// Messages this member sent (0 for a receiver), in all and in the measure window.
    pub sent: u64,
    pub sent_window: u64,
    /// Times Corosync's flow control answered CS_ERR_TRY_AGAIN.
    pub try_again: u64,
    /// Per-sender sequence numbers out of order (gap or duplicate).
    pub order_violations: u64,
    /// Messages senders reported sending that this member did not deliver.
    pub missing: u64,
    /// Messages that were not cpgbench's (bad header, size or sender).
    pub foreign: u64,
    /// Configuration changes after the group formed and before every DONE came.
    pub membership_changes: u64,
    /// A digest over the (sender, sequence) order of every delivered message: equal at
    /// every member when they delivered one total order.
    pub digest: String,
}

/// The group's figures for one run.
#[derive(Debug, Clone, PartialEq)]
pub struct CpgFigures {
    pub senders: usize,
    pub message_bytes: usize,
    pub duration_s: f64,
    /// Messages delivered per second in the window: the median over the members (each
    /// member delivers every message, so this is the group's agreed-message rate).
    pub msgs_per_s: f64,
    pub mbit_per_s: f64,
    /// Delivery latency, send to delivery: the median over the members of each member's
    /// percentile.
    pub latency_us_p50: f64,
    pub latency_us_p99: f64,
    /// The largest latency any member saw in the window.
    pub latency_us_max: u64,
    /// What the senders together sent per second in the window.
    pub sent_msgs_per_s: f64,
    /// Summed over the members.
    pub order_violations: u64,
    pub missing: u64,
    /// Every member's digest of the delivery order is the same.
    pub total_order_agrees: bool,
    /// "udpu, netmtu 8982, ..." ([`CorosyncTuning::describe`]).
    pub tuning: String,
    /// Member 0's corosync.conf.
    pub config: String,
    pub members: Vec<CpgMember>,
}

/// What [`cpg_available`] found.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Probe {
    root: bool,
    corosync: bool,
    cpg_header: bool,
    libcpg: bool,
    cc: bool,
}

fn probe() -> Probe {
    // SAFETY: geteuid has no preconditions and no side effects.
    let root = unsafe { libc::geteuid() } == 0;
    let lib_dirs = library_dirs();
    Probe {
        root,
        corosync: corosync_binary().is_some(),
        cpg_header: ["/usr/include", "/usr/local/include"]
            .iter()
            .any(|d| Path::new(d).join("corosync/cpg.h").is_file()),
        libcpg: lib_dirs.iter().any(|d| d.join("libcpg.so").exists()),
        cc: Command::new("cc")
            .arg("--version")
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .status()
            .is_ok_and(|s| s.success()),
    }
}

/// Where the linker looks for `-lcpg` on Debian and most other distributions.
fn library_dirs() -> Vec<PathBuf> {
    let mut dirs: Vec<PathBuf> = ["/usr/lib", "/usr/lib64", "/usr/local/lib", "/lib"]
        .iter()
        .map(PathBuf::from)
        .collect();
    if let Ok(entries) = fs::read_dir("/usr/lib") {
        dirs.extend(
            entries
                .flatten()
                .map(|e| e.path())
                .filter(|p| p.to_string_lossy().ends_with("-linux-gnu")),
        );
    }
    dirs
}

/// The corosync program: on the PATH, or in /usr/sbin (not on every user's PATH).
fn corosync_binary() -> Option<PathBuf> {
    let path = std::env::var_os("PATH").unwrap_or_default();
    std::env::split_paths(&path)
        .chain([PathBuf::from("/usr/sbin"), PathBuf::from("/sbin")])
        .map(|d| d.join("corosync"))
        .find(|p| p.is_file())
}

/// The error for what `p` lacks, or `Ok` when nothing is missing.
fn availability(p: &Probe) -> Result<(), String> {
    let mut missing: Vec<&str> = Vec::new();
    if !p.corosync {
        missing.push("the corosync program (package corosync)");
    }
    if !p.cpg_header {
        missing.push("the header corosync/cpg.h (package libcpg-dev)");
    }
    if !p.libcpg {
        missing.push("the library libcpg.so (package libcpg-dev)");
    }
    let mut problems: Vec<String> = Vec::new();
    if !missing.is_empty() {
        problems.push(format!(
            "missing {}; install them with `{CPG_INSTALL_HINT}`",
            missing.join(", ")
        ));
    }
    if !p.cc {
        problems.push(
            "no C compiler `cc` to build cpgbench; install one with `apt-get install gcc`"
                .to_string(),
        );
    }
    if !p.root {
        problems.push(
            "not root: the members run in network namespaces, and each corosync mounts a \
             private /run (run it with sudo)"
                .to_string(),
        );
    }
    if problems.is_empty() {
        Ok(())
    } else {
        Err(format!(
            "Corosync CPG cannot run here: {}",
            problems.join("; ")
        ))
    }
}

/// Whether this host can run [`run_cpg_workload`]: root, the corosync program, libcpg's
/// header and library, and a C compiler. The error lists everything missing and says how to
/// install it (`apt-get install corosync libcpg-dev`).
pub fn cpg_available() -> Result<(), String> {
    availability(&probe())
}

/// Writes `cpgbench.c` into `dir` and compiles it to `dir/cpgbench` (`cc -O2 ... -lcpg`),
/// unless the same source was already built there. Returns the program's path.
pub fn build_cpgbench(dir: &Path) -> Result<PathBuf, String> {
    fs::create_dir_all(dir)
        .map_err(|e| format!("corosync CPG: cannot create {}: {e}", dir.display()))?;
    let source = dir.join("cpgbench.c");
    let program = dir.join("cpgbench");
    let same_source = fs::read_to_string(&source).is_ok_and(|s| s == CPGBENCH_SOURCE);
    if same_source && program.is_file() {
        return Ok(program);
    }
    fs::write(&source, CPGBENCH_SOURCE)
        .map_err(|e| format!("corosync CPG: cannot write {}: {e}", source.display()))?;
    let out = Command::new("cc")
        .args(["-O2", "-Wall", "-Wextra", "-o"])
        .arg(&program)
        .arg(&source)
        .arg("-lcpg")
        .output()
        .map_err(|e| format!("corosync CPG: cannot run the C compiler `cc`: {e}"))?;
    if !out.status.success() {
        return Err(format!(
            "corosync CPG: `cc -O2 -Wall -Wextra -o {} {} -lcpg` failed ({}); is libcpg-dev \
             installed (`{CPG_INSTALL_HINT}`)?\n{}",
            program.display(),
            source.display(),
            out.status,
            String::from_utf8_lossy(&out.stderr).trim()
        ));
    }
    Ok(program)
}

/// The corosync.conf of the member whose directory is `member_dir`, for a group whose
/// members have the addresses `addrs` (node ids 1, 2, ...).
pub fn corosync_conf(addrs: &[Ipv4Addr], tuning: &CorosyncTuning, member_dir: &Path) -> String {
    let mut c = String::new();
    let _ = writeln!(
        c,
        "# Written by abcast bench group-peer (bench/corosync.rs)."
    );
    c.push_str("totem {\n\tversion: 2\n\tcluster_name: abcast_group_peer\n");
    let _ = writeln!(c, "\ttransport: {}", tuning.transport.as_str());
    c.push_str("\tcrypto_cipher: none\n\tcrypto_hash: none\n");
    // knet's compression is off by default (`knet_compression_model`); corosync 3.1.7's
    // parser refuses the value "none" the manual names, so it is left unset.
    for (key, v) in [
        ("netmtu", tuning.netmtu),
        ("window_size", tuning.window_size),
        ("max_messages", tuning.max_messages),
    ] {
        if let Some(v) = v {
            let _ = writeln!(c, "\t{key}: {v}");
        }
    }
    c.push_str("}\n\n");
    let _ = writeln!(
        c,
        "system {{\n\tstate_dir: {}\n}}\n",
        member_dir.join("state").display()
    );
    let _ = writeln!(
        c,
        "logging {{\n\tto_stderr: no\n\tto_syslog: no\n\tto_logfile: yes\n\tlogfile: {}\n\
         \ttimestamp: hires\n\tfileline: off\n\tdebug: off\n}}\n",
        member_dir.join("corosync.log").display()
    );
    c.push_str("nodelist {\n");
    for (i, addr) in addrs.iter().enumerate() {
        let _ = writeln!(
            c,
            "\tnode {{\n\t\tnodeid: {}\n\t\tname: m{i}\n\t\tring0_addr: {addr}\n\t}}",
            i + 1
        );
    }
    c.push_str("}\n");
    c
}

fn field<'a>(v: &'a Value, key: &str) -> Result<&'a Value, String> {
    v.get(key)
        .ok_or_else(|| format!("cpgbench's report has no field {key:?}"))
}

fn field_u64(v: &Value, key: &str) -> Result<u64, String> {
    field(v, key)?
        .as_u64()
        .ok_or_else(|| format!("cpgbench's report: {key:?} is not a whole number"))
}

fn field_f64(v: &Value, key: &str) -> Result<f64, String> {
    field(v, key)?
        .as_f64()
        .filter(|x| x.is_finite())
        .ok_or_else(|| format!("cpgbench's report: {key:?} is not a number"))
}

fn field_bool(v: &Value, key: &str) -> Result<bool, String> {
    field(v, key)?
        .as_bool()
        .ok_or_else(|| format!("cpgbench's report: {key:?} is not true or false"))
}

/// Reads `cpgbench`'s JSON line.
pub fn parse_member_report(line: &str) -> Result<CpgMember, String> {
    let v: Value = serde_json::from_str(line.trim())
        .map_err(|e| format!("cpgbench's report is not JSON ({e}): {:?}", line.trim()))?;
    let id = usize::try_from(field_u64(&v, "id")?)
        .map_err(|_| "cpgbench's report: \"id\" is too large".to_string())?;
    Ok(CpgMember {
        id,
        sender: field_bool(&v, "sender")?,
        msgs_per_s: field_f64(&v, "msgs_per_s")?,
        mbit_per_s: field_f64(&v, "mbit_per_s")?,
        latency_us_p50: field_u64(&v, "latency_us_p50")?,
        latency_us_p99: field_u64(&v, "latency_us_p99")?,
        latency_us_max: field_u64(&v, "latency_us_max")?,
        received_window: field_u64(&v, "received_window")?,
        received_total: field_u64(&v, "received_total")?,
        sent: field_u64(&v, "sent")?,
        sent_window: field_u64(&v, "sent_window")?,
        try_again: field_u64(&v, "try_again")?,
        order_violations: field_u64(&v, "order_violations")?,
        missing: field_u64(&v, "missing")?,
        foreign: field_u64(&v, "foreign")?,
        membership_changes: field_u64(&v, "membership_changes")?,
        digest: field(&v, "digest")?
            .as_str()
            .ok_or_else(|| "cpgbench's report: \"digest\" is not a string".to_string())?
            .to_string(),
    })
}

/// The group's figures from every member's report. A run whose group changed under load
/// (the ring re-formed) measured something else, and is an error.
pub fn figures(
    spec: &CpgSpec,
    mut members: Vec<CpgMember>,
    config: String,
) -> Result<CpgFigures, String> {
    members.sort_by_key(|m| m.id);
    let ids: Vec<usize> = members.iter().map(|m| m.id).collect();
    if ids != (0..CPG_MEMBERS).collect::<Vec<usize>>() {
        return Err(format!(
            "corosync CPG: reports from members {ids:?}, want one from each of 0 to {}",
            CPG_MEMBERS - 1
        ));
    }
    if let Some(m) = members.iter().find(|m| m.membership_changes > 0) {
        return Err(format!(
            "corosync CPG: the group changed {} time(s) under load at member {} (the ring \
             re-formed, e.g. after a lost token); the run measured a recovery, not the \
             workload",
            m.membership_changes, m.id
        ));
    }
    let med = |f: &dyn Fn(&CpgMember) -> f64| {
        median(&members.iter().map(f).collect::<Vec<f64>>()).unwrap_or(0.0)
    };
    let sent_window: u64 = members.iter().map(|m| m.sent_window).sum();
    Ok(CpgFigures {
        senders: spec.senders,
        message_bytes: spec.message_bytes,
        duration_s: spec.duration_s,
        msgs_per_s: med(&|m| m.msgs_per_s),
        mbit_per_s: med(&|m| m.mbit_per_s),
        latency_us_p50: med(&|m| m.latency_us_p50 as f64),
        latency_us_p99: med(&|m| m.latency_us_p99 as f64),
        latency_us_max: members.iter().map(|m| m.latency_us_max).max().unwrap_or(0),
        sent_msgs_per_s: sent_window as f64 / spec.duration_s,
        order_violations: members.iter().map(|m| m.order_violations).sum(),
        missing: members.iter().map(|m| m.missing).sum(),
        total_order_agrees: members.windows(2).all(|w| w[0].digest == w[1].digest),
        tuning: spec.tuning.describe(),
        config,
        members,
    })
}

/// Set by SIGINT or SIGTERM once a run has started: the run stops, its processes and
/// namespaces are removed, and it returns an error.
fn stop_flag() -> &'static Arc<AtomicBool> {
    static FLAG: std::sync::OnceLock<Arc<AtomicBool>> = std::sync::OnceLock::new();
    FLAG.get_or_init(|| {
        let flag = Arc::new(AtomicBool::new(false));
        for sig in [signal_hook::consts::SIGINT, signal_hook::consts::SIGTERM] {
            // Without the handler the signal ends the process and the Drop guards do not
            // run: the children still get SIGTERM (PR_SET_PDEATHSIG), and the next run's
            // LAN removes the namespaces left behind.
            let _ = signal_hook::flag::register(sig, Arc::clone(&flag));
        }
        flag
    })
}

/// Whether a SIGINT or SIGTERM came since the first run started.
pub fn interrupted() -> bool {
    stop_flag().load(Ordering::Relaxed)
}

/// A child process that is stopped (SIGTERM, then SIGKILL) when dropped.
pub(super) struct Proc {
    what: String,
    child: Child,
    status: Option<ExitStatus>,
}

impl Proc {
    pub(super) fn poll(&mut self) -> Option<ExitStatus> {
        if self.status.is_none() {
            self.status = self.child.try_wait().ok().flatten();
        }
        self.status
    }

    pub(super) fn terminate(&mut self) {
        if self.poll().is_some() {
            return;
        }
        match libc::pid_t::try_from(self.child.id()) {
            // SAFETY: kill(2) on our own child, which has not been reaped (poll said it is
            // still running), so the pid is still ours.
            Ok(pid) => unsafe {
                libc::kill(pid, libc::SIGTERM);
            },
            Err(_) => {
                let _ = self.child.kill();
            }
        }
    }

    /// Waits until `deadline` for the process to end, then kills it.
    pub(super) fn reap(&mut self, deadline: Instant) {
        while self.poll().is_none() && Instant::now() < deadline {
            std::thread::sleep(Duration::from_millis(20));
        }
        if self.poll().is_none() {
            let _ = self.child.kill();
            self.status = self.child.wait().ok();
        }
    }
}

impl Drop for Proc {
    fn drop(&mut self) {
        self.terminate();
        self.reap(Instant::now() + Duration::from_secs(STOP_GRACE_S));
    }
}

/// Everything a run started; dropping it stops the benches, then the corosyncs (all at
/// once, then waiting for each), then removes the LAN.
struct Group {
    benches: Vec<Proc>,
    corosyncs: Vec<Proc>,
    lan: EmulatedLan,
}

impl Drop for Group {
    fn drop(&mut self) {
        let deadline = Instant::now() + Duration::from_secs(STOP_GRACE_S);
        for p in self.benches.iter_mut().chain(self.corosyncs.iter_mut()) {
            p.terminate();
        }
        for p in self.benches.iter_mut().chain(self.corosyncs.iter_mut()) {
            p.reap(deadline);
        }
        // The fields drop next: the processes are gone, then the LAN is removed.
    }
}

/// The member directory of member `i`.
fn member_dir(out_dir: &Path, i: usize) -> PathBuf {
    out_dir.join(format!("member-{i}"))
}

fn create_file(path: &Path) -> Result<File, String> {
    File::create(path).map_err(|e| format!("cannot create {}: {e}", path.display()))
}

/// Runs `program args` in network namespace `netns` (`ip netns exec`, which also gives it a
/// mount namespace of its own), its output into `stdout` and `stderr`.
pub(super) fn spawn_in_netns(
    what: String,
    netns: &str,
    program: &[&std::ffi::OsStr],
    stdout: &Path,
    stderr: &Path,
) -> Result<Proc, String> {
    let mut cmd = Command::new("ip");
    cmd.args(["netns", "exec", netns])
        .args(program)
        .stdin(Stdio::null())
        .stdout(create_file(stdout)?)
        .stderr(create_file(stderr)?);
    // Should this process die without running its Drop guards (SIGKILL), the kernel sends
    // the child SIGTERM; the setting survives `ip netns exec`'s and `sh`'s exec.
    // SAFETY: prctl(2) is async-signal-safe and changes only the child's own state.
    unsafe {
        cmd.pre_exec(|| {
            if libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGTERM) != 0 {
                return Err(std::io::Error::last_os_error());
            }
            Ok(())
        });
    }
    let child = cmd
        .spawn()
        .map_err(|e| format!("cannot start {what} (`ip netns exec`): {e}"))?;
    Ok(Proc {
        what,
        child,
        status: None,
    })
}

/// The last `lines` lines of a file, for an error message.
fn tail(path: &Path, lines: usize) -> String {
    let text = fs::read_to_string(path).unwrap_or_default();
    let all: Vec<&str> = text.lines().collect();
    all[all.len().saturating_sub(lines)..].join("\n")
}

/// The error for a failed run, with the logs to read.
fn failure(what: String, out_dir: &Path) -> String {
    let logs: Vec<String> = (0..CPG_MEMBERS)
        .map(|i| {
            member_dir(out_dir, i)
                .join("corosync.log")
                .display()
                .to_string()
        })
        .collect();
    format!(
        "{what}\ncorosync logs: {}\n(each member's directory {}/member-N also holds its \
         corosync.conf, corosync's stderr and cpgbench's output)",
        logs.join(", "),
        out_dir.display()
    )
}

/// Runs the workload once on three fresh corosync instances and returns the group's
/// figures. Needs root (see [`cpg_available`]); builds `cpgbench` into `spec.out_dir`.
pub fn run_cpg_workload(spec: &CpgSpec) -> Result<CpgFigures, String> {
    spec.validate()?;
    cpg_available()?;
    fs::create_dir_all(&spec.out_dir).map_err(|e| {
        format!(
            "corosync CPG: cannot create {}: {e}",
            spec.out_dir.display()
        )
    })?;
    let out_dir = fs::canonicalize(&spec.out_dir).map_err(|e| {
        format!(
            "corosync CPG: cannot resolve {}: {e}",
            spec.out_dir.display()
        )
    })?;
    if out_dir.starts_with("/run") || out_dir.starts_with("/var/run") {
        return Err(format!(
            "corosync CPG: the output directory {} is under /run, which each corosync \
             replaces by a private tmpfs; choose another",
            out_dir.display()
        ));
    }
    let spec = CpgSpec {
        out_dir: out_dir.clone(),
        ..spec.clone()
    };
    let corosync = corosync_binary().ok_or_else(|| {
        format!("corosync CPG: no corosync program; install it with `{CPG_INSTALL_HINT}`")
    })?;
    let cpgbench = build_cpgbench(&out_dir)?;
    stop_flag();
    if interrupted() {
        return Err("corosync CPG: interrupted".to_string());
    }
    let lan = EmulatedLan::create_unshaped(&spec.lan_tag, CPG_MEMBERS)
        .map_err(|e| format!("corosync CPG: {e}"))?;
    let addrs: Vec<Ipv4Addr> = lan.nodes.iter().map(|n| n.addr).collect();
    let mut config = String::new();
    for i in 0..CPG_MEMBERS {
        let dir = member_dir(&out_dir, i);
        // A previous run's state and logs would confuse this one's.
        if dir.exists() {
            fs::remove_dir_all(&dir)
                .map_err(|e| format!("corosync CPG: cannot clear {}: {e}", dir.display()))?;
        }
        fs::create_dir_all(dir.join("state"))
            .map_err(|e| format!("corosync CPG: cannot create {}: {e}", dir.display()))?;
        let conf = corosync_conf(&addrs, &spec.tuning, &dir);
        fs::write(dir.join("corosync.conf"), &conf).map_err(|e| {
            format!(
                "corosync CPG: cannot write {}: {e}",
                dir.join("corosync.conf").display()
            )
        })?;
        if i == 0 {
            config = conf;
        }
    }
    let mut group = Group {
        benches: Vec::new(),
        corosyncs: Vec::new(),
        lan,
    };
    start(&spec, &mut group, &corosync, &cpgbench)?;
    let members = wait(&spec, &mut group)?;
    drop(group);
    figures(&spec, members, config)
}

/// Starts each member's corosync, then each member's cpgbench (which waits for its corosync
/// and for the whole group).
fn start(
    spec: &CpgSpec,
    group: &mut Group,
    corosync: &Path,
    cpgbench: &Path,
) -> Result<(), String> {
    // Corosync's lock file is /var/run/corosync.pid whatever the configuration says: a
    // private tmpfs on /run in this member's mount namespace gives each its own.
    let script = "mount -t tmpfs -o size=8m,mode=0755 abcast-corosync-run /run && \
                  exec \"$0\" -f -c \"$1\"";
    let netns: Vec<String> = group.lan.nodes.iter().map(|n| n.netns.clone()).collect();
    for (i, ns) in netns.iter().enumerate() {
        let dir = member_dir(&spec.out_dir, i);
        let conf = dir.join("corosync.conf");
        let p = spawn_in_netns(
            format!("member {i}'s corosync"),
            ns,
            &[
                "sh".as_ref(),
                "-c".as_ref(),
                script.as_ref(),
                corosync.as_os_str(),
                conf.as_os_str(),
            ],
            &dir.join("corosync.stdout"),
            &dir.join("corosync.stderr"),
        )?;
        group.corosyncs.push(p);
    }
    for (i, ns) in netns.iter().enumerate() {
        let dir = member_dir(&spec.out_dir, i);
        let args: Vec<String> = vec![
            "--group".into(),
            CPG_GROUP.into(),
            "--members".into(),
            CPG_MEMBERS.to_string(),
            "--senders".into(),
            spec.senders.to_string(),
            "--id".into(),
            i.to_string(),
            "--bytes".into(),
            spec.message_bytes.to_string(),
            "--warmup".into(),
            spec.warmup_s.to_string(),
            "--measure".into(),
            spec.duration_s.to_string(),
            "--cooldown".into(),
            COOLDOWN_S.to_string(),
            "--join-timeout".into(),
            spec.join_timeout_s.to_string(),
            "--done-timeout".into(),
            DONE_TIMEOUT_S.to_string(),
        ];
        let mut program: Vec<&std::ffi::OsStr> = vec![cpgbench.as_os_str()];
        program.extend(args.iter().map(std::ffi::OsStr::new));
        let p = spawn_in_netns(
            format!("member {i}'s cpgbench"),
            ns,
            &program,
            &dir.join("cpgbench.json"),
            &dir.join("cpgbench.stderr"),
        )?;
        group.benches.push(p);
    }
    Ok(())
}

/// Waits for every cpgbench to finish and reads its report; fails as soon as a corosync or
/// a cpgbench fails, the run overstays its time, or a signal comes.
fn wait(spec: &CpgSpec, group: &mut Group) -> Result<Vec<CpgMember>, String> {
    let out_dir = spec.out_dir.as_path();
    // cpgbench's own timeouts end it first; this is the backstop.
    let limit_s =
        spec.join_timeout_s + spec.warmup_s + spec.duration_s + COOLDOWN_S + DONE_TIMEOUT_S + 10.0;
    let deadline = Instant::now() + Duration::from_secs_f64(limit_s);
    loop {
        if interrupted() {
            return Err(failure(
                "corosync CPG: interrupted; every process and namespace is removed".to_string(),
                out_dir,
            ));
        }
        for (i, p) in group.corosyncs.iter_mut().enumerate() {
            if let Some(status) = p.poll() {
                let dir = member_dir(out_dir, i);
                return Err(failure(
                    format!(
                        "corosync CPG: {} ended during the run ({status}); its stderr: {}",
                        p.what,
                        tail(&dir.join("corosync.stderr"), 5)
                    ),
                    out_dir,
                ));
            }
        }
        let mut running = 0;
        for (i, p) in group.benches.iter_mut().enumerate() {
            match p.poll() {
                None => running += 1,
                Some(status) if status.success() => {}
                Some(status) => {
                    let dir = member_dir(out_dir, i);
                    return Err(failure(
                        format!(
                            "corosync CPG: {} failed ({status}): {}",
                            p.what,
                            tail(&dir.join("cpgbench.stderr"), 5)
                        ),
                        out_dir,
                    ));
                }
            }
        }
        if running == 0 {
            break;
        }
        if Instant::now() >= deadline {
            return Err(failure(
                format!("corosync CPG: the run did not end within {limit_s:.0} s"),
                out_dir,
            ));
        }
        std::thread::sleep(POLL_INTERVAL);
    }
    (0..CPG_MEMBERS)
        .map(|i| {
            let path = member_dir(out_dir, i).join("cpgbench.json");
            let text = fs::read_to_string(&path)
                .map_err(|e| format!("corosync CPG: cannot read {}: {e}", path.display()))?;
            let line = text.lines().find(|l| !l.trim().is_empty()).ok_or_else(|| {
                failure(
                    format!("corosync CPG: member {i}'s cpgbench printed no report"),
                    out_dir,
                )
            })?;
            parse_member_report(line).map_err(|e| format!("corosync CPG: member {i}: {e}"))
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    const LINE: &str = r#"{"id":1,"members":3,"senders":1,"sender":false,"bytes":1024,"window_s":3.000,"received_window":35779,"msgs_per_s":11926.3,"mbit_per_s":97.701,"latency_us_p50":964,"latency_us_p99":71837,"latency_us_max":73997,"latency_samples":35779,"received_total":55232,"sent":0,"sent_window":0,"try_again":0,"order_violations":0,"missing":0,"foreign":0,"membership_changes":0,"dones":1,"digest":"d45c0942791d5e25"}"#;

    fn member(id: usize, rate: f64, p50: u64, digest: &str) -> CpgMember {
        CpgMember {
            id,
            sender: id == 0,
            msgs_per_s: rate,
            mbit_per_s: rate * 1024.0 * 8.0 / 1e6,
            latency_us_p50: p50,
            latency_us_p99: p50 * 10,
            latency_us_max: p50 * 20,
            received_window: (rate * 10.0) as u64,
            received_total: (rate * 12.0) as u64,
            sent: if id == 0 { (rate * 12.0) as u64 } else { 0 },
            sent_window: if id == 0 { (rate * 10.0) as u64 } else { 0 },
            try_again: 0,
            order_violations: 0,
            missing: 0,
            foreign: 0,
            membership_changes: 0,
            digest: digest.to_string(),
        }
    }

    #[test]
    fn a_cpgbench_line_is_read_field_by_field() {
        let m = parse_member_report(LINE).unwrap();
        assert_eq!(m.id, 1);
        assert!(!m.sender);
        assert_eq!(m.msgs_per_s, 11926.3);
        assert_eq!(m.latency_us_p50, 964);
        assert_eq!(m.latency_us_p99, 71837);
        assert_eq!(m.received_total, 55232);
        assert_eq!(m.digest, "d45c0942791d5e25");
    }

    #[test]
    fn a_bad_cpgbench_line_names_what_is_wrong() {
        let e = parse_member_report("cpgbench: oops").unwrap_err();
        assert!(e.contains("not JSON"), "{e}");
        let e = parse_member_report(&LINE.replace("\"latency_us_p99\":71837,", "")).unwrap_err();
        assert!(e.contains("latency_us_p99"), "{e}");
        let e = parse_member_report(&LINE.replace("\"sent\":0", "\"sent\":-1")).unwrap_err();
        assert!(e.contains("\"sent\" is not a whole number"), "{e}");
    }

    #[test]
    fn the_figures_are_medians_over_the_members_and_sums_of_faults() {
        let spec = CpgSpec::new(1, 10.0, "/tmp/x");
        let members = vec![
            member(2, 15_000.0, 3000, "ab"),
            member(0, 16_000.0, 1000, "ab"),
            member(1, 14_000.0, 2000, "ab"),
        ];
        let f = figures(&spec, members, "conf".to_string()).unwrap();
        assert_eq!(f.msgs_per_s, 15_000.0);
        assert_eq!(f.latency_us_p50, 2000.0);
        assert_eq!(f.latency_us_p99, 20_000.0);
        assert_eq!(f.latency_us_max, 60_000);
        assert_eq!(f.sent_msgs_per_s, 16_000.0);
        assert!(f.total_order_agrees);
        assert_eq!(f.order_violations, 0);
        assert_eq!(
            f.members.iter().map(|m| m.id).collect::<Vec<_>>(),
            vec![0, 1, 2]
        );
    }

    #[test]
    fn members_that_delivered_different_orders_are_flagged() {
        let spec = CpgSpec::new(1, 10.0, "/tmp/x");
        let mut members = vec![
            member(0, 1.0, 1, "ab"),
            member(1, 1.0, 1, "ab"),
            member(2, 1.0, 1, "cd"),
        ];
        members[1].order_violations = 2;
        members[2].missing = 5;
        let f = figures(&spec, members, String::new()).unwrap();
        assert!(!f.total_order_agrees);
        assert_eq!(f.order_violations, 2);
        assert_eq!(f.missing, 5);
    }

    #[test]
    fn a_missing_member_or_a_reformed_ring_is_an_error() {
        let spec = CpgSpec::new(1, 10.0, "/tmp/x");
        let e = figures(
            &spec,
            vec![member(0, 1.0, 1, "a"), member(2, 1.0, 1, "a")],
            String::new(),
        )
        .unwrap_err();
        assert!(e.contains("[0, 2]"), "{e}");
        let mut members = vec![
            member(0, 1.0, 1, "a"),
            member(1, 1.0, 1, "a"),
            member(2, 1.0, 1, "a"),
        ];
        members[2].membership_changes = 1;
        let e = figures(&spec, members, String::new()).unwrap_err();
        assert!(e.contains("re-formed") && e.contains("member 2"), "{e}");
    }

    #[test]
    fn the_config_lists_every_member_and_keeps_state_and_log_in_the_member_dir() {
        let addrs: Vec<Ipv4Addr> = (1..=3).map(|h| Ipv4Addr::new(10, 77, 5, h)).collect();
        let dir = Path::new("/srv/run-1/member-2");
        let c = corosync_conf(&addrs, &CorosyncTuning::tuned(), dir);
        assert!(c.contains("\ttransport: udpu\n"), "{c}");
        assert!(c.contains("\tnetmtu: 8982\n"), "{c}");
        assert!(
            c.contains("\twindow_size: 300\n\tmax_messages: 50\n"),
            "{c}"
        );
        assert!(c.contains("state_dir: /srv/run-1/member-2/state\n"), "{c}");
        assert!(
            c.contains("logfile: /srv/run-1/member-2/corosync.log\n"),
            "{c}"
        );
        assert!(c.contains("to_syslog: no"), "{c}");
        for (i, a) in addrs.iter().enumerate() {
            assert!(
                c.contains(&format!(
                    "\t\tnodeid: {}\n\t\tname: m{i}\n\t\tring0_addr: {a}\n",
                    i + 1
                )),
                "{c}"
            );
        }
        // Every opened section is closed: corosync's parser refuses anything else.
        assert_eq!(c.matches('{').count(), c.matches('}').count());
        // Nothing after an opening brace on its line (corosync's parser refuses it).
        assert!(
            c.lines()
                .all(|l| !l.contains('{') || l.trim_end().ends_with('{')),
            "{c}"
        );
    }

    #[test]
    fn the_default_config_sets_only_the_transport_and_crypto() {
        let addrs = [Ipv4Addr::new(10, 0, 0, 1)];
        let c = corosync_conf(&addrs, &CorosyncTuning::defaults(), Path::new("/d"));
        assert!(c.contains("\ttransport: knet\n"), "{c}");
        assert!(
            c.contains("\tcrypto_cipher: none\n\tcrypto_hash: none\n"),
            "{c}"
        );
        for key in ["netmtu", "window_size", "max_messages", "compression"] {
            assert!(!c.contains(key), "{key} in {c}");
        }
        assert_eq!(CorosyncTuning::defaults().describe(), "knet");
        assert_eq!(
            CorosyncTuning::tuned().describe(),
            "udpu, netmtu 8982, window_size 300, max_messages 50"
        );
    }

    #[test]
    fn what_is_missing_is_named_with_the_command_that_installs_it() {
        let all = Probe {
            root: true,
            corosync: true,
            cpg_header: true,
            libcpg: true,
            cc: true,
        };
        assert_eq!(availability(&all), Ok(()));
        let e = availability(&Probe {
            corosync: false,
            libcpg: false,
            ..all
        })
        .unwrap_err();
        assert!(e.contains("the corosync program"), "{e}");
        assert!(e.contains("libcpg.so"), "{e}");
        assert!(!e.contains("cpg.h"), "{e}");
        assert!(e.contains("apt-get install corosync libcpg-dev"), "{e}");
        let e = availability(&Probe { cc: false, ..all }).unwrap_err();
        assert!(e.contains("C compiler") && !e.contains("libcpg-dev"), "{e}");
        let e = availability(&Probe { root: false, ..all }).unwrap_err();
        assert!(e.contains("not root"), "{e}");
    }

    #[test]
    fn bad_specs_are_refused_before_anything_runs() {
        let ok = CpgSpec::new(3, 10.0, "/tmp/cpg");
        assert_eq!(ok.validate(), Ok(()));
        for (spec, want) in [
            (
                CpgSpec {
                    senders: 0,
                    ..ok.clone()
                },
                "0 senders",
            ),
            (
                CpgSpec {
                    senders: 4,
                    ..ok.clone()
                },
                "4 senders",
            ),
            (
                CpgSpec {
                    message_bytes: 8,
                    ..ok.clone()
                },
                "8-byte",
            ),
            (
                CpgSpec {
                    duration_s: f64::NAN,
                    ..ok.clone()
                },
                "duration",
            ),
            (
                CpgSpec {
                    warmup_s: -1.0,
                    ..ok.clone()
                },
                "warm-up",
            ),
            (
                CpgSpec {
                    out_dir: PathBuf::from("/tmp/a{b"),
                    ..ok.clone()
                },
                "brace",
            ),
        ] {
            let e = spec.validate().unwrap_err();
            assert!(e.contains(want), "{want}: {e}");
            // run_cpg_workload refuses it the same way, before it looks for corosync.
            assert_eq!(run_cpg_workload(&spec).unwrap_err(), e);
        }
    }

    /// Runs the real thing for 3 s with one sender, when this host can (root, corosync,
    /// libcpg-dev, cc); otherwise says why it skips.
    #[test]
    fn corosync_cpg_delivers_every_message_in_one_order_when_available() {
        if let Err(why) = cpg_available() {
            eprintln!("skipped: {why}");
            return;
        }
        let out = std::env::temp_dir().join(format!("abcast-cpg-test-{}", std::process::id()));
        let spec = CpgSpec {
            lan_tag: format!("c{:04x}", std::process::id() % 0x1_0000),
            ..CpgSpec::new(1, 3.0, &out)
        };
        let f = run_cpg_workload(&spec).unwrap();
        assert!(f.msgs_per_s > 0.0, "{f:?}");
        assert_eq!(f.order_violations, 0, "{f:?}");
        assert_eq!(f.missing, 0, "{f:?}");
        assert!(f.total_order_agrees, "{f:?}");
        let _ = fs::remove_dir_all(&out);
    }
}
