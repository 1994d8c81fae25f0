#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| {
    rate_limit_window_fuzz::override_body(data);
});
