//! Just enough of ELF to read a BPF object that clang compiled: its
//! programs (one per section, every function they use inlined), the map
//! definitions in its `maps` section, and the relocations that point
//! instructions at those maps. Safe code over a byte slice: a malformed
//! object is an error, never a panic.

use std::collections::BTreeMap;

/// Why an object could not be read.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ElfError {
    /// Not a 64-bit little-endian BPF relocatable object.
    #[error("not a 64-bit little-endian BPF object")]
    NotBpf,
    /// A header or table runs past the end of the file.
    #[error("the object is cut short ({0})")]
    Short(&'static str),
    /// A relocation that is not to a map.
    #[error("program `{program}`: relocation to `{symbol}`, which is not a map (only maps can be referenced)")]
    Relocation {
        /// The program.
        program: String,
        /// What it referenced.
        symbol: String,
    },
    /// A map definition of the wrong size.
    #[error("map `{0}`: its definition is not five 32-bit words")]
    MapDef(String),
}

/// A map as the object defines it (`struct map_def`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct MapDef {
    /// `BPF_MAP_TYPE_*`.
    pub map_type: u32,
    /// Key size in bytes.
    pub key_size: u32,
    /// Value size in bytes.
    pub value_size: u32,
    /// Entries.
    pub max_entries: u32,
    /// `BPF_F_*` flags.
    pub flags: u32,
}

/// One program: its section, instructions, and where maps are referenced.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ProgramText {
    /// The function's name.
    pub name: String,
    /// The section it is in (`socket`, `tcx/ingress`).
    pub section: String,
    /// Its instructions, 8 bytes each, as compiled.
    pub insns: Vec<u8>,
    /// (instruction index of a 16-byte load, map name).
    pub map_refs: Vec<(usize, String)>,
}

/// What a BPF object holds.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ElfObject {
    /// Maps by name.
    pub maps: BTreeMap<String, MapDef>,
    /// Programs.
    pub programs: Vec<ProgramText>,
    /// The `license` section's string.
    pub license: String,
}

struct Section<'a> {
    name: String,
    kind: u32,
    data: &'a [u8],
    link: u32,
    info: u32,
}

fn u16_at(b: &[u8], at: usize) -> Result<u16, ElfError> {
    b.get(at..at + 2)
        .map(|s| u16::from_le_bytes([s[0], s[1]]))
        .ok_or(ElfError::Short("header"))
}

fn u32_at(b: &[u8], at: usize) -> Result<u32, ElfError> {
    b.get(at..at + 4)
        .map(|s| u32::from_le_bytes([s[0], s[1], s[2], s[3]]))
        .ok_or(ElfError::Short("header"))
}

/// A 64-bit offset or size in the file, as an index into it (one beyond
/// the address space is beyond the file too).
fn offset_at(b: &[u8], at: usize) -> Result<usize, ElfError> {
    usize::try_from(u64_at(b, at)?).map_err(|_| ElfError::Short("an offset beyond the address space"))
}

fn u64_at(b: &[u8], at: usize) -> Result<u64, ElfError> {
    b.get(at..at + 8)
        .map(|s| u64::from_le_bytes([s[0], s[1], s[2], s[3], s[4], s[5], s[6], s[7]]))
        .ok_or(ElfError::Short("header"))
}

fn cstr(b: &[u8], at: usize) -> String {
    let s = b.get(at..).unwrap_or_default();
    let end = s.iter().position(|&c| c == 0).unwrap_or(s.len());
    String::from_utf8_lossy(&s[..end]).into_owned()
}

const SHT_SYMTAB: u32 = 2;
const SHT_REL: u32 = 9;
const EM_BPF: u16 = 247;
const R_BPF_64_64: u32 = 1;
const STT_FUNC: u8 = 2;

/// Reads a BPF object.
pub fn parse(file: &[u8]) -> Result<ElfObject, ElfError> {
    if file.get(..4) != Some(b"\x7fELF") || file.get(4) != Some(&2) || file.get(5) != Some(&1) {
        return Err(ElfError::NotBpf);
    }
    if u16_at(file, 18)? != EM_BPF {
        return Err(ElfError::NotBpf);
    }
    let shoff = offset_at(file, 40)?;
    let shentsize = usize::from(u16_at(file, 58)?);
    let shnum = usize::from(u16_at(file, 60)?);
    let shstrndx = usize::from(u16_at(file, 62)?);
    let mut raw = Vec::with_capacity(shnum);
    for i in 0..shnum {
        let h = shoff + i * shentsize;
        let (name, kind) = (u32_at(file, h)?, u32_at(file, h + 4)?);
        let (off, size) = (offset_at(file, h + 24)?, offset_at(file, h + 32)?);
        let (link, info) = (u32_at(file, h + 40)?, u32_at(file, h + 44)?);
        // SHT_NOBITS (8) holds no bytes in the file.
        let data = if kind == 8 {
            &[][..]
        } else {
            file.get(off..off.checked_add(size).ok_or(ElfError::Short("section"))?)
                .ok_or(ElfError::Short("section"))?
        };
        raw.push((name, kind, data, link, info));
    }
    let names = raw.get(shstrndx).map(|r| r.2).ok_or(ElfError::Short("section names"))?;
    let sections: Vec<Section<'_>> = raw
        .into_iter()
        .map(|(name, kind, data, link, info)| Section {
            name: cstr(names, name as usize),
            kind,
            data,
            link,
            info,
        })
        .collect();
    let symtab = sections
        .iter()
        .find(|s| s.kind == SHT_SYMTAB)
        .ok_or(ElfError::Short("no symbol table"))?;
    let strtab = sections
        .get(symtab.link as usize)
        .ok_or(ElfError::Short("symbol names"))?
        .data;
    // (name, type, section index, value)
    let mut symbols = Vec::new();
    for e in symtab.data.chunks_exact(24) {
        let name = cstr(strtab, u32_at(e, 0)? as usize);
        let kind = e[4] & 0xf;
        let shndx = usize::from(u16_at(e, 6)?);
        let value = offset_at(e, 8)?;
        symbols.push((name, kind, shndx, value));
    }
    let maps_idx = sections.iter().position(|s| s.name == "maps");
    let mut maps = BTreeMap::new();
    if let Some(mi) = maps_idx {
        for (name, _, shndx, value) in symbols.iter().filter(|s| s.2 == mi && !s.0.is_empty()) {
            let d = sections[*shndx]
                .data
                .get(*value..*value + 20)
                .ok_or_else(|| ElfError::MapDef(name.clone()))?;
            let w = |i: usize| u32_at(d, 4 * i);
            maps.insert(
                name.clone(),
                MapDef {
                    map_type: w(0)?,
                    key_size: w(1)?,
                    value_size: w(2)?,
                    max_entries: w(3)?,
                    flags: w(4)?,
                },
            );
        }
    }
    let mut programs = Vec::new();
    for (name, _, shndx, _) in symbols.iter().filter(|s| s.1 == STT_FUNC) {
        let sec = sections.get(*shndx).ok_or(ElfError::Short("program section"))?;
        // A program has a section of its own; a function left in `.text`
        // is a helper the compiler did not inline, which is refused below
        // when a program calls it (calls are not relocated here).
        if sec.name == ".text" {
            continue;
        }
        let mut map_refs = Vec::new();
        for rel in sections
            .iter()
            .filter(|r| r.kind == SHT_REL && r.info as usize == *shndx)
        {
            for e in rel.data.chunks_exact(16) {
                let off = offset_at(e, 0)?;
                let info = u64_at(e, 8)?;
                let (sym, rtype) = (
                    usize::try_from(info >> 32).map_err(|_| ElfError::Short("relocation"))?,
                    u32::try_from(info & 0xffff_ffff).unwrap_or(u32::MAX),
                );
                let target = symbols.get(sym).ok_or(ElfError::Short("relocation symbol"))?;
                if rtype != R_BPF_64_64 || Some(target.2) != maps_idx {
                    return Err(ElfError::Relocation {
                        program: name.clone(),
                        symbol: target.0.clone(),
                    });
                }
                map_refs.push((off / 8, target.0.clone()));
            }
        }
        programs.push(ProgramText {
            name: name.clone(),
            section: sec.name.clone(),
            insns: sec.data.to_vec(),
            map_refs,
        });
    }
    let license = sections
        .iter()
        .find(|s| s.name == "license")
        .map(|s| cstr(s.data, 0))
        .unwrap_or_default();
    Ok(ElfObject {
        maps,
        programs,
        license,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn anything_that_is_not_an_object_is_refused_without_panicking() {
        assert_eq!(parse(b""), Err(ElfError::NotBpf));
        assert_eq!(parse(b"\x7fELF\x02\x01"), Err(ElfError::Short("header")));
        let mut cut = vec![0u8; 64];
        cut[..6].copy_from_slice(b"\x7fELF\x02\x01");
        cut[18] = 247;
        cut[40] = 0xff; // section headers past the end
        cut[60] = 3;
        assert!(parse(&cut).is_err());
    }
}
