#![no_main]
// See abcast_fuzz::targets::node_config (crates/abcast-fuzz) for the input and what is checked.
libfuzzer_sys::fuzz_target!(
    |data: &[u8]| (abcast_fuzz::target("node_config").expect("registered"))(data)
);
