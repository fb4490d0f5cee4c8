#![no_main]
//! See `properties::sse`.

#[path = "../properties.rs"]
mod properties;

libfuzzer_sys::fuzz_target!(|data: &[u8]| properties::sse(data));
