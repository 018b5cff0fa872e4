//! The command line as a user meets it: every command explains itself with `--help`, and
//! bad input is refused with exit status 2 and a message that names the flag to fix,
//! before any process is started.

use std::process::{Command, Output};

fn abcast(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_abcast"))
        .args(args)
        .output()
        .expect("the abcast binary runs")
}

fn stderr(out: &Output) -> String {
    String::from_utf8_lossy(&out.stderr).into_owned()
}

fn stdout(out: &Output) -> String {
    String::from_utf8_lossy(&out.stdout).into_owned()
}

/// Asserts exit status 2 and an `error:` message naming `flag`.
fn assert_usage_error(args: &[&str], flag: &str) {
    let out = abcast(args);
    let err = stderr(&out);
    assert_eq!(
        out.status.code(),
        Some(2),
        "abcast {args:?} should exit 2; stderr: {err}"
    );
    assert!(
        err.contains("error:"),
        "abcast {args:?}: no `error:` in {err}"
    );
    assert!(
        err.contains(flag),
        "abcast {args:?}: the message does not name {flag}: {err}"
    );
    assert!(!err.contains("panicked"), "abcast {args:?} panicked: {err}");
}

#[test]
fn help_of_every_command_succeeds_and_explains_it() {
    let top = abcast(&["--help"]);
    assert!(top.status.success());
    let text = stdout(&top);
    for cmd in [
        "node",
        "propose",
        "learn",
        "demo",
        "bench",
        "status",
        "reconfigure",
        "read",
    ] {
        assert!(
            text.contains(cmd),
            "top-level help does not mention {cmd}: {text}"
        );
        let out = abcast(&[cmd, "--help"]);
        assert!(
            out.status.success(),
            "abcast {cmd} --help failed: {}",
            stderr(&out)
        );
        assert!(
            stdout(&out).contains("Usage"),
            "abcast {cmd} --help has no usage line"
        );
    }
}

#[test]
fn demo_help_names_every_flag_with_its_unit() {
    let text = stdout(&abcast(&["demo", "--help"]));
    for flag in [
        "--nodes",
        "--value-size",
        "--duration",
        "--rate",
        "--kill",
        "--json",
        "--keep-dir",
    ] {
        assert!(text.contains(flag), "demo --help lacks {flag}");
    }
    assert!(text.contains("seconds") && text.contains("bytes"), "{text}");
}

#[test]
fn bench_list_names_every_experiment() {
    let out = abcast(&["bench", "--list"]);
    assert!(out.status.success(), "{}", stderr(&out));
    let text = stdout(&out);
    for name in ["value-size", "buffer", "ring-size"] {
        assert!(text.contains(name), "bench --list lacks {name}: {text}");
    }
    assert!(text.contains("fig 4.2") && text.contains("fig 4.1") && text.contains("fig 4.5"));
}

#[test]
fn negative_or_zero_duration_is_refused_naming_the_flag() {
    assert_usage_error(&["demo", "--duration", "-1"], "--duration");
    assert_usage_error(&["demo", "--duration", "0"], "--duration");
    assert_usage_error(&["demo", "--duration", "NaN"], "--duration");
    assert_usage_error(&["demo", "--duration", "soon"], "--duration");
    assert_usage_error(&["bench", "buffer", "--duration", "-3"], "--duration");
}

#[test]
fn node_count_outside_1_to_64_is_refused() {
    assert_usage_error(&["demo", "--nodes", "0"], "--nodes");
    assert_usage_error(&["demo", "--nodes", "65"], "--nodes");
    assert_usage_error(&["demo", "--nodes", "-3"], "--nodes");
    assert_usage_error(&["bench", "ring-size", "--max-nodes", "65"], "--max-nodes");
}

#[test]
fn value_size_zero_is_refused() {
    assert_usage_error(&["demo", "--value-size", "0"], "--value-size");
    assert_usage_error(&["demo", "--value-size", "-5"], "--value-size");
}

#[test]
fn negative_rate_is_refused() {
    assert_usage_error(&["demo", "--rate", "-5"], "--rate");
}

#[test]
fn unknown_bench_name_is_refused_and_the_names_are_listed() {
    assert_usage_error(&["bench", "no-such-bench"], "no-such-bench");
    let err = stderr(&abcast(&["bench", "no-such-bench"]));
    assert!(
        err.contains("value-size"),
        "the valid names are not suggested: {err}"
    );
}

#[test]
fn bench_without_a_name_is_refused() {
    assert_usage_error(&["bench"], "NAME");
    assert_usage_error(&["bench", "value-size", "--runs", "0"], "--runs");
}

#[test]
fn kill_needs_a_majority_to_survive_and_time_for_two_outages() {
    assert_usage_error(&["demo", "--kill", "--nodes", "2"], "--nodes");
    assert_usage_error(&["demo", "--kill", "--duration", "3"], "--duration");
}

#[test]
fn unknown_command_and_flag_are_refused() {
    assert_usage_error(&["frobnicate"], "frobnicate");
    assert_usage_error(&["demo", "--colour"], "--colour");
}

#[test]
fn reconfigure_lists_are_checked_before_any_node_is_asked() {
    let node = ["reconfigure", "--node", "127.0.0.1:1"];
    let with = |extra: &[&'static str]| -> Vec<&'static str> {
        node.iter().chain(extra).copied().collect()
    };
    assert_usage_error(&with(&[]), "--members");
    assert_usage_error(&with(&["--members", "0,1,1"]), "--members");
    assert_usage_error(&with(&["--members", "0,,1"]), "--members");
    assert_usage_error(&with(&["--members", "0,-1"]), "--members");
    assert_usage_error(
        &with(&["--members", "0,1", "--learners", "1"]),
        "--learners",
    );
    assert_usage_error(
        &with(&["--members", "0", "--timeout-s", "0"]),
        "--timeout-s",
    );
    assert_usage_error(&["status"], "--node");
    assert_usage_error(&["read", "--node", "x", "--timeout-s", "-1"], "--timeout-s");
}

#[test]
fn an_unreachable_node_is_a_runtime_error_naming_it() {
    for args in [
        &["status", "--node", "127.0.0.1:1"][..],
        &["read", "--node", "127.0.0.1:1"][..],
        &["reconfigure", "--node", "127.0.0.1:1", "--members", "0,1,2"][..],
    ] {
        let out = abcast(args);
        let err = stderr(&out);
        assert_eq!(out.status.code(), Some(1), "abcast {args:?}: {err}");
        assert!(err.contains("cannot connect to 127.0.0.1:1"), "{err}");
        assert!(!err.contains("panicked"), "{err}");
    }
}
