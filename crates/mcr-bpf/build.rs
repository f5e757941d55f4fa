//! Compiles bpf/datapath.c into a BPF object with clang. The object is
//! embedded in the crate (`mcr_bpf::OBJECT`), so mcrd carries its data
//! path with it and nothing is read from disk at run time. The compiler
//! and flags it used are kept beside it (`mcr_bpf::COMPILER`).

use std::path::PathBuf;
use std::process::Command;

fn main() {
    let src = "bpf/datapath.c";
    println!("cargo:rerun-if-changed={src}");
    println!("cargo:rerun-if-env-changed=CLANG");
    let out = PathBuf::from(std::env::var_os("OUT_DIR").expect("cargo sets OUT_DIR")).join("datapath.o");
    let clang = std::env::var("CLANG").unwrap_or_else(|_| "clang".into());
    // linux/bpf.h includes asm/types.h, which Debian keeps under the
    // multiarch directory.
    let multiarch = Command::new("gcc")
        .arg("-print-multiarch")
        .output()
        .ok()
        .and_then(|o| String::from_utf8(o.stdout).ok())
        .map(|s| s.trim().to_string())
        .filter(|s| !s.is_empty())
        .unwrap_or_else(|| "x86_64-linux-gnu".into());
    let flags = [
        "-O2".to_string(),
        "-target".into(),
        "bpf".into(),
        "-mcpu=v3".into(),
        // Each spilled value gets a stack slot of its own: the verifier of
        // a process without CAP_PERFMON refuses a slot that held a spilled
        // pointer being reused, in part, for plain data, which slot sharing
        // does where the arbitration's pointers and the forwarding loop's
        // values are never live at once.
        "-mllvm".into(),
        "-no-stack-slot-sharing".into(),
        "-Wall".into(),
        "-Wextra".into(),
        "-Werror".into(),
        format!("-I/usr/include/{multiarch}"),
    ];
    // The compiler and its flags, one a line, for whoever must compile a
    // variant of the source exactly as this build did (`mcr_bpf::COMPILER`).
    let mut used = vec![clang.clone()];
    used.extend(flags.iter().cloned());
    let record = out.with_file_name("compiler");
    std::fs::write(&record, used.join("\n")).unwrap_or_else(|e| panic!("writing {}: {e}", record.display()));
    let status = Command::new(&clang)
        .args(&flags)
        .args(["-c", src, "-o"])
        .arg(&out)
        .status();
    match status {
        Ok(s) if s.success() => {}
        Ok(s) => panic!("{clang} could not compile {src} ({s}); see its messages above"),
        Err(e) => panic!(
            "MCR's in-kernel data path is C compiled with clang, and `{clang}` could not be run ({e}): \
             install clang and the kernel headers (Debian: apt-get install clang linux-libc-dev), \
             or run scripts/deps"
        ),
    }
}
