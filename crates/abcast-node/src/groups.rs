//! Process groups from the command line and from a Rust client (issue 18; Spread's and
//! Corosync CPG's verbs): `abcast join`, `abcast leave`, `abcast multicast`, `abcast
//! listen` and `abcast groups`, on the client-port frames of `clientwire.rs` (kinds
//! 145..=153). A node runs process groups with `protocol = "token"`.
//!
//! A member joined with `abcast join` stays until `abcast leave` (or until its node leaves
//! the configuration); `abcast listen --member NAME` joins for as long as it listens (the
//! member is bound to the connection and leaves when it closes).
//!
//! `abcast multicast --count N` (or `--duration S`) is a load generator: each message
//! starts with a [`LoadStamp`] (the sender's tag, a sequence number and the send time on
//! the host's monotonic clock), and `abcast listen --stats` measures throughput, latency
//! and per-sender order from them (the group-peer benchmark's figures).

use crate::client::{Client, ClientError, format_payload};
use abcast_core::groups::{Member, check_name};
use abcast_core::{ConfigKind, DeliveryLevel, ValueId};
use abcast_runtime::clientwire::{ClientFrame, GroupBatch, MAX_VALUES_PER_FRAME};
use bytes::{Bytes, BytesMut};
use serde_json::json;
use std::collections::{HashMap, HashSet, VecDeque};
use std::io::{self, BufRead, BufWriter, Write};
use std::time::{Duration, Instant};

/// Bytes of messages one `GroupMulticast` frame carries at most (and at most
/// `MAX_VALUES_PER_FRAME` messages): one request is in flight at a time, so that the
/// node takes a sender's messages in its order, and a large one amortises the round trip.
const REQUEST_BYTES: usize = 1 << 20;
/// Pause after the node answered `Busy`.
const BUSY_PAUSE: Duration = Duration::from_millis(2);

fn parse_service(s: &str) -> Result<DeliveryLevel, String> {
    match s {
        "agreed" => Ok(DeliveryLevel::Agreed),
        "safe" => Ok(DeliveryLevel::Safe),
        other => Err(format!("{other:?}: expected agreed or safe")),
    }
}

fn group_name(s: &str) -> Result<String, String> {
    check_name("group", s, false).map(|()| s.to_string())
}

fn member_name(s: &str) -> Result<String, String> {
    check_name("member", s, false).map(|()| s.to_string())
}

/// Arguments of `abcast join` and `abcast leave`.
#[derive(clap::Args, Debug, Clone)]
pub struct MembershipArgs {
    /// Client address of a node of the token ring (its `client_addr`, or its `client_path` socket).
    #[arg(long)]
    pub node: String,
    /// The group (1 to 64 bytes, printable, no spaces).
    #[arg(long, value_parser = group_name)]
    pub group: String,
    /// The member's name on that node (1 to 64 bytes, printable, no spaces).
    #[arg(long, value_parser = member_name)]
    pub member: String,
    /// Give up when the node answers nothing for this many seconds.
    #[arg(long, default_value_t = 10, allow_hyphen_values = true,
          value_parser = clap::value_parser!(u64).range(1..=3600))]
    pub timeout_s: u64,
}

/// Arguments of `abcast multicast`.
#[derive(clap::Args, Debug, Clone)]
pub struct MulticastArgs {
    /// Client address of a node of the token ring (its `client_addr`, or its `client_path` socket).
    #[arg(long)]
    pub node: String,
    #[arg(long, value_parser = group_name)]
    pub group: String,
    /// Send as this member of the group (joined at this node); without it, as a sender that
    /// is not a member (groups are open, as Spread's are).
    #[arg(long, value_parser = member_name)]
    pub member: Option<String>,
    /// `agreed`: delivered in the total order at once; `safe`: only once every member of
    /// the configuration has it (seed 002 §II).
    #[arg(long, default_value = "agreed", value_parser = parse_service)]
    pub service: DeliveryLevel,
    /// Messages to send; without any (and without --count or --duration), one message per
    /// line of standard input.
    pub messages: Vec<String>,
    /// Load: send this many generated messages of --size bytes, as fast as the node takes
    /// them, and print a summary.
    #[arg(long)]
    pub count: Option<u64>,
    /// Load: send generated messages for this many seconds.
    #[arg(long = "duration", value_name = "SECONDS")]
    pub duration_s: Option<f64>,
    /// Load: bytes per generated message (at least 24, the stamp).
    #[arg(long, default_value_t = 1024)]
    pub size: usize,
    /// Load: messages sent and not yet acknowledged, at most.
    #[arg(long, default_value_t = 4096, value_parser = clap::value_parser!(u64).range(1..=65_536))]
    pub window: u64,
    /// Load: the tag in every stamp, so listeners tell senders apart [default: a number
    /// drawn from the process id].
    #[arg(long)]
    pub tag: Option<u32>,
    /// Print one JSON object instead of the text.
    #[arg(long)]
    pub json: bool,
    /// Give up when the node acknowledges nothing for this many seconds.
    #[arg(long, default_value_t = 30)]
    pub timeout_s: u64,
}

/// Arguments of `abcast listen`.
#[derive(clap::Args, Debug, Clone)]
pub struct ListenArgs {
    /// Client address of a node of the token ring (its `client_addr`, or its `client_path` socket).
    #[arg(long)]
    pub node: String,
    /// The group; without it, every group.
    #[arg(long, value_parser = group_name)]
    pub group: Option<String>,
    /// Join the group as this member while listening (it leaves when the listener stops).
    #[arg(long, value_parser = member_name, requires = "group")]
    pub member: Option<String>,
    /// Stop after this many messages.
    #[arg(long)]
    pub count: Option<u64>,
    /// Stop after this many seconds.
    #[arg(long = "duration", value_name = "SECONDS")]
    pub duration_s: Option<f64>,
    /// Print no line per message; at the end, one JSON object with the message rate,
    /// latency (from the stamps of `abcast multicast --count/--duration`) and order checks.
    #[arg(long)]
    pub stats: bool,
    /// With --stats: the first seconds are not measured (the load starting up).
    #[arg(long = "warmup", value_name = "SECONDS", default_value_t = 0.0)]
    pub warmup_s: f64,
}

/// Arguments of `abcast groups`.
#[derive(clap::Args, Debug, Clone)]
pub struct GroupsArgs {
    /// Client address of a node of the token ring (its `client_addr`, or its `client_path` socket).
    #[arg(long)]
    pub node: String,
    /// Print one JSON object instead of the text.
    #[arg(long)]
    pub json: bool,
}

/// The host's monotonic clock in nanoseconds (`CLOCK_MONOTONIC`: one clock for every
/// process of the host, network namespaces included), for latencies across processes.
pub fn monotonic_ns() -> u64 {
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: `clock_gettime` writes one `timespec` through a valid pointer.
    unsafe {
        libc::clock_gettime(libc::CLOCK_MONOTONIC, &mut ts);
    }
    (ts.tv_sec as u64)
        .saturating_mul(1_000_000_000)
        .saturating_add(ts.tv_nsec as u64)
}

/// The first bytes of a generated message: who sent it, its number and when.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct LoadStamp {
    pub tag: u32,
    pub seq: u64,
    pub sent_ns: u64,
}

impl LoadStamp {
    pub const MAGIC: [u8; 4] = *b"ABLS";
    pub const BYTES: usize = 24;

    pub fn write(&self, buf: &mut [u8]) {
        if buf.len() < Self::BYTES {
            return;
        }
        buf[..4].copy_from_slice(&Self::MAGIC);
        buf[4..8].copy_from_slice(&self.tag.to_le_bytes());
        buf[8..16].copy_from_slice(&self.seq.to_le_bytes());
        buf[16..24].copy_from_slice(&self.sent_ns.to_le_bytes());
    }

    pub fn read(buf: &[u8]) -> Option<LoadStamp> {
        let b = buf.get(..Self::BYTES)?;
        if b[..4] != Self::MAGIC {
            return None;
        }
        let u32_at = |i: usize| u32::from_le_bytes([b[i], b[i + 1], b[i + 2], b[i + 3]]);
        let u64_at = |i: usize| {
            let mut x = [0u8; 8];
            x.copy_from_slice(&b[i..i + 8]);
            u64::from_le_bytes(x)
        };
        Some(LoadStamp {
            tag: u32_at(4),
            seq: u64_at(8),
            sent_ns: u64_at(16),
        })
    }
}

/// Where and how [`Client::group_multicast_stream`] sends.
#[derive(Clone, Debug)]
pub struct GroupSend {
    pub group: String,
    /// A member on the node (empty: a sender that is not a member).
    pub sender: String,
    pub level: DeliveryLevel,
    /// Messages sent and not yet acknowledged, at most.
    pub window: usize,
    /// Fail when nothing is acknowledged for this long.
    pub stall_max: Duration,
}

/// What a listener hears.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum GroupEventFrame {
    View(Box<abcast_core::groups::GroupView>),
    Messages(Box<GroupBatch>),
}

impl Client {
    /// Waits for the answer to a group request: `GroupAsked`, else the refusal.
    fn group_asked(&mut self, timeout: Duration) -> Result<(), ClientError> {
        match self.recv(Some(timeout))? {
            ClientFrame::GroupAsked => Ok(()),
            ClientFrame::Busy => Err(ClientError::Busy),
            ClientFrame::Error { text } => Err(ClientError::Refused(text)),
            other => Err(ClientError::Unexpected(format!(
                "frame kind {}",
                other.kind()
            ))),
        }
    }

    /// Asks the node to make `member` (on it) a member of `group`; `bound`: the member
    /// leaves when this connection closes. The join is in effect once a view shows it.
    pub fn group_join(
        &mut self,
        group: &str,
        member: &str,
        bound: bool,
        timeout: Duration,
    ) -> Result<(), ClientError> {
        self.send(&ClientFrame::GroupJoin {
            group: group.into(),
            member: member.into(),
            bound,
        })?;
        self.group_asked(timeout)
    }

    /// Asks the node to take `member` out of `group`.
    pub fn group_leave(
        &mut self,
        group: &str,
        member: &str,
        timeout: Duration,
    ) -> Result<(), ClientError> {
        self.send(&ClientFrame::GroupLeave {
            group: group.into(),
            member: member.into(),
        })?;
        self.group_asked(timeout)
    }

    /// From now on, `group`'s views and messages ("" = every group's) come to this
    /// connection ([`Client::next_group_event`]); the views in effect come first.
    pub fn group_listen(&mut self, group: &str, timeout: Duration) -> Result<(), ClientError> {
        self.send(&ClientFrame::GroupListen {
            group: group.into(),
        })?;
        self.group_asked(timeout)
    }

    /// The next view or batch of messages of a listened group.
    pub fn next_group_event(
        &mut self,
        timeout: Option<Duration>,
    ) -> Result<GroupEventFrame, ClientError> {
        match self.recv(timeout)? {
            ClientFrame::GroupView { view } => Ok(GroupEventFrame::View(view)),
            ClientFrame::GroupMessages { batch } => Ok(GroupEventFrame::Messages(batch)),
            ClientFrame::Error { text } => Err(ClientError::Refused(text)),
            other => Err(ClientError::Unexpected(format!(
                "frame kind {}",
                other.kind()
            ))),
        }
    }

    /// Every group with members, as the node's views have them.
    pub fn groups(&mut self, timeout: Duration) -> Result<Vec<(String, Vec<Member>)>, ClientError> {
        self.send(&ClientFrame::GetGroups)?;
        match self.recv(Some(timeout))? {
            ClientFrame::Groups { groups } => Ok(groups),
            ClientFrame::Error { text } => Err(ClientError::Refused(text)),
            other => Err(ClientError::Unexpected(format!(
                "frame kind {}",
                other.kind()
            ))),
        }
    }

    /// Multicasts every message as `to` says, in order, and returns when all are
    /// acknowledged (every member of the configuration has them). `next` hands the messages
    /// out, one call each, `None` at the end; `on_acked` hears each acknowledged count.
    pub fn group_multicast_stream(
        &mut self,
        to: &GroupSend,
        mut next: impl FnMut() -> Option<Bytes>,
        mut on_acked: impl FnMut(usize),
    ) -> Result<u64, ClientError> {
        let GroupSend {
            group,
            sender,
            level,
            window,
            stall_max,
        } = to;
        let (level, window, stall_max) = (*level, (*window).max(1), *stall_max);
        // Values taken and not yet acknowledged, with how many messages each carries; an
        // acknowledgement may overtake its `GroupSent`.
        let mut pending: HashMap<ValueId, usize> = HashMap::new();
        let mut early: HashSet<ValueId> = HashSet::new();
        let mut in_flight = 0usize;
        let mut held: VecDeque<Bytes> = VecDeque::new();
        let mut asked: Option<usize> = None;
        let mut done = false;
        let mut sent = 0u64;
        let mut last_progress = Instant::now();
        let mut retry_at: Option<Instant> = None;
        loop {
            let now = Instant::now();
            if asked.is_none() && retry_at.is_none_or(|t| now >= t) && in_flight < window {
                let room = (window - in_flight).min(MAX_VALUES_PER_FRAME);
                let mut bytes: usize = held.iter().map(Bytes::len).sum();
                while held.len() < room && bytes < REQUEST_BYTES && !done {
                    match next() {
                        Some(m) => {
                            bytes += m.len();
                            held.push_back(m);
                        }
                        None => done = true,
                    }
                }
                if !held.is_empty() {
                    let n = held.len().min(room);
                    let payloads: Vec<Bytes> = held.iter().take(n).cloned().collect();
                    self.send(&ClientFrame::GroupMulticast {
                        group: group.clone(),
                        sender: sender.clone(),
                        level,
                        payloads,
                    })?;
                    asked = Some(n);
                    retry_at = None;
                }
            }
            if asked.is_none() && held.is_empty() && done && pending.is_empty() {
                return Ok(sent);
            }
            if now.duration_since(last_progress) > stall_max {
                return Err(ClientError::Timeout(stall_max));
            }
            let frame = match self.recv(Some(Duration::from_millis(20))) {
                Ok(f) => f,
                Err(ClientError::Timeout(_)) => continue,
                Err(e) => return Err(e),
            };
            match frame {
                ClientFrame::GroupSent { values } => {
                    let Some(n) = asked.take() else {
                        return Err(ClientError::Unexpected(
                            "GroupSent without a request".into(),
                        ));
                    };
                    let messages: usize = values.iter().map(|(_, m)| *m as usize).sum();
                    if messages > n {
                        return Err(ClientError::Unexpected(format!(
                            "{messages} messages taken of {n}"
                        )));
                    }
                    sent += messages as u64;
                    held.drain(..messages);
                    let mut acked = 0;
                    for (id, count) in values {
                        let count = count as usize;
                        if early.remove(&id) {
                            acked += count;
                        } else {
                            pending.insert(id, count);
                            in_flight += count;
                        }
                    }
                    if acked > 0 {
                        on_acked(acked);
                    }
                    last_progress = Instant::now();
                }
                ClientFrame::Busy => {
                    asked = None;
                    retry_at = Some(Instant::now() + BUSY_PAUSE);
                }
                ClientFrame::Error { text } => return Err(ClientError::Refused(text)),
                ClientFrame::Decided { ids } => {
                    let mut acked = 0;
                    for id in ids {
                        match pending.remove(&id) {
                            Some(count) => {
                                acked += count;
                                in_flight -= count;
                            }
                            None => {
                                early.insert(id);
                            }
                        }
                    }
                    if acked > 0 {
                        last_progress = Instant::now();
                        on_acked(acked);
                    }
                }
                other => {
                    return Err(ClientError::Unexpected(format!(
                        "frame kind {}",
                        other.kind()
                    )));
                }
            }
        }
    }
}

fn timeout_of(s: u64) -> Duration {
    Duration::from_secs(s)
}

/// `abcast join`.
pub fn run_join(args: MembershipArgs) -> Result<(), ClientError> {
    let mut c = Client::connect(&args.node)?;
    c.group_join(&args.group, &args.member, false, timeout_of(args.timeout_s))?;
    println!(
        "{} asked to join group {} at {}; in effect once delivered (`abcast listen --node {} \
         --group {}` shows the view)",
        args.member, args.group, args.node, args.node, args.group
    );
    Ok(())
}

/// `abcast leave`.
pub fn run_leave(args: MembershipArgs) -> Result<(), ClientError> {
    let mut c = Client::connect(&args.node)?;
    c.group_leave(&args.group, &args.member, timeout_of(args.timeout_s))?;
    println!(
        "{} asked to leave group {} at {}",
        args.member, args.group, args.node
    );
    Ok(())
}

/// `abcast groups`.
pub fn run_groups(args: GroupsArgs) -> Result<(), ClientError> {
    let mut c = Client::connect(&args.node)?;
    let groups = c.groups(Duration::from_secs(10))?;
    if args.json {
        let v: Vec<_> = groups
            .iter()
            .map(|(g, ms)| {
                json!({
                    "group": g,
                    "members": ms.iter().map(|m| json!({"node": m.node.0, "name": m.name})).collect::<Vec<_>>(),
                })
            })
            .collect();
        println!("{}", json!({ "groups": v }));
        return Ok(());
    }
    if groups.is_empty() {
        println!("no group has members");
    }
    for (g, ms) in groups {
        println!("{g}: {}", members_text(&ms));
    }
    Ok(())
}

fn members_text(ms: &[Member]) -> String {
    if ms.is_empty() {
        return "(no members)".into();
    }
    ms.iter()
        .map(|m| m.to_string())
        .collect::<Vec<_>>()
        .join(" ")
}

/// `abcast multicast`.
pub fn run_multicast(args: MulticastArgs) -> Result<(), ClientError> {
    let sender = args.member.clone().unwrap_or_default();
    let mut c = Client::connect(&args.node)?;
    let stall = timeout_of(args.timeout_s);
    if args.count.is_none() && args.duration_s.is_none() {
        let messages: Vec<Bytes> = if args.messages.is_empty() {
            let mut v = Vec::new();
            for line in io::stdin().lock().lines() {
                v.push(Bytes::from(line?));
            }
            v
        } else {
            args.messages
                .iter()
                .map(|m| Bytes::from(m.clone()))
                .collect()
        };
        let n = messages.len();
        let mut it = messages.into_iter();
        let to = GroupSend {
            group: args.group.clone(),
            sender,
            level: args.service,
            window: args.window as usize,
            stall_max: stall,
        };
        let sent = c.group_multicast_stream(&to, || it.next(), |_| {})?;
        println!(
            "{sent} of {n} message(s) to group {} delivered to every member of the \
             configuration ({})",
            args.group,
            level_text(args.service)
        );
        return Ok(());
    }
    if !args.messages.is_empty() {
        return Err(ClientError::Usage(
            "give messages or --count/--duration, not both".into(),
        ));
    }
    if args.size < LoadStamp::BYTES {
        return Err(ClientError::Usage(format!(
            "--size {} is below {} bytes, the stamp every generated message carries",
            args.size,
            LoadStamp::BYTES
        )));
    }
    if let Some(d) = args.duration_s
        && !(d.is_finite() && d > 0.0 && d <= 86_400.0)
    {
        return Err(ClientError::Usage(format!(
            "--duration {d}: expected 0 < seconds <= 86400"
        )));
    }
    let tag = args.tag.unwrap_or_else(std::process::id);
    let start = Instant::now();
    let end = args.duration_s.map(|d| start + Duration::from_secs_f64(d));
    let count = args.count.unwrap_or(u64::MAX);
    let mut seq = 0u64;
    let mut buf = BytesMut::new();
    let size = args.size;
    let mut acked = 0u64;
    let to = GroupSend {
        group: args.group.clone(),
        sender,
        level: args.service,
        window: args.window as usize,
        stall_max: stall,
    };
    let sent = c.group_multicast_stream(
        &to,
        || {
            if seq >= count || end.is_some_and(|e| Instant::now() >= e) {
                return None;
            }
            if buf.capacity() < size {
                // One allocation for many messages: each is split off the front.
                buf.reserve(size * 256);
            }
            buf.resize(size, 0);
            LoadStamp {
                tag,
                seq,
                sent_ns: monotonic_ns(),
            }
            .write(&mut buf);
            seq += 1;
            Some(buf.split().freeze())
        },
        |n| acked += n as u64,
    )?;
    let secs = start.elapsed().as_secs_f64();
    let rate = sent as f64 / secs.max(1e-9);
    if args.json {
        println!(
            "{}",
            json!({
                "group": args.group,
                "tag": tag,
                "sent": sent,
                "acked": acked,
                "seconds": secs,
                "msgs_per_s": rate,
                "mbit_per_s": rate * size as f64 * 8.0 / 1e6,
                "service": level_text(args.service),
            })
        );
    } else {
        println!(
            "{sent} messages of {size} bytes to group {} in {secs:.2} s: {rate:.0} msgs/s, \
             {:.1} Mbit/s; {acked} acknowledged ({})",
            args.group,
            rate * size as f64 * 8.0 / 1e6,
            level_text(args.service)
        );
    }
    Ok(())
}

fn level_text(l: DeliveryLevel) -> &'static str {
    match l {
        DeliveryLevel::Agreed => "agreed",
        DeliveryLevel::Safe => "safe",
    }
}

const FNV_OFFSET: u64 = 0xcbf2_9ce4_8422_2325;
const FNV_PRIME: u64 = 0x0000_0100_0000_01b3;

/// What `abcast listen --stats` counts.
#[derive(Default)]
struct ListenStats {
    messages: u64,
    measured: u64,
    bytes: u64,
    latencies_us: Vec<u64>,
    /// Per sender tag, the next seq expected.
    next_seq: HashMap<u32, u64>,
    order_violations: u64,
    views: u64,
    /// FNV-1a over (tag, seq) of every stamped message in delivery order: equal at two
    /// listeners that delivered the same messages in the same order.
    digest: u64,
    first_at: Option<Instant>,
    measure_from: Option<Instant>,
    last_at: Option<Instant>,
}

impl ListenStats {
    fn on_message(&mut self, payload: &[u8], now: Instant, now_ns: u64, warmup: Duration) {
        self.messages += 1;
        let first = *self.first_at.get_or_insert(now);
        if let Some(s) = LoadStamp::read(payload) {
            if self.digest == 0 {
                self.digest = FNV_OFFSET;
            }
            for b in s.tag.to_le_bytes().iter().chain(s.seq.to_le_bytes().iter()) {
                self.digest = (self.digest ^ u64::from(*b)).wrapping_mul(FNV_PRIME);
            }
            let next = self.next_seq.entry(s.tag).or_insert(s.seq);
            if s.seq != *next {
                self.order_violations += 1;
            }
            *next = s.seq.saturating_add(1);
            if now.duration_since(first) >= warmup {
                self.measure_from.get_or_insert(now);
                self.measured += 1;
                self.bytes += payload.len() as u64;
                self.last_at = Some(now);
                if self.latencies_us.len() < 4_000_000 {
                    self.latencies_us
                        .push(now_ns.saturating_sub(s.sent_ns) / 1000);
                }
            }
        }
    }

    fn json(&mut self) -> serde_json::Value {
        let secs = match (self.measure_from, self.last_at) {
            (Some(a), Some(b)) => b.duration_since(a).as_secs_f64(),
            _ => 0.0,
        };
        self.latencies_us.sort_unstable();
        let pct = |p: f64| -> Option<u64> {
            let n = self.latencies_us.len();
            (n > 0).then(|| self.latencies_us[((n as f64 - 1.0) * p).round() as usize])
        };
        let rate = if secs > 0.0 {
            self.measured.saturating_sub(1) as f64 / secs
        } else {
            0.0
        };
        json!({
            "messages": self.messages,
            "measured": self.measured,
            "seconds": secs,
            "msgs_per_s": rate,
            "mbit_per_s": if secs > 0.0 { self.bytes as f64 * 8.0 / secs / 1e6 } else { 0.0 },
            "latency_us_p50": pct(0.5),
            "latency_us_p99": pct(0.99),
            "latency_us_max": pct(1.0),
            "senders": self.next_seq.len(),
            "order_violations": self.order_violations,
            "order_digest": format!("{:016x}", self.digest),
            "views": self.views,
        })
    }
}

/// One view as a line: `view GROUP ID KIND: members (joined ..., left ...)`.
pub fn view_line(v: &abcast_core::groups::GroupView) -> String {
    let mut s = format!(
        "view {} {} {}: {}",
        v.group,
        v.id,
        match v.kind {
            ConfigKind::Regular => "regular",
            ConfigKind::Transitional => "transitional",
        },
        members_text(&v.members)
    );
    if !v.joined.is_empty() {
        s.push_str(&format!("; joined {}", members_text(&v.joined)));
    }
    if !v.left.is_empty() {
        s.push_str(&format!("; left {}", members_text(&v.left)));
    }
    s
}

/// `abcast listen`.
pub fn run_listen(args: ListenArgs) -> Result<(), ClientError> {
    let mut c = Client::connect(&args.node)?;
    let t = Duration::from_secs(10);
    let group = args.group.clone().unwrap_or_default();
    if let Some(m) = &args.member {
        c.group_join(&group, m, true, t)?;
    }
    c.group_listen(&group, t)?;
    if let Some(d) = args.duration_s
        && !(d.is_finite() && d > 0.0 && d <= 86_400.0)
    {
        return Err(ClientError::Usage(format!(
            "--duration {d}: expected 0 < seconds <= 86400"
        )));
    }
    let end = args
        .duration_s
        .map(|d| Instant::now() + Duration::from_secs_f64(d));
    let warmup = Duration::from_secs_f64(args.warmup_s.clamp(0.0, 3600.0));
    let stdout = io::stdout();
    let mut out = BufWriter::new(stdout.lock());
    let mut stats = ListenStats::default();
    let mut printed = 0u64;
    loop {
        if args.count.is_some_and(|n| stats.messages >= n) {
            break;
        }
        let wait = match end {
            Some(e) => {
                let left = e.saturating_duration_since(Instant::now());
                if left.is_zero() {
                    break;
                }
                Some(left.min(Duration::from_millis(200)))
            }
            None => None,
        };
        let ev = match c.next_group_event(wait) {
            Ok(ev) => ev,
            Err(ClientError::Timeout(_)) => continue,
            Err(e) => return Err(e),
        };
        let now = Instant::now();
        let now_ns = monotonic_ns();
        let r = (|| -> io::Result<()> {
            match ev {
                GroupEventFrame::View(v) => {
                    stats.views += 1;
                    if !args.stats {
                        writeln!(out, "{}", view_line(&v))?;
                    }
                }
                GroupEventFrame::Messages(b) => {
                    for payload in &b.payloads {
                        if args.count.is_some_and(|n| stats.messages >= n) {
                            break;
                        }
                        if args.stats {
                            stats.on_message(payload, now, now_ns, warmup);
                            continue;
                        }
                        stats.messages += 1;
                        printed += 1;
                        writeln!(
                            out,
                            "message {} from {} ({}{}): {}",
                            b.group,
                            b.sender,
                            level_text(b.level),
                            if b.transitional { ", transitional" } else { "" },
                            format_payload(payload)
                        )?;
                    }
                }
            }
            out.flush()
        })();
        match r {
            Ok(()) => {}
            Err(e) if e.kind() == io::ErrorKind::BrokenPipe => return Ok(()),
            Err(e) => return Err(e.into()),
        }
    }
    let _ = printed;
    if args.stats {
        writeln!(out, "{}", stats.json())?;
        out.flush()?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_stamp_round_trips_and_a_plain_message_has_none() {
        let s = LoadStamp {
            tag: 7,
            seq: 1 << 40,
            sent_ns: 123_456_789,
        };
        let mut b = vec![0u8; 100];
        s.write(&mut b);
        assert_eq!(LoadStamp::read(&b), Some(s));
        assert_eq!(LoadStamp::read(b"hello world, a plain message"), None);
        assert_eq!(LoadStamp::read(&b[..10]), None);
    }

    #[test]
    fn listen_stats_count_rate_latency_and_order() {
        let mut st = ListenStats::default();
        let t0 = Instant::now();
        let mut buf = vec![0u8; 64];
        for (i, seq) in [0u64, 1, 2, 4, 5].into_iter().enumerate() {
            LoadStamp {
                tag: 1,
                seq,
                sent_ns: 1_000_000,
            }
            .write(&mut buf);
            let at = t0 + Duration::from_millis(100 * i as u64);
            st.on_message(&buf, at, 1_000_000 + 500_000, Duration::ZERO);
        }
        let j = st.json();
        assert_eq!(j["messages"], 5);
        assert_eq!(j["order_violations"], 1, "seq 3 is missing");
        assert_eq!(j["latency_us_p50"], 500);
        let rate = j["msgs_per_s"].as_f64().unwrap();
        assert!((rate - 10.0).abs() < 0.01, "{rate}");
    }

    #[test]
    fn services_and_names_are_checked() {
        assert_eq!(parse_service("safe"), Ok(DeliveryLevel::Safe));
        assert!(parse_service("fast").is_err());
        assert!(group_name("a b").is_err());
        assert!(member_name("").is_err());
    }
}
