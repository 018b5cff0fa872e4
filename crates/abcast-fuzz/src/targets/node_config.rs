//! The node's TOML config (`abcast_node::nodeconfig::parse_with`), from a string, as
//! `abcast node --config FILE [--id N]` reads it.
//!
//! Input: a byte (bit 0: give `--id`; the rest: which id), then the text (bytes that are
//! not UTF-8 are replaced, as a file would be refused before parsing anyway).
//! Checks: a config is parsed or refused with an error that names what is wrong; never a
//! panic. Host names are refused, not resolved (`Resolve::NumericOnly`): a fuzzer must
//! not send a DNS query per name it makes up.

use abcast_node::nodeconfig::{Resolve, parse_with};
use std::path::Path;

pub fn node_config(data: &[u8]) {
    let Some((&opts, text)) = data.split_first() else {
        return;
    };
    let text = String::from_utf8_lossy(text);
    let id = (opts & 1 == 1).then_some(u32::from(opts >> 1));
    let base = Path::new("/nonexistent/abcast-fuzz");
    if let Err(e) = parse_with(&text, id, base, Resolve::NumericOnly) {
        assert!(!e.to_string().is_empty(), "an error that says nothing");
    }
}
