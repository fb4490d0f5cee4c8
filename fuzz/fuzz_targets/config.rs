#![no_main]
//! See `properties::config`.

#[path = "../properties.rs"]
mod properties;

libfuzzer_sys::fuzz_target!(|data: &[u8]| properties::config(data));
