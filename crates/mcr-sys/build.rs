//! Links the system libsrt and librist (found with pkg-config) and compiles
//! src/srt/abi_check.c and src/rist/abi_check.c against their headers: the
//! static assertions there stop the build if a struct or constant the Rust
//! bindings mirror has changed.

use std::process::Command;

/// Each library: its pkg-config name, its ABI check, and the Debian
/// package that has it.
const LIBRARIES: [(&str, &str, &str); 2] = [
    ("srt", "src/srt/abi_check.c", "libsrt-openssl-dev"),
    ("librist", "src/rist/abi_check.c", "librist-dev"),
];

/// `pkg-config ARGS LIB`, split into words; panics with the fix when
/// pkg-config or the library is missing.
fn pkg_config(args: &[&str], lib: &str, package: &str) -> Vec<String> {
    let out = Command::new("pkg-config").args(args).arg(lib).output();
    match out {
        Ok(o) if o.status.success() => String::from_utf8_lossy(&o.stdout)
            .split_whitespace()
            .map(str::to_string)
            .collect(),
        Ok(o) => panic!(
            "`pkg-config {} {lib}` failed: {}\nmcr-sys links the system {lib}: install it \
             (Debian: apt-get install {package}) or run scripts/deps",
            args.join(" "),
            String::from_utf8_lossy(&o.stderr).trim()
        ),
        Err(e) => panic!("could not run pkg-config ({e}): install it (Debian: apt-get install pkg-config)"),
    }
}

fn main() {
    println!("cargo:rerun-if-changed=build.rs");
    println!("cargo:rerun-if-changed=src/abi_check.h");
    println!("cargo:rerun-if-env-changed=PKG_CONFIG_PATH");
    for (lib, abi_check, package) in LIBRARIES {
        link_and_check(lib, abi_check, package);
    }
}

fn link_and_check(lib: &str, abi_check: &str, package: &str) {
    println!("cargo:rerun-if-changed={abi_check}");
    for word in pkg_config(&["--libs"], lib, package) {
        if let Some(dir) = word.strip_prefix("-L") {
            println!("cargo:rustc-link-search=native={dir}");
        } else if let Some(name) = word.strip_prefix("-l") {
            println!("cargo:rustc-link-lib={name}");
        }
    }

    let mut build = cc::Build::new();
    build
        .file(abi_check)
        .std("c11")
        .warnings(true)
        .extra_warnings(true)
        .warnings_into_errors(true)
        .cargo_metadata(false);
    for word in pkg_config(&["--cflags"], lib, package) {
        if let Some(dir) = word.strip_prefix("-I") {
            build.include(dir);
        } else {
            build.flag(&word);
        }
    }
    // Only the compile matters (the assertions); the object holds no code
    // and is not linked.
    if let Err(e) = build.try_compile_intermediates() {
        panic!(
            "{abi_check} does not compile against the installed {lib} header: the bindings \
             no longer match it (see the static assertion above): {e}"
        );
    }
}
