//! storage-compare: our durable acceptor log against raft-engine, fjall and redb, on the
//! acceptor's workload (see README.md).
//!
//! `storage-compare all` runs everything: each measurement runs in a child process of its
//! own (`point`, `fill`, `recover`), in a fresh directory, so that one engine's threads,
//! caches and allocator state never leak into the next engine's numbers.

mod engines;
mod sys;

use bytes::Bytes;
use engines::Vote;
use std::collections::BTreeMap;
use std::fs;
use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::{Command, ExitCode};
use std::time::Instant;

use abcast_core::types::{Ballot, NodeId};

const USAGE: &str = "\
usage:
  storage-compare all [--reps N] [--mib M] [--max-commits C] [--engines a,b,..]
                      [--values 1024,8192,32768] [--batches 1,16,128] [--fill-mib M]
                      [--root DIR] [--out DIR] [--no-points] [--no-recovery]
  storage-compare report --out DIR      (median tables from DIR/results.csv, DIR/recovery.csv)
children (run by `all`):
  storage-compare point   --engine E --value V --batch B --bytes N --dir D
  storage-compare fill    --engine E --value V --batch B --bytes N --dir D
  storage-compare recover --engine E --value V --dir D
";

const POINT_HEADER: &str = "rep,engine,value,batch,records,commits,value_bytes,secs,mb_s,records_s,p50_us,p99_us,cpu_ms_per_mb,disk_bytes";
const RECOVERY_HEADER: &str = "rep,engine,value,batch,records,disk_bytes,recover_cold_ms,reopen_warm_ms,trim_ms,reclaim_ms,disk_after_trim,disk_after_reclaim";

/// Command-line options, `--key value` or `--flag`.
struct Args {
    cmd: String,
    kv: BTreeMap<String, String>,
}

impl Args {
    fn parse() -> Result<Args, String> {
        let mut it = std::env::args().skip(1);
        let cmd = it.next().ok_or("no command")?;
        let mut kv = BTreeMap::new();
        let rest: Vec<String> = it.collect();
        let mut i = 0;
        while i < rest.len() {
            let k = rest[i]
                .strip_prefix("--")
                .ok_or_else(|| format!("expected --option, got {:?}", rest[i]))?;
            if k.starts_with("no-") {
                kv.insert(k.to_string(), "1".to_string());
                i += 1;
            } else {
                let v = rest
                    .get(i + 1)
                    .ok_or_else(|| format!("--{k} needs a value"))?;
                kv.insert(k.to_string(), v.clone());
                i += 2;
            }
        }
        Ok(Args { cmd, kv })
    }
    fn str(&self, k: &str, default: &str) -> String {
        self.kv
            .get(k)
            .cloned()
            .unwrap_or_else(|| default.to_string())
    }
    fn req(&self, k: &str) -> Result<String, String> {
        self.kv
            .get(k)
            .cloned()
            .ok_or_else(|| format!("--{k} is required"))
    }
    fn num(&self, k: &str, default: u64) -> Result<u64, String> {
        match self.kv.get(k) {
            None => Ok(default),
            Some(v) => v.parse().map_err(|e| format!("--{k} {v:?}: {e}")),
        }
    }
    fn req_num(&self, k: &str) -> Result<u64, String> {
        let v = self.req(k)?;
        v.parse().map_err(|e| format!("--{k} {v:?}: {e}"))
    }
    fn list(&self, k: &str, default: &str) -> Vec<String> {
        self.str(k, default)
            .split(',')
            .filter(|s| !s.is_empty())
            .map(str::to_string)
            .collect()
    }
    fn flag(&self, k: &str) -> bool {
        self.kv.contains_key(k)
    }
}

fn main() -> ExitCode {
    let args = match Args::parse() {
        Ok(a) => a,
        Err(e) => {
            eprintln!("{e}\n{USAGE}");
            return ExitCode::from(2);
        }
    };
    let res = match args.cmd.as_str() {
        "all" => run_all(&args),
        "report" => report(Path::new(&args.str("out", "results"))),
        "point" => child_point(&args, false),
        "fill" => child_point(&args, true),
        "recover" => child_recover(&args),
        "-h" | "--help" | "help" => {
            print!("{USAGE}");
            Ok(())
        }
        other => Err(format!("unknown command {other:?}\n{USAGE}")),
    };
    match res {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("storage-compare {}: {e}", args.cmd);
            ExitCode::FAILURE
        }
    }
}

// ---------------------------------------------------------------------------------------
// The workload.

/// Incompressible payload bytes, the same in every run (a fixed xorshift stream), so a
/// read-back can be checked and no engine gains from compression.
const POOL_BYTES: usize = 64 << 20;

fn payload_pool() -> Bytes {
    let mut v = vec![0u8; POOL_BYTES];
    let mut x: u64 = 0x9E37_79B9_7F4A_7C15;
    for chunk in v.chunks_exact_mut(8) {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        chunk.copy_from_slice(&x.to_le_bytes());
    }
    Bytes::from(v)
}

/// The payload of instance `i` (instances start at 1): consecutive slices of the pool.
fn payload(pool: &Bytes, i: u64, value: usize) -> Bytes {
    let slots = (POOL_BYTES / value) as u64;
    let at = ((i - 1) % slots) as usize * value;
    pool.slice(at..at + value)
}

fn ballot() -> Ballot {
    Ballot::new(3, NodeId(1), 0)
}

struct PointResult {
    records: u64,
    commits: u64,
    secs: f64,
    lat_us: Vec<f64>,
    cpu_secs: f64,
    disk_bytes: u64,
}

/// Writes `bytes` of values in batches of `batch`, one durable commit per batch.
fn write_log(
    engine: &mut dyn engines::Engine,
    pool: &Bytes,
    value: usize,
    batch: usize,
    bytes: u64,
) -> Result<(u64, u64, f64, Vec<f64>), String> {
    let records = (bytes / value as u64).max(1);
    let commits = records.div_ceil(batch as u64);
    let mut lat_us = Vec::with_capacity(commits as usize);
    let mut next: u64 = 1;
    let t0 = Instant::now();
    while next <= records {
        let n = (batch as u64).min(records - next + 1);
        let votes: Vec<Vote> = (next..next + n)
            .map(|i| Vote {
                instance: i,
                ballot: ballot(),
                payload: payload(pool, i, value),
            })
            .collect();
        let t = Instant::now();
        engine.commit(&votes).map_err(|e| e.to_string())?;
        lat_us.push(t.elapsed().as_secs_f64() * 1e6);
        next += n;
    }
    Ok((records, commits, t0.elapsed().as_secs_f64(), lat_us))
}

/// `point`: one engine, one (value, batch) point, in a fresh directory. `fill`: the same,
/// then the process kills itself (SIGKILL) right after its last durable commit, so that
/// `recover` finds the log as a machine crash would leave it (nothing closed cleanly).
fn child_point(args: &Args, fill: bool) -> Result<(), String> {
    let engine_name = args.req("engine")?;
    let value = args.req_num("value")? as usize;
    let batch = args.req_num("batch")? as usize;
    let bytes = args.req_num("bytes")?;
    let dir = PathBuf::from(args.req("dir")?);
    let pool = payload_pool();
    let mut engine = engines::open(&engine_name, &dir).map_err(|e| e.to_string())?;
    let cpu0 = sys::cpu_seconds();
    let (records, commits, secs, lat_us) = write_log(engine.as_mut(), &pool, value, batch, bytes)?;
    if fill {
        // Durable already: every commit returned after its fdatasync.
        let r = PointResult {
            records,
            commits,
            secs,
            lat_us,
            cpu_secs: sys::cpu_seconds() - cpu0,
            disk_bytes: sys::disk_bytes(&dir),
        };
        print_row(&engine_name, value, batch, &r);
        std::io::stdout().flush().map_err(|e| e.to_string())?;
        sys::kill_self();
    }
    // CPU includes closing the engine (work an engine defers to its drop counts).
    drop(engine);
    let cpu_secs = sys::cpu_seconds() - cpu0;
    let r = PointResult {
        records,
        commits,
        secs,
        lat_us,
        cpu_secs,
        disk_bytes: sys::disk_bytes(&dir),
    };
    print_row(&engine_name, value, batch, &r);
    Ok(())
}

fn print_row(engine: &str, value: usize, batch: usize, r: &PointResult) {
    let mut lat = r.lat_us.clone();
    lat.sort_by(f64::total_cmp);
    let value_bytes = r.records * value as u64;
    let mb = value_bytes as f64 / 1e6;
    println!(
        "ROW {engine},{value},{batch},{},{},{value_bytes},{:.3},{:.2},{:.0},{:.0},{:.0},{:.2},{}",
        r.records,
        r.commits,
        r.secs,
        mb / r.secs,
        r.records as f64 / r.secs,
        percentile(&lat, 0.50),
        percentile(&lat, 0.99),
        r.cpu_secs * 1e3 / mb,
        r.disk_bytes
    );
}

/// Nearest-rank percentile of sorted samples.
fn percentile(sorted: &[f64], p: f64) -> f64 {
    if sorted.is_empty() {
        return f64::NAN;
    }
    let rank = (p * sorted.len() as f64).ceil() as usize;
    sorted[rank.clamp(1, sorted.len()) - 1]
}

/// `recover`: opens a log `fill` left behind (its page cache dropped by the parent), checks
/// the newest instance, closes cleanly and opens again (warm), trims the oldest 90 %,
/// reclaims the space and checks the trim.
fn child_recover(args: &Args) -> Result<(), String> {
    let engine_name = args.req("engine")?;
    let value = args.req_num("value")? as usize;
    let dir = PathBuf::from(args.req("dir")?);
    let pool = payload_pool();
    let ms = |t: Instant| t.elapsed().as_secs_f64() * 1e3;
    let fail = |e: engines::Error| e.to_string();

    let disk_bytes = sys::disk_bytes(&dir);
    let t = Instant::now();
    let mut engine = engines::open(&engine_name, &dir).map_err(fail)?;
    let (first, last) = engine
        .bounds()
        .map_err(fail)?
        .ok_or("recovered an empty log")?;
    let recover_cold_ms = ms(t);
    check_read(engine.as_mut(), &pool, value, last)?;

    drop(engine);
    let t = Instant::now();
    let mut engine = engines::open(&engine_name, &dir).map_err(fail)?;
    let reopened = engine.bounds().map_err(fail)?;
    let reopen_warm_ms = ms(t);
    if reopened != Some((first, last)) {
        return Err(format!(
            "reopen found {reopened:?}, expected {:?}",
            (first, last)
        ));
    }

    let below = first + (last - first + 1) * 9 / 10;
    let t = Instant::now();
    engine.trim(below).map_err(fail)?;
    let trim_ms = ms(t);
    let disk_after_trim = sys::disk_bytes(&dir);
    let t = Instant::now();
    engine.reclaim().map_err(fail)?;
    let reclaim_ms = ms(t);
    let disk_after_reclaim = sys::disk_bytes(&dir);
    if engine.read(below - 1).map_err(fail)?.is_some() {
        return Err(format!(
            "instance {} still readable after the trim",
            below - 1
        ));
    }
    check_read(engine.as_mut(), &pool, value, below)?;
    check_read(engine.as_mut(), &pool, value, last)?;
    drop(engine);
    println!(
        "ROW {engine_name},{value},-,{},{disk_bytes},{recover_cold_ms:.1},{reopen_warm_ms:.1},{trim_ms:.1},{reclaim_ms:.1},{disk_after_trim},{disk_after_reclaim}",
        last - first + 1
    );
    Ok(())
}

fn check_read(
    engine: &mut dyn engines::Engine,
    pool: &Bytes,
    value: usize,
    i: u64,
) -> Result<(), String> {
    match engine.read(i).map_err(|e| e.to_string())? {
        Some((got, p)) if got == i && p == payload(pool, i, value) => Ok(()),
        Some((got, _)) => Err(format!(
            "instance {i} read back wrong (instance {got} or payload differs)"
        )),
        None => Err(format!("instance {i} missing")),
    }
}

// ---------------------------------------------------------------------------------------
// The driver.

fn run_all(args: &Args) -> Result<(), String> {
    let reps = args.num("reps", 3)?;
    let mib = args.num("mib", 256)?;
    let max_commits = args.num("max-commits", 4096)?;
    let fill_mib = args.num("fill-mib", 256)?;
    let engines_list = args.list("engines", &engines::ALL.join(","));
    for e in &engines_list {
        if !engines::ALL.contains(&e.as_str()) {
            return Err(format!("unknown engine {e:?}"));
        }
    }
    let parse = |k: &str, d: &str| -> Result<Vec<u64>, String> {
        args.list(k, d)
            .iter()
            .map(|s| s.parse().map_err(|e| format!("--{k} {s:?}: {e}")))
            .collect()
    };
    let values = parse("values", "1024,8192,32768")?;
    let batches = parse("batches", "1,16,128")?;
    let root = PathBuf::from(args.str("root", "/work/tmp/storage-compare"));
    let out = PathBuf::from(args.str("out", "docs/benchmarks/storage-engines"));
    fs::create_dir_all(&root).map_err(|e| format!("{}: {e}", root.display()))?;
    fs::create_dir_all(&out).map_err(|e| format!("{}: {e}", out.display()))?;
    if sys::is_tmpfs(&root) {
        return Err(format!(
            "{} is on tmpfs: fdatasync costs nothing there; use a directory on the real disk (--root)",
            root.display()
        ));
    }
    let exe = std::env::current_exe().map_err(|e| format!("current_exe: {e}"))?;
    let points_csv = out.join("results.csv");
    let recovery_csv = out.join("recovery.csv");
    let mut points = open_csv(&points_csv, POINT_HEADER)?;
    let mut recov = open_csv(&recovery_csv, RECOVERY_HEADER)?;
    eprintln!(
        "storage-compare: {} reps, engines {}, values {values:?}, batches {batches:?}, {mib} MiB or {max_commits} commits per point; logs under {}",
        reps,
        engines_list.join(","),
        root.display()
    );

    let n = engines_list.len();
    for rep in 0..reps {
        // Interleave: every point runs each engine once per rep, in an order rotated by rep.
        let order: Vec<&String> = (0..n)
            .map(|k| &engines_list[(k + rep as usize) % n])
            .collect();
        if !args.flag("no-points") {
            for &value in &values {
                for &batch in &batches {
                    let bytes = (mib << 20).min(max_commits * batch * value);
                    for e in &order {
                        let dir = fresh_dir(&root, e)?;
                        let row = run_child(
                            &exe,
                            &[
                                "point",
                                "--engine",
                                e,
                                "--value",
                                &value.to_string(),
                                "--batch",
                                &batch.to_string(),
                                "--bytes",
                                &bytes.to_string(),
                                "--dir",
                                &dir.display().to_string(),
                            ],
                            false,
                        )?;
                        let _ = fs::remove_dir_all(&dir);
                        eprintln!("rep {rep} {row}");
                        writeln!(points, "{rep},{row}").map_err(|e| e.to_string())?;
                    }
                }
            }
        }
        if !args.flag("no-recovery") {
            // The recovery and trim log: 8 KiB values, batches of 16.
            let (value, batch) = (8192u64, 16u64);
            for e in &order {
                let dir = fresh_dir(&root, e)?;
                let d = dir.display().to_string();
                let (v, b, by) = (
                    value.to_string(),
                    batch.to_string(),
                    (fill_mib << 20).to_string(),
                );
                let fill_row = run_child(
                    &exe,
                    &[
                        "fill", "--engine", e, "--value", &v, "--batch", &b, "--bytes", &by,
                        "--dir", &d,
                    ],
                    true,
                )?;
                eprintln!("rep {rep} fill {fill_row}");
                sys::drop_cache(&dir)
                    .map_err(|err| format!("dropping the page cache of {d}: {err}"))?;
                let row = run_child(
                    &exe,
                    &["recover", "--engine", e, "--value", &v, "--dir", &d],
                    false,
                )?;
                let _ = fs::remove_dir_all(&dir);
                let row = row.replacen(",-,", &format!(",{batch},"), 1);
                eprintln!("rep {rep} recover {row}");
                writeln!(recov, "{rep},{row}").map_err(|e| e.to_string())?;
            }
        }
    }
    drop(points);
    drop(recov);
    report(&out)
}

fn open_csv(path: &Path, header: &str) -> Result<fs::File, String> {
    let mut f = fs::File::create(path).map_err(|e| format!("{}: {e}", path.display()))?;
    writeln!(f, "{header}").map_err(|e| format!("{}: {e}", path.display()))?;
    Ok(f)
}

fn fresh_dir(root: &Path, engine: &str) -> Result<PathBuf, String> {
    let dir = root.join(format!("{engine}-{}", std::process::id()));
    if dir.exists() {
        fs::remove_dir_all(&dir).map_err(|e| format!("{}: {e}", dir.display()))?;
    }
    fs::create_dir_all(&dir).map_err(|e| format!("{}: {e}", dir.display()))?;
    Ok(dir)
}

/// Runs a child and returns its `ROW` line. A `fill` child ends by SIGKILL: that is its
/// success, once it printed its row.
fn run_child(exe: &Path, argv: &[&str], killed_ok: bool) -> Result<String, String> {
    let out = Command::new(exe)
        .args(argv)
        .output()
        .map_err(|e| format!("running {}: {e}", exe.display()))?;
    let stdout = String::from_utf8_lossy(&out.stdout);
    let row = stdout
        .lines()
        .find_map(|l| l.strip_prefix("ROW "))
        .map(str::to_string);
    let ok = out.status.success() || (killed_ok && sys::killed(&out.status));
    match row {
        Some(r) if ok => Ok(r),
        _ => Err(format!(
            "child {} failed ({}): {}",
            argv.join(" "),
            out.status,
            String::from_utf8_lossy(&out.stderr).trim()
        )),
    }
}

// ---------------------------------------------------------------------------------------
// The report: medians over the reps.

fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(f64::total_cmp);
    let n = v.len();
    if n == 0 {
        return f64::NAN;
    }
    if n % 2 == 1 {
        v[n / 2]
    } else {
        (v[n / 2 - 1] + v[n / 2]) / 2.0
    }
}

/// Reads a CSV written by `all`: header names → column, rows.
fn read_csv(path: &Path) -> Result<(Vec<String>, Vec<Vec<String>>), String> {
    let text = fs::read_to_string(path).map_err(|e| format!("{}: {e}", path.display()))?;
    let mut lines = text.lines();
    let header: Vec<String> = lines
        .next()
        .ok_or_else(|| format!("{}: empty", path.display()))?
        .split(',')
        .map(str::to_string)
        .collect();
    let rows = lines
        .filter(|l| !l.is_empty())
        .map(|l| l.split(',').map(str::to_string).collect())
        .collect();
    Ok((header, rows))
}

/// Groups rows by `keys` (in first-seen order) and prints the median of each of `cols`.
fn median_table(path: &Path, keys: &[&str], cols: &[&str]) -> Result<String, String> {
    let (header, rows) = read_csv(path)?;
    let idx = |name: &str| -> Result<usize, String> {
        header
            .iter()
            .position(|h| h == name)
            .ok_or_else(|| format!("{}: no column {name}", path.display()))
    };
    let kidx: Vec<usize> = keys.iter().map(|k| idx(k)).collect::<Result<_, _>>()?;
    let cidx: Vec<usize> = cols.iter().map(|c| idx(c)).collect::<Result<_, _>>()?;
    let mut groups: Vec<(Vec<String>, Vec<Vec<f64>>)> = Vec::new();
    for r in &rows {
        let key: Vec<String> = kidx.iter().map(|&i| r[i].clone()).collect();
        let vals: Vec<f64> = cidx
            .iter()
            .map(|&i| r[i].parse().unwrap_or(f64::NAN))
            .collect();
        match groups.iter_mut().find(|(k, _)| *k == key) {
            Some((_, v)) => v.push(vals),
            None => groups.push((key, vec![vals])),
        }
    }
    // Sorted by the numeric keys, then the engine order of ALL.
    let rank = |s: &str| engines::ALL.iter().position(|e| *e == s).unwrap_or(99) as f64;
    let sort_key = |k: &Vec<String>| -> Vec<f64> {
        let mut out: Vec<f64> = k.iter().skip(1).map(|s| s.parse().unwrap_or(0.0)).collect();
        out.push(rank(&k[0]));
        out
    };
    groups.sort_by(|a, b| {
        sort_key(&a.0)
            .partial_cmp(&sort_key(&b.0))
            .unwrap_or(std::cmp::Ordering::Equal)
    });
    let mut s = String::new();
    s += &format!("| {} | runs | {} |\n", keys.join(" | "), cols.join(" | "));
    s += &format!("|{}\n", " --- |".repeat(keys.len() + 1 + cols.len()));
    for (k, runs) in &groups {
        let meds: Vec<String> = (0..cols.len())
            .map(|c| fmt_num(median(runs.iter().map(|r| r[c]).collect())))
            .collect();
        s += &format!(
            "| {} | {} | {} |\n",
            k.join(" | "),
            runs.len(),
            meds.join(" | ")
        );
    }
    Ok(s)
}

fn fmt_num(x: f64) -> String {
    if x.is_nan() {
        "-".into()
    } else if x.abs() >= 100.0 {
        format!("{x:.0}")
    } else if x.abs() >= 10.0 {
        format!("{x:.1}")
    } else {
        format!("{x:.2}")
    }
}

fn report(out: &Path) -> Result<(), String> {
    let points = out.join("results.csv");
    if points.exists() {
        println!("## Writes (medians)\n");
        print!(
            "{}",
            median_table(
                &points,
                &["engine", "value", "batch"],
                &[
                    "mb_s",
                    "records_s",
                    "p50_us",
                    "p99_us",
                    "cpu_ms_per_mb",
                    "disk_bytes"
                ],
            )?
        );
    }
    let recovery = out.join("recovery.csv");
    if recovery.exists() {
        println!("\n## Recovery and trim (medians)\n");
        print!(
            "{}",
            median_table(
                &recovery,
                &["engine"],
                &[
                    "disk_bytes",
                    "recover_cold_ms",
                    "reopen_warm_ms",
                    "trim_ms",
                    "reclaim_ms",
                    "disk_after_trim",
                    "disk_after_reclaim",
                ],
            )?
        );
    }
    Ok(())
}
