"""launcher/elf on real programs: ELF headers, USDT notes, sites and argument values.

tests/progs/sdt_args.c is built -m64/-m32 x -O0/-O2 x PIE/non-PIE.  Besides
the static checks, each build is run under gdb with a breakpoint on every
probe site, and every decoded ArgSpec is evaluated against the stopped
process's registers and memory: the value must be the one the C source passed.
"""

from __future__ import annotations

import json
import os
import shutil
import stat
import struct
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from cbuild import PROGS, build_c
from elftools.elf.elffile import ELFFile

from pydyn.launcher.elf.argspec import ArgKind, ArgSpec
from pydyn.launcher.elf.libraries import _iter_ld_cache, find_library
from pydyn.launcher.elf.reader import ElfInfo, check_preloadable, get_elf_info
from pydyn.launcher.elf.stapsdt import (
    ProbeSite,
    SiteScan,
    get_probe_sites,
    iter_stapsdt_notes,
    nop_length,
)
from pydyn.launcher.elf.symbols import get_symbol_table
from pydyn.launcher.errors import TargetError

INT64_MIN = -(1 << 63)
UINT64_MAX = (1 << 64) - 1


def f32_bits(x: float) -> int:
    return int.from_bytes(struct.pack("<f", x), "little")


def f64_bits(x: float) -> int:
    return int.from_bytes(struct.pack("<d", x), "little")


# The value of every argument of every probe in sdt_args.c / sdt_sema.c.  Strings are
# addresses: "sym+off" (link-time vaddr + load bias) or "tls:sym" (thread-local address).
EXPECTED: dict[str, list[int | str]] = {
    "consts": [-127, 0x81, -32767, 0x8001, -1, INT64_MIN, UINT64_MAX, 42],
    "regs": [-127, 0x81, -32767, 0x8001, -1, 0x80000001],
    "wide": [INT64_MIN, UINT64_MAX, -2],
    "stack": [-100, -300, -3, 0x123456789ABCDEF0, 0xDEADBEEF],
    "ptrs": ["pydyn_global+0", "pydyn_array+4", "tls:pydyn_tls"],
    "array": [13, 15],
    "globals": [0x5678, -5, 13, 0x1234],
    "floats": [f32_bits(1.5), f64_bits(-2.25)],
    "many": list(range(1, 13)),
    "noargs": [],
    "sema": [7],
    "mem": [0x1234, 0x5678, -5, 13, -3],
}


@dataclass(frozen=True)
class Flavour:
    m32: bool
    opt: str
    pie: bool

    @property
    def id(self) -> str:
        return f"{'m32' if self.m32 else 'm64'}{self.opt}-{'pie' if self.pie else 'nopie'}"

    @property
    def flags(self) -> tuple[str, ...]:
        return ("-fPIE", "-pie") if self.pie else ("-fno-pie", "-no-pie")


FLAVOURS = [Flavour(m32, opt, pie) for m32 in (False, True) for opt in ("-O0", "-O2")
            for pie in (True, False)]


def allowed_unsupported(flavour: Flavour, spec: ArgSpec) -> bool:
    """The one case the note cannot describe: i386 64-bit values in a register pair."""
    return flavour.m32 and spec.size == 8 and "4-byte register" in spec.error


@pytest.fixture(scope="module")
def built(tmp_path_factory: pytest.TempPathFactory, request: pytest.FixtureRequest,
          sdt_cflags: Any) -> tuple[Flavour, Path]:
    flavour: Flavour = request.param
    out = tmp_path_factory.mktemp(flavour.id) / "sdt_args"
    build_c([PROGS / "sdt_args.c", PROGS / "sdt_sema.c"], out, m32=flavour.m32,
            opt=flavour.opt, extra=flavour.flags)
    return flavour, out


def pytest_generate_tests(metafunc: pytest.Metafunc) -> None:
    if "built" in metafunc.fixturenames:
        metafunc.parametrize("built", FLAVOURS, ids=[f.id for f in FLAVOURS], indirect=True,
                             scope="module")


def by_name(scan: SiteScan) -> dict[str, ProbeSite]:
    sites = {s.name: s for s in scan.sites}
    assert len(sites) == len(scan.sites), "probe names are unique in sdt_args.c"
    return sites


def elf_symbol(path: Path, name: str) -> Any:
    """The symbol via pyelftools: independent of pydyn's own symbol decoding."""
    with open(path, "rb") as f:
        elf = ELFFile(f)
        symtab: Any = elf.get_section_by_name(".symtab")
        syms = symtab.get_symbol_by_name(name)
        assert syms, name
        return syms[0].entry


def section_range(path: Path, name: str) -> tuple[int, int]:
    with open(path, "rb") as f:
        sec: Any = ELFFile(f).get_section_by_name(name)
        return sec["sh_addr"], sec["sh_addr"] + sec["sh_size"]


# --- headers -----------------------------------------------------------------------------

def test_elf_info(built: tuple[Flavour, Path]) -> None:
    flavour, prog = built
    info = get_elf_info(str(prog))
    assert info.path == os.path.realpath(prog)
    assert (info.elf_class, info.machine, info.abi) == \
        ((32, "i386", "m32") if flavour.m32 else (64, "x86_64", "m64"))
    assert info.elf_type == ("DYN" if flavour.pie else "EXEC")
    assert info.is_dynamic and not info.is_shared_object and info.is_pie == flavour.pie
    assert info.interpreter == ("/lib/ld-linux.so.2" if flavour.m32
                                else "/lib64/ld-linux-x86-64.so.2")
    assert "libc.so.6" in info.needed
    assert info.build_id and len(info.build_id) == 40
    assert any(s.executable for s in info.segments) and any(s.writable for s in info.segments)
    assert info.tls is not None and info.tls[1] >= 4
    check_preloadable(info)
    out = subprocess.run(["readelf", "-n", str(prog)], capture_output=True, text=True).stdout
    if out:
        assert info.build_id in out


# --- notes and sites ---------------------------------------------------------------------

def test_every_note_is_a_valid_site(built: tuple[Flavour, Path]) -> None:
    flavour, prog = built
    scan = get_probe_sites(str(prog))
    assert scan.skipped == ()
    sites = by_name(scan)
    assert set(sites) == set(EXPECTED)
    text_lo, text_hi = section_range(prog, ".text")
    for site in scan.sites:
        assert site.provider == "pydyn_test" and site.path == os.path.realpath(prog)
        assert text_lo <= site.pc < text_hi
        assert site.nop_len == 1          # sdt.h emits a one-byte nop on x86
        assert site.machine == ("i386" if flavour.m32 else "x86_64")
        assert len(site.args) == len(EXPECTED[site.name]), site
        assert str(site).startswith(f'process("{site.path}").provider("pydyn_test")'
                                    f'.mark("{site.name}") pc={site.pc:#x}')
    notes = list(iter_stapsdt_notes(str(prog)))
    assert sorted((n.name, n.pc, n.args) for n in notes) == \
        sorted((s.name, s.pc, s.arg_text) for s in scan.sites)


def test_every_argument_parses(built: tuple[Flavour, Path]) -> None:
    flavour, prog = built
    for site in get_probe_sites(str(prog)).sites:
        for spec in site.args:
            assert spec.supported or allowed_unsupported(flavour, spec), f"{site}: {spec}"


def test_constants_decode(built: tuple[Flavour, Path]) -> None:
    _, prog = built
    consts = by_name(get_probe_sites(str(prog)))["consts"]
    assert all(a.kind is ArgKind.CONST for a in consts.args)
    assert [a.value for a in consts.args] == EXPECTED["consts"]
    assert consts.args[1].text == "1@$-127" and consts.args[1].value == 129


def test_semaphore(built: tuple[Flavour, Path]) -> None:
    _, prog = built
    sites = by_name(get_probe_sites(str(prog)))
    sema = elf_symbol(prog, "pydyn_test_sema_semaphore")
    lo, hi = section_range(prog, ".probes")
    assert sites["sema"].semaphore == sema["st_value"] and lo <= sema["st_value"] < hi
    assert all(s.semaphore == 0 for n, s in sites.items() if n != "sema")


def test_symbolic_operands_resolve(built: tuple[Flavour, Path]) -> None:
    """The displacements of the "m" probe against pyelftools' symbol table."""
    flavour, prog = built
    mem = by_name(get_probe_sites(str(prog)))["mem"]
    tls_var = elf_symbol(prog, "pydyn_tls")
    glob = elf_symbol(prog, "pydyn_global")["st_value"]
    info = get_elf_info(str(prog))
    assert info.tls is not None
    _, memsz, align = info.tls
    tls_arg, glob_arg = mem.args[0], mem.args[1]
    assert tls_arg.segment == ("gs" if flavour.m32 else "fs") and tls_arg.base == -1
    assert tls_arg.disp == tls_var["st_value"] - (memsz + align - 1) // align * align
    if flavour.m32 and flavour.pie:
        got = elf_symbol(prog, "_GLOBAL_OFFSET_TABLE_")["st_value"]
        assert "@GOTOFF" in glob_arg.text
        assert glob_arg.disp == glob - got and not glob_arg.disp_is_vaddr
        assert glob_arg.base >= 0
    else:
        assert glob_arg.disp == glob and glob_arg.disp_is_vaddr and glob_arg.base == -1


# --- values at run time, under gdb ---------------------------------------------------------

GDB_SCRIPT = r'''
import json, gdb

plan = json.load(open(PLAN_PATH))
ptr = plan["ptr_size"]
mask = (1 << (8 * ptr)) - 1
gdb.execute("set pagination off")
gdb.execute("set confirm off")
gdb.execute("starti", to_string=True)
inf = gdb.selected_inferior()
bias = None
for line in open("/proc/%d/maps" % inf.pid):
    f = line.split()
    if len(f) >= 6 and f[5] == plan["exe"] and int(f[2], 16) == 0:
        bias = int(f[0].split("-")[0], 16) - plan["first_vaddr"]
        break
for sema in plan["semaphores"]:
    inf.write_memory(sema + bias, b"\x01\x00")
by_pc = {}
for probe in plan["probes"]:
    gdb.Breakpoint("*%#x" % (probe["pc"] + bias), internal=True)
    by_pc[probe["pc"] + bias] = probe

def rd(addr, size):
    return int.from_bytes(inf.read_memory(addr & mask, size).tobytes(), "little")

results = {}
while True:
    try:
        gdb.execute("continue", to_string=True)
    except gdb.error:
        break
    if not inf.pid:
        break
    frame = gdb.selected_frame()
    probe = by_pc[int(frame.pc())]
    tp = rd(plan["tp_vaddr"] + bias, ptr)
    def reg(n):
        return int(frame.read_register(plan["regs"][n])) & mask
    values = []
    for a in probe["args"]:
        size = a["size"]
        if a["kind"] == "const":
            raw = a["value"] + (bias if a["disp_is_vaddr"] else 0)
        elif a["kind"] == "reg":
            raw = reg(a["reg"]) >> a["reg_shift"]
        elif a["kind"] == "mem":
            addr = a["disp"] + (bias if a["disp_is_vaddr"] else 0)
            if a["base"] >= 0:
                addr += reg(a["base"])
            if a["index"] >= 0:
                addr += reg(a["index"]) * a["scale"]
            if a["segment"]:
                addr += tp
            raw = rd(addr, size)
        else:
            values.append(None)
            continue
        raw &= (1 << (8 * size)) - 1
        if a["signed"] and raw >> (8 * size - 1):
            raw -= 1 << (8 * size)
        values.append(raw)
    results[probe["name"]] = {"values": values, "tp": tp, "bias": bias}
json.dump(results, open(OUT_PATH, "w"))
'''

# DWARF number -> gdb register name (System V psABI), independent of argspec's tables.
GDB_REGS = {
    "x86_64": ["rax", "rdx", "rcx", "rbx", "rsi", "rdi", "rbp", "rsp",
               "r8", "r9", "r10", "r11", "r12", "r13", "r14", "r15", "rip"],
    "i386": ["eax", "ecx", "edx", "ebx", "esp", "ebp", "esi", "edi", "eip"],
}


def run_under_gdb(prog: Path, scan: SiteScan, tmp: Path) -> dict[str, Any]:
    info = scan.info
    first = min((s for s in info.segments if s.offset == 0), key=lambda s: s.vaddr)
    plan = {
        "exe": info.path,
        "first_vaddr": first.vaddr & ~0xFFF,
        "ptr_size": info.elf_class // 8,
        "tp_vaddr": elf_symbol(prog, "pydyn_tp")["st_value"],
        "regs": GDB_REGS[info.machine],
        "semaphores": sorted({s.semaphore for s in scan.sites if s.semaphore}),
        "probes": [{"name": s.name, "pc": s.pc,
                    "args": [{"kind": a.kind.value, "size": a.size, "signed": a.signed,
                              "value": a.value, "reg": a.reg, "reg_shift": a.reg_shift,
                              "base": a.base, "index": a.index, "scale": a.scale,
                              "disp": a.disp, "disp_is_vaddr": a.disp_is_vaddr,
                              "segment": a.segment} for a in s.args]}
                   for s in scan.sites],
    }
    plan_path, out_path, script = tmp / "plan.json", tmp / "out.json", tmp / "eval.py"
    plan_path.write_text(json.dumps(plan))
    script.write_text(f"PLAN_PATH = {str(plan_path)!r}\nOUT_PATH = {str(out_path)!r}\n"
                      + GDB_SCRIPT)
    env = dict(os.environ, DEBUGINFOD_URLS="")
    res = subprocess.run(["gdb", "-nx", "-q", "-batch", "-ex", "set auto-load off",
                          "-x", str(script), str(prog)],
                         capture_output=True, text=True, timeout=60, env=env)
    if not out_path.exists():
        if "ptrace" in res.stderr.lower() or "not permitted" in res.stderr.lower():
            pytest.skip(f"gdb cannot trace here: {res.stderr.strip()[:200]}")
        pytest.fail(f"gdb run failed:\n{res.stdout}\n{res.stderr}")
    result: dict[str, Any] = json.loads(out_path.read_text())
    return result


@pytest.mark.skipif(shutil.which("gdb") is None, reason="gdb not installed")
def test_argument_values_at_run_time(built: tuple[Flavour, Path], tmp_path: Path) -> None:
    flavour, prog = built
    scan = get_probe_sites(str(prog))
    sites = by_name(scan)
    results = run_under_gdb(prog, scan, tmp_path)
    # Every site was hit, the semaphore-guarded one only because its semaphore was set.
    assert set(results) == set(EXPECTED)
    info = scan.info
    assert info.tls is not None
    _, memsz, align = info.tls
    block = (memsz + align - 1) // align * align
    for name, want in EXPECTED.items():
        got = results[name]
        expected: list[int | None] = []
        for value, spec in zip(want, sites[name].args, strict=True):
            if not spec.supported:
                assert allowed_unsupported(flavour, spec), spec
                expected.append(None)
            elif isinstance(value, str) and value.startswith("tls:"):
                offset = elf_symbol(prog, value[4:])["st_value"] - block
                expected.append(got["tp"] + offset)
            elif isinstance(value, str):
                sym, off = value.split("+")
                expected.append(elf_symbol(prog, sym)["st_value"] + got["bias"] + int(off))
            else:
                expected.append(value)
        assert got["values"] == expected, (name, [str(a) for a in sites[name].args])


# --- damaged copies ----------------------------------------------------------------------

@dataclass(frozen=True)
class NoteLoc:
    name: str
    desc_offset: int   # file offset of the note's pc field


def note_locations(path: Path) -> list[NoteLoc]:
    """Where each stapsdt note's fields are in the file (a small independent walker)."""
    with open(path, "rb") as f:
        sec: Any = ELFFile(f).get_section_by_name(".note.stapsdt")
        data, base = sec.data(), sec["sh_offset"]
    out, off = [], 0
    while off + 12 <= len(data):
        namesz, descsz, _ = struct.unpack_from("<III", data, off)
        desc = off + 12 + (namesz + 3) // 4 * 4
        strings = data[desc + 24:desc + descsz].split(b"\0")
        out.append(NoteLoc(strings[1].decode(), base + desc))
        off = desc + (descsz + 3) // 4 * 4
    return out


@pytest.fixture(scope="module")
def small(tmp_path_factory: pytest.TempPathFactory, sdt_cflags: Any) -> Path:
    out = tmp_path_factory.mktemp("small") / "sdt_small"
    return build_c(PROGS / "sdt_small.c", out,
                   extra=("-ffunction-sections", "-Wl,--gc-sections"))


def patched(src: Path, dst: Path, offset: int, data: bytes) -> Path:
    raw = bytearray(src.read_bytes())
    raw[offset:offset + len(data)] = data
    dst.write_bytes(bytes(raw))
    return dst


def site_file_offset(path: Path, pc: int) -> int:
    for seg in get_elf_info(str(path)).segments:
        off = seg.file_offset(pc)
        if off is not None:
            return off
    raise AssertionError(pc)


def test_dangling_note_is_skipped(small: Path, tmp_path: Path) -> None:
    scan = get_probe_sites(str(small))
    unused = [s for s in scan.sites if s.name == "unused"]
    skipped = [s for s in scan.skipped if s.name == "unused"]
    assert len(unused) + len(skipped) == 1       # however the linker treated it
    loc = next(n for n in note_locations(small) if n.name == "unused")
    copy = patched(small, tmp_path / "dangling", loc.desc_offset, struct.pack("<Q", 0))
    scan = get_probe_sites(str(copy))
    assert [s.name for s in scan.sites] == ["used"]
    (skip,) = scan.skipped
    assert (skip.name, skip.provider, skip.pc) == ("unused", "pydyn_test", 0)
    assert "not inside an executable segment" in skip.reason and "--gc-sections" in skip.reason


def test_overwritten_nop_is_skipped(small: Path, tmp_path: Path) -> None:
    used = next(s for s in get_probe_sites(str(small)).sites if s.name == "used")
    copy = patched(small, tmp_path / "int3", site_file_offset(small, used.pc), b"\xcc")
    scan = get_probe_sites(str(copy))
    (skip,) = [s for s in scan.skipped if s.name == "used"]
    assert skip.reason.startswith("instruction at pc is not a nop (cc")
    assert [s.name for s in scan.sites] == ["unused"]


def test_semaphore_outside_writable_segment_is_skipped(small: Path, tmp_path: Path) -> None:
    loc = next(n for n in note_locations(small) if n.name == "used")
    used = next(s for s in get_probe_sites(str(small)).sites if s.name == "used")
    # Point the semaphore at the (read-only, executable) probe site itself.
    copy = patched(small, tmp_path / "sema", loc.desc_offset + 16, struct.pack("<Q", used.pc))
    (skip,) = [s for s in get_probe_sites(str(copy)).skipped if s.name == "used"]
    assert "semaphore" in skip.reason and "writable" in skip.reason


def test_prelink_base_adjustment(small: Path, tmp_path: Path) -> None:
    """A note whose pc and base fields are both off by the same delta (a prelinked file)."""
    loc = next(n for n in note_locations(small) if n.name == "used")
    raw = small.read_bytes()
    pc, base = struct.unpack_from("<QQ", raw, loc.desc_offset)
    copy = patched(small, tmp_path / "prelinked", loc.desc_offset,
                   struct.pack("<QQ", pc + 0x10000, base + 0x10000))
    (note,) = [n for n in iter_stapsdt_notes(str(copy)) if n.name == "used"]
    assert (note.pc, note.base) == (pc, base + 0x10000)
    assert any(s.name == "used" and s.pc == pc for s in get_probe_sites(str(copy)).sites)


def test_garbage_notes_never_raise(small: Path, tmp_path: Path) -> None:
    with open(small, "rb") as f:
        sec: Any = ELFFile(f).get_section_by_name(".note.stapsdt")
        off, size = sec["sh_offset"], sec["sh_size"]
    locs = note_locations(small)
    # Oversized namesz in the second note: the first survives, the walk stops with a reason.
    second_hdr = locs[1].desc_offset - 12 - 8
    copy = patched(small, tmp_path / "big", second_hdr, struct.pack("<I", 0x7FFFFFF0))
    scan = get_probe_sites(str(copy))
    assert [s.name for s in scan.sites] == [locs[0].name]
    assert any("malformed .note.stapsdt" in s.reason for s in scan.skipped)
    # Strings without terminators: the note is skipped, never misread.
    first_strings = locs[0].desc_offset + 24
    copy = patched(small, tmp_path / "noterm", first_strings,
                   b"x" * (locs[1].desc_offset - 20 - first_strings))
    scan = get_probe_sites(str(copy))
    assert [s.name for s in scan.sites] == [locs[1].name]
    assert len(scan.skipped) == 1
    # A section header claiming more bytes than the file has: the notes are lost, not the file.
    with open(small, "rb") as f:
        elf = ELFFile(f)
        index = next(i for i, sec in enumerate(elf.iter_sections())
                     if sec.name == ".note.stapsdt")
        shdr = elf.header["e_shoff"] + index * elf.header["e_shentsize"]
    copy = patched(small, tmp_path / "huge", shdr + 32, struct.pack("<Q", 1 << 40))  # sh_size
    scan = get_probe_sites(str(copy))
    assert scan.sites == () and "runs past the end" in scan.skipped[0].reason
    # Random bytes over the whole section.
    for seed in range(20):
        noise = bytes((seed * 131 + i * 197 + (i >> 3) * 7) & 0xFF for i in range(size))
        copy = patched(small, tmp_path / f"noise{seed}", off, noise)
        scan = get_probe_sites(str(copy))
        for site in scan.sites:       # whatever survives is a real nop in the code
            assert site.nop_len > 0 and any(
                s.executable and s.contains(site.pc) for s in scan.info.segments)


@pytest.mark.unit
def test_nop_lengths() -> None:
    for code, n in [(b"\x90", 1), (b"\x66\x90", 2), (b"\x0f\x1f\x00", 3),
                    (b"\x0f\x1f\x40\x00", 4), (b"\x0f\x1f\x44\x00\x00", 5),
                    (b"\x66\x0f\x1f\x44\x00\x00", 6), (b"\x0f\x1f\x80\x00\x00\x00\x00", 7),
                    (b"\x0f\x1f\x84\x00\x00\x00\x00\x00", 8),
                    (b"\x66\x0f\x1f\x84\x00\x00\x00\x00\x00", 9),
                    (b"\x66\x2e\x0f\x1f\x84\x00\x00\x00\x00\x00", 10)]:
        assert nop_length(code + b"\xc3", "x86_64") == n, code.hex()
    for code in [b"\xcc", b"\x55", b"\x0f\x1f", b"\x0f\x1f\x48\x00", b"\xf3\x90", b""]:
        assert nop_length(code, "i386") == 0, code.hex()
    assert nop_length(bytes.fromhex("1f2003d5"), "aarch64") == 4
    assert nop_length(bytes.fromhex("c0035fd6"), "aarch64") == 0


def test_many_notes_are_all_read(tmp_path: Path) -> None:
    """20k probe sites in one binary, each read whole (how fast many points resolve is
    bench/coldstart.py's measure, not a test's).

    Each note has its own name, pc and argument string; the operands in them
    repeat as in real code (a few registers, stack slots and constants).
    """
    n = 20000
    lines = [".text", ".globl main", ".type main,@function", "main:"]
    for i in range(n):
        lines += [
            "990: nop",
            '.pushsection .note.stapsdt,"","note"', ".balign 4",
            ".4byte 992f-991f, 994f-993f, 3", '991: .asciz "stapsdt"', "992: .balign 4",
            "993: .8byte 990b", ".8byte _.stapsdt.base", ".8byte 0",
            '.asciz "bulk"', f'.asciz "p{i}"',
            f'.asciz "-4@%edi 8@%rsi -4@-{8 * (i % 512)}(%rbp) 8@${i % 1000}"',
            "994: .balign 4", ".popsection"]
    lines += ["xorl %eax, %eax", "ret",
              '.pushsection .stapsdt.base,"aG","progbits",.stapsdt.base,comdat',
              ".weak _.stapsdt.base", ".hidden _.stapsdt.base", "_.stapsdt.base: .space 1",
              ".size _.stapsdt.base, 1", ".popsection",
              '.section .note.GNU-stack,"",@progbits']
    src = tmp_path / "bulk.s"
    src.write_text("\n".join(lines) + "\n")
    prog = build_c(src, tmp_path / "bulk")
    scan = get_probe_sites(str(prog))
    assert len(scan.sites) == n and not scan.skipped
    last = scan.sites[-1]
    assert last.name == f"p{n - 1}" and len({s.pc for s in scan.sites}) == n
    assert last.args[2].disp == -8 * ((n - 1) % 512) and last.args[3].value == (n - 1) % 1000


# --- errors ------------------------------------------------------------------------------

def assert_target_error(path: str, reason: str) -> None:
    with pytest.raises(TargetError) as exc:
        get_elf_info(path)
    assert exc.value.path == path and str(exc.value).startswith(f"{path}: ")
    assert reason in exc.value.reason, exc.value.reason


def test_errors_name_the_path(tmp_path: Path, small: Path) -> None:
    assert_target_error(str(tmp_path / "missing"), "no such file")
    assert_target_error(str(tmp_path), "is a directory")
    text = tmp_path / "notes.txt"
    text.write_text("hello, not an ELF file\n")
    assert_target_error(str(text), "not an ELF file")
    empty = tmp_path / "empty"
    empty.write_bytes(b"")
    assert_target_error(str(empty), "not an ELF file")
    trunc = tmp_path / "truncated"
    trunc.write_bytes(small.read_bytes()[:100])
    assert_target_error(str(trunc), "truncated ELF file")
    tiny = tmp_path / "tiny"
    tiny.write_bytes(small.read_bytes()[:40])
    assert_target_error(str(tiny), "truncated ELF file")
    fifo = tmp_path / "fifo"
    os.mkfifo(fifo)
    assert_target_error(str(fifo), "not a regular file")
    for fn in (get_probe_sites, get_symbol_table):
        with pytest.raises(TargetError, match="truncated ELF file"):
            fn(str(trunc))


@pytest.mark.skipif(os.geteuid() == 0, reason="root can read any file")
def test_permission_denied(tmp_path: Path, small: Path) -> None:
    copy = tmp_path / "unreadable"
    shutil.copy(small, copy)
    copy.chmod(0)
    assert_target_error(str(copy), "permission denied")


def test_static_binaries_are_not_preloadable(tmp_path: Path, sdt_cflags: Any) -> None:
    for flag in ("-static", "-static-pie"):
        prog = build_c(PROGS / "sdt_small.c", tmp_path / f"small{flag}", extra=(flag,))
        info = get_elf_info(str(prog))
        assert not info.is_dynamic and info.interpreter is None and not info.is_shared_object
        with pytest.raises(TargetError, match="statically linked") as exc:
            check_preloadable(info)
        assert str(exc.value).startswith(info.path)
        # Static binaries still carry their probe sites.
        assert {s.name for s in get_probe_sites(str(prog)).sites} >= {"used"}


def test_setuid_is_not_preloadable(tmp_path: Path, small: Path) -> None:
    # setuid to another user: the loader runs it in secure mode (a program setuid to
    # the user running it is not, and is preloadable)
    if os.geteuid() != 0:
        pytest.skip("making a program setuid to another user needs root")
    copy = tmp_path / "suid"
    shutil.copy(small, copy)
    os.chown(copy, 65534, 65534)
    copy.chmod(copy.stat().st_mode | stat.S_ISUID)
    info = get_elf_info(str(copy))
    assert info.is_setuid
    with pytest.raises(TargetError, match="setuid"):
        check_preloadable(info)


@pytest.mark.unit
def test_shared_library_info() -> None:
    libc = find_library("libc.so.6", get_elf_info(sys.executable))
    info = get_elf_info(libc)
    assert info.is_shared_object and info.soname == "libc.so.6" and not info.is_pie
    with pytest.raises(TargetError, match="shared library"):
        check_preloadable(info)


# --- libraries ---------------------------------------------------------------------------

@pytest.fixture(scope="module")
def lib_layout(tmp_path_factory: pytest.TempPathFactory, sdt_cflags: Any) -> Path:
    """app (RUNPATH $ORIGIN/lib) + lib/libpdt.so, and 32-bit copies under m32/."""
    root = tmp_path_factory.mktemp("libs")
    src = root / "pdt.c"
    src.write_text("int pdt_value(void) { return 42; }\n")
    main = root / "app.c"
    main.write_text("int pdt_value(void);\nint main(void) { return pdt_value() != 42; }\n")
    (root / "lib").mkdir()
    build_c(src, root / "lib" / "libpdt.so", extra=("-shared", "-fPIC"))
    build_c(main, root / "app", extra=(f"-L{root / 'lib'}", "-lpdt",
                                       "-Wl,-rpath,$ORIGIN/lib", "-Wl,--enable-new-dtags"))
    return root


def test_find_library_runpath_origin(lib_layout: Path) -> None:
    info = get_elf_info(str(lib_layout / "app"))
    assert info.runpath == ("$ORIGIN/lib",) and not info.runpath_is_rpath
    assert "libpdt.so" in info.needed
    assert find_library("libpdt.so", info) == str((lib_layout / "lib" / "libpdt.so").resolve())


def test_find_library_ld_library_path(lib_layout: Path, tmp_path: Path) -> None:
    info = get_elf_info(sys.executable)
    with pytest.raises(TargetError, match="library not found"):
        find_library("libpdt.so", info)
    got = find_library("libpdt.so", info, env_library_path=f"/nonexistent:{lib_layout / 'lib'}")
    assert got == str((lib_layout / "lib" / "libpdt.so").resolve())


def test_find_library_by_class(tmp_path: Path, have_m32: bool) -> None:
    info64 = get_elf_info(sys.executable)
    libc64 = find_library("libc.so.6", info64)
    assert get_elf_info(libc64).elf_class == 64
    assert find_library(libc64, info64) == libc64
    assert find_library("libc.so*", info64) == libc64
    rel = os.path.relpath(libc64)
    assert find_library(rel, info64) == libc64
    with pytest.raises(TargetError, match="no such file"):
        find_library(str(tmp_path / "libnope.so"), info64)
    with pytest.raises(TargetError, match="library not found"):
        find_library("libpydyn-does-not-exist.so.9", info64)
    if not have_m32:
        pytest.skip("no -m32 toolchain")
    prog = build_c(PROGS / "sdt_small.c", tmp_path / "small32", m32=True)
    info32 = get_elf_info(str(prog))
    libc32 = find_library("libc.so.6", info32)
    assert get_elf_info(libc32).elf_class == 32 and libc32 != libc64
    with pytest.raises(TargetError, match="32-bit i386 file"):
        find_library(libc32, info64)


@pytest.mark.unit
@pytest.mark.skipif(not os.path.exists("/etc/ld.so.cache"), reason="no /etc/ld.so.cache")
def test_ld_so_cache_lists_libc() -> None:
    paths = list(_iter_ld_cache("libc.so.6"))
    assert paths and all(os.path.basename(p) == "libc.so.6" for p in paths)
    assert any(get_elf_info(p).elf_class == 64 for p in paths)


def test_elf_info_str(small: Path) -> None:
    info: ElfInfo = get_elf_info(str(small))
    assert str(info).startswith(f"{info.path}: ELF64 x86_64 PIE, interpreter ")
    assert all(str(s).startswith("LOAD 0x") for s in info.segments)
