"""The shared-segment layout: C header vs Python definition, the Python view, records."""

from __future__ import annotations

import mmap
import re
import shutil
import struct
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from pydyn import shmlayout
from pydyn.shmlayout import (
    CONST_GROUPS,
    CONSTANTS,
    HEADER,
    PD_TSLOTS,
    PROC,
    REC,
    STRUCTS,
    TSLOT,
    Field,
    LayoutError,
    SegmentView,
    Struct,
    StructView,
    decode_args,
    init_header,
    pack_record,
    plan_segment,
    render_c_header,
    string_arg_size,
    unpack_header,
)
from pydyn.shmlayout import globals as shmlayout_globals
from pydyn.shmlayout.c_header import render_struct
from pydyn.shmlayout.globals import GLOBAL_CONSTANTS, GLOBAL_STRUCTS, STAT

CFLAGS = ["-std=gnu11", "-Wall", "-Wextra", "-Werror", "-O1"]
ABIS: dict[str, list[str]] = {
    "m64": ["gcc", "-m64"],
    "m32": ["gcc", "-m32", "-idirafter", "/usr/include/x86_64-linux-gnu"],
}
AARCH64_GCC = "aarch64-linux-gnu-gcc"

# A struct that needs padding everywhere; on i386 it only matches the Python
# layout because pd_u64/pd_i64 force 8-byte alignment.
PADDED = Struct("pd_test_padded", (
    Field("a", "u8"),
    Field("b", "u64"),
    Field("c", "u16"),
    Field("d", "i64"),
    Field("e", "u32"),
    Field("f", "u8", 3),
    Field("g", "i64"),
    Field("h", "u16"),
))


def _abi_cmd(abi: str, tmp: Path) -> list[str]:
    """The compiler command for abi, or skip when that toolchain cannot link a program."""
    cmd = ABIS[abi]
    if shutil.which(cmd[0]) is None:
        pytest.skip(f"{cmd[0]} not installed")
    probe = tmp / f"probe_{abi}.c"
    probe.write_text("#include <stdio.h>\nint main(void) { return puts(\"\") < 0; }\n")
    r = subprocess.run([*cmd, str(probe), "-o", str(tmp / f"probe_{abi}")],
                       capture_output=True, text=True)
    if r.returncode != 0:
        pytest.skip(f"{abi} toolchain cannot build a program: {r.stderr.strip()[:200]}")
    return cmd


def _sample(si: int, fi: int, f: Field) -> int:
    """A distinct value per field that uses every byte (and the sign bit for some)."""
    bits = f.scalar.size * 8
    v = (0x9E3779B97F4A7C15 * (si * 64 + fi + 1)) & ((1 << bits) - 1)
    if f.type.startswith("i") and v >= 1 << (bits - 1):
        v -= 1 << bits
    return v


def _printer_source(structs: tuple[Struct, ...], extra: str = "") -> str:
    """C that prints every size/alignment/offset/constant, or dumps sample structs."""
    out = ['#include <stdio.h>', '#include <string.h>', '#include "pd_shm.h"', extra,
           "static void dump(const char *path) {", '\tFILE *fp = fopen(path, "wb");']
    for si, s in enumerate(structs):
        out.append(f"\t{{ struct {s.name} v; memset(&v, 0, sizeof v);")
        for fi, m in enumerate(s.members):
            f = m.field
            if m.is_pad:
                continue
            if f.is_bytes:
                out.append(f"\t  for (unsigned i = 0; i < {f.count}; i++) "
                           f"v.{f.name}[i] = (uint8_t)({si * 31 + fi} + i * 7);")
            else:
                bits = f.scalar.size * 8
                pattern = _sample(si, fi, f) & ((1 << bits) - 1)
                out.append(f"\t  v.{f.name} = ({f.scalar.ctype})UINT64_C({pattern:#x});")
        out.append("\t  fwrite(&v, sizeof v, 1, fp); }")
    out += ["\tfclose(fp);", "}", "int main(int argc, char **argv) {",
            "\tif (argc > 1) { dump(argv[1]); return 0; }"]
    for s in structs:
        out.append(f'\tprintf("struct {s.name} %u %u\\n", (unsigned)sizeof(struct {s.name}), '
                   f"(unsigned)_Alignof(struct {s.name}));")
        for m in s.members:
            out.append(f'\tprintf("field {s.name}.{m.name} %u %u\\n", '
                       f"(unsigned)offsetof(struct {s.name}, {m.name}), "
                       f"(unsigned)sizeof(((struct {s.name} *)0)->{m.name}));")
    for c in CONSTANTS:
        out.append(f'\tprintf("const {c.name} %llu\\n", (unsigned long long){c.name});')
    out += ["\treturn 0;", "}", ""]
    return "\n".join(out)


def _expected(structs: tuple[Struct, ...]) -> dict[str, tuple[int, ...]]:
    exp: dict[str, tuple[int, ...]] = {}
    for s in structs:
        exp[f"struct {s.name}"] = (s.sizeof, s.align)
        for m in s.members:
            exp[f"field {s.name}.{m.name}"] = (m.offset, m.field.size)
    for c in CONSTANTS:
        exp[f"const {c.name}"] = (c.value,)
    return exp


def _parse(text: str) -> dict[str, tuple[int, ...]]:
    got: dict[str, tuple[int, ...]] = {}
    for line in text.splitlines():
        kind, name, *nums = line.split()
        got[f"{kind} {name}"] = tuple(int(n) for n in nums)
    return got


@pytest.fixture
def header_dir(tmp_path: Path) -> Path:
    (tmp_path / "pd_shm.h").write_text(render_c_header())
    return tmp_path


ALL = (*STRUCTS, PADDED)
PADDED_DECL = "\n".join(render_struct(PADDED))


@pytest.mark.parametrize("abi", sorted(ABIS))
def test_c_layout_matches_python(abi: str, header_dir: Path) -> None:
    cmd = _abi_cmd(abi, header_dir)
    src = header_dir / "printer.c"
    src.write_text(_printer_source(ALL, PADDED_DECL))
    exe = header_dir / f"printer_{abi}"
    subprocess.run([*cmd, *CFLAGS, "-I", str(header_dir), str(src), "-o", str(exe)],
                   check=True, capture_output=True, text=True)
    got = _parse(subprocess.run([str(exe)], check=True, capture_output=True, text=True).stdout)
    assert got == _expected(ALL)

    # The bytes C writes decode through the Python view to the same values.
    dump = header_dir / f"dump_{abi}.bin"
    subprocess.run([str(exe), str(dump)], check=True)
    data = bytearray(dump.read_bytes())
    assert len(data) == sum(s.sizeof for s in ALL)
    at = 0
    for si, s in enumerate(ALL):
        view = StructView(s, data, at)
        for fi, m in enumerate(s.members):
            if m.is_pad:
                assert data[at + m.offset:at + m.end] == bytes(m.field.size)
            elif m.field.is_bytes:
                want = bytes((si * 31 + fi + i * 7) & 0xFF for i in range(m.field.count))
                assert getattr(view, m.name) == want, (s.name, m.name)
            else:
                assert getattr(view, m.name) == _sample(si, fi, m.field), (s.name, m.name)
        at += s.sizeof


@pytest.mark.unit
def test_padding_is_explicit() -> None:
    layout = [(m.name, m.offset, m.field.size) for m in PADDED.members]
    assert layout == [
        ("a", 0, 1), ("_pad0", 1, 7), ("b", 8, 8), ("c", 16, 2), ("_pad1", 18, 6),
        ("d", 24, 8), ("e", 32, 4), ("f", 36, 3), ("_pad2", 39, 1), ("g", 40, 8),
        ("h", 48, 2), ("_pad3", 50, 6),
    ]
    assert PADDED.sizeof == 56 and PADDED.align == 8
    # Members tile the struct exactly, with no gap or overlap.
    for s in ALL:
        ends = [0] + [m.end for m in s.members]
        assert [m.offset for m in s.members] == ends[:-1]
        assert ends[-1] == s.sizeof and s.sizeof % 8 == 0


@pytest.mark.unit
def test_fixed_sizes() -> None:
    assert (HEADER.sizeof, PROC.sizeof, REC.sizeof) == (512, 256, 16)
    assert HEADER.members[-1].name == "_reserved"
    assert not any(m.is_pad for m in PROC.members)  # exe fills pd_proc exactly
    with pytest.raises(ValueError, match="size"):
        Struct("t", (Field("a", "u64"), Field("b", "u32")), size=8)
    with pytest.raises(ValueError, match="duplicate"):
        Struct("t", (Field("a", "u32"), Field("a", "u32")))
    with pytest.raises(ValueError, match="reserved"):
        Struct("t", (Field("_x", "u32"),))
    # A Field is checked when a Struct is made of it.
    with pytest.raises(ValueError, match="only u8"):
        Struct("t", (Field("x", "u32", 2),))
    with pytest.raises(ValueError, match="unknown type"):
        Struct("t", (Field("x", "u128"),))


@pytest.mark.unit
def test_constants() -> None:
    names = [c.name for c in CONSTANTS]
    assert len(names) == len(set(names))
    for c in CONSTANTS:
        assert getattr(shmlayout, c.name) == c.value, c.name
    assert struct.pack("<Q", shmlayout.PD_MAGIC) == b"PDYN_SHM"
    groups = {g.name: {c.name: c.value for c in g.consts} for g in CONST_GROUPS}
    assert groups["rec"]["PD_REC_TEXT"] == 6 and groups["proc"]["PD_PROC_REFUSED"] == 5


def _strip_comments(text: str) -> str:
    return re.sub(r"/\*.*?\*/", "", text, flags=re.S)


@pytest.mark.unit
def test_header_has_no_abi_dependent_types() -> None:
    text = render_c_header()
    for bad in (r"\blong\b", r"\bsize_t\b", r"\bssize_t\b", r"\bu?intptr_t\b", r"\bptrdiff_t\b",
                r"\bvoid\s*\*", r"pthread", r"\bint\b", r"\bunsigned\b", r"\bchar\b"):
        assert re.search(bad, text) is None, bad
    assert "*" not in _strip_comments(text)  # no pointer members at all
    for s in STRUCTS:
        assert text.count(f"offsetof(struct {s.name},") == len(s.members)


def test_gen_c_cli_writes_the_header(tmp_path: Path) -> None:
    out = tmp_path / "pd_shm.h"
    r = subprocess.run([sys.executable, "-W", "error", "-m", "pydyn.shmlayout.gen_c", str(out)],
                       capture_output=True, text=True)
    assert r.returncode == 0, r.stderr
    assert r.stderr == ""
    assert out.read_text() == render_c_header()


def test_aarch64_compiles(header_dir: Path) -> None:
    cc = shutil.which(AARCH64_GCC)
    if cc is None:
        pytest.skip(f"{AARCH64_GCC} not installed; aarch64 layout checked only by the Python model")
    src = header_dir / "check.c"
    src.write_text(PADDED_DECL.join(['#include "pd_shm.h"\n', "\n"]))
    subprocess.run([cc, *CFLAGS, "-fsyntax-only", "-I", str(header_dir), str(src)], check=True)


# --- Python view -----------------------------------------------------------

@pytest.mark.unit
def test_plan_segment_aligns_areas() -> None:
    for count in (1, 3, 64, 1000):
        for globals_size in (0, 1, 63, 64, 4097, 1 << 20):
            for ring in (4096, 1 << 16, 1 << 22):
                p = plan_segment(count, globals_size, ring)
                assert p.tslots_off % 64 == 0 and p.tslots_off >= HEADER.sizeof
                assert p.proctab_off % 64 == 0
                assert p.proctab_off >= p.tslots_off + PD_TSLOTS * TSLOT.sizeof
                assert p.globals_off % 64 == 0
                assert p.globals_off >= p.proctab_off + count * PROC.sizeof
                assert p.ring_off % 4096 == 0 and p.ring_off >= p.globals_off + globals_size
                assert p.segment_size % 4096 == 0 and p.segment_size >= p.ring_off + ring
    for bad_ring in (0, 3000, 4097, 2048, 1 << 32):
        with pytest.raises(LayoutError, match="ring_size"):
            plan_segment(1, 0, bad_ring)
    with pytest.raises(LayoutError):
        plan_segment(0, 0, 4096)
    with pytest.raises(LayoutError):
        plan_segment(1, -1, 4096)


@pytest.fixture
def segment() -> Iterator[SegmentView]:
    plan = plan_segment(4, 100, 8192)
    m = mmap.mmap(-1, plan.segment_size)
    m[:] = b"\xaa" * len(m)  # init_header must clear what it owns
    view = SegmentView(m)
    init_header(view, checksum=bytes(range(32)), proctab_count=4, globals_size=100,
                ring_size=8192, launcher_pid=1234, maxaction=1000, start_ns=77)
    yield view
    m.close()


@pytest.mark.unit
def test_init_header(segment: SegmentView) -> None:
    segment.check()
    h = segment.header
    plan = plan_segment(4, 100, 8192)
    assert (h.magic, h.layout_version, h.header_size) == (
        shmlayout.PD_MAGIC, shmlayout.PD_LAYOUT_VERSION, 512)
    assert h.checksum == bytes(range(32))
    assert (h.proctab_off, h.globals_off, h.ring_off, h.segment_size) == (
        plan.proctab_off, plan.globals_off, plan.ring_off, plan.segment_size)
    assert (h.proctab_count, h.proc_entry_size, h.ring_size) == (4, 256, 8192)
    assert (h.launcher_pid, h.maxaction, h.start_ns) == (1234, 1000, 77)
    assert h.session_state == shmlayout.PD_SESSION_STARTING
    assert (h.ring_head, h.ring_tail, h.ring_lock, h.lock_recoveries) == (0, 0, 0, 0)
    assert (h.stat_slots, h.stat_slots_hw, h.stat_slot_fallbacks) == (0, 0, 0)
    assert (h.tslots_off, h.inflight_unslotted) == (plan.tslots_off, 0)
    buf = segment.buffer
    reserved = HEADER.offset("_reserved")
    assert buf[reserved:plan.ring_off] == bytes(plan.ring_off - reserved)
    assert all(p.state == shmlayout.PD_PROC_FREE and p.pid == 0 for p in segment.procs())
    with pytest.raises(LayoutError, match="checksum"):
        init_header(segment, checksum=b"short", proctab_count=4, globals_size=100,
                    ring_size=8192, launcher_pid=1)
    with pytest.raises(LayoutError, match="needs"):
        init_header(SegmentView(bytearray(4096)), checksum=bytes(32), proctab_count=4,
                    globals_size=100, ring_size=8192, launcher_pid=1)


@pytest.mark.unit
def test_stat_slot_fields() -> None:
    # runtime/pd_pstat.c updates the bitmap with 64-bit atomics (cmpxchg8b on i386):
    # it must be 8-aligned, and the three fields must stay inside the fixed header.
    assert HEADER.offset("stat_slots") % 8 == 0
    assert HEADER.offset("stat_slots_hw") == HEADER.offset("stat_slots") + 8
    assert HEADER.offset("stat_slot_fallbacks") == HEADER.offset("stat_slots") + 12
    assert HEADER.offset("stat_slot_fallbacks") + 4 <= HEADER.sizeof == 512


@pytest.mark.unit
def test_check_rejects_foreign_segments(segment: SegmentView) -> None:
    h = segment.header
    h.layout_version = shmlayout.PD_LAYOUT_VERSION + 1
    with pytest.raises(LayoutError, match="version"):
        segment.check()
    h.layout_version = shmlayout.PD_LAYOUT_VERSION
    h.ring_off += 64
    with pytest.raises(LayoutError, match="plan"):
        segment.check()
    h.magic = 0
    with pytest.raises(LayoutError, match="magic"):
        segment.check()


@pytest.mark.unit
def test_proc_entries(segment: SegmentView) -> None:
    h = segment.header
    for i in range(4):
        p = segment.proc(i)
        assert p.offset == h.proctab_off + i * 256
        p.pid = 1000 + i
    assert [p.pid for p in segment.procs()] == [1000, 1001, 1002, 1003]
    with pytest.raises(IndexError):
        segment.proc(4)
    with pytest.raises(IndexError):
        segment.proc(-1)


@pytest.mark.unit
@pytest.mark.parametrize("s", ALL, ids=lambda s: s.name)
def test_view_round_trips(s: Struct) -> None:
    buf = bytearray(b"\x55" * (s.sizeof + 16))
    view = StructView(s, buf, 8)
    values: dict[str, int | bytes] = {}
    for fi, m in enumerate(s.members):
        if m.is_pad:
            continue
        f = m.field
        if f.is_bytes:
            values[m.name] = bytes((fi + i) & 0xFF for i in range(f.count))
        else:
            values[m.name] = _sample(3, fi, f)
            bits = f.scalar.size * 8
            lo, hi = (-(1 << (bits - 1)), (1 << (bits - 1)) - 1) if f.type[0] == "i" \
                else (0, (1 << bits) - 1)
            for extreme in (lo, hi):
                setattr(view, m.name, extreme)
                assert getattr(view, m.name) == extreme
            with pytest.raises(ValueError):
                setattr(view, m.name, hi + 1)
            with pytest.raises(ValueError):
                setattr(view, m.name, lo - 1)
            with pytest.raises(TypeError):
                setattr(view, m.name, b"x")
        setattr(view, m.name, values[m.name])
    assert view.as_dict() == values
    # Each value sits at its offset, little-endian, and nothing outside the struct moved.
    for name, v in values.items():
        m = s.member(name)
        raw = v if isinstance(v, bytes) else struct.pack("<" + m.field.scalar.fmt, v)
        assert buf[8 + m.offset:8 + m.end] == raw
    assert buf[:8] == b"\x55" * 8 and buf[8 + s.sizeof:] == b"\x55" * 8
    for m in s.members:
        if m.is_pad:
            with pytest.raises(AttributeError):
                getattr(view, m.name)


@pytest.mark.unit
def test_view_byte_arrays() -> None:
    buf = bytearray(PROC.sizeof)
    p = StructView(PROC, buf, 0)
    p.comm = b"\xff" * 16
    p.comm = b"sh"
    assert p.comm == b"sh" + bytes(14)
    p.exe = bytearray(b"/bin/sh")
    assert p.exe.rstrip(b"\0") == b"/bin/sh"
    with pytest.raises(ValueError):
        p.comm = b"x" * 17
    with pytest.raises(TypeError):
        p.comm = "sh"
    with pytest.raises(AttributeError):
        p.nonexistent = 1
    with pytest.raises(LayoutError):
        StructView(PROC, buf, 1)


# --- records ---------------------------------------------------------------

@pytest.mark.unit
def test_string_arg_size() -> None:
    assert [string_arg_size(n) for n in (0, 1, 4, 5, 12, 13)] == [8, 8, 8, 16, 16, 24]


@pytest.mark.unit
def test_record_round_trip() -> None:
    args: list[int | bytes] = [-1, b"", 2**63 - 1, b"abcd", b"hello", -(2**63), b"x" * 13]
    rec = pack_record(shmlayout.PD_REC_PRINTF, 7, 4242, args)
    hdr = unpack_header(rec)
    assert (hdr.len, hdr.kind, hdr.nargs, hdr.fmt_id, hdr.pid) == (
        len(rec), shmlayout.PD_REC_PRINTF, len(args), 7, 4242)
    assert hdr.len % 8 == 0
    assert hdr.len == 16 + 8 * 3 + 8 + 8 + 16 + 24
    assert decode_args(rec, 16, hdr.len, "isissis") == args
    # The header fields sit where pd_rec says.
    view = StructView(REC, bytearray(rec), 0)
    assert (view.len, view.kind, view.nargs, view.fmt_id, view.pid) == (
        hdr.len, hdr.kind, hdr.nargs, hdr.fmt_id, hdr.pid)
    # String padding is zero.
    assert rec[16 + 8 + 4:16 + 16] == bytes(4)


@pytest.mark.unit
def test_record_decode_rejects_overruns() -> None:
    rec = bytearray(pack_record(shmlayout.PD_REC_TEXT, 0, 1, [b"abc"]))
    struct.pack_into("<I", rec, 16, 100)
    with pytest.raises(LayoutError, match="overruns"):
        decode_args(rec, 16, len(rec), "s")
    with pytest.raises(LayoutError):
        decode_args(rec, 16, len(rec), "ii")
    with pytest.raises(ValueError):
        decode_args(rec, 16, len(rec), "x")


# --- the globals area (globals.py) -------------------------------------------

RUNTIME = Path(__file__).resolve().parent.parent / "runtime"


def _globals_checks() -> str:
    """C asserting every size, alignment, offset and constant of globals.py as Python
    computes it, against the generated header."""
    out = ['#include "pd_shm.h"']
    for s in GLOBAL_STRUCTS:
        out.append(f'_Static_assert(sizeof(struct {s.name}) == {s.sizeof}, "{s.name}");')
        out.append(f'_Static_assert(_Alignof(struct {s.name}) == {s.align}, "{s.name} align");')
        for m in s.members:
            out.append(f"_Static_assert(offsetof(struct {s.name}, {m.name}) == {m.offset} && "
                       f"sizeof(((struct {s.name} *)0)->{m.name}) == {m.field.size}, "
                       f'"{s.name}.{m.name}");')
    for c in GLOBAL_CONSTANTS:
        out.append(f'_Static_assert({c.name} == {c.value}u, "{c.name}");')
    # the sizes the translator lays globals out with
    out.append(f'_Static_assert(PD_PSTAT_SLOT_SIZE == sizeof(struct pd_pslot_head) + '
               f'sizeof(struct pd_stat) && {shmlayout_globals.PSTAT_SLOT_SIZE} == '
               f'PD_PSTAT_SLOT_SIZE, "pstat slot");')
    out.append(f'_Static_assert(offsetof(struct pd_stat, hist) == {shmlayout_globals.STAT_HEAD}'
               f' && sizeof(((struct pd_stat *)0)->hist) == 8 * PD_HIST_MAX_BUCKETS, "hist");')
    return "\n".join(out) + "\n"


@pytest.mark.parametrize("abi", [*sorted(ABIS), "aarch64"])
def test_globals_area_matches_python(abi: str, header_dir: Path) -> None:
    """The statistic, array header and entry, per-thread slot, counter block and probe
    kinds compile to the sizes and values Python lays globals out with, on every ABI."""
    if abi == "aarch64":
        if shutil.which(AARCH64_GCC) is None:
            pytest.skip(f"{AARCH64_GCC} not installed")
        cmd = [AARCH64_GCC]
    else:
        cmd = _abi_cmd(abi, header_dir)
    src = header_dir / "globals_check.c"
    src.write_text(_globals_checks())
    r = subprocess.run([*cmd, *CFLAGS, "-fsyntax-only", "-I", str(header_dir), str(src)],
                       capture_output=True, text=True)
    assert r.returncode == 0, r.stderr
    # the check can fail: a wrong number is a compile error
    src.write_text(_globals_checks().replace(f"== {STAT.sizeof},", f"== {STAT.sizeof + 8},"))
    r = subprocess.run([*cmd, *CFLAGS, "-fsyntax-only", "-I", str(header_dir), str(src)],
                       capture_output=True, text=True)
    assert r.returncode != 0 and "pd_stat" in r.stderr


def test_runtime_restates_no_globals_definition() -> None:
    """The runtime takes the globals area's structs and numbers from pd_shm.h alone."""
    names = [c.name for c in GLOBAL_CONSTANTS]
    for path in sorted([*RUNTIME.glob("*.[ch]"), *RUNTIME.glob("arch/*/*.h")]):
        text = path.read_text()
        for name in names:
            assert re.search(rf"#\s*define\s+{name}\b|\b{name}\s*=", text) is None, (path, name)
        for s in GLOBAL_STRUCTS:
            assert re.search(rf"struct\s+{s.name}\s*\{{", text) is None, (path, s.name)
    assert "struct pd_stat {" in render_c_header()
