"""USDT probe sites: `.note.stapsdt` entries from `<sys/sdt.h>`, checked against the file.

Each STAP_PROBE expands to a `nop` at the probe site plus a note recording the
site's address, the optional semaphore's address and an argument string.  The
notes are decoded here with `struct` (pyelftools mislabels NT_STAPSDT and is
slow on 20k notes) and every site is validated before pydyn would patch it: a
note that points outside the code or at something other than a nop is
reported as a SkippedSite, never armed.
"""

from __future__ import annotations

import re
import struct
from collections.abc import Iterator
from dataclasses import dataclass, fields
from typing import Any

from ..errors import TargetError
from .argspec import ArgKind, ArgParser, ArgSpec
from .notes import BadNote, iter_note_spans
from .reader import ElfHandle, ElfInfo, LoadSegment, get_elf_info, open_elf, read_elf_info
from .symbols import SymbolTable

NT_STAPSDT = 3
_STAPSDT_NAME = b"stapsdt"
_NOTE_SECTION = ".note.stapsdt"
_BASE_SECTION = ".stapsdt.base"
_PROBES_SECTION = ".probes"
_UPROBE2_TYPE = 0x32425055    # "UPB2"
_SEMAPHORE_SIZE = 2           # unsigned short, incremented by each tracer
_MAX_X86_INSN = 15
# Names end up in generated C and in script matching: keep them to what sdt.h can emit.
_NAME_RE = re.compile(r"[A-Za-z0-9_.$-]+")
_AARCH64_NOP = b"\x1f\x20\x03\xd5"


@dataclass(frozen=True)
class SdtNote:
    """One decoded NT_STAPSDT note.

    `pc` and `semaphore` are already adjusted for prelink: if the file has a
    `.stapsdt.base` section, both are moved by `sh_addr - base` (semaphore only
    when non-zero).  `base` is the note's raw base field.
    """

    provider: str
    name: str
    pc: int
    base: int
    semaphore: int
    args: str

    def __str__(self) -> str:
        sema = f" sema={self.semaphore:#x}" if self.semaphore else ""
        return f"{self.provider}:{self.name} pc={self.pc:#x}{sema} args={self.args!r}"


@dataclass(frozen=True)
class ProbeSite:
    """A validated probe site: pydyn may patch the `nop_len`-byte nop at `pc`."""

    path: str
    provider: str
    name: str
    pc: int             # link-time vaddr; add the load bias at run time
    semaphore: int      # link-time vaddr of the unsigned short, 0 if none
    arg_text: str
    args: tuple[ArgSpec, ...]
    nop_len: int
    machine: str
    elf_class: int

    def __str__(self) -> str:
        sema = f" sema={self.semaphore:#x}" if self.semaphore else ""
        return (f'process("{self.path}").provider("{self.provider}").mark("{self.name}") '
                f'pc={self.pc:#x}{sema} args="{self.arg_text}"')


@dataclass(frozen=True)
class SkippedSite:
    """A note pydyn will not arm, and why."""

    path: str
    provider: str
    name: str
    pc: int
    reason: str

    def __str__(self) -> str:
        who = f"{self.provider}:{self.name}" if self.provider or self.name else "note"
        return f"{self.path}: {who} at pc={self.pc:#x} skipped: {self.reason}"


@dataclass(frozen=True)
class SiteScan:
    """All USDT notes of one file: the usable sites and the skipped ones."""

    info: ElfInfo
    sites: tuple[ProbeSite, ...]
    skipped: tuple[SkippedSite, ...]

    def __str__(self) -> str:
        return f"{self.info.path}: {len(self.sites)} probe sites, {len(self.skipped)} skipped"


@dataclass(frozen=True)
class _Malformed:
    pc: int
    provider: str
    name: str
    reason: str


def _decode_notes(data: bytes, elf_class: int, little_endian: bool,
                  base_addr: int | None) -> Iterator[SdtNote | _Malformed]:
    word = 8 if elf_class == 64 else 4
    words = struct.Struct(("<" if little_endian else ">") + ("QQQ" if word == 8 else "III"))
    unpack_from, fixed = words.unpack_from, words.size
    mask = (1 << (word * 8)) - 1
    name_ok = _NAME_RE.fullmatch
    for item in iter_note_spans(data, little_endian):
        if isinstance(item, BadNote):
            yield _Malformed(0, "", "", f"malformed {_NOTE_SECTION} section: {item}")
            return
        off, note_name, note_type, start, end = item
        if note_name != _STAPSDT_NAME or note_type != NT_STAPSDT:
            continue
        if end - start < fixed:
            yield _Malformed(0, "", "", f"note at +{off:#x} too short")
            continue
        pc, base, sema = unpack_from(data, start)
        parts = data[start + fixed:end].split(b"\0", 3)
        if len(parts) < 4:
            # provider, name and args each end in a NUL; the rest is padding.
            yield _Malformed(pc, "", "", f"note at +{off:#x} has unterminated strings")
            continue
        try:
            provider, name, args = parts[0].decode("ascii"), parts[1].decode("ascii"), \
                parts[2].decode("ascii")
        except UnicodeDecodeError:
            yield _Malformed(pc, "", "", f"note at +{off:#x} has non-ASCII text")
            continue
        if not name_ok(provider) or not name_ok(name):
            yield _Malformed(pc, provider[:64], name[:64],
                             f"note at +{off:#x} has an invalid provider or name")
            continue
        if not args.isprintable():
            yield _Malformed(pc, provider, name, f"note at +{off:#x} has unprintable "
                                                 "argument text")
            continue
        if base_addr is not None and base:
            # The file was prelinked (moved) after the notes were written: the
            # .stapsdt.base section moved with it while the note fields did not.
            delta = base_addr - base
            pc = (pc + delta) & mask
            if sema:
                sema = (sema + delta) & mask
        yield SdtNote(provider, name, pc, base, sema, args)


def _decode_probes_section(addr: int, data: bytes, elf_class: int,
                           little_endian: bool) -> Iterator[SdtNote | _Malformed]:
    """The entries of a `.probes` section (sdt.h's version 2, kept by SystemTap's
    testsuite wrapper and old programs): at each 8-aligned UPB2 magic, the link-time
    addresses of the name, provider and argument strings (all in this section), the
    argument count, the probe's pc and, if the program has semaphores, its semaphore,
    each in an 8-byte slot (a 4-byte address and padding in a 32-bit file).  The strings
    follow the entry, the name last; the next entry starts after it.  The arguments are
    the compiler's operands without sizes (`%rax -4(%rbp)`): native unsigned, as the v2
    macros cast each argument to size_t."""
    order = "<" if little_endian else ">"
    entry = struct.Struct(order + "II6Q")
    mask = (1 << elf_class) - 1
    magic = struct.pack(order + "I", _UPROBE2_TYPE)

    def string(ptr: int) -> str | None:
        off = (ptr & mask) - addr
        if not 0 <= off < len(data):
            return None
        end = data.find(b"\0", off)
        try:
            return data[off:end].decode("ascii") if end >= 0 else None
        except UnicodeDecodeError:
            return None

    off = 0
    while off + entry.size <= len(data):
        if data[off:off + 4] != magic:
            off += 8
            continue
        _type, _pad, name_p, prov_p, _argc, args_p, pc, sema = entry.unpack_from(data, off)
        if not name_p:
            # a shared object's addresses wait for their relocations: nothing to read
            yield _Malformed(0, "", "", f"{_PROBES_SECTION} entry at +{off:#x} has no "
                                        "name address (unrelocated)")
            return
        name, provider = string(name_p), string(prov_p)
        args = string(args_p) if args_p else ""
        if name is None or provider is None or args is None:
            yield _Malformed(pc & mask, "", "", f"{_PROBES_SECTION} entry at +{off:#x} "
                                                "points outside the section")
            off += 8
            continue
        if min((p & mask) - addr for p in (name_p, prov_p, args_p or name_p)) < off + 56:
            sema = 0   # without semaphores `.quad ""` assembles to nothing: no slot
        if not _NAME_RE.fullmatch(provider) or not _NAME_RE.fullmatch(name) \
                or not args.isprintable():
            yield _Malformed(pc & mask, provider[:64], name[:64], f"{_PROBES_SECTION} entry "
                             f"at +{off:#x} has an invalid provider, name or argument text")
        else:
            yield SdtNote(provider, name, pc & mask, 0, sema & mask, args)
        off = max(off + entry.size, (name_p & mask) - addr + len(name) + 1)
        off = (off + 7) & ~7


def _read_notes(h: ElfHandle, info: ElfInfo) -> list[SdtNote | _Malformed]:
    try:
        section = h.get_section_bytes(_NOTE_SECTION)
        # stap reads a .probes section only from a file without notes
        probes = h.get_section_bytes(_PROBES_SECTION) if section is None else None
    except TargetError as exc:
        # A lying section header loses the notes, not the rest of the file.
        return [_Malformed(0, "", "", f"malformed {_NOTE_SECTION} section: {exc.reason}")]
    if probes is not None:
        return list(_decode_probes_section(probes[0], probes[1], info.elf_class,
                                           info.little_endian))
    if section is None:
        return []
    base_section = h.elffile.get_section_by_name(_BASE_SECTION)
    base_addr = base_section["sh_addr"] if base_section is not None else None
    return list(_decode_notes(section[1], info.elf_class, info.little_endian, base_addr))


def iter_stapsdt_notes(path: str) -> Iterator[SdtNote]:
    """The well-formed USDT notes of the file at `path` (malformed ones are left out)."""
    with open_elf(path) as h:
        notes = _read_notes(h, read_elf_info(h))
    for note in notes:
        if isinstance(note, SdtNote):
            yield note


def nop_length(code: bytes, machine: str) -> int:
    """Length of the nop instruction at the start of `code`, 0 if it is not one."""
    if machine in ("x86_64", "i386"):
        return _x86_nop_length(code)
    if machine == "aarch64":
        return 4 if code[:4] == _AARCH64_NOP else 0
    return 0


def _x86_nop_length(code: bytes) -> int:
    """`90`, `66 90`, and the `[66|2e]* 0f 1f /0` multi-byte nops compilers pad with."""
    i = 0
    while i < len(code) and code[i] in (0x66, 0x2E) and i < 8:
        i += 1
    if i < len(code) and code[i] == 0x90:
        return i + 1 if all(b == 0x66 for b in code[:i]) else 0
    if code[i:i + 2] != b"\x0f\x1f" or len(code) < i + 3:
        return 0
    modrm = code[i + 2]
    if (modrm >> 3) & 7:
        return 0          # 0f 1f is only a nop with reg field /0
    mod, rm = modrm >> 6, modrm & 7
    n = i + 3
    if mod != 3 and rm == 4:
        sib_base = code[n] & 7 if n < len(code) else 0
        n += 1
        if mod == 0 and sib_base == 5:
            n += 4
    if mod == 0 and rm == 5:
        n += 4
    elif mod == 1:
        n += 1
    elif mod == 2:
        n += 4
    return n if n <= min(len(code), _MAX_X86_INSN) else 0


def _segment_for(segments: tuple[LoadSegment, ...], addr: int, size: int, *,
                 executable: bool = False, writable: bool = False) -> LoadSegment | None:
    for seg in segments:
        if executable and not seg.executable or writable and not seg.writable:
            continue
        if seg.contains(addr, size):
            return seg
    return None


def get_probe_sites(path: str) -> SiteScan:
    """Every USDT probe site of the ELF file at `path`, validated (TargetError if
    unreadable).  What the notes say depends on the binary alone: decoded and checked
    once per binary (tens of milliseconds on PostgreSQL, whose argument forms name
    symbols) and kept in the facts store (factstore.py)."""
    from ..factstore import binary_key, load_or_compute, store_dir
    if store_dir() is None:
        with open_elf(path) as h:
            return _scan(h, read_elf_info(h))
    info = get_elf_info(path)

    def compute() -> tuple[dict[str, Any], dict[str, Any]]:
        with open_elf(path) as h:
            return _scan_facts(_scan(h, info)), {}

    header, _ = load_or_compute(binary_key(path, f"usdt sites {SITES_FORMAT}"), compute)
    return SiteScan(
        info,
        tuple(ProbeSite(info.path, provider, name, pc, sem, text,
                        tuple(_arg_of_json(a) for a in args), nop, info.machine,
                        info.elf_class)
              for provider, name, pc, sem, text, args, nop in header["sites"]),
        tuple(SkippedSite(info.path, provider, name, pc, reason)
              for provider, name, pc, reason in header["skipped"]))


SITES_FORMAT = 1    # of the USDT sites kept per binary
_ARG_FIELDS = tuple(f.name for f in fields(ArgSpec))


def _scan_facts(scan: SiteScan) -> dict[str, Any]:
    return {"sites": [[s.provider, s.name, s.pc, s.semaphore, s.arg_text,
                       [_arg_json(a) for a in s.args], s.nop_len] for s in scan.sites],
            "skipped": [[s.provider, s.name, s.pc, s.reason] for s in scan.skipped]}


def _arg_json(a: ArgSpec) -> list[Any]:
    return [a.kind.value if f == "kind" else getattr(a, f) for f in _ARG_FIELDS]


def _arg_of_json(values: list[Any]) -> ArgSpec:
    a = dict(zip(_ARG_FIELDS, values, strict=True))
    a["kind"] = ArgKind(a["kind"])
    a["ops"] = tuple(tuple(op) for op in a["ops"])
    return ArgSpec(**a)


def _scan(h: ElfHandle, info: ElfInfo) -> SiteScan:
    notes = _read_notes(h, info)
    symbols = SymbolTable.from_handle(h)
    # A library's static-TLS offset is chosen by ld.so at run time, so @tpoff
    # forms are only resolvable in an executable.
    tls = None if info.is_shared_object else info.tls
    parser = ArgParser(info.machine, symbols, tls)
    machine_ok = info.machine in ("x86_64", "i386", "aarch64")
    code_segments = tuple(s for s in info.segments if s.executable)
    sites: list[ProbeSite] = []
    skipped: list[SkippedSite] = []
    for note in notes:
        if isinstance(note, _Malformed):
            skipped.append(SkippedSite(info.path, note.provider, note.name, note.pc,
                                       note.reason))
            continue
        if not machine_ok:
            reason, nop_len = f"probe sites on machine {info.machine} are not supported", 0
        else:
            reason, nop_len = _check_site(h, info, code_segments, note)
        if reason:
            skipped.append(SkippedSite(info.path, note.provider, note.name, note.pc,
                                       reason))
            continue
        sites.append(ProbeSite(info.path, note.provider, note.name, note.pc,
                               note.semaphore, note.args, parser.parse(note.args), nop_len,
                               info.machine, info.elf_class))
    return SiteScan(info, tuple(sites), tuple(skipped))


def _check_site(h: ElfHandle, info: ElfInfo, code_segments: tuple[LoadSegment, ...],
                note: SdtNote) -> tuple[str, int]:
    """(reason to skip, 0) or ("", nop length)."""
    pc = note.pc
    for seg in code_segments:
        if seg.vaddr <= pc < seg.vaddr + seg.filesz:
            break
    else:
        return "not inside an executable segment (dangling note, e.g. after --gc-sections)", 0
    offset = seg.offset + (pc - seg.vaddr)
    code = h.data[offset:min(offset + _MAX_X86_INSN, seg.offset + seg.filesz, len(h.data))]
    nop_len = nop_length(code, info.machine)
    if not nop_len:
        shown = bytes(code[:4]).hex(" ") or "none"
        return f"instruction at pc is not a nop ({shown})", 0
    if note.semaphore and _segment_for(info.segments, note.semaphore, _SEMAPHORE_SIZE,
                                       writable=True) is None:
        return f"semaphore {note.semaphore:#x} is not inside a writable segment", 0
    return "", nop_len
