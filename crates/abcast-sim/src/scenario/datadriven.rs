//! The file format of scenario tests, after cockroachdb/datadriven (the format etcd-io/raft's
//! `testdata/*.txt` interaction tests use): a command line, a `----` line, and the output
//! the command must print, ended by a blank line.
//!
//! ```text
//! # a comment
//! propose node=0 values=a,b
//! ----
//! n0 delivered 1:a 2:b
//! ```
//!
//! An output that has blank lines in it is written between doubled separators (`----`
//! `----` ... `----` `----`). Arguments are `key`, `key=value` or `key=a,b,c` (a list;
//! `key=(a,b)` too). With the environment variable `REWRITE` set, [`run_file`] writes the
//! actual outputs back into the file instead of comparing.

use std::fmt::Write as _;
use std::path::Path;

/// One argument of a command: `key` (no values), `key=v` or `key=v1,v2`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Arg {
    pub key: String,
    pub vals: Vec<String>,
}

/// One step of a file: the command, its arguments, and where its expected output is.
#[derive(Clone, Debug)]
pub struct Case {
    /// 1-based line of the command in the file.
    pub line: usize,
    /// The command as written (for failure messages).
    pub text: String,
    pub cmd: String,
    pub args: Vec<Arg>,
    pub expected: String,
    /// Line index of the `----` separator, and one past the last line of the expected block.
    sep: usize,
    end: usize,
}

/// Splits a command line into the command and its arguments.
pub fn parse_command(line: &str) -> Result<(String, Vec<Arg>), String> {
    let mut words = line.split_whitespace();
    let cmd = words.next().ok_or("empty command")?.to_string();
    let mut args = Vec::new();
    for w in words {
        let (key, vals) = match w.split_once('=') {
            None => (w.to_string(), Vec::new()),
            Some((k, v)) => {
                let v = v
                    .strip_prefix('(')
                    .and_then(|v| v.strip_suffix(')'))
                    .unwrap_or(v);
                let vals = if v.is_empty() {
                    Vec::new()
                } else {
                    v.split(',').map(|s| s.trim().to_string()).collect()
                };
                (k.to_string(), vals)
            }
        };
        if key.is_empty() {
            return Err(format!("argument {w:?} has no name"));
        }
        args.push(Arg { key, vals });
    }
    Ok((cmd, args))
}

/// Parses a scenario file into its steps.
pub fn parse(text: &str) -> Result<Vec<Case>, String> {
    let lines: Vec<&str> = text.lines().collect();
    let mut cases = Vec::new();
    let mut i = 0;
    while i < lines.len() {
        let l = lines[i].trim_end();
        if l.trim().is_empty() || l.trim_start().starts_with('#') {
            i += 1;
            continue;
        }
        let line = i + 1;
        // A command may go on over lines that end in a backslash.
        let mut text = String::new();
        loop {
            let cur = lines
                .get(i)
                .ok_or_else(|| format!("line {line}: the file ends inside a command"))?
                .trim_end();
            i += 1;
            match cur.strip_suffix('\\') {
                Some(head) => {
                    text.push_str(head);
                    text.push(' ');
                }
                None => {
                    text.push_str(cur);
                    break;
                }
            }
        }
        if lines.get(i).map(|l| l.trim_end()) != Some("----") {
            return Err(format!(
                "line {line}: a command must be followed by a `----` line: {text}"
            ));
        }
        let sep = i;
        i += 1;
        let mut expected = Vec::new();
        if lines.get(i).map(|l| l.trim_end()) == Some("----") {
            // Doubled separators: the output ends at `----` `----`.
            i += 1;
            loop {
                match lines.get(i).map(|l| l.trim_end()) {
                    None => return Err(format!("line {line}: unterminated `----` `----` block")),
                    Some("----") if lines.get(i + 1).map(|l| l.trim_end()) == Some("----") => {
                        i += 2;
                        break;
                    }
                    Some(l) => expected.push(l),
                }
                i += 1;
            }
        } else {
            while let Some(l) = lines.get(i).map(|l| l.trim_end()) {
                if l.is_empty() {
                    break;
                }
                expected.push(l);
                i += 1;
            }
        }
        let (cmd, args) = parse_command(&text).map_err(|e| format!("line {line}: {e}"))?;
        cases.push(Case {
            line,
            text: text.trim().to_string(),
            cmd,
            args,
            expected: expected.join("\n"),
            sep,
            end: i,
        });
    }
    Ok(cases)
}

/// Trailing blanks off every line, and blank lines off both ends.
pub fn normalize(s: &str) -> String {
    let lines: Vec<&str> = s.lines().map(str::trim_end).collect();
    let first = lines
        .iter()
        .position(|l| !l.is_empty())
        .unwrap_or(lines.len());
    let last = lines
        .iter()
        .rposition(|l| !l.is_empty())
        .map_or(0, |p| p + 1);
    if first >= last {
        return String::new();
    }
    lines[first..last].join("\n")
}

/// What became of one file.
#[derive(Debug, Default)]
pub struct FileReport {
    /// Steps run (up to the first failure).
    pub steps: usize,
    /// The first failing step, rendered for people; `None` if every step passed.
    pub failure: Option<String>,
    /// The file asked to be skipped, and why.
    pub skipped: Option<String>,
    pub rewritten: bool,
}

/// What a step handler returns: the output, or a reason to skip the rest of the file.
pub enum StepResult {
    Output(String),
    Skip(String),
}

/// Whether outputs are written back (`REWRITE` set, to anything but `0` or empty).
pub fn rewrite_requested() -> bool {
    std::env::var("REWRITE").is_ok_and(|v| !v.is_empty() && v != "0")
}

/// Runs every step of the file at `path` through `step` and compares (or, with `rewrite`,
/// writes back) the outputs. The first failing step stops the file: later steps build on
/// the state it left.
pub fn run_file(
    path: &Path,
    rewrite: bool,
    mut step: impl FnMut(&Case) -> StepResult,
) -> Result<FileReport, String> {
    let text = std::fs::read_to_string(path).map_err(|e| format!("{}: {e}", path.display()))?;
    let cases = parse(&text).map_err(|e| format!("{}: {e}", path.display()))?;
    let lines: Vec<&str> = text.lines().collect();
    let mut report = FileReport::default();
    let mut new_text = String::new();
    let mut copied = 0;
    for case in &cases {
        let actual = match step(case) {
            StepResult::Output(s) => normalize(&s),
            StepResult::Skip(why) => {
                report.skipped = Some(why);
                return Ok(report);
            }
        };
        report.steps += 1;
        if rewrite {
            for l in &lines[copied..=case.sep] {
                new_text.push_str(l);
                new_text.push('\n');
            }
            if actual.lines().any(|l| l.is_empty()) {
                let _ = writeln!(new_text, "----\n{actual}\n----\n----");
            } else if !actual.is_empty() {
                let _ = writeln!(new_text, "{actual}");
            }
            copied = case.end;
        } else if actual != case.expected {
            report.failure = Some(render_failure(path, case, &actual));
            return Ok(report);
        }
    }
    if rewrite {
        for l in &lines[copied..] {
            new_text.push_str(l);
            new_text.push('\n');
        }
        if new_text != text {
            std::fs::write(path, &new_text).map_err(|e| format!("{}: {e}", path.display()))?;
            report.rewritten = true;
        }
    }
    Ok(report)
}

fn render_failure(path: &Path, case: &Case, actual: &str) -> String {
    let mut s = format!(
        "{}:{}: the output of `{}` differs\n",
        path.display(),
        case.line,
        case.text
    );
    let indent = |t: &str| -> String {
        if t.is_empty() {
            "    (nothing)\n".to_string()
        } else {
            t.lines().map(|l| format!("    {l}\n")).collect()
        }
    };
    let _ = write!(s, "  expected:\n{}", indent(&case.expected));
    let _ = write!(s, "  actual:\n{}", indent(actual));
    s.push_str("  diff (- expected, + actual):\n");
    for d in diff_lines(&case.expected, actual) {
        let _ = writeln!(s, "    {d}");
    }
    s.push_str("  (REWRITE=1 cargo test -p abcast-sim --test scenarios writes the actual outputs into the file)\n");
    s
}

/// A line diff (longest common subsequence): `  ` same, `- ` only expected, `+ ` only actual.
pub fn diff_lines(expected: &str, actual: &str) -> Vec<String> {
    let a: Vec<&str> = expected.lines().collect();
    let b: Vec<&str> = actual.lines().collect();
    let (n, m) = (a.len(), b.len());
    let mut lcs = vec![vec![0u32; m + 1]; n + 1];
    for i in (0..n).rev() {
        for j in (0..m).rev() {
            lcs[i][j] = if a[i] == b[j] {
                lcs[i + 1][j + 1] + 1
            } else {
                lcs[i + 1][j].max(lcs[i][j + 1])
            };
        }
    }
    let (mut i, mut j) = (0, 0);
    let mut out = Vec::new();
    while i < n || j < m {
        if i < n && j < m && a[i] == b[j] {
            out.push(format!("  {}", a[i]));
            i += 1;
            j += 1;
        } else if i < n && (j == m || lcs[i + 1][j] >= lcs[i][j + 1]) {
            out.push(format!("- {}", a[i]));
            i += 1;
        } else {
            out.push(format!("+ {}", b[j]));
            j += 1;
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_single_and_doubled_blocks() {
        let text = "# c\nfoo a=1,2 b\n----\nx\ny\n\nbar \\\n  c=3\n----\n----\nl1\n\nl2\n----\n----\nbaz\n----\n";
        let cases = parse(text).unwrap();
        assert_eq!(cases.len(), 3);
        assert_eq!(cases[0].cmd, "foo");
        assert_eq!(cases[0].args[0].vals, vec!["1", "2"]);
        assert!(cases[0].args[1].vals.is_empty());
        assert_eq!(cases[0].expected, "x\ny");
        assert_eq!(cases[1].args[0].key, "c");
        assert_eq!(cases[1].expected, "l1\n\nl2");
        assert_eq!(cases[2].expected, "");
    }

    #[test]
    fn diff_marks_changed_lines() {
        assert_eq!(
            diff_lines("a\nb\nc", "a\nx\nc"),
            vec!["  a", "- b", "+ x", "  c"]
        );
    }
}
