#![no_main]
// See abcast_fuzz::targets::intake (crates/abcast-fuzz) for the input and what is checked.
libfuzzer_sys::fuzz_target!(
    |data: &[u8]| (abcast_fuzz::target("intake").expect("registered"))(data)
);
