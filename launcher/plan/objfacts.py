"""What x86 patch planning knows of a binary's code: computed once per binary, shared.

A site's `displace` plan (x86.py) is safe only if nothing can reach the bytes a
jmp would overwrite: no branch, code address named by an instruction, relocation,
data word, jump-table entry or landing pad may point inside them, other than direct
branches the runtime can retarget.  Such a reference can come from anywhere in the
binary, so some facts are whole-binary ones; none depends on the script.  They are
split by cost:

- *Once per binary* (its GNU build-id, else a sha256 of its bytes): the data words
  and jump-table entries that point into the code (`pd_sweep`, a byte scan in C,
  launcher/plan/pd_sweep.c), relocation targets, C++ landing pads, the function starts
  (`.eh_frame` FDEs and FUNC symbols), the USDT sites.  Kept compactly in the module
  cache, `DIR/objfacts/<key>.facts` (a JSON header line, then sorted int64 arrays).
- *Per neighbourhood of a probed address* (`cover`: 640 bytes either side, enough for
  a window, its islands and the rel8 branches that reach them): which instructions
  name an address inside it.  `pd_sweep` lists every byte offset of the code at which
  some encoding (rel8/rel16/rel32 branch opcode, RIP-relative ModRM, an 8-64 bit value)
  would name one -- a superset, found in tens of milliseconds without decoding
  anything -- and only the instructions holding those bytes are decoded with capstone,
  from the start of the function that holds them (the linear sweep this replaces is
  in step with the code at every function start).  The padding runs of the
  neighbourhood are decoded the same way.  The result is kept per binary too
  (`DIR/objfacts/<key>.d/<hash>.json`, one file per set of neighbourhoods), so a later
  script that probes the same places decodes and scans nothing.

The store reuses the module cache's trust checks and locking (cache.py): a file not
ours, or writable by group/others, is ignored; the per-binary computation holds an
exclusive lock on `<key>.lock` (a concurrent run on the same new binary waits for it);
files are written to temporaries and renamed.  `pd_sweep` is compiled once per
compiler and source into the same directory (`pd_sweep-<hash>`).

`PYDYN_DEBUG_SCANS=FILE` appends a line per `pd_sweep` run to FILE (tests count them).
"""

from __future__ import annotations

import json
import os
import re
import struct
import subprocess
import sys
from array import array
from bisect import bisect_left, bisect_right, insort
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field
from functools import lru_cache
from pathlib import Path
from typing import Any

from ..build import compiler_path, sha256
from ..elf.stapsdt import iter_stapsdt_notes
from ..errors import BuildError
from ..factstore import STORE_DIR, Facts, load_or_compute, rmtree, set_cache_root, store_dir
from ..factstore import binary_key as factstore_key

__all__ = ["STORE_DIR", "ObjectFacts", "analyse", "set_cache_root"]

FACTS_FORMAT = 3
SWEEP_SOURCE = Path(__file__).resolve().parent / "pd_sweep.c"
SCAN_DEBUG_ENV = "PYDYN_DEBUG_SCANS"
REACH = 640               # bytes either side of a site whose padding runs are decoded
WINDOW = 32               # bytes after a site that its plan may ask about

# -- instructions -------------------------------------------------------------------------

_HEX = re.compile(r"0x[0-9a-f]+")
_RIP = re.compile(r"\[rip(?: ([+-]) (0x[0-9a-f]+|[0-9]+))?\]")  # capstone: decimal below 10
_BRANCHES = ("j", "call", "loop", "xbegin")
_PADDING = ("nop", "int3")
_SAME_REG = re.compile(r"(\w+), \[?\1\]?")   # i386 gcc pads with `lea 0(%esi),%esi` & co.
_NO_FALLTHROUGH = ("jmp", "ret", "ud2", "hlt", "int3")


def is_pad(mnem: str, ops: str) -> bool:
    return mnem in _PADDING or (mnem in ("lea", "mov") and bool(_SAME_REG.fullmatch(ops)))


def cs(bits: int, detail: bool = False) -> Any:
    import capstone
    md = capstone.Cs(capstone.CS_ARCH_X86, capstone.CS_MODE_64 if bits == 64
                     else capstone.CS_MODE_32)
    md.detail = detail
    md.skipdata = False
    return md


def _branch_field(data: bytes, at: int, size: int) -> tuple[int, int] | None:
    """(offset, size) of the displacement of a direct `jmp/call rel32`, `jcc rel32`,
    `jmp rel8` or `jcc rel8` of `size` bytes at data[at:]; None for another form (loop)."""
    if size >= 5:
        op = data[at + size - 5]
        if op in (0xE8, 0xE9) or (size >= 6 and data[at + size - 6] == 0x0F and
                                  0x80 <= op <= 0x8F):
            return size - 4, 4
    op = data[at + size - 2]
    if 2 <= size <= 3 and (op == 0xEB or 0x70 <= op <= 0x7F):
        return size - 1, 1
    return None


def references(addr: int, size: int, mnem: str, ops: str, data: bytes, at: int,
               lo: int, hi: int) -> Iterator[tuple[int, int, int]]:
    """What the instruction at `addr` (its bytes at data[at:]) names: (target, 0, 0) for a
    hard target (a RIP-relative or immediate code address, a branch of another form) and
    (target, field address, 4 or 1) for a direct branch the runtime can retarget.  Code
    addresses only ([lo, hi), and any branch target)."""
    if "0x" not in ops and "rip" not in ops:
        return
    m = _RIP.search(ops)
    if m:
        disp = int(m.group(2), 0) if m.group(2) else 0
        t = addr + size + (disp if m.group(1) == "+" else -disp)
        if lo <= t < hi:
            yield t, 0, 0
        return
    branch = mnem.startswith(_BRANCHES)
    if branch and _HEX.fullmatch(ops):
        fld = _branch_field(data, at, size)
        if fld is not None:
            yield int(ops, 16), addr + fld[0], fld[1]
            return
    for h in _HEX.findall(ops):
        t = int(h, 16)
        if lo <= t < hi or branch:
            yield t, 0, 0


# -- sorted sets -----------------------------------------------------------------------------

class SortedInts:
    """A sorted int64 array with set-like membership (bisect): a few MB where a Python
    set of the same numbers would take tens."""

    def __init__(self, values: array[int] | None = None) -> None:
        self.values = values if values is not None else array("q")

    def __contains__(self, x: object) -> bool:
        if not isinstance(x, int):
            return False
        v = self.values
        i = bisect_left(v, x)
        return i < len(v) and v[i] == x

    def __len__(self) -> int:
        return len(self.values)

    def __iter__(self) -> Iterator[int]:
        return iter(self.values)


class _Targets:
    """Hard targets: whole-binary ones plus those of the analysed neighbourhoods (an
    address outside them is analysed first)."""

    def __init__(self, obj: ObjectFacts) -> None:
        self.obj = obj

    def __contains__(self, b: object) -> bool:
        if not isinstance(b, int):
            return False
        self.obj.ensure(b)
        return b in self.obj.hard or b in self.obj.named or b in self.obj.start_set

    def __ge__(self, other: object) -> bool:
        """`small_set <= targets`: every element of `other` is a target."""
        if not isinstance(other, (set, frozenset)):
            return NotImplemented
        return all(x in self for x in other)


class _Sources:
    """target -> [(address of the rel field, 4 or 1)] of the direct branches reaching it
    (in address order), for the analysed neighbourhoods."""

    def __init__(self, obj: ObjectFacts) -> None:
        self.obj = obj

    def get(self, target: int) -> list[tuple[int, int]] | None:
        self.obj.ensure(target)
        return self.obj.sources.get(target)

    def __contains__(self, target: object) -> bool:
        if not isinstance(target, int):
            return False
        self.obj.ensure(target)
        return target in self.obj.sources


# -- the object -----------------------------------------------------------------------------

@dataclass
class ObjectFacts:
    path: str
    key: str
    bits: int
    machine: str
    text: list[tuple[int, bytes]]            # executable sections: (vaddr, bytes)
    # weak: words of data that fall in the text (a real code pointer is an instruction
    # start, so one landing inside an instruction decoded from the site is no pointer)
    weak: SortedInts = field(default_factory=SortedInts)
    hard: SortedInts = field(default_factory=SortedInts)   # relocations, landing pads
    starts: array[int] = field(default_factory=lambda: array("q"))  # function starts
    start_set: SortedInts = field(default_factory=SortedInts)
    landing_pads: set[int] = field(default_factory=set)   # C++, from the LSDAs (in hard)
    eh_ranges: list[tuple[int, int]] = field(default_factory=list)   # FDEs with an LSDA
    marks: set[int] = field(default_factory=set)   # every USDT site of the object
    # the start of every site this run plans in the object (marks, functions, statements,
    # set by x86.prepare): no other site's window may overwrite one
    probed: set[int] = field(default_factory=set)
    error: str = ""
    # per neighbourhood: the analysed ranges, in order and disjoint
    covered: list[tuple[int, int]] = field(default_factory=list)
    pad_covered: list[tuple[int, int]] = field(default_factory=list)
    named: set[int] = field(default_factory=set)   # hard targets named by instructions
    sources: dict[int, list[tuple[int, int]]] = field(default_factory=dict)
    # runs of >= 2 padding bytes (nop/int3) after an instruction that does not fall
    # through, in address order: (start, length)
    pads: list[tuple[int, int]] = field(default_factory=list)
    claimed: dict[int, tuple[int, int]] = field(default_factory=dict)  # byte -> owner
    sections: tuple[list[tuple[int, int, int]], list[tuple[int, int, int]], int] = \
        field(default_factory=lambda: ([], [], 0))

    def __post_init__(self) -> None:
        self.targets = _Targets(self)
        # target -> (field address, 4 or 1) of the direct jmp/jcc/call rel32 and jmp/jcc
        # rel8 reaching it: such a branch can be retargeted into the stub (a rel8 one
        # through an island of dead padding), so its target may lie inside the window
        self.branch_src = _Sources(self)
        self._pad_set: set[tuple[int, int]] = set()
        self._loaded = False      # the stored neighbourhoods were read
        self._md: Any = None

        self.bounds()

    def bounds(self) -> None:
        self.lo = min((va for va, _d in self.text), default=0)
        self.hi = max((va + len(d) for va, d in self.text), default=0)

    def read(self, addr: int, n: int) -> bytes:
        for va, data in self.text:
            if va <= addr < va + len(data):
                return data[addr - va:addr - va + n]
        return b""

    def in_text(self, addr: int) -> bool:
        return any(va <= addr < va + len(data) for va, data in self.text)

    # -- neighbourhoods --------------------------------------------------------------
    # Two layers: the padding runs of a neighbourhood (decoded locally, `pad_covered`),
    # and the instructions that name the bytes a plan may ask about (`covered`): a
    # site's window and the padding runs around it.

    def ensure(self, b: int) -> None:
        """Before asking whether anything reaches byte `b`."""
        if not self.error and not _inside(self.covered, b) and self.lo <= b < self.hi:
            self._cover([], [(b - WINDOW, b + WINDOW)])

    def ensure_pads(self, anchor: int) -> None:
        """Before looking for dead padding within rel8 reach of `anchor`."""
        if not self.error and not _inside(self.pad_covered, anchor) and \
                self.lo <= anchor < self.hi:
            self._cover([(anchor - REACH, anchor + REACH)], [])

    def cover_sites(self, pcs: Iterable[int], spans: Iterable[tuple[int, int]] = ()) -> None:
        """Analyse what planning the sites at `pcs` (and windows anywhere in `spans`,
        e.g. a function whose exits are patched) may ask, in one scan."""
        pcs = list(pcs)
        spans = list(spans)
        self._cover([(pc - REACH, pc + REACH) for pc in pcs] +
                    [(a - REACH, b + REACH) for a, b in spans],
                    [(pc + 1, pc + WINDOW) for pc in pcs] + spans)

    def _cover(self, pad_ranges: list[tuple[int, int]], ref_ranges: list[tuple[int, int]],
               ) -> None:
        if self.error:
            return
        pad_todo = _subtract(pad_ranges, self.pad_covered, self.lo, self.hi)
        ref_todo = _subtract(ref_ranges, self.covered, self.lo, self.hi)
        if not pad_todo and not ref_todo:
            return
        if not self._loaded:
            self._loaded = True
            for rec in load_regions(self.key):
                self._merge(rec)
            pad_todo = _subtract(pad_todo, self.pad_covered, self.lo, self.hi)
            ref_todo = _subtract(ref_todo, self.covered, self.lo, self.hi)
            if not pad_todo and not ref_todo:
                return
        pads = self._find_pads(pad_todo)
        # the padding runs are asked about too (islands, dead padding after a window)
        runs = [(s, s + n) for s, n in pads] + [
            (s, s + n) for a, b in pad_todo for s, n in self._pads_in(a, b)]
        ref_todo = _subtract(ref_todo + runs, self.covered, self.lo, self.hi)
        named, sources = self._find_refs(ref_todo)
        rec = {"ranges": ref_todo, "pad_ranges": pad_todo, "named": named,
               "sources": sources, "pads": pads}
        self._merge(rec)
        save_region(self.key, rec)

    def _pads_in(self, a: int, b: int) -> list[tuple[int, int]]:
        i = bisect_left(self.pads, (a - 4096,))
        return [(s, n) for s, n in self.pads[i:] if s < b and s + n > a]

    def _merge(self, rec: dict[str, Any]) -> None:
        self.covered = _union(self.covered, rec["ranges"])
        self.pad_covered = _union(self.pad_covered, rec["pad_ranges"])
        self.named.update(rec["named"])
        for t, f, size in rec["sources"]:
            lst = self.sources.setdefault(t, [])
            if (f, size) not in lst:
                insort(lst, (f, size))
        for s, n in rec["pads"]:
            if (s, n) not in self._pad_set:
                self._pad_set.add((s, n))
                insort(self.pads, (s, n))

    def _sync(self, addr: int) -> int:
        """Where a decode that reaches `addr` starts: the function start at or before it,
        else its section's start."""
        i = bisect_right(self.starts, addr) - 1
        start = self.starts[i] if i >= 0 else -1
        for va, data in self.text:
            if va <= addr < va + len(data):
                return max(start, va)
        return addr

    def _decode(self, start: int, end: int) -> Iterator[tuple[int, int, str, str, bool]]:
        """(address, size, mnemonic, operands, first after a restart) of the instructions
        from `start` until one ends at or after `end`, as the linear sweep decodes them
        (after an undecodable byte, on at the next one)."""
        if self._md is None:
            self._md = cs(self.bits)
        md = self._md
        for va, data in self.text:
            if not va <= start < va + len(data):
                continue
            pos = start - va
            stop = min(end - va, len(data))
            while pos < stop:
                first = True
                last = pos
                for addr, size, mnem, ops in md.disasm_lite(data[pos:stop + 16], va + pos):
                    yield addr, size, mnem, ops, first
                    first = False
                    last = addr + size - va
                    if last >= stop:
                        return
                pos = max(last, pos) + (1 if last <= pos or last < len(data) else 0)
            return

    def _find_pads(self, ranges: list[tuple[int, int]]) -> list[tuple[int, int]]:
        """The padding runs that meet `ranges`: >= 2 bytes of nop/int3 after an
        instruction that does not fall through."""
        pads: set[tuple[int, int]] = set()
        # each section on its own (a decode stops at its section's end)
        parts = [(max(a, va), min(b, va + len(data))) for a, b in ranges
                 for va, data in self.text if a < va + len(data) and va < b]
        for a, b in parts:
            dead = False
            run = (0, 0)
            for addr, size, mnem, ops, first in self._decode(self._sync(a), b + 256):
                if first:
                    dead, run = False, (0, 0)
                if (dead or run[1]) and is_pad(mnem, ops):
                    run = (run[0] or addr, run[1] + size)
                    continue
                if run[1] >= 2 and run[0] + run[1] > a and run[0] < b:
                    pads.add(run)
                run = (0, 0)
                dead = mnem.split()[-1] in _NO_FALLTHROUGH
        return sorted(pads)

    def _find_refs(self, ranges: list[tuple[int, int]],
                   ) -> tuple[list[int], list[tuple[int, int, int]]]:
        """(hard targets, retargetable branches) inside `ranges`, from every instruction
        of the object that names an address there.  Function starts are left out (asked
        about, they count as targets: every call reaches them)."""
        if not ranges:
            return [], []
        lo, hi = self.lo, self.hi
        scan: list[tuple[int, int]] = []
        for a, b in ranges:
            i = bisect_left(self.starts, a)
            while i < len(self.starts) and self.starts[i] < b:
                if a < self.starts[i]:
                    scan.append((a, self.starts[i]))
                a = self.starts[i] + 1
                i += 1
            if a < b:
                scan.append((a, b))
        if not scan:
            return [], []
        cands = list(run_tool(self.path, self.bits, lo, hi, 0, self.sections[0], [], scan))
        named: set[int] = set()
        sources: set[tuple[int, int, int]] = set()
        k = 0
        while k < len(cands):     # decode from the sync point of each candidate in turn
            sync = self._sync(cands[k])
            nxt = bisect_right(self.starts, cands[k])
            limit = self.starts[nxt] if nxt < len(self.starts) else hi
            last = bisect_left(cands, limit, k)
            end = cands[max(last - 1, k)] + 1
            for addr, size, mnem, ops, _f in self._decode(sync, end):
                j = bisect_left(cands, addr, k)
                if j < len(cands) and cands[j] < addr + size:
                    data = self.read(addr, size)
                    for t, fld, fsize in references(addr, size, mnem, ops, data, 0, lo, hi):
                        if _inside(scan, t):
                            if fsize:
                                sources.add((t, fld, fsize))
                            else:
                                named.add(t)
            k = max(last, k + 1)
        return sorted(named), sorted(sources)


def _inside(ranges: list[tuple[int, int]], b: int) -> bool:
    """Whether `b` is in one of the sorted, disjoint `ranges`."""
    i = bisect_right(ranges, (b, 1 << 64)) - 1
    return i >= 0 and ranges[i][0] <= b < ranges[i][1]


def _union(a: Iterable[tuple[int, int]], b: Iterable[tuple[int, int]]) -> list[tuple[int, int]]:
    out: list[tuple[int, int]] = []
    for x, y in sorted([*a, *(tuple(r) for r in b)]):
        if out and x <= out[-1][1]:
            out[-1] = (out[-1][0], max(out[-1][1], y))
        else:
            out.append((x, y))
    return out


def _subtract(ranges: Iterable[tuple[int, int]], covered: list[tuple[int, int]], lo: int,
              hi: int) -> list[tuple[int, int]]:
    """`ranges` within [lo, hi) less `covered` (sorted, disjoint), merged."""
    out: list[tuple[int, int]] = []
    for a, b in _union([], ((max(a, lo), min(b, hi)) for a, b in ranges if a < b)):
        i = max(bisect_right(covered, (a, 1 << 64)) - 1, 0)
        for ca, cb in covered[i:]:
            if ca >= b:
                break
            if cb <= a:
                continue
            if a < ca:
                out.append((a, ca))
            a = max(a, cb)
        if a < b:
            out.append((a, b))
    return out


# -- the sweep tool ----------------------------------------------------------------------

_tool: str | None = None


def sweep_tool() -> str:
    """The path of the compiled `pd_sweep` (BuildError if it cannot be built)."""
    global _tool
    if _tool is not None and os.path.exists(_tool):
        return _tool
    cc = compiler_path("m64")
    if cc is None:
        raise BuildError("no C compiler ($CC, gcc) to build the code scanner pd_sweep")
    real = os.path.realpath(cc)
    st = os.stat(real)
    ident = (f"{sha256(SWEEP_SOURCE.read_bytes()).hexdigest()}\n{real}\n"
             f"{st.st_size} {st.st_mtime_ns}")
    digest = sha256(ident.encode()).hexdigest()[:24]
    store = store_dir()
    if store is not None:
        from ..cache import check_private
        final = store / f"pd_sweep-{digest}"
        if final.exists():
            check_private(final, "code scanner")
            _tool = str(final)
            return _tool
    else:
        import atexit
        import tempfile
        store = Path(tempfile.mkdtemp(prefix="pydyn-sweep-"))
        atexit.register(rmtree, store)
        final = store / "pd_sweep"
    tmp = final.with_name(f".{final.name}.tmp{os.getpid()}")
    proc = subprocess.run([cc, "-O2", "-std=gnu11", "-o", str(tmp), str(SWEEP_SOURCE)],
                          stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
    if proc.returncode != 0:
        tmp.unlink(missing_ok=True)
        raise BuildError("the code scanner pd_sweep failed to compile:\n"
                         + proc.stdout.decode(errors="replace"))
    os.chmod(tmp, 0o700)
    os.replace(tmp, final)     # a concurrent build's identical file may be replaced: fine
    _tool = str(final)
    return _tool


def start_tool(path: str, bits: int, lo: int, hi: int, got: int,
               text: Iterable[tuple[int, int, int]], data: Iterable[tuple[int, int, int]],
               ranges: Iterable[tuple[int, int]] = ()) -> Callable[[], array[int]]:
    """Start `pd_sweep` on the file at `path` (`text`/`data`: its (vaddr, file offset,
    size) sections); the function returned waits for its answer: the data words into
    the code, or with `ranges` the candidate addresses of instructions that may name an
    address inside them."""
    ranges = list(ranges)
    args = [sweep_tool(), path, str(bits), f"{lo:x}", f"{hi:x}", f"{got:x}",
            *(f"r:{a:x}:{b:x}" for a, b in ranges),
            *(f"x:{va:x}:{off:x}:{size:x}" for va, off, size in text),
            *(f"d:{va:x}:{off:x}:{size:x}" for va, off, size in data)]
    proc = subprocess.Popen(args, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    debug = os.environ.get(SCAN_DEBUG_ENV)
    if debug:
        with open(debug, "a") as f:
            f.write(f"{path} {'ranges' if ranges else 'data'}\n")

    def wait() -> array[int]:
        out, err = proc.communicate()
        if proc.returncode != 0:
            raise OSError(f"pd_sweep failed: {err.decode(errors='replace').strip()}")
        (n,) = struct.unpack_from("<Q", out, 0)
        a = array("q")
        a.frombytes(out[8:8 + 8 * n])
        if sys.byteorder != "little":
            a.byteswap()
        return a
    return wait


def run_tool(path: str, bits: int, lo: int, hi: int, got: int,
             text: Iterable[tuple[int, int, int]], data: Iterable[tuple[int, int, int]],
             ranges: Iterable[tuple[int, int]] = ()) -> array[int]:
    """`start_tool`, waited for."""
    return start_tool(path, bits, lo, hi, got, text, data, ranges)()


# -- whole-binary facts ---------------------------------------------------------------------

def _sections(elf: Any) -> tuple[list[tuple[int, int, int]], list[tuple[int, int, int]], int]:
    """(executable sections, allocated data sections, the GOT base or 0) of an ELF file:
    (vaddr, file offset, size) each."""
    text: list[tuple[int, int, int]] = []
    blobs: list[tuple[int, int, int]] = []
    got = 0
    for s in elf.iter_sections():
        if s.name in (".got.plt", ".got") and not got:
            got = s["sh_addr"]
        if s["sh_type"] == "SHT_NOBITS" or not s["sh_addr"]:
            continue
        where = (s["sh_addr"], s["sh_offset"], s["sh_size"])
        if s["sh_flags"] & 0x4:
            text.append(where)
        elif s["sh_flags"] & 0x2 and s["sh_type"] != "SHT_NOTE":
            blobs.append(where)
    return text, blobs, got


def _symbol_values(elf: Any, sec: Any) -> list[tuple[int, int]]:
    """(value, st_info) of each symbol of a SYMTAB/DYNSYM section, read with `struct`."""
    e = "<" if elf.little_endian else ">"
    raw = sec.data()
    if elf.elfclass == 64:
        return [(v, i) for _n, i, _o, _s, v, _z in
                struct.iter_unpack(e + "IBBHQQ", raw[:len(raw) // 24 * 24])]
    return [(v, i) for _n, v, _z, i, _o, _s in
            struct.iter_unpack(e + "IIIBBH", raw[:len(raw) // 16 * 16])]


def _relocation_targets(elf: Any, lo: int, hi: int) -> set[int]:
    """Code addresses named by relocations (RELA addends, symbol values + addends, RELR
    offsets), read with `struct` (pyelftools parses each entry, ~25 us apiece).
    ValueError if a relocation section cannot be read: it may name a branch target, so
    every displaced window of the object would be a guess."""
    out: set[int] = set()
    symvals: dict[int, list[int]] = {}

    def values(index: int) -> list[int]:
        if index not in symvals:
            sec = elf.get_section(index)
            symvals[index] = [v for v, _i in _symbol_values(elf, sec)] \
                if sec["sh_type"] in ("SHT_SYMTAB", "SHT_DYNSYM") else []
        return symvals[index]

    for s in elf.iter_sections():
        try:
            _section_relocations(elf, s, lo, hi, values, out)
        except Exception as exc:  # noqa: BLE001 - pyelftools raises many kinds
            raise ValueError(f"cannot read the relocations of {s.name}: {exc}") from exc
    return out


def _section_relocations(elf: Any, s: Any, lo: int, hi: int,
                         values: Callable[[int], list[int]], out: set[int]) -> None:
    """Add what the relocation section `s` names in [lo, hi) to `out`."""
    bits = elf.elfclass
    mask = (1 << bits) - 1
    e = "<" if elf.little_endian else ">"
    kind = s["sh_type"]
    if kind in ("SHT_RELA", "SHT_REL"):
        rela = kind == "SHT_RELA"
        size = (24 if rela else 16) if bits == 64 else (12 if rela else 8)
        raw = s.data()
        fmt = e + ("QQq" if rela else "QQ") if bits == 64 else e + ("IIi" if rela else "II")
        syms = values(s["sh_link"]) if s["sh_link"] else []
        for ent in struct.iter_unpack(fmt, raw[:len(raw) // size * size]):
            info = ent[1]
            addend = ent[2] if rela else 0
            sym = info >> 32 if bits == 64 else info >> 8
            if rela:
                c = addend & mask
                if lo <= c < hi:
                    out.add(c)
            if sym and sym < len(syms):
                c = syms[sym] + addend
                if lo <= c < hi:
                    out.add(c)
    elif kind == "SHT_RELR":
        word = bits // 8
        raw = s.data()
        base = 0
        for (w,) in struct.iter_unpack(e + ("Q" if bits == 64 else "I"),
                                       raw[:len(raw) // word * word]):
            if not w & 1:
                out.add(w)      # the word there was scanned as data
                base = w + word
            else:
                for i in range(bits - 1):
                    if (w >> (i + 1)) & 1:
                        out.add(base + i * word)
                base += (bits - 1) * word


def _hdr_starts(elf: Any) -> list[int] | None:
    """The start of every FDE from `.eh_frame_hdr`'s search table (what unwinders read;
    ~40,000 entries in libjvm cost milliseconds here), when it has the usual encodings
    (count udata4, table datarel sdata4); else None."""
    sec = elf.get_section_by_name(".eh_frame_hdr")
    if sec is None or sec["sh_type"] == "SHT_NOBITS":
        return None
    data = sec.data()
    if len(data) < 12 or data[0] != 1 or data[2] != 0x03 or data[3] != 0x3B or \
            data[1] & 0x0F not in (0x03, 0x0B):
        return None
    e = "<" if elf.little_endian else ">"
    (count,) = struct.unpack_from(e + "I", data, 8)
    table = data[12:12 + 8 * count]
    if len(table) != 8 * count:
        return None
    base = sec["sh_addr"]
    return [base + loc for loc, _fde in struct.iter_unpack(e + "ii", table)]


def _function_starts(path: str, elf: Any) -> set[int]:
    """Where functions start: every `.eh_frame` FDE and defined FUNC symbol."""
    from ..elf.ehframe import fde_ranges
    from ..elf.reader import open_elf
    starts: set[int] = set(_hdr_starts(elf) or ())
    if not starts:
        with open_elf(path) as h:
            starts.update(start for start, _size in fde_ranges(h))
    for sec in elf.iter_sections():
        if sec["sh_type"] in ("SHT_SYMTAB", "SHT_DYNSYM"):
            starts.update(v for v, info in _symbol_values(elf, sec) if info & 0xF == 2 and v)
    return starts


def _landing_pads(table: tuple[int, bytes], lsda: int, func: int, bits: int) -> list[int] | None:
    """The landing pads of the LSDA at `lsda` (in .gcc_except_table, `table` = (address,
    bytes)) of the function at `func`; None if its encodings are not the plain ones gcc
    and clang emit."""
    base, data = table
    pos = lsda - base

    def uleb() -> int:
        nonlocal pos
        v = shift = 0
        while True:
            b = data[pos]
            pos += 1
            v |= (b & 0x7F) << shift
            shift += 7
            if not b & 0x80:
                return v

    def enc(e: int) -> int | None:
        nonlocal pos
        if e == 0x01:                       # DW_EH_PE_uleb128
            return uleb()
        size = {0x02: 2, 0x03: 4, 0x04: 8, 0x00: bits // 8}.get(e)
        if size is None:
            return None
        v = int.from_bytes(data[pos:pos + size], "little")
        pos += size
        return v

    try:
        if not 0 <= pos < len(data):
            return None
        lp_enc = data[pos]
        pos += 1
        lpstart = func
        if lp_enc != 0xFF:
            v = enc(lp_enc)
            if v is None:
                return None
            lpstart = v
        tt_enc = data[pos]
        pos += 1
        if tt_enc != 0xFF:
            uleb()
        cs_enc = data[pos]
        pos += 1
        end = uleb() + pos
        pads = []
        while pos < end:
            fields = [enc(cs_enc), enc(cs_enc), enc(cs_enc)]
            if None in fields:
                return None
            uleb()                          # action
            if fields[2]:
                pads.append(lpstart + int(fields[2] or 0))
        return pads
    except IndexError:
        return None


def _compute(path: str) -> Facts:
    """The whole-binary facts of the object at `path`."""
    from ..elf.elffile import ElfFile

    with open(path, "rb") as f:
        elf = ElfFile(f)
        bits = elf.elfclass
        machine = "x86_64" if elf["e_machine"] == "EM_X86_64" else "i386"
        header: dict[str, Any] = {"bits": bits, "machine": machine, "error": "",
                                  "eh_ranges": [], "marks": []}
        text, blobs, got = _sections(elf)
        header["sections"] = [text, blobs, got]
        if not text:
            header["error"] = "no executable sections"
            return header, {}
        lo = min(va for va, _o, _n in text)
        hi = max(va + n for va, _o, n in text)
        # the scan runs while the tables are read here
        weak_wait = start_tool(path, bits, lo, hi, got if bits == 32 else 0, text, blobs)
        try:
            hard = _relocation_targets(elf, lo, hi)
        except ValueError as exc:
            weak_wait()
            header["error"] = str(exc)
            return header, {}
        starts = _function_starts(path, elf)
        # C++ landing pads are entered by the unwinder: each is a target; a function
        # whose LSDA cannot be read is refused whole
        landing: set[int] = set()
        gcc_except = elf.get_section_by_name(".gcc_except_table")
        if gcc_except is not None and elf.has_dwarf_info():
            table = (gcc_except["sh_addr"], gcc_except.data())
            try:
                dwarf = elf.get_dwarf_info(follow_links=False)
                if dwarf.has_EH_CFI():
                    for entry in dwarf.EH_CFI_entries():
                        fde: Any = entry
                        if getattr(fde, "lsda_pointer", None) is not None and "initial_location" \
                                in fde.header:
                            start = fde.header["initial_location"]
                            found = _landing_pads(table, fde.lsda_pointer, start, bits)
                            if found is None:
                                header["eh_ranges"].append(
                                    (start, start + fde.header["address_range"]))
                            else:
                                landing.update(found)
            except Exception:  # noqa: BLE001 - pyelftools raises many kinds
                header["eh_ranges"].append((lo, hi))
    try:
        header["marks"] = sorted({n.pc for n in iter_stapsdt_notes(path)})
    except Exception:  # noqa: BLE001 - the notes were read once already by resolve
        header["marks"] = []
    return header, {"weak": weak_wait(), "hard": array("q", sorted(hard | landing)),
                    "starts": array("q", sorted(starts)), "landing": array("q", sorted(landing))}


def _load(path: str) -> ObjectFacts:
    key = binary_key(path)
    header, arrays = load_or_compute(key, lambda: _compute(path))
    obj = ObjectFacts(path, key, header["bits"], header["machine"], [])
    obj.error = header["error"]
    if obj.error:
        return obj
    text, blobs, got = header["sections"]
    obj.sections = ([tuple(t) for t in text], [tuple(b) for b in blobs], got)
    with open(path, "rb") as f:
        for va, off, size in text:
            f.seek(off)
            obj.text.append((va, f.read(size)))
    obj.bounds()
    obj.weak = SortedInts(arrays["weak"])
    obj.hard = SortedInts(arrays["hard"])
    obj.starts = arrays["starts"]
    obj.start_set = SortedInts(obj.starts)
    obj.landing_pads = set(arrays["landing"])
    obj.eh_ranges = [(lo, hi) for lo, hi in header["eh_ranges"]]
    obj.marks = set(header["marks"])
    return obj


@lru_cache(maxsize=32)
def _analyse_cached(path: str, mtime: int, size: int) -> ObjectFacts:
    return _load(path)


def analyse(path: str) -> ObjectFacts:
    """The facts of the x86 object at `path`, one instance per file version and process
    (plans of one run share its `claimed` bytes)."""
    st = os.stat(path)
    return _analyse_cached(path, st.st_mtime_ns, st.st_size)


# -- the store ---------------------------------------------------------------------------

def binary_key(path: str) -> str:
    """Names the facts of the file at `path` (factstore.py), with the format and the
    scanner's source (a change to either is another key)."""
    return factstore_key(path, f"x86 code facts {FACTS_FORMAT} "
                               f"{sha256(SWEEP_SOURCE.read_bytes()).hexdigest()}")


def load_regions(key: str) -> list[dict[str, Any]]:
    """The analysed neighbourhoods stored for the binary `key`."""
    from ..cache import CacheRefused, check_private
    store = store_dir()
    if store is None:
        return []
    out = []
    d = store / f"{key}.d"
    try:
        names = sorted(os.listdir(d))
    except OSError:
        return []
    for name in names:
        if not name.endswith(".json"):
            continue
        try:
            check_private(d / name, "object facts")
            rec = json.loads((d / name).read_bytes())
            if all(k in rec for k in ("ranges", "pad_ranges", "named", "sources", "pads")):
                out.append(rec)
        except (OSError, ValueError, CacheRefused):
            continue
    return out


def save_region(key: str, rec: dict[str, Any]) -> None:
    from ..cache import CacheRefused, _write_atomic, check_private
    store = store_dir()
    if store is None:
        return
    d = store / f"{key}.d"
    raw = json.dumps(rec, separators=(",", ":"))
    try:
        d.mkdir(mode=0o700, exist_ok=True)
        check_private(d, "object facts")
        _write_atomic(d / f"{sha256(raw.encode()).hexdigest()[:24]}.json", raw)
    except (OSError, CacheRefused):
        pass
