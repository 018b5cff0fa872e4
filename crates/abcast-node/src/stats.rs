//! Parsing and merging the stats lines that `abcast node --json-stats` prints on stdout
//! (docs/CONTRACTS.md, "Node stats lines").
//!
//! The parent (`abcast demo`, `abcast bench`) never trusts a line: a node that crashes
//! mid-write, a stray `println!` or a version skew must give a clear error for that line, never
//! a panic or a silently wrong number. Every field the contract names is required, so a
//! renamed field shows up as an error at once instead of as a zero in a benchmark.

use base64::Engine as _;
use hdrhistogram::Histogram;
use hdrhistogram::serialization::Deserializer;
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;
use std::fmt;

/// Longest line accepted. A histogram serialization is a few KiB; anything much larger is
/// not a stats line and must not make the parent allocate without limit.
pub const LINE_BYTES_MAX: usize = 4 << 20;

/// Why a line is not a valid stats line.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StatsError {
    pub reason: String,
}

impl fmt::Display for StatsError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "bad stats line: {}", self.reason)
    }
}

impl std::error::Error for StatsError {}

fn bad<T>(reason: impl Into<String>) -> Result<T, StatsError> {
    Err(StatsError {
        reason: reason.into(),
    })
}

/// A periodic line (`"type":"stats"`) or the last line a node prints before a clean exit
/// (`"type":"final"`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum LineKind {
    Stats,
    Final,
}

/// One stats line, as the contract defines it. Counters are totals since this incarnation of
/// the node started.
#[derive(Debug, Clone, PartialEq)]
pub struct StatsLine {
    pub kind: LineKind,
    pub node: u32,
    pub incarnation: u64,
    /// The node's own clock; only differences between lines of one incarnation mean anything.
    pub t_us: u64,
    pub delivered_values: u64,
    pub delivered_bytes: u64,
    pub delivered_instance: u64,
    /// FNV-1a 64 over the delivered value ids, in delivery order, as hex (`node::OrderHash`).
    pub order_hash: String,
    pub proposed_values: u64,
    pub acked_values: u64,
    pub busy_rejections: u64,
    /// The coordinator this node believes in, if any.
    pub coordinator: Option<u32>,
    /// The node restarted without its acceptor state (memory storage) and its peers have
    /// not repaired it yet: it neither votes nor counts.
    pub amnesic: bool,
    pub cpu_user_ms: u64,
    pub cpu_sys_ms: u64,
    pub rss_kib: u64,
    /// Bytes of acceptor log on disk (durable storage; 0 otherwise), and appended since
    /// the node started.
    pub log_bytes: u64,
    pub log_appended_bytes: u64,
    pub lat_count: u64,
    pub lat_us_p50: f64,
    pub lat_us_p99: f64,
    pub lat_us_p999: f64,
    /// HdrHistogram V2 serialization, base64: lets the parent merge nodes exactly.
    pub lat_hist: Option<String>,
    /// With `--load-stamp`: the latency of every value this node delivered, from its
    /// proposer's stamp (any origin, this node's own too), and its histogram.
    pub lat_all_count: u64,
    pub lat_all_hist: Option<String>,
    pub delivered_by_origin: BTreeMap<u32, u64>,
    pub acked_by_origin: BTreeMap<u32, u64>,
    pub duplicate_deliveries: u64,
    /// Per ring of a Multi-Ring node (empty otherwise), by group.
    pub groups: BTreeMap<u16, GroupLine>,
}

/// One ring's figures in a Multi-Ring node's stats line.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct GroupLine {
    /// Values of this ring delivered here (after the merge).
    pub delivered_values: u64,
    pub delivered_bytes: u64,
    /// Decided instances of this ring waiting in the merge now, and the most seen since the
    /// node started (seed 000 figure 4.6).
    pub buffered_instances: u64,
    pub buffered_instances_max: u64,
    /// The learner follows this ring now.
    pub following: bool,
}

/// The wire shape of a stats line (docs/CONTRACTS.md): the node serializes it, the parent
/// deserializes it and converts it into [`StatsLine`] after checks serde cannot express. One
/// definition for both sides, so they cannot drift apart.
#[derive(Serialize, Deserialize)]
pub struct WireLine {
    #[serde(rename = "type")]
    pub kind: String,
    pub node: u32,
    pub incarnation: u64,
    pub t_us: u64,
    pub delivered_values: u64,
    pub delivered_bytes: u64,
    pub delivered_instance: u64,
    pub order_hash: String,
    pub proposed_values: u64,
    pub acked_values: u64,
    pub busy_rejections: u64,
    pub coordinator: Option<u32>,
    #[serde(default)]
    pub amnesic: bool,
    pub cpu_user_ms: u64,
    pub cpu_sys_ms: u64,
    pub rss_kib: u64,
    #[serde(default)]
    pub log_bytes: u64,
    #[serde(default)]
    pub log_appended_bytes: u64,
    pub lat_count: u64,
    pub lat_us_p50: f64,
    pub lat_us_p99: f64,
    pub lat_us_p999: f64,
    #[serde(default)]
    pub lat_hist: Option<String>,
    /// With `--load-stamp`: every delivered value's latency from its proposer's stamp.
    #[serde(default, skip_serializing_if = "is_zero")]
    pub lat_all_count: u64,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub lat_all_hist: Option<String>,
    /// JSON object keys are strings: node ids as decimal text.
    pub delivered_by_origin: BTreeMap<String, u64>,
    pub acked_by_origin: BTreeMap<String, u64>,
    pub duplicate_deliveries: u64,
    /// Multi-Ring nodes only; keys are group ids as decimal text.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub groups: BTreeMap<String, GroupLine>,
    /// Datagrams the node's UDP sockets dropped at a check (bad bytes, a message that does
    /// not decode, another cluster, a stranger), over every socket.
    #[serde(default)]
    pub datagrams_rejected: u64,
    /// Of `datagrams_rejected`: those from outside the configured members.
    #[serde(default)]
    pub datagrams_unknown_sender: u64,
    /// Client connections that moved onto the shared-memory rings (`runtime::shm`).
    #[serde(default)]
    pub client_shm_opened: u64,
    /// Client and peer connections closed for bad input (a malformed frame, a broken ring).
    #[serde(default)]
    pub bad_input_closes: u64,
}

fn is_zero(v: &u64) -> bool {
    *v == 0
}

fn origins(field: &str, raw: BTreeMap<String, u64>) -> Result<BTreeMap<u32, u64>, StatsError> {
    let mut out = BTreeMap::new();
    for (key, count) in raw {
        match key.parse::<u32>() {
            Ok(origin) => {
                out.insert(origin, count);
            }
            Err(_) => return bad(format!("{field}: key {key:?} is not a node id")),
        }
    }
    Ok(out)
}

/// Parses one stdout line of a node. Empty lines are errors too: the contract has none.
pub fn parse_line(line: &str) -> Result<StatsLine, StatsError> {
    let line = line.trim();
    if line.len() > LINE_BYTES_MAX {
        return bad(format!("{} bytes, at most {LINE_BYTES_MAX}", line.len()));
    }
    if !line.starts_with('{') {
        let shown: String = line.chars().take(60).collect();
        return bad(format!("not a JSON object: {shown:?}"));
    }
    let raw: WireLine = match serde_json::from_str(line) {
        Ok(raw) => raw,
        Err(e) => return bad(e.to_string()),
    };
    let kind = match raw.kind.as_str() {
        "stats" => LineKind::Stats,
        "final" => LineKind::Final,
        other => return bad(format!("type {other:?}, expected \"stats\" or \"final\"")),
    };
    if raw.order_hash.is_empty()
        || raw.order_hash.len() > 16
        || !raw.order_hash.chars().all(|c| c.is_ascii_hexdigit())
    {
        return bad(format!(
            "order_hash {:?} is not 1 to 16 hex digits",
            raw.order_hash
        ));
    }
    for (field, v) in [
        ("lat_us_p50", raw.lat_us_p50),
        ("lat_us_p99", raw.lat_us_p99),
        ("lat_us_p999", raw.lat_us_p999),
    ] {
        if !v.is_finite() || v < 0.0 {
            return bad(format!("{field} = {v} is not a latency"));
        }
    }
    Ok(StatsLine {
        kind,
        node: raw.node,
        incarnation: raw.incarnation,
        t_us: raw.t_us,
        delivered_values: raw.delivered_values,
        delivered_bytes: raw.delivered_bytes,
        delivered_instance: raw.delivered_instance,
        order_hash: raw.order_hash.to_ascii_lowercase(),
        proposed_values: raw.proposed_values,
        acked_values: raw.acked_values,
        busy_rejections: raw.busy_rejections,
        coordinator: raw.coordinator,
        amnesic: raw.amnesic,
        cpu_user_ms: raw.cpu_user_ms,
        cpu_sys_ms: raw.cpu_sys_ms,
        rss_kib: raw.rss_kib,
        log_bytes: raw.log_bytes,
        log_appended_bytes: raw.log_appended_bytes,
        lat_count: raw.lat_count,
        lat_us_p50: raw.lat_us_p50,
        lat_us_p99: raw.lat_us_p99,
        lat_us_p999: raw.lat_us_p999,
        lat_hist: raw.lat_hist.filter(|h| !h.is_empty()),
        lat_all_count: raw.lat_all_count,
        lat_all_hist: raw.lat_all_hist.filter(|h| !h.is_empty()),
        delivered_by_origin: origins("delivered_by_origin", raw.delivered_by_origin)?,
        acked_by_origin: origins("acked_by_origin", raw.acked_by_origin)?,
        duplicate_deliveries: raw.duplicate_deliveries,
        groups: groups(raw.groups)?,
    })
}

fn groups(raw: BTreeMap<String, GroupLine>) -> Result<BTreeMap<u16, GroupLine>, StatsError> {
    let mut out = BTreeMap::new();
    for (key, g) in raw {
        match key.parse::<u16>() {
            Ok(group) => {
                out.insert(group, g);
            }
            Err(_) => return bad(format!("groups: key {key:?} is not a group id")),
        }
    }
    Ok(out)
}

/// Decodes a `lat_hist` field (base64 of an HdrHistogram V2 or V2+deflate serialization).
pub fn decode_histogram(b64: &str) -> Result<Histogram<u64>, StatsError> {
    let bytes = match base64::engine::general_purpose::STANDARD.decode(b64.trim()) {
        Ok(bytes) => bytes,
        Err(e) => return bad(format!("lat_hist is not base64: {e}")),
    };
    let mut reader = bytes.as_slice();
    match Deserializer::new().deserialize::<u64, _>(&mut reader) {
        Ok(h) => Ok(h),
        Err(e) => bad(format!(
            "lat_hist is not an HdrHistogram V2 serialization: {e:?}"
        )),
    }
}

/// The latency of the proposals delivered between two lines of one incarnation.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct IntervalLatency {
    pub count: u64,
    pub p50_us: f64,
    pub p99_us: f64,
}

/// The latency between two lines of one incarnation, from their `lat_hist` fields (each
/// covers the incarnation's life so far, so the interval is their difference). `prev` is
/// `None` for the incarnation's first line. `None` when a histogram is missing or bad, or
/// the interval holds no sample.
pub fn interval_latency(prev: Option<&str>, cur: &str) -> Option<IntervalLatency> {
    let mut h = decode_histogram(cur).ok()?;
    if let Some(p) = prev {
        let p = decode_histogram(p).ok()?;
        h.subtract(&p).ok()?;
    }
    (!h.is_empty()).then(|| IntervalLatency {
        count: h.len(),
        p50_us: h.value_at_quantile(0.5) as f64,
        p99_us: h.value_at_quantile(0.99) as f64,
    })
}

/// Latency percentiles in microseconds, and whether they are exact.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct LatencySummary {
    pub count: u64,
    pub p50_us: f64,
    pub p99_us: f64,
    pub p999_us: f64,
    /// False when some node sent no `lat_hist`, so the figures are the worst per-node
    /// percentiles instead of percentiles of the merged distribution.
    pub exact: bool,
}

/// Merges the latency of several lines (one per node incarnation, each covering that
/// incarnation's whole life). With every `lat_hist` present the result is exact; otherwise
/// it falls back to the worst per-line percentile, which over-states and says so.
pub fn merge_latency<'a>(lines: impl IntoIterator<Item = &'a StatsLine>) -> LatencySummary {
    let mut merged: Option<Histogram<u64>> = None;
    let mut exact = true;
    let mut fallback = LatencySummary {
        count: 0,
        p50_us: 0.0,
        p99_us: 0.0,
        p999_us: 0.0,
        exact: false,
    };
    for line in lines {
        if line.lat_count == 0 {
            continue;
        }
        fallback.count += line.lat_count;
        fallback.p50_us = fallback.p50_us.max(line.lat_us_p50);
        fallback.p99_us = fallback.p99_us.max(line.lat_us_p99);
        fallback.p999_us = fallback.p999_us.max(line.lat_us_p999);
        let decoded = line.lat_hist.as_deref().map(decode_histogram);
        match (decoded, merged.as_mut()) {
            (Some(Ok(h)), Some(m)) => {
                if m.add(&h).is_err() {
                    exact = false;
                }
            }
            (Some(Ok(h)), None) => merged = Some(h),
            _ => exact = false,
        }
    }
    match merged {
        Some(h) if exact && !h.is_empty() => LatencySummary {
            count: h.len(),
            p50_us: h.value_at_quantile(0.5) as f64,
            p99_us: h.value_at_quantile(0.99) as f64,
            p999_us: h.value_at_quantile(0.999) as f64,
            exact: true,
        },
        _ => fallback,
    }
}

/// Median of a list (mean of the two middle values for an even count); `None` when empty.
pub fn median(values: &[f64]) -> Option<f64> {
    let mut v: Vec<f64> = values.iter().copied().filter(|x| x.is_finite()).collect();
    if v.is_empty() {
        return None;
    }
    v.sort_by(f64::total_cmp);
    let mid = v.len() / 2;
    if v.len() % 2 == 1 {
        Some(v[mid])
    } else {
        Some((v[mid - 1] + v[mid]) / 2.0)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use hdrhistogram::serialization::{Serializer, V2Serializer};

    pub(crate) fn sample_line(kind: &str, node: u32, delivered: u64, hist: Option<&str>) -> String {
        let hist = hist
            .map(|h| format!(",\"lat_hist\":\"{h}\""))
            .unwrap_or_default();
        format!(
            "{{\"type\":\"{kind}\",\"node\":{node},\"incarnation\":0,\"t_us\":1234567,\
             \"delivered_values\":{delivered},\"delivered_bytes\":{},\"delivered_instance\":7,\
             \"order_hash\":\"0123abcd\",\"proposed_values\":5,\"acked_values\":4,\
             \"busy_rejections\":0,\"coordinator\":0,\"cpu_user_ms\":10,\"cpu_sys_ms\":5,\
             \"rss_kib\":2048,\"lat_count\":4,\"lat_us_p50\":100,\"lat_us_p99\":200,\
             \"lat_us_p999\":300{hist},\"delivered_by_origin\":{{\"0\":3,\"1\":2}},\
             \"acked_by_origin\":{{\"{node}\":4}},\"duplicate_deliveries\":0}}",
            delivered * 1024
        )
    }

    fn hist_b64(values_us: &[u64]) -> String {
        let mut h = Histogram::<u64>::new(3).unwrap();
        for &v in values_us {
            h.record(v).unwrap();
        }
        let mut buf = Vec::new();
        V2Serializer::new().serialize(&h, &mut buf).unwrap();
        base64::engine::general_purpose::STANDARD.encode(buf)
    }

    #[test]
    fn interval_latency_is_the_difference_of_two_lines() {
        let first = hist_b64(&[100, 100, 100]);
        let second = hist_b64(&[100, 100, 100, 5000, 5000, 5000, 5000]);
        let one = interval_latency(None, &first).unwrap();
        assert_eq!(one.count, 3);
        let two = interval_latency(Some(&first), &second).unwrap();
        assert_eq!(two.count, 4);
        assert!((4990.0..=5010.0).contains(&two.p50_us), "{two:?}");
        assert_eq!(
            interval_latency(Some(&second), &second),
            None,
            "an empty interval"
        );
        assert_eq!(interval_latency(None, "not base64!"), None);
    }

    #[test]
    fn well_formed_line_parses_every_field() {
        let line = parse_line(&sample_line("stats", 1, 5, None)).unwrap();
        assert_eq!(line.kind, LineKind::Stats);
        assert_eq!(line.node, 1);
        assert_eq!(line.delivered_values, 5);
        assert_eq!(line.delivered_bytes, 5 * 1024);
        assert_eq!(line.coordinator, Some(0));
        assert_eq!(line.delivered_by_origin.get(&1), Some(&2));
        assert_eq!(line.acked_by_origin.get(&1), Some(&4));
        assert_eq!(line.lat_hist, None);
        let fin = parse_line(&sample_line("final", 2, 5, None)).unwrap();
        assert_eq!(fin.kind, LineKind::Final);
    }

    #[test]
    fn garbage_lines_are_rejected_with_an_error() {
        let good = sample_line("stats", 1, 5, None);
        let garbage = [
            String::new(),
            "hello world".to_string(),
            "{".to_string(),
            "{}".to_string(),
            "[1,2,3]".to_string(),
            "\u{0}\u{1}\u{ff}".to_string(),
            good.replace("\"stats\"", "\"status\""),
            good.replace("\"0123abcd\"", "\"not-hex\""),
            good.replace("\"0123abcd\"", "\"\""),
            good.replace("\"delivered_values\":5", "\"delivered_values\":-5"),
            good.replace("\"delivered_values\":5,", ""),
            good.replace("{\"0\":3", "{\"zero\":3"),
            good.replace("\"node\":1", "\"node\":\"one\""),
            good[..good.len() / 2].to_string(),
        ];
        for g in &garbage {
            let err = parse_line(g).expect_err(g);
            assert!(!err.to_string().is_empty());
        }
    }

    #[test]
    fn null_coordinator_means_unknown() {
        let line =
            sample_line("stats", 1, 5, None).replace("\"coordinator\":0", "\"coordinator\":null");
        assert_eq!(parse_line(&line).unwrap().coordinator, None);
    }

    #[test]
    fn merged_latency_is_exact_with_histograms() {
        let a = parse_line(&sample_line(
            "final",
            0,
            5,
            Some(&hist_b64(&[100, 100, 100])),
        ))
        .unwrap();
        let b = parse_line(&sample_line("final", 1, 5, Some(&hist_b64(&[900])))).unwrap();
        let m = merge_latency([&a, &b]);
        assert!(m.exact);
        assert_eq!(m.count, 4);
        assert!((m.p50_us - 100.0).abs() < 1.0);
        assert!((m.p999_us - 900.0).abs() < 1.0);
    }

    #[test]
    fn merged_latency_falls_back_to_worst_percentile_without_histograms() {
        let a = parse_line(&sample_line("final", 0, 5, None)).unwrap();
        let m = merge_latency([&a]);
        assert!(!m.exact);
        assert_eq!(m.p99_us, 200.0);
    }

    #[test]
    fn corrupt_histogram_is_an_error() {
        assert!(decode_histogram("!!!").is_err());
        assert!(decode_histogram("aGVsbG8=").is_err());
    }

    #[test]
    fn median_of_even_and_odd_lists() {
        assert_eq!(median(&[]), None);
        assert_eq!(median(&[3.0, 1.0, 2.0]), Some(2.0));
        assert_eq!(median(&[4.0, 1.0, 2.0, 3.0]), Some(2.5));
    }
}
