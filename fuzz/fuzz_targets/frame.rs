#![no_main]
// See abcast_fuzz::targets::frame (crates/abcast-fuzz) for the input and what is checked.
libfuzzer_sys::fuzz_target!(
    |data: &[u8]| (abcast_fuzz::target("frame").expect("registered"))(data)
);
