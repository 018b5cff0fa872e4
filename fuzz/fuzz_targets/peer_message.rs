#![no_main]
// See abcast_fuzz::targets::peer_message (crates/abcast-fuzz) for the input and what is checked.
libfuzzer_sys::fuzz_target!(
    |data: &[u8]| (abcast_fuzz::target("peer_message").expect("registered"))(data)
);
