#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| {
    let _ = coord_fuzz::lock::run(data);
});
