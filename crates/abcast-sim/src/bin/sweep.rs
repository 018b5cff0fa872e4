//! `sweep`: many seeds of one protocol's simulation suite, on every core.
//!
//! ```text
//! cargo run --release -p abcast-sim --bin sweep -- --protocol uring --mix all --seeds 200 --json
//! ```
//!
//! `--protocol uring|ringpaxos|multiring|multiring-ringpaxos|seqpaxos|raft|token` (token: the
//! EVS world, `abcast_sim::evs`, its mixes and checker), `--mix M` (one of the fault mixes,
//! or `all`: the protocol's mixes, `reconfig` included where it reconfigures),
//! `--seeds N` (per mix), `--seed-start S` (default 0), `--jobs J` (default: every core),
//! `--mutation NAME` (a deliberately broken variant; needs `--features mutations`),
//! `--stop` (end at the first violation), `--json` (the last line is one JSON object with
//! `seeds`, `violations` and `fault_counts`). Every violation is printed with the line that
//! replays it. `--per-seed` prints one line per seed, in seed order, with the run's whole
//! report (its trace fingerprint included) or its violation: two builds that behave alike
//! print the same lines (how a change to the simulator or a protocol that must not change
//! behaviour is checked). Exit status: 0 when no seed failed, 1 when some did, 2 on bad
//! arguments.

use abcast_core::mutation::Mutation;
use abcast_sim::sim::PartialShape;
use abcast_sim::suites::{self, Proto, SuiteReport, Variant};
use abcast_sim::{FaultKind, FaultMix};
use std::cell::RefCell;
use std::process::ExitCode;
use std::sync::Mutex;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::time::Instant;

struct Args {
    proto: Proto,
    mixes: Vec<FaultMix>,
    mix_name: String,
    seeds: u64,
    seed_start: u64,
    jobs: usize,
    variant: Variant,
    stop: bool,
    json: bool,
    per_seed: bool,
}

const USAGE: &str = "usage: sweep --protocol uring|ringpaxos|multiring|multiring-ringpaxos|seqpaxos|raft|token --mix MIX|all --seeds N \
                     [--seed-start S] [--jobs J] [--mutation NAME] [--stop] [--json] [--per-seed]";

fn parse() -> Result<Args, String> {
    let mut a = Args {
        proto: Proto::URing,
        mixes: Vec::new(),
        mix_name: String::new(),
        seeds: 200,
        seed_start: 0,
        jobs: std::thread::available_parallelism().map_or(2, |n| n.get()),
        variant: Variant::CORRECT,
        stop: false,
        json: false,
        per_seed: false,
    };
    let mut proto = None;
    let mut it = std::env::args().skip(1);
    while let Some(flag) = it.next() {
        let mut value = |what: &str| {
            it.next()
                .ok_or_else(|| format!("{flag} needs {what}; {USAGE}"))
        };
        let num =
            |v: String, flag: &str| v.parse::<u64>().map_err(|e| format!("{flag} {v:?}: {e}"));
        match flag.as_str() {
            "--protocol" => proto = Some(value("a protocol")?.parse::<Proto>()?),
            "--mix" => {
                let m = value("a mix")?;
                // `all` is the protocol's mixes, known once every flag is read.
                a.mixes = if m == "all" {
                    Vec::new()
                } else {
                    vec![m.parse()?]
                };
                a.mix_name = m;
            }
            "--seeds" => a.seeds = num(value("a count")?, "--seeds")?,
            "--seed-start" => a.seed_start = num(value("a seed")?, "--seed-start")?,
            "--jobs" => {
                a.jobs = num(value("a count")?, "--jobs")?.clamp(1, 256) as usize;
            }
            "--mutation" => {
                let m: Mutation = value("a mutation")?.parse()?;
                a.variant = Variant::broken(m);
            }
            "--stop" => a.stop = true,
            "--json" => a.json = true,
            "--per-seed" => a.per_seed = true,
            "-h" | "--help" => return Err(USAGE.into()),
            other => return Err(format!("unknown argument {other:?}; {USAGE}")),
        }
    }
    a.proto = proto.ok_or_else(|| format!("--protocol is required; {USAGE}"))?;
    if a.mix_name == "all" {
        a.mixes = a.proto.mixes();
    }
    if a.mixes.is_empty() {
        return Err(format!("--mix is required; {USAGE}"));
    }
    a.variant.available()?;
    Ok(a)
}

thread_local! {
    /// The replay line of the seed this thread runs, for the panic hook: in a release
    /// build a panic aborts the process (`panic = "abort"`), so the simulator cannot turn it
    /// into a violation; the hook still says which seed it was.
    static CURRENT: RefCell<Option<String>> = const { RefCell::new(None) };
}

/// Runs one mix's seeds on `jobs` threads, seeds handed out in order.
fn run_mix(a: &Args, mix: FaultMix, stopped: &AtomicUsize) -> SuiteReport {
    let next = AtomicU64::new(a.seed_start);
    let end = a.seed_start.saturating_add(a.seeds);
    let total = Mutex::new(SuiteReport::default());
    let lines = Mutex::new(Vec::new());
    std::thread::scope(|s| {
        for _ in 0..a.jobs.max(1) {
            s.spawn(|| {
                loop {
                    if a.stop && stopped.load(Ordering::Relaxed) > 0 {
                        break;
                    }
                    let seed = next.fetch_add(1, Ordering::Relaxed);
                    if seed >= end {
                        break;
                    }
                    let cfg = suites::config(a.proto, mix, a.variant).with_run(seed, mix);
                    CURRENT.with(|c| *c.borrow_mut() = Some(cfg.replay_line()));
                    let r = if a.per_seed {
                        let mut r = SuiteReport {
                            seeds: 1,
                            ..SuiteReport::default()
                        };
                        let line = match suites::run_one(a.proto, &cfg, a.variant) {
                            Ok(rep) => {
                                r.totals.add(&rep);
                                format!("seed {seed} {mix}: {rep:?}")
                            }
                            Err(v) => {
                                eprintln!("{v}");
                                let line = format!("seed {seed} {mix}: violation {}", v.headline());
                                r.violations.push(v);
                                line
                            }
                        };
                        if let Ok(mut l) = lines.lock() {
                            l.push((seed, line));
                        }
                        r
                    } else {
                        suites::sweep(a.proto, mix, seed..seed + 1, a.variant, true)
                    };
                    stopped.fetch_add(r.violations.len(), Ordering::Relaxed);
                    if let Ok(mut t) = total.lock() {
                        t.merge(r);
                    }
                }
            });
        }
    });
    let mut lines = lines.into_inner().unwrap_or_default();
    lines.sort();
    for (_, line) in lines {
        println!("{line}");
    }
    total.into_inner().unwrap_or_default()
}

fn json_string(s: &str) -> String {
    let mut o = String::from("\"");
    for c in s.chars() {
        match c {
            '"' => o.push_str("\\\""),
            '\\' => o.push_str("\\\\"),
            '\n' => o.push_str("\\n"),
            c if (c as u32) < 0x20 => o.push_str(&format!("\\u{:04x}", c as u32)),
            c => o.push(c),
        }
    }
    o.push('"');
    o
}

/// `--protocol token`: the EVS world (`abcast_sim::evs`), its own mixes and checker.
fn token_main(args: &[String]) -> ExitCode {
    use abcast_sim::evs::{self, EvsConfig, EvsSweep};
    let mut mix_name = String::from("all");
    let (mut seeds, mut start, mut json, mut stop) = (200u64, 0u64, false, false);
    let mut mutation: Option<Mutation> = None;
    let mut jobs = std::thread::available_parallelism().map_or(2, |n| n.get());
    let mut it = args.iter();
    while let Some(flag) = it.next() {
        let mut value = || it.next().cloned().unwrap_or_default();
        let parsed = match flag.as_str() {
            "--protocol" => {
                value();
                Ok(())
            }
            "--mix" => {
                mix_name = value();
                Ok(())
            }
            "--seeds" => value()
                .parse()
                .map(|v| seeds = v)
                .map_err(|e| e.to_string()),
            "--seed-start" => value()
                .parse()
                .map(|v| start = v)
                .map_err(|e| e.to_string()),
            "--jobs" => value()
                .parse::<usize>()
                .map(|v| jobs = v.clamp(1, 256))
                .map_err(|e| e.to_string()),
            "--mutation" => value().parse().map(|m| mutation = Some(m)),
            "--json" => {
                json = true;
                Ok(())
            }
            "--stop" => {
                stop = true;
                Ok(())
            }
            other => Err(format!("unknown argument {other:?}; {USAGE}")),
        };
        if let Err(e) = parsed {
            eprintln!("sweep: {flag}: {e}");
            return ExitCode::from(2);
        }
    }
    let mixes: Vec<FaultMix> = if mix_name == "all" {
        evs::MIXES.to_vec()
    } else {
        match mix_name.parse::<FaultMix>() {
            Ok(m) if evs::MIXES.contains(&m) => vec![m],
            _ => {
                eprintln!(
                    "sweep: the token ring runs the mixes {:?} or all",
                    evs::MIXES
                );
                return ExitCode::from(2);
            }
        }
    };
    let started = Instant::now();
    let stopped = AtomicUsize::new(0);
    let mut all = EvsSweep::new();
    for &mix in &mixes {
        let t0 = Instant::now();
        let next = AtomicU64::new(start);
        let total = Mutex::new(EvsSweep::new());
        std::thread::scope(|s| {
            for _ in 0..jobs {
                s.spawn(|| {
                    loop {
                        if stop && stopped.load(Ordering::Relaxed) > 0 {
                            break;
                        }
                        let seed = next.fetch_add(1, Ordering::Relaxed);
                        if seed >= start.saturating_add(seeds) {
                            break;
                        }
                        let mut cfg = EvsConfig::new(mix);
                        cfg.seed = seed;
                        CURRENT.with(|c| {
                            *c.borrow_mut() =
                                Some(evs::token::world_config(&cfg, mutation).replay_line())
                        });
                        let r = evs::token::run_token(&cfg, mutation);
                        if let Ok(mut t) = total.lock() {
                            if r.is_err() {
                                stopped.fetch_add(1, Ordering::Relaxed);
                            }
                            t.add(r);
                        }
                    }
                });
            }
        });
        let r = total.into_inner().unwrap_or_default();
        eprintln!(
            "sweep: token {mix}{}: {r} ({:.1} s)",
            mutation
                .map(|m| format!(" (mutation {m})"))
                .unwrap_or_default(),
            t0.elapsed().as_secs_f64()
        );
        all.merge(r);
        if stop && stopped.load(Ordering::Relaxed) > 0 {
            break;
        }
    }
    let elapsed = started.elapsed().as_secs_f64();
    eprintln!("sweep: token {mix_name}: {all} in {elapsed:.1} s");
    for v in &all.violations {
        eprintln!("violation: {}", v.headline().replace('\n', "\n  "));
    }
    if json {
        let failures: Vec<String> = all
            .violations
            .iter()
            .map(|v| {
                format!(
                    "{{\"seed\":{},\"mix\":\"{}\",\"kind\":\"{:?}\",\"replay\":{}}}",
                    v.seed,
                    v.mix,
                    v.kind,
                    json_string(&v.replay)
                )
            })
            .collect();
        let t = &all.totals;
        println!(
            "{{\"protocol\":\"token\",\"mix\":{},\"mutation\":{},\"seeds\":{},\"violations\":{},\
             \"failures\":[{}],\"fault_counts\":{},\"elapsed_s\":{elapsed:.1},\"jobs\":{jobs},\
             \"proposed_values\":{},\"acked_values\":{},\"deliveries\":{},\"safe_deliveries\":{},\
             \"transitional_deliveries\":{},\"configs_installed\":{},\"crashes\":{},\"pauses\":{},\
             \"partition_changes\":{},\"messages_held_long\":{},\"settle_us_max\":{},\
             \"remain_runs\":{},\"remain_data_cut_runs\":{},\"remain_installs_max\":{}}}",
            json_string(&mix_name),
            mutation.map_or("null".to_string(), |m| json_string(m.name())),
            all.runs,
            all.violations.len(),
            failures.join(","),
            t.faults.to_json(),
            t.proposed,
            t.acked,
            t.deliveries,
            t.safe_deliveries,
            t.transitional_deliveries,
            t.configs_installed,
            t.crashes,
            t.pauses,
            t.partition_changes,
            t.messages_held_long,
            all.settle_us_max,
            t.remain_runs,
            t.remain_data_cut_runs,
            t.remain_installs_max,
        );
    }
    if all.violations.is_empty() {
        ExitCode::SUCCESS
    } else {
        ExitCode::from(1)
    }
}

fn main() -> ExitCode {
    let args: Vec<String> = std::env::args().skip(1).collect();
    if args
        .windows(2)
        .any(|w| w[0] == "--protocol" && w[1] == "token")
    {
        return token_main(&args);
    }
    let a = match parse() {
        Ok(a) => a,
        Err(e) => {
            eprintln!("sweep: {e}");
            return ExitCode::from(2);
        }
    };
    let default_hook = std::panic::take_hook();
    std::panic::set_hook(Box::new(move |info| {
        CURRENT.with(|c| {
            if let Some(line) = c.borrow().as_ref() {
                eprintln!("sweep: a protocol or the simulator panicked; replay: {line}");
            }
        });
        default_hook(info);
    }));
    let started = Instant::now();
    let stopped = AtomicUsize::new(0);
    let mut all = SuiteReport::default();
    for &mix in &a.mixes {
        let t0 = Instant::now();
        let r = run_mix(&a, mix, &stopped);
        let t = &r.totals;
        let faults: Vec<String> = FaultKind::ALL
            .iter()
            .map(|k| format!("{}={}", k.name(), t.faults.get(*k)))
            .collect();
        eprintln!(
            "sweep: {} {mix}{}: {} seeds, {} violations, {:.1} s; acked {} of {} proposed, \
             converge max {} ms, faults-remain converge max {} ms in {} runs, busy max {}/run; \
             reads answered {} checked {}; reconfigs accepted {} done {} (leader {}), configs {}; {}",
            a.proto,
            a.variant
                .mutation
                .map(|m| format!(" (mutation {m})"))
                .unwrap_or_default(),
            r.seeds,
            r.violations.len(),
            t0.elapsed().as_secs_f64(),
            t.acked_values,
            t.proposed_values,
            t.time_to_converge_us_max / 1000,
            t.faults_remain_converge_us_max / 1000,
            t.faults_remain_runs,
            t.busy_rejections_max,
            t.reads_answered,
            t.reads_checked,
            t.reconfigs_accepted,
            t.reconfigs_done,
            t.leader_replacements,
            t.configs_applied,
            faults.join(" ")
        );
        if mix == FaultMix::PartialConnectivity {
            let shapes: Vec<String> = PartialShape::ALL
                .iter()
                .map(|s| format!("{}={}", s.name(), t.partial_shapes[s.index()]))
                .collect();
            eprintln!(
                "sweep: {} partial: episodes {}; held to the bound {}: recovery max {} ms (seed {}), later windows max {} ms",
                a.proto,
                shapes.join(" "),
                t.partial_checked,
                t.partial_recover_us_max / 1000,
                t.partial_recover_seed,
                t.partial_window_us_max / 1000
            );
        }
        all.merge(r);
        if a.stop && stopped.load(Ordering::Relaxed) > 0 {
            break;
        }
    }
    let elapsed = started.elapsed().as_secs_f64();
    let t = &all.totals;
    eprintln!(
        "sweep: {} {}: {} seeds, {} violations in {elapsed:.1} s",
        a.proto,
        a.mix_name,
        all.seeds,
        all.violations.len()
    );
    for v in &all.violations {
        eprintln!("violation: {}", v.headline().replace('\n', "\n  "));
    }
    if a.json {
        let failures: Vec<String> = all
            .violations
            .iter()
            .map(|v| {
                format!(
                    "{{\"seed\":{},\"mix\":\"{}\",\"kind\":\"{:?}\",\"replay\":{}}}",
                    v.seed,
                    v.mix,
                    v.kind,
                    json_string(&v.replay)
                )
            })
            .collect();
        println!(
            "{{\"protocol\":\"{}\",\"mix\":{},\"mutation\":{},\"seeds\":{},\"violations\":{},\
             \"failures\":[{}],\"fault_counts\":{},\"elapsed_s\":{elapsed:.1},\"jobs\":{},\
             \"proposed_values\":{},\"acked_values\":{},\"crashes\":{},\"time_to_converge_us_max\":{},\
             \"faults_remain_runs\":{},\"faults_remain_converge_us_max\":{},\"busy_rejections_max\":{},\
             \"messages_held_long\":{},\"messages_parked\":{},\"reads_answered\":{},\"reads_checked\":{},\
             \"reconfigs_accepted\":{},\"reconfigs_done\":{},\"leader_replacements\":{},\"configs_applied\":{},\
             \"partial_checked\":{},\"partial_recover_us_max\":{},\"partial_window_us_max\":{}}}",
            a.proto,
            json_string(&a.mix_name),
            a.variant
                .mutation
                .map_or("null".to_string(), |m| json_string(m.name())),
            all.seeds,
            all.violations.len(),
            failures.join(","),
            t.faults.to_json(),
            a.jobs,
            t.proposed_values,
            t.acked_values,
            t.crashes,
            t.time_to_converge_us_max,
            t.faults_remain_runs,
            t.faults_remain_converge_us_max,
            t.busy_rejections_max,
            t.messages_held_long,
            t.messages_parked,
            t.reads_answered,
            t.reads_checked,
            t.reconfigs_accepted,
            t.reconfigs_done,
            t.leader_replacements,
            t.configs_applied,
            t.partial_checked,
            t.partial_recover_us_max,
            t.partial_window_us_max,
        );
    }
    if all.violations.is_empty() {
        ExitCode::SUCCESS
    } else {
        ExitCode::from(1)
    }
}
