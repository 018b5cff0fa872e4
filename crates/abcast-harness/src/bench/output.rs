//! What every `abcast bench` does with its results once the runs are over, in one place:
//! where the files go, how a file and a CSV field are written, how a summary quotes the
//! command and lists failed runs, and what is printed last (one JSON line with `--json`,
//! else text) with the exit status. Each bench keeps its own CSV columns, plot and
//! sentences; only the parts that must not drift apart between benches are here.

use super::BenchArgs;
use crate::error::HarnessError;
use std::fmt::Write as _;
use std::fs;
use std::io::Write as _;
use std::path::{Path, PathBuf};

/// The result directory: `--out`, else `results/NAME-STAMP/`. Created before the first run,
/// so that an unwritable directory fails the bench before minutes of measuring are lost.
pub(crate) fn create_out_dir(
    args: &BenchArgs,
    name: &str,
    stamp: &str,
) -> Result<PathBuf, HarnessError> {
    let out = args
        .out
        .clone()
        .unwrap_or_else(|| PathBuf::from("results").join(format!("{name}-{stamp}")));
    fs::create_dir_all(&out)
        .map_err(|e| HarnessError::Runtime(format!("cannot create {}: {e}", out.display())))?;
    Ok(out)
}

/// Writes a result file, naming it in the error.
pub(crate) fn write_file(path: &Path, text: &str) -> Result<(), HarnessError> {
    fs::write(path, text)
        .map_err(|e| HarnessError::Runtime(format!("cannot write {}: {e}", path.display())))
}

/// A CSV field, quoted when it holds a comma, a quote or a line break.
pub(crate) fn csv_field(s: &str) -> String {
    if s.contains([',', '"', '\n']) {
        format!("\"{}\"", s.replace('"', "\"\""))
    } else {
        s.to_string()
    }
}

/// The command line as a summary quotes it, an argument with a space in quotes, so that a
/// reader can run the same bench again.
pub(crate) fn command_line() -> String {
    let command: Vec<String> = std::env::args()
        .map(|a| if a.contains(' ') { format!("'{a}'") } else { a })
        .collect();
    command.join(" ")
}

/// Why a run failed, as the summaries print it: its error, or the cluster checks.
pub(crate) fn failure_reason(error: Option<&str>) -> &str {
    error.unwrap_or("checks failed (agreement, loss or duplicates)")
}

/// Appends the summary's "Failed runs" section: one `- line` per failed run (nothing when
/// every run passed).
pub(crate) fn push_failed_runs(s: &mut String, failures: &[String]) {
    if !failures.is_empty() {
        let _ = writeln!(s, "\n## Failed runs\n");
        for f in failures {
            let _ = writeln!(s, "- {f}");
        }
    }
}

/// Says that Ctrl-C cut the runs short, before the files are written: they then hold only
/// the runs measured so far.
pub(crate) fn note_interrupted(interrupted: bool) {
    if interrupted {
        eprintln!("interrupted by Ctrl-C: writing the results measured so far");
    }
}

/// The last thing a bench does: prints one JSON line with `--json`, else `text()`, and
/// returns the exit status, 0 only when `all_ok`. Only the output asked for is built. A
/// stdout that cannot be written is an error: a script reading the JSON line would
/// otherwise take a missing line for a finished bench.
pub(crate) fn finish(
    args: &BenchArgs,
    json: impl FnOnce() -> serde_json::Value,
    text: impl FnOnce() -> String,
    all_ok: bool,
) -> Result<u8, HarnessError> {
    let shown = if args.json {
        format!("{}\n", json())
    } else {
        text()
    };
    let mut stdout = std::io::stdout().lock();
    stdout
        .write_all(shown.as_bytes())
        .and_then(|()| stdout.flush())
        .map_err(|e| HarnessError::Runtime(format!("cannot write the summary: {e}")))?;
    Ok(if all_ok { 0 } else { 1 })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn csv_fields_with_commas_are_quoted() {
        assert_eq!(csv_field("a,b"), "\"a,b\"");
        assert_eq!(csv_field("say \"hi\""), "\"say \"\"hi\"\"\"");
        assert_eq!(csv_field("plain"), "plain");
    }

    #[test]
    fn failed_runs_make_a_section_only_when_there_are_some() {
        let mut s = String::new();
        push_failed_runs(&mut s, &[]);
        assert_eq!(s, "");
        push_failed_runs(&mut s, &["run 1: boom".to_string()]);
        assert_eq!(s, "\n## Failed runs\n\n- run 1: boom\n");
    }
}
