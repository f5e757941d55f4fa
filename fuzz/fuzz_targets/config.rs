//! The config parser: any text in, a config or an error with a place,
//! never a panic; a config that parses and checks renders to a file that
//! parses back to the same settings and rules.

#![no_main]

use libfuzzer_sys::fuzz_target;
use mcr_core::config::Config;
use mcr_core::interfaces::{InterfaceInfo, Interfaces};

fuzz_target!(|data: &[u8]| {
    let Ok(text) = std::str::from_utf8(data) else {
        return;
    };
    let config = match Config::parse(text) {
        Ok(c) => c,
        Err(e) => {
            assert!(e.line <= text.lines().count() + 1, "{e}");
            return;
        }
    };
    let ifaces = Interfaces::new(["eth0", "eth1"].iter().enumerate().map(|(i, name)| InterfaceInfo {
        mac: [2, 0, 0, 0, 0, i as u8],
        ..InterfaceInfo::ethernet(name, i as u32 + 2, [format!("10.0.{i}.1").parse().expect("literal")])
    }));
    if config.check(text, &ifaces).is_err() {
        return;
    }
    let saved = Config::render(&config.settings, &config.rules).expect("renders");
    let back = Config::parse(&saved).expect("the rendered file parses");
    assert_eq!(back.settings, config.settings);
    assert_eq!(back.rules, config.rules);
});
