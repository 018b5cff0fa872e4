//! Runs every scenario file under `testdata/scenarios/<protocol>/` (see
//! `abcast_sim::scenario`): stories of the ring protocols, each step's expected output
//! written under it. A failing step shows the command, the expected and actual output
//! and their diff. `REWRITE=1 cargo test -p abcast-sim --test scenarios` writes the
//! actual outputs back into the files (then read the diff before committing it).
//! `SCENARIO=name` runs only the files whose path contains `name`.

use abcast_sim::scenario;
use std::path::Path;

#[test]
fn scenario_files_play_as_written() {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("testdata/scenarios");
    let files = scenario::scenario_files(&dir).expect("the scenario directory");
    assert!(
        !files.is_empty(),
        "no scenario files under {}",
        dir.display()
    );
    let only = std::env::var("SCENARIO").ok();
    let rewrite = scenario::datadriven::rewrite_requested();
    let (mut ran, mut steps, mut failures) = (0, 0, Vec::new());
    for f in &files {
        let name = f.strip_prefix(&dir).unwrap_or(f).display().to_string();
        if only.as_ref().is_some_and(|o| !name.contains(o.as_str())) {
            continue;
        }
        match scenario::run_file(f, rewrite) {
            Err(e) => failures.push(e),
            Ok(r) => {
                if let Some(why) = r.skipped {
                    println!("skipped {name}: {why}");
                    continue;
                }
                ran += 1;
                steps += r.steps;
                println!(
                    "{name}: {} steps{}",
                    r.steps,
                    if r.rewritten { " (rewritten)" } else { "" }
                );
                if let Some(fail) = r.failure {
                    failures.push(fail);
                }
            }
        }
    }
    println!("{ran} scenario files, {steps} steps");
    assert!(
        failures.is_empty(),
        "{} of {ran} scenario files failed:\n\n{}",
        failures.len(),
        failures.join("\n")
    );
}
