//! CI's fuzz smoke, on the stable toolchain (docs/fuzzing.md): every target over its
//! committed corpus (`fuzz/corpus/<target>/`), then over generated variants of it (bit
//! flips, byte changes, insertions, deletions, repeats, splices, cuts), from a fixed seed
//! per target. Not coverage-guided: it proves each target still runs clean on what the
//! long runs found interesting and a few thousand neighbours of it. A crash fails the test
//! named after the target and writes the input to `target/fuzz-smoke/<target>-<n>`, to
//! replay with `cargo +nightly fuzz run <target> FILE`.

use std::panic::{AssertUnwindSafe, catch_unwind};
use std::path::{Path, PathBuf};

/// Generated variants per target: about a second or less each (docs/fuzzing.md).
const VARIANTS: usize = 3000;
/// Largest generated input.
const VARIANT_BYTES_MAX: usize = 1 << 16;

fn fuzz_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../../fuzz")
}

fn corpus(name: &str) -> Vec<(String, Vec<u8>)> {
    let dir = fuzz_dir().join("corpus").join(name);
    let mut files: Vec<(String, Vec<u8>)> = std::fs::read_dir(&dir)
        .unwrap_or_else(|e| panic!("fuzz target `{name}`: no corpus at {}: {e}", dir.display()))
        .map(|e| {
            let p = e.expect("corpus entry").path();
            let bytes = std::fs::read(&p).expect("corpus file");
            (p.file_name().unwrap().to_string_lossy().into_owned(), bytes)
        })
        .collect();
    files.sort();
    assert!(!files.is_empty(), "fuzz target `{name}`: empty corpus");
    files
}

/// xorshift64*: a fixed sequence per target, so a failing variant is found again.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_f491_4f6c_dd1d)
    }
    fn below(&mut self, n: usize) -> usize {
        if n == 0 {
            0
        } else {
            (self.next() % n as u64) as usize
        }
    }
}

const INTERESTING: [u8; 8] = [0, 1, 0x7f, 0x80, 0xff, 0xfe, 16, 64];

fn mutate(rng: &mut Rng, base: &[u8], other: &[u8]) -> Vec<u8> {
    let mut v = base.to_vec();
    for _ in 0..1 + rng.below(4) {
        let len = v.len();
        match rng.below(8) {
            0 if len > 0 => {
                let i = rng.below(len);
                v[i] ^= 1 << rng.below(8);
            }
            1 if len > 0 => {
                let i = rng.below(len);
                v[i] = INTERESTING[rng.below(INTERESTING.len())];
            }
            2 if len > 0 => {
                let i = rng.below(len);
                v[i] = rng.next() as u8;
            }
            3 => {
                let i = rng.below(len + 1);
                v.insert(i, rng.next() as u8);
            }
            4 if len > 0 => {
                let i = rng.below(len);
                let n = 1 + rng.below((len - i).min(64));
                v.drain(i..i + n);
            }
            5 if len > 0 => {
                let i = rng.below(len);
                let n = 1 + rng.below((len - i).min(64));
                let piece = v[i..i + n].to_vec();
                let at = rng.below(len + 1);
                v.splice(at..at, piece);
            }
            6 if !other.is_empty() => {
                let cut = rng.below(len + 1);
                let from = rng.below(other.len());
                v.truncate(cut);
                v.extend_from_slice(&other[from..]);
            }
            7 if len > 0 => v.truncate(rng.below(len)),
            _ => {}
        }
    }
    v.truncate(VARIANT_BYTES_MAX);
    v
}

fn crash_file(name: &str, n: usize, input: &[u8]) -> PathBuf {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../target/fuzz-smoke");
    let _ = std::fs::create_dir_all(&dir);
    let p = dir.join(if n == usize::MAX {
        format!("{name}-last")
    } else {
        format!("{name}-{n}")
    });
    let _ = std::fs::write(&p, input);
    p
}

fn run_one(name: &str, f: fn(&[u8]), what: &str, n: usize, input: &[u8]) {
    // A crash that aborts the process (an allocation failure) cannot be caught: with
    // ABCAST_FUZZ_SMOKE_TRACE set, each input is saved before it runs.
    if std::env::var_os("ABCAST_FUZZ_SMOKE_TRACE").is_some() {
        crash_file(name, usize::MAX, input);
    }
    if catch_unwind(AssertUnwindSafe(|| f(input))).is_err() {
        let p = crash_file(name, n, input);
        panic!(
            "FUZZ SMOKE FAILED: target `{name}` crashed on {what} ({} bytes, saved to {}); \
             replay: cargo +nightly fuzz run {name} {}",
            input.len(),
            p.display(),
            p.display()
        );
    }
}

fn smoke(name: &str) {
    let f = abcast_fuzz::target(name).expect("a registered target");
    let files = corpus(name);
    for (i, (file, bytes)) in files.iter().enumerate() {
        run_one(name, f, &format!("corpus file {file}"), i, bytes);
    }
    let mut rng = Rng(0x9e37_79b9_7f4a_7c15
        ^ name
            .bytes()
            .fold(0u64, |h, b| h.rotate_left(5) ^ u64::from(b)));
    for n in 0..VARIANTS {
        let base = &files[rng.below(files.len())].1;
        let other = &files[rng.below(files.len())].1;
        let v = mutate(&mut rng, base, other);
        run_one(
            name,
            f,
            &format!("generated variant {n}"),
            files.len() + n,
            &v,
        );
    }
}

macro_rules! smoke_tests {
    ($($name:ident),* $(,)?) => {
        $(
            #[test]
            fn $name() {
                smoke(stringify!($name));
            }
        )*

        /// Every target has a test here, a cargo-fuzz target and a corpus, and nothing else
        /// is there: a target added to one place only is caught.
        #[test]
        fn every_target_has_a_smoke_test_a_fuzz_target_and_a_corpus() {
            let tested: Vec<&str> = vec![$(stringify!($name)),*];
            let registered: Vec<&str> = abcast_fuzz::TARGETS.iter().map(|(n, _)| *n).collect();
            assert_eq!(tested, registered, "smoke tests and abcast_fuzz::TARGETS differ");
            let manifest = std::fs::read_to_string(fuzz_dir().join("Cargo.toml")).expect("fuzz/Cargo.toml");
            let mut files: Vec<String> = std::fs::read_dir(fuzz_dir().join("fuzz_targets"))
                .expect("fuzz/fuzz_targets")
                .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
                .collect();
            files.sort();
            let mut want: Vec<String> = registered.iter().map(|n| format!("{n}.rs")).collect();
            want.sort();
            assert_eq!(files, want, "fuzz/fuzz_targets/ and abcast_fuzz::TARGETS differ");
            for n in &registered {
                let src = std::fs::read_to_string(fuzz_dir().join(format!("fuzz_targets/{n}.rs"))).unwrap();
                assert!(src.contains(&format!("abcast_fuzz::target(\"{n}\")")), "fuzz_targets/{n}.rs does not run target {n}");
                assert!(manifest.contains(&format!("name = \"{n}\"")), "fuzz/Cargo.toml has no [[bin]] {n}");
                assert!(fuzz_dir().join("corpus").join(n).is_dir(), "no corpus for {n}");
            }
        }
    };
}

smoke_tests!(
    frame,
    intake,
    peer_message,
    client_frame,
    shm_ring,
    datagram,
    node_config,
    durable_store,
    durable_log_store,
    history,
);
