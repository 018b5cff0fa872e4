#![no_main]
// See abcast_fuzz::targets::durable_log_store (crates/abcast-fuzz) for the input and what is checked.
libfuzzer_sys::fuzz_target!(
    |data: &[u8]| (abcast_fuzz::target("durable_log_store").expect("registered"))(data)
);
