//! The agent binary's read-only segments end on page boundaries, so that
//! gVisor's loader has no page tail to zero and every sandbox shares the
//! host's copy of them instead of holding its own (link/pad-rodata.ld).
//! A unit test of the link step: it reads the ELF program headers of the
//! binary cargo built, no sandbox involved.

const PT_LOAD: u32 = 1;
const PF_X: u32 = 1;
const PF_W: u32 = 2;
const PAGE: u64 = 4096;

/// One PT_LOAD program header, the fields the check needs.
#[derive(Debug)]
struct Load {
    flags: u32,
    vaddr: u64,
    filesz: u64,
    memsz: u64,
}

fn u16_at(b: &[u8], at: usize) -> u16 {
    u16::from_le_bytes(b[at..at + 2].try_into().expect("2 bytes"))
}
fn u32_at(b: &[u8], at: usize) -> u32 {
    u32::from_le_bytes(b[at..at + 4].try_into().expect("4 bytes"))
}
fn u64_at(b: &[u8], at: usize) -> u64 {
    u64::from_le_bytes(b[at..at + 8].try_into().expect("8 bytes"))
}

fn loads(elf: &[u8]) -> Vec<Load> {
    assert_eq!(&elf[..4], b"\x7fELF", "not an ELF file");
    assert_eq!(elf[4], 2, "not a 64-bit ELF");
    let phoff = u64_at(elf, 0x20) as usize;
    let phentsize = u16_at(elf, 0x36) as usize;
    let phnum = u16_at(elf, 0x38) as usize;
    (0..phnum)
        .map(|i| phoff + i * phentsize)
        .filter(|&h| u32_at(elf, h) == PT_LOAD)
        .map(|h| Load {
            flags: u32_at(elf, h + 4),
            vaddr: u64_at(elf, h + 16),
            filesz: u64_at(elf, h + 32),
            memsz: u64_at(elf, h + 40),
        })
        .collect()
}

#[test]
fn read_only_data_segments_end_on_a_page_boundary() {
    let elf = std::fs::read(env!("CARGO_BIN_EXE_sbx-agent")).expect("read the agent binary");
    let loads = loads(&elf);
    let read_only: Vec<&Load> = loads
        .iter()
        .filter(|l| l.flags & (PF_W | PF_X) == 0 && l.filesz == l.memsz)
        .collect();
    assert!(!read_only.is_empty(), "no read-only PT_LOAD in {loads:?}");
    for l in read_only {
        assert_eq!(
            (l.vaddr + l.filesz) % PAGE,
            0,
            "read-only segment {l:x?} ends inside a page: gVisor's loader would copy it into every sandbox"
        );
    }
}
