//! No function in the runtime's source is longer than `FN_LINES_MAX` lines (signature to
//! closing brace, as rustfmt lays it out): a long function is steps that want names.
//! Run with `--nocapture` to see the longest ones.

use std::path::{Path, PathBuf};

const FN_LINES_MAX: usize = 150;

/// One function: where it is and how many lines it spans.
#[derive(Debug)]
struct FnSpan {
    file: PathBuf,
    line: usize,
    name: String,
    lines: usize,
}

fn rust_files(dir: &Path, out: &mut Vec<PathBuf>) {
    let entries = std::fs::read_dir(dir).unwrap_or_else(|e| panic!("{}: {e}", dir.display()));
    for entry in entries {
        let path = entry.expect("directory entry").path();
        if path.is_dir() {
            rust_files(&path, out);
        } else if path.extension().is_some_and(|x| x == "rs") {
            out.push(path);
        }
    }
}

/// The name of the function a line declares, if it declares one.
fn fn_name(line: &str) -> Option<&str> {
    let mut rest = line.trim_start();
    for prefix in [
        "pub(crate) ",
        "pub(super) ",
        "pub ",
        "const ",
        "async ",
        "unsafe ",
    ] {
        rest = rest.strip_prefix(prefix).unwrap_or(rest);
    }
    let rest = rest.strip_prefix("fn ")?;
    let end = rest.find(|c: char| !(c.is_alphanumeric() || c == '_'))?;
    Some(&rest[..end])
}

/// Every function with a body in `text`, measured from its `fn` line to the closing brace
/// at the same indentation.
fn spans(file: &Path, text: &str) -> Vec<FnSpan> {
    let lines: Vec<&str> = text.lines().collect();
    let mut found = Vec::new();
    for (i, line) in lines.iter().enumerate() {
        let Some(name) = fn_name(line) else {
            continue;
        };
        let indent = &line[..line.len() - line.trim_start().len()];
        let close = format!("{indent}}}");
        // The signature ends at the first line ending in `{` (a body) or `;` (none).
        let Some(open) = (i..lines.len()).find(|&j| {
            let t = lines[j].trim_end();
            t.ends_with('{') || t.ends_with(';') || (j == i && t.ends_with('}'))
        }) else {
            continue;
        };
        let t = lines[open].trim_end();
        let end = if t.ends_with(';') {
            continue;
        } else if t.ends_with('}') {
            open
        } else {
            match (open..lines.len()).find(|&j| lines[j].trim_end() == close) {
                Some(end) => end,
                None => continue,
            }
        };
        found.push(FnSpan {
            file: file.to_path_buf(),
            line: i + 1,
            name: name.to_string(),
            lines: end - i + 1,
        });
    }
    found
}

#[test]
fn no_function_in_the_runtime_is_longer_than_fn_lines_max() {
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
    let mut files = Vec::new();
    rust_files(&src, &mut files);
    let mut all: Vec<FnSpan> = Vec::new();
    for file in &files {
        let text = std::fs::read_to_string(file).expect("source file");
        all.extend(spans(file, &text));
    }
    assert!(
        all.len() > 100,
        "the scan found too few functions: {}",
        all.len()
    );
    all.sort_by_key(|f| std::cmp::Reverse(f.lines));
    for f in all.iter().take(10) {
        println!(
            "{:4} lines  {}:{} {}",
            f.lines,
            f.file.display(),
            f.line,
            f.name
        );
    }
    let long: Vec<&FnSpan> = all.iter().filter(|f| f.lines > FN_LINES_MAX).collect();
    assert!(
        long.is_empty(),
        "functions longer than {FN_LINES_MAX} lines: {long:#?}"
    );
}

#[test]
fn the_scan_measures_a_function_from_its_signature_to_its_closing_brace() {
    let text = "impl X {\n    pub(super) fn a(\n        x: u8,\n    ) -> u8 {\n        x\n    }\n\n    fn b(&self);\n    fn c() -> u8 { 1 }\n}\n";
    let s = spans(Path::new("x.rs"), text);
    let got: Vec<(&str, usize)> = s.iter().map(|f| (f.name.as_str(), f.lines)).collect();
    assert_eq!(got, vec![("a", 5), ("c", 1)]);
}
