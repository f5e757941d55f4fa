//! Links the system libsrt (found with `pkg-config srt`) and compiles
//! src/srt/abi_check.c against its header: the static assertions there stop
//! the build if a struct or constant the Rust bindings mirror has changed.

use std::process::Command;

const ABI_CHECK: &str = "src/srt/abi_check.c";

/// `pkg-config ARGS srt`, split into words; panics with the fix when
/// pkg-config or libsrt is missing.
fn pkg_config(args: &[&str]) -> Vec<String> {
    let out = Command::new("pkg-config").args(args).arg("srt").output();
    match out {
        Ok(o) if o.status.success() => String::from_utf8_lossy(&o.stdout)
            .split_whitespace()
            .map(str::to_string)
            .collect(),
        Ok(o) => panic!(
            "`pkg-config {} srt` failed: {}\nmcr-sys links the system libsrt 1.5: install it \
             (Debian: apt-get install libsrt-openssl-dev) or run scripts/deps",
            args.join(" "),
            String::from_utf8_lossy(&o.stderr).trim()
        ),
        Err(e) => panic!("could not run pkg-config ({e}): install it (Debian: apt-get install pkg-config)"),
    }
}

fn main() {
    println!("cargo:rerun-if-changed={ABI_CHECK}");
    println!("cargo:rerun-if-changed=build.rs");
    println!("cargo:rerun-if-env-changed=PKG_CONFIG_PATH");

    for word in pkg_config(&["--libs"]) {
        if let Some(dir) = word.strip_prefix("-L") {
            println!("cargo:rustc-link-search=native={dir}");
        } else if let Some(lib) = word.strip_prefix("-l") {
            println!("cargo:rustc-link-lib={lib}");
        }
    }

    let mut build = cc::Build::new();
    build
        .file(ABI_CHECK)
        .std("c11")
        .warnings(true)
        .extra_warnings(true)
        .warnings_into_errors(true)
        .cargo_metadata(false);
    for word in pkg_config(&["--cflags"]) {
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
            "{ABI_CHECK} does not compile against the installed libsrt header: the bindings in \
             src/srt/ no longer match it (see the static assertion above): {e}"
        );
    }
}
