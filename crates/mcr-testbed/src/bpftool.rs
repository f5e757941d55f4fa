//! What the kernel holds of an eBPF program and its maps, as bpftool (the
//! kernel's own tool, Debian package bpftool) reads it: a test checks the
//! maps a running program uses without trusting mcrd's word for them.

use std::process::Command;

use crate::{Error, Result};

fn bpftool(args: &[&str]) -> Result<serde_json::Value> {
    let out = crate::command::run(Command::new("bpftool").arg("-j").args(args))?;
    serde_json::from_str(&out).map_err(|e| Error::Report {
        what: format!("bpftool {}", args.join(" ")),
        reason: e.to_string(),
        stdout: out.clone(),
        stderr: String::new(),
    })
}

/// True when the kernel still holds program `id`.
pub fn program_exists(id: u32) -> Result<bool> {
    let out = Command::new("bpftool")
        .args(["prog", "show", "id", &id.to_string()])
        .output()
        .map_err(|source| Error::Spawn {
            program: "bpftool".into(),
            source,
        })?;
    Ok(out.status.success())
}

/// The tag of program `id`: a hash of its instructions, so two loads of
/// the same program share it and a changed program does not.
pub fn program_tag(id: u32) -> Result<String> {
    let prog = bpftool(&["prog", "show", "id", &id.to_string()])?;
    Ok(prog["tag"].as_str().unwrap_or_default().to_string())
}

/// The maps program `id` uses, by name: (name, map id).
pub fn program_maps(id: u32) -> Result<Vec<(String, u32)>> {
    let prog = bpftool(&["prog", "show", "id", &id.to_string()])?;
    let ids: Vec<u32> = prog["map_ids"]
        .as_array()
        .map(|a| a.iter().filter_map(|v| v.as_u64()?.try_into().ok()).collect())
        .unwrap_or_default();
    let mut maps = Vec::new();
    for m in ids {
        let info = bpftool(&["map", "show", "id", &m.to_string()])?;
        maps.push((info["name"].as_str().unwrap_or_default().to_string(), m));
    }
    Ok(maps)
}

fn bytes(v: &serde_json::Value) -> Vec<u8> {
    v.as_array()
        .map(|a| {
            a.iter()
                .filter_map(|b| u8::from_str_radix(b.as_str()?.trim_start_matches("0x"), 16).ok())
                .collect()
        })
        .unwrap_or_default()
}

/// Every entry of map `id` (a hash map: an array dumps all its slots), as
/// key and value bytes.
pub fn dump(id: u32) -> Result<Vec<(Vec<u8>, Vec<u8>)>> {
    let all = bpftool(&["map", "dump", "id", &id.to_string()])?;
    Ok(all
        .as_array()
        .map(|a| a.iter().map(|e| (bytes(&e["key"]), bytes(&e["value"]))).collect())
        .unwrap_or_default())
}

/// The value at `index` of array map `id`.
pub fn lookup(id: u32, index: u32) -> Result<Vec<u8>> {
    let key: Vec<String> = index.to_le_bytes().iter().map(|b| b.to_string()).collect();
    let mut args = vec!["map", "lookup", "id"];
    let id = id.to_string();
    args.push(&id);
    args.push("key");
    args.extend(key.iter().map(String::as_str));
    Ok(bytes(&bpftool(&args)?["value"]))
}
