#![no_main]
//! See `properties::jsonrpc`.

#[path = "../properties.rs"]
mod properties;

libfuzzer_sys::fuzz_target!(|data: &[u8]| properties::jsonrpc(data));
