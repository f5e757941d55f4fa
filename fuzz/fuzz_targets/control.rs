//! The control-request decoder: any line in, a request or an error, never
//! a panic; a request that decodes encodes and decodes back to itself.

#![no_main]

use libfuzzer_sys::fuzz_target;
use mcr_core::control::Request;

fuzz_target!(|data: &[u8]| {
    if let Ok(r) = serde_json::from_slice::<Request>(data) {
        let line = serde_json::to_vec(&r).expect("a request encodes");
        let back: Request = serde_json::from_slice(&line).expect("and decodes back");
        assert_eq!(back, r);
    }
});
