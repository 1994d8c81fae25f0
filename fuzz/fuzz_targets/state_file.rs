#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| {
    rate_limit_window_fuzz::state_file(data);
});
