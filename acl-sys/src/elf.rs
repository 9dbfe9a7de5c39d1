//! Just enough ELF64 reading to list a shared object's `DT_NEEDED` entries, so that the
//! loader can open a library's dependencies by absolute path first (no
//! `LD_LIBRARY_PATH` needed at run time).

use std::path::Path;

fn u16_at(b: &[u8], o: usize) -> Option<u16> {
    Some(u16::from_le_bytes(b.get(o..o + 2)?.try_into().ok()?))
}
fn u32_at(b: &[u8], o: usize) -> Option<u32> {
    Some(u32::from_le_bytes(b.get(o..o + 4)?.try_into().ok()?))
}
fn u64_at(b: &[u8], o: usize) -> Option<u64> {
    Some(u64::from_le_bytes(b.get(o..o + 8)?.try_into().ok()?))
}

/// The `DT_NEEDED` sonames of a little-endian ELF64 file; `None` if it is not one (or
/// is malformed). Never panics on hostile input.
pub fn needed(path: &Path) -> Option<Vec<String>> {
    let b = std::fs::read(path).ok()?;
    needed_from_bytes(&b)
}

pub(crate) fn needed_from_bytes(b: &[u8]) -> Option<Vec<String>> {
    if b.get(0..4)? != b"\x7fELF" || *b.get(4)? != 2 || *b.get(5)? != 1 {
        return None;
    }
    let phoff = usize::try_from(u64_at(b, 0x20)?).ok()?;
    let phentsize = u16_at(b, 0x36)? as usize;
    let phnum = u16_at(b, 0x38)? as usize;
    let mut loads = Vec::new();
    let mut dynamic = None;
    for i in 0..phnum {
        let o = phoff.checked_add(i.checked_mul(phentsize)?)?;
        let p_type = u32_at(b, o)?;
        let p_offset = u64_at(b, o + 8)?;
        let p_vaddr = u64_at(b, o + 16)?;
        let p_filesz = u64_at(b, o + 32)?;
        match p_type {
            1 => loads.push((p_vaddr, p_offset, p_filesz)),
            2 => dynamic = Some((p_offset, p_filesz)),
            _ => {}
        }
    }
    let (doff, dsize) = dynamic?;
    let to_off = |vaddr: u64| -> Option<usize> {
        loads
            .iter()
            .find(|(va, _, sz)| vaddr >= *va && vaddr < va.saturating_add(*sz))
            .and_then(|(va, off, _)| usize::try_from(vaddr - va + off).ok())
    };
    let mut strtab = None;
    let mut needed_offsets = Vec::new();
    let (doff, dsize) = (usize::try_from(doff).ok()?, usize::try_from(dsize).ok()?);
    let mut o = doff;
    while o + 16 <= doff.checked_add(dsize)? {
        let tag = u64_at(b, o)?;
        let val = u64_at(b, o + 8)?;
        match tag {
            0 => break,
            1 => needed_offsets.push(val),
            5 => strtab = Some(val),
            _ => {}
        }
        o += 16;
    }
    let base = to_off(strtab?)?;
    let mut out = Vec::new();
    for n in needed_offsets {
        let start = base.checked_add(usize::try_from(n).ok()?)?;
        let rest = b.get(start..)?;
        let end = rest.iter().position(|&c| c == 0)?;
        out.push(String::from_utf8_lossy(&rest[..end]).into_owned());
    }
    Some(out)
}

#[cfg(test)]
mod tests {
    #[test]
    fn garbage_is_not_elf() {
        assert_eq!(super::needed_from_bytes(b"not an elf file at all"), None);
        assert_eq!(super::needed_from_bytes(b"\x7fELF\x02\x01"), None);
        assert_eq!(super::needed_from_bytes(&[]), None);
    }

    #[test]
    fn reads_a_real_library() {
        // The running test binary is an ELF64 file that needs libc.
        let exe = std::env::current_exe().unwrap();
        let n = super::needed(&exe).expect("test binary is ELF64");
        assert!(n.iter().any(|s| s.starts_with("libc.so")), "{n:?}");
    }
}
