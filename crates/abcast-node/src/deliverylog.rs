//! Instance-by-instance comparison of learners from their delivery logs (`abcast node
//! --delivery-log`: one line `instance origin first_seq count` per delivered batch).
//!
//! Whole-sequence counts and hashes compare learners that delivered from instance 1. A learner
//! restarted on in-memory storage starts from the oldest instance its peers still hold, so the
//! demo compares what every learner delivered *at each instance* instead:
//!
//! * agreement: one batch per instance across every learner and incarnation;
//! * no gap: inside the span an incarnation covered, it delivered every instance any learner
//!   delivered there, and every node's last incarnation reached the last instance delivered;
//! * integrity: no value id twice within one incarnation;
//! * nothing lost: every acknowledged value of an origin is among the values delivered.

use std::collections::BTreeMap;
use std::path::Path;

/// One delivered batch.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Entry {
    pub instance: u64,
    pub origin: u32,
    pub first_seq: u64,
    pub count: u64,
}

/// The log of one incarnation of one learner.
#[derive(Debug, Clone)]
pub struct LearnerLog {
    pub node: u32,
    pub incarnation: u64,
    pub entries: Vec<Entry>,
    /// Instances `[from, to)` passed over: trimmed at every acceptor.
    pub skipped: Vec<(u64, u64)>,
    /// Instances `[from, to)` covered by a snapshot installed from a peer (the learner fell
    /// behind the trim point): delivered by the snapshot's state, not one by one.
    pub installed: Vec<(u64, u64)>,
}

/// Reads every `deliveries-<incarnation>.log` of a node's directory. Every line must be
/// whole: for the logs of lives that were killed, see [`read_node_lives`].
pub fn read_node(node: u32, dir: &Path) -> Result<Vec<LearnerLog>, String> {
    read_node_lives(node, dir, |_, _| false).map(|(logs, _)| logs)
}

/// The unfinished last line of a killed life's log, dropped by [`read_node_lives`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TornTail {
    pub node: u32,
    pub incarnation: u64,
    /// The bytes after the last newline, as found.
    pub text: String,
}

/// Reads every `deliveries-<incarnation>.log` of a node's directory, in incarnation order.
/// `killed(incarnation, ordinal)` says whether the life that wrote a log was killed
/// (SIGKILL), `ordinal` being the log's place among the node's logs (0: the oldest), for a
/// caller that knows its lives only in the order it started them. A killed life's log may
/// end in a torn line: the node writes through a buffer that reaches the file in pieces
/// cut anywhere, even inside a number (`parse_killed_log`); that line alone is dropped and
/// returned. Any other malformed line, or a torn line in the log of a life that was not
/// killed, is an error naming the file and the line.
pub fn read_node_lives(
    node: u32,
    dir: &Path,
    killed: impl Fn(u64, usize) -> bool,
) -> Result<(Vec<LearnerLog>, Vec<TornTail>), String> {
    let rd = match std::fs::read_dir(dir) {
        Ok(rd) => rd,
        Err(e) => return Err(format!("cannot read {}: {e}", dir.display())),
    };
    let mut files = Vec::new();
    for item in rd.flatten() {
        let name = item.file_name().to_string_lossy().to_string();
        let Some(inc) = name
            .strip_prefix("deliveries-")
            .and_then(|r| r.strip_suffix(".log"))
        else {
            continue;
        };
        let incarnation: u64 = inc
            .parse()
            .map_err(|_| format!("bad delivery log name {name}"))?;
        files.push((incarnation, name, item.path()));
    }
    files.sort_by_key(|f| f.0);
    let mut logs = Vec::new();
    let mut torn = Vec::new();
    for (ordinal, (incarnation, name, path)) in files.into_iter().enumerate() {
        let text =
            std::fs::read_to_string(&path).map_err(|e| format!("cannot read {name}: {e}"))?;
        let p = if killed(incarnation, ordinal) {
            let (p, tail) = parse_killed_log(&text).map_err(|e| format!("{name}: {e}"))?;
            torn.extend(tail.map(|text| TornTail {
                node,
                incarnation,
                text: text.to_string(),
            }));
            p
        } else {
            parse_log(&text).map_err(|e| format!("{name}: {e}"))?
        };
        logs.push(LearnerLog {
            node,
            incarnation,
            entries: p.entries,
            skipped: p.skipped,
            installed: p.installed,
        });
    }
    Ok((logs, torn))
}

/// Parses the log of a life killed with SIGKILL. The node writes its log through a
/// buffer, and `writeln!` hands the buffer a line in pieces (each number, each space), so
/// the buffer reaches the file whenever it fills, cut anywhere in a line, and a kill
/// leaves the file ending in an unfinished line: `52569 2 1099512537856 ` (issue 33). The
/// text after the last newline is that line: it is dropped whole and returned, even when
/// it reads as a valid line, since `5 2 100 1` may be the start of `5 2 100 12`. Every
/// line before it must be whole and valid, as in [`parse_log`].
pub fn parse_killed_log(text: &str) -> Result<(ParsedLog, Option<&str>), String> {
    if text.is_empty() || text.ends_with('\n') {
        return parse_log(text).map(|p| (p, None));
    }
    let cut = text.rfind('\n').map_or(0, |i| i + 1);
    let (whole, tail) = text.split_at(cut);
    parse_log(whole).map(|p| (p, Some(tail)))
}

pub fn parse(text: &str) -> Result<Vec<Entry>, String> {
    parse_log(text).map(|p| p.entries)
}

/// Delivered batches, skipped instance ranges and installed snapshots of one log.
#[derive(Debug, Default)]
pub struct ParsedLog {
    pub entries: Vec<Entry>,
    pub skipped: Vec<(u64, u64)>,
    /// `[from, upto + 1)` per `snapshot UPTO` line, `from` one past the instance delivered
    /// before it.
    pub installed: Vec<(u64, u64)>,
}

/// Parses delivered batches, `skip FROM TO` lines (instances the learner passed over
/// because every acceptor had trimmed them) and `snapshot UPTO` lines (a snapshot fetched
/// from a peer covers every instance up to UPTO).
pub fn parse_log(text: &str) -> Result<ParsedLog, String> {
    let mut out = Vec::new();
    let mut skips = Vec::new();
    let mut installed = Vec::new();
    let mut reached = 0u64;
    for (i, line) in text.lines().enumerate() {
        let f: Vec<&str> = line.split_whitespace().collect();
        let bad = || {
            format!(
                "line {}: {line:?} is neither 4 numbers, `skip FROM TO` nor `snapshot UPTO`",
                i + 1
            )
        };
        let num = |k: usize| -> Result<u64, String> {
            f.get(k).and_then(|v| v.parse().ok()).ok_or_else(bad)
        };
        if f.first() == Some(&"skip") {
            if f.len() != 3 {
                return Err(bad());
            }
            skips.push((num(1)?, num(2)?));
            reached = reached.max(num(2)?.saturating_sub(1));
            continue;
        }
        if f.first() == Some(&"snapshot") {
            if f.len() != 2 {
                return Err(bad());
            }
            let upto = num(1)?;
            installed.push((reached + 1, upto.saturating_add(1)));
            reached = reached.max(upto);
            continue;
        }
        if f.len() != 4 {
            return Err(bad());
        }
        let origin =
            u32::try_from(num(1)?).map_err(|_| format!("line {}: origin out of range", i + 1))?;
        let instance = num(0)?;
        reached = reached.max(instance);
        out.push(Entry {
            instance,
            origin,
            first_seq: num(2)?,
            count: num(3)?,
        });
    }
    Ok(ParsedLog {
        entries: out,
        skipped: skips,
        installed,
    })
}

/// What the comparison found.
#[derive(Debug, Default, Clone)]
pub struct Verdict {
    pub instances_compared: u64,
    pub last_instance: u64,
    /// Instances learners passed over because every acceptor had trimmed them (in-memory
    /// storage without snapshots): not a disagreement, reported apart.
    pub trimmed_skipped: u64,
    /// Instances learners did not deliver one by one because a snapshot installed from a
    /// peer covered them.
    pub snapshot_covered: u64,
    pub disagreements: Vec<String>,
    pub duplicates: Vec<String>,
    pub lost: Vec<String>,
    /// Values per origin among all delivered batches.
    pub delivered_by_origin: BTreeMap<u32, u64>,
}

/// Compares the logs of every learner. `final_incarnation` names each node's last one;
/// `acked_by_origin` is what proposers were told was decided.
pub fn compare(logs: &[LearnerLog], acked_by_origin: &BTreeMap<u32, u64>) -> Verdict {
    let mut v = Verdict::default();
    let mut global: BTreeMap<u64, (Entry, u32, u64)> = BTreeMap::new();
    for log in logs {
        let mut prev = 0u64;
        for e in &log.entries {
            if e.instance <= prev {
                v.disagreements.push(format!(
                    "node {} (incarnation {}) delivered instance {} after {prev}",
                    log.node, log.incarnation, e.instance
                ));
            }
            prev = e.instance;
            match global.get(&e.instance) {
                None => {
                    global.insert(e.instance, (*e, log.node, log.incarnation));
                }
                Some((g, n, inc)) if g != e => v.disagreements.push(format!(
                    "ORDER DIFFERS at instance {}: node {} (incarnation {}) delivered {}:{}+{}, node {n} (incarnation {inc}) delivered {}:{}+{}",
                    e.instance, log.node, log.incarnation, e.origin, e.first_seq, e.count, g.origin, g.first_seq, g.count
                )),
                Some(_) => {}
            }
        }
        // Integrity: no value id twice within this incarnation.
        let mut by_origin: BTreeMap<u32, Vec<(u64, u64)>> = BTreeMap::new();
        for e in &log.entries {
            by_origin
                .entry(e.origin)
                .or_default()
                .push((e.first_seq, e.first_seq.saturating_add(e.count)));
        }
        for (origin, mut spans) in by_origin {
            spans.sort_unstable();
            for w in spans.windows(2) {
                if w[1].0 < w[0].1 {
                    v.duplicates.push(format!(
                        "node {} (incarnation {}) delivered values of origin {origin} from seq {} twice",
                        log.node, log.incarnation, w[1].0
                    ));
                    break;
                }
            }
        }
    }
    v.instances_compared = global.len() as u64;
    v.last_instance = global.keys().next_back().copied().unwrap_or(0);
    // No gap inside the span each incarnation covered.
    for log in logs {
        let (Some(first), Some(last)) = (log.entries.first(), log.entries.last()) else {
            continue;
        };
        let have: std::collections::BTreeSet<u64> =
            log.entries.iter().map(|e| e.instance).collect();
        let batches: std::collections::BTreeSet<(u32, u64)> = log
            .entries
            .iter()
            .map(|e| (e.origin, e.first_seq))
            .collect();
        // A batch decided in two instances is delivered at the first only (learners skip the
        // copy); a learner that restarted between the two delivers the second. Either way the
        // learner has the batch: skipping that instance is the de-duplication rule at work.
        let in_skip = |i: u64| log.skipped.iter().any(|&(f, t)| f <= i && i < t);
        let in_install = |i: u64| log.installed.iter().any(|&(f, t)| f <= i && i < t);
        let mut reported = false;
        for (i, (g, _, _)) in global.range(first.instance..=last.instance) {
            if have.contains(i) || batches.contains(&(g.origin, g.first_seq)) {
                continue;
            }
            if in_install(*i) {
                v.snapshot_covered += 1;
            } else if in_skip(*i) {
                v.trimmed_skipped += 1;
            } else if !reported {
                reported = true;
                v.disagreements.push(format!(
                    "node {} (incarnation {}) skipped instance {i}, delivered by others",
                    log.node, log.incarnation
                ));
            }
        }
    }
    // Every node's last incarnation reached the end.
    let mut last_by_node: BTreeMap<u32, &LearnerLog> = BTreeMap::new();
    for log in logs {
        let keep = last_by_node
            .get(&log.node)
            .is_none_or(|l| l.incarnation < log.incarnation);
        if keep {
            last_by_node.insert(log.node, log);
        }
    }
    for (node, log) in last_by_node {
        // A snapshot installed (or a trimmed range skipped) after the last delivery counts
        // as reaching the instance before its end.
        let reached = log
            .entries
            .last()
            .map_or(0, |e| e.instance)
            .max(log.installed.iter().map(|&(_, t)| t - 1).max().unwrap_or(0))
            .max(
                log.skipped
                    .iter()
                    .map(|&(_, t)| t.saturating_sub(1))
                    .max()
                    .unwrap_or(0),
            );
        if reached < v.last_instance {
            v.disagreements.push(format!(
                "node {node} is behind: delivered up to instance {reached}, others up to {}",
                v.last_instance
            ));
        }
    }
    let mut distinct: BTreeMap<(u32, u64), u64> = BTreeMap::new();
    for (e, _, _) in global.values() {
        distinct.insert((e.origin, e.first_seq), e.count);
    }
    for ((origin, _), count) in distinct {
        *v.delivered_by_origin.entry(origin).or_default() += count;
    }
    for (&origin, &acked) in acked_by_origin {
        let got = v.delivered_by_origin.get(&origin).copied().unwrap_or(0);
        if got < acked {
            v.lost.push(format!(
                "origin {origin}: {acked} values acknowledged, {got} delivered"
            ));
        }
    }
    v
}

#[cfg(test)]
mod tests {
    use super::*;

    fn log(node: u32, inc: u64, text: &str) -> LearnerLog {
        let p = parse_log(text).expect("parses");
        LearnerLog {
            node,
            incarnation: inc,
            entries: p.entries,
            skipped: p.skipped,
            installed: p.installed,
        }
    }

    #[test]
    fn a_restarted_learner_that_starts_late_agrees() {
        let full = "1 0 1 10\n2 1 1 5\n4 0 11 10\n";
        let logs = vec![
            log(0, 0, full),
            log(1, 0, full),
            log(2, 0, "1 0 1 10\n"),
            log(2, 1, "4 0 11 10\n"),
        ];
        let acked = BTreeMap::from([(0, 20), (1, 5)]);
        let v = compare(&logs, &acked);
        assert!(
            v.disagreements.is_empty() && v.duplicates.is_empty() && v.lost.is_empty(),
            "{v:?}"
        );
        assert_eq!(v.last_instance, 4);
    }

    #[test]
    fn order_gap_duplicate_and_loss_are_reported() {
        let logs = vec![
            log(0, 0, "1 0 1 10\n2 1 1 5\n3 0 5 10\n"),
            log(1, 0, "1 0 1 10\n2 1 2 5\n"),
            log(2, 0, "1 0 1 10\n3 0 5 10\n"),
        ];
        let acked = BTreeMap::from([(1, 50)]);
        let v = compare(&logs, &acked);
        assert!(
            v.disagreements
                .iter()
                .any(|d| d.contains("ORDER DIFFERS at instance 2")),
            "{v:?}"
        );
        assert!(
            v.disagreements
                .iter()
                .any(|d| d.contains("node 2 (incarnation 0) skipped instance 2")),
            "{v:?}"
        );
        assert!(
            v.disagreements
                .iter()
                .any(|d| d.contains("node 1 is behind")),
            "{v:?}"
        );
        assert!(v.duplicates.iter().any(|d| d.contains("node 0")), "{v:?}");
        assert!(v.lost.iter().any(|d| d.contains("origin 1")), "{v:?}");
    }

    #[test]
    fn a_batch_decided_twice_is_not_a_gap() {
        // Batch 1:1 decided in instances 2 and 5: learners that saw 2 skip 5; node 2 restarted
        // at 4 and delivers it at 5.
        let logs = vec![
            log(0, 0, "1 0 1 10\n2 1 1 5\n4 0 11 1\n6 0 12 1\n"),
            log(1, 0, "1 0 1 10\n2 1 1 5\n4 0 11 1\n6 0 12 1\n"),
            log(2, 1, "4 0 11 1\n5 1 1 5\n6 0 12 1\n"),
        ];
        let v = compare(&logs, &BTreeMap::from([(1, 5)]));
        assert!(v.disagreements.is_empty(), "{v:?}");
        assert_eq!(v.delivered_by_origin.get(&1), Some(&5));
    }

    #[test]
    fn instances_trimmed_everywhere_are_counted_apart() {
        let logs = vec![
            log(0, 0, "1 0 1 1\n2 0 2 1\n3 0 3 1\n4 0 4 1\n"),
            log(1, 1, "1 0 1 1\nskip 2 4\n4 0 4 1\n"),
        ];
        let v = compare(&logs, &BTreeMap::new());
        assert!(v.disagreements.is_empty(), "{v:?}");
        assert_eq!(v.trimmed_skipped, 2);
    }

    #[test]
    fn instances_covered_by_an_installed_snapshot_are_not_a_gap() {
        let logs = vec![
            log(0, 0, "1 0 1 1\n2 0 2 1\n3 0 3 1\n4 0 4 1\n5 0 5 1\n"),
            log(1, 0, "1 0 1 1\nsnapshot 3\n4 0 4 1\n5 0 5 1\n"),
        ];
        let v = compare(&logs, &BTreeMap::new());
        assert!(v.disagreements.is_empty(), "{v:?}");
        assert_eq!(v.snapshot_covered, 2);
        assert_eq!(logs[1].installed, vec![(2, 4)]);
        // A snapshot that does not cover the gap is still a gap.
        let logs = vec![
            log(0, 0, "1 0 1 1\n2 0 2 1\n3 0 3 1\n4 0 4 1\n"),
            log(1, 0, "1 0 1 1\nsnapshot 2\n4 0 4 1\n"),
        ];
        let v = compare(&logs, &BTreeMap::new());
        assert!(
            v.disagreements
                .iter()
                .any(|d| d.contains("skipped instance 3")),
            "{v:?}"
        );
        // A log that ends with an install reached the snapshot's instance; one short of
        // the others' end is behind.
        let logs = vec![
            log(0, 0, "1 0 1 1\n2 0 2 1\n3 0 3 1\n"),
            log(1, 0, "1 0 1 1\nsnapshot 3\n"),
        ];
        assert!(compare(&logs, &BTreeMap::new()).disagreements.is_empty());
        let logs = vec![
            log(0, 0, "1 0 1 1\n2 0 2 1\n3 0 3 1\n"),
            log(1, 0, "1 0 1 1\nsnapshot 2\n"),
        ];
        let v = compare(&logs, &BTreeMap::new());
        assert!(
            v.disagreements
                .iter()
                .any(|d| d.contains("node 1 is behind")),
            "{v:?}"
        );
    }

    #[test]
    fn garbage_lines_are_errors() {
        assert!(parse_log("snapshot\n").is_err());
        assert!(parse_log("skip 1\n").is_err());
        assert!(parse("1 2 3\n").is_err());
        assert!(parse("a b c d\n").is_err());
        assert!(parse("1 99999999999 1 1\n").is_err());
    }

    #[test]
    fn a_killed_lifes_torn_last_line_is_dropped_and_returned() {
        // The line of issue 33, cut after a space by the kill.
        let text = "52567 0 1099512537800 3\n52568 1 1099512537850 6\n52569 2 1099512537856 ";
        assert!(
            parse_log(text).is_err(),
            "read as a whole log, the torn line is an error"
        );
        let (p, tail) = parse_killed_log(text).expect("a killed life's log");
        assert_eq!(tail, Some("52569 2 1099512537856 "));
        assert_eq!(p.entries.len(), 2);
        assert_eq!(p.entries[1].instance, 52568);
        // A torn line that happens to read as a line is dropped too: `2 1 1 5` may be
        // the start of `2 1 1 57`.
        let (p, tail) = parse_killed_log("1 0 1 10\n2 1 1 5").expect("parses");
        assert_eq!((p.entries.len(), tail), (1, Some("2 1 1 5")));
        // Cut inside the first line; cut at a line's end; empty.
        let (p, tail) = parse_killed_log("1 0").expect("parses");
        assert_eq!((p.entries.len(), tail), (0, Some("1 0")));
        let (p, tail) = parse_killed_log("1 0 1 10\n").expect("parses");
        assert_eq!((p.entries.len(), tail), (1, None));
        let (p, tail) = parse_killed_log("").expect("parses");
        assert_eq!((p.entries.len(), tail), (0, None));
    }

    #[test]
    fn a_malformed_line_before_the_last_is_an_error_even_in_a_killed_lifes_log() {
        let e = parse_killed_log("1 0 1 10\n2 x 1\n3 0 11 1\n4 0").unwrap_err();
        assert!(e.starts_with("line 2:"), "{e}");
        // Malformed and whole (ends with a newline): the last line too.
        let e = parse_killed_log("1 0 1 10\n2 x 1\n").unwrap_err();
        assert!(e.starts_with("line 2:"), "{e}");
    }

    #[test]
    fn only_the_lives_that_were_killed_may_end_in_a_torn_line() {
        let dir = std::env::temp_dir().join(format!("abcast-deliverylog-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).expect("dir");
        std::fs::write(dir.join("deliveries-3.log"), "1 0 1 10\n2 0 11 5\n3 0 1").expect("w");
        std::fs::write(dir.join("deliveries-7.log"), "4 0 16 1\n5 0 1").expect("w");
        std::fs::write(dir.join("other.log"), "not a delivery log").expect("w");
        // By incarnation: 3 was killed, 7 (the last life) was not.
        let e = read_node_lives(1, &dir, |inc, _| inc == 3).unwrap_err();
        assert!(e.starts_with("deliveries-7.log: line 2:"), "{e}");
        assert!(
            read_node(1, &dir)
                .unwrap_err()
                .starts_with("deliveries-3.log")
        );
        // By place: both lives killed (the ordinals are 0 and 1, in incarnation order).
        let (logs, torn) = read_node_lives(1, &dir, |_, ordinal| ordinal < 2).expect("reads");
        assert_eq!(
            logs.iter()
                .map(|l| (l.incarnation, l.entries.len()))
                .collect::<Vec<_>>(),
            [(3, 2), (7, 1)]
        );
        assert_eq!(
            torn,
            [
                TornTail {
                    node: 1,
                    incarnation: 3,
                    text: "3 0 1".into()
                },
                TornTail {
                    node: 1,
                    incarnation: 7,
                    text: "5 0 1".into()
                }
            ]
        );
        let _ = std::fs::remove_dir_all(&dir);
    }
}
