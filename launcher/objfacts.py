"""What patch planning knows of a binary, computed once per binary and shared.

Planning an x86 site needs facts about the whole object: every direct branch and code
address any instruction names (a branch INTO the bytes a jmp would overwrite can
come from anywhere in the binary), the data words and jump-table entries that point
into the code, relocations, landing pads, the USDT sites, the runs of dead padding
(patchplan.py says why each matters).  None of them depends on the script, so they
are computed once per binary -- its GNU build-id, else a sha256 of its bytes -- by
`pd_sweep` (a capstone sweep in C, launcher/pd_sweep.c) and kept compactly in the
module cache (`DIR/objfacts/<key>.facts`: a JSON header line, then sorted int64
arrays), where every later script that probes the same binary reads them in
milliseconds.  What depends on the probed sites (the windows, their checks,
relocation, islands) stays per run and is cheap.

The store reuses the module cache's trust checks and locking (cache.py): files are
ours and not group/other writable or they are ignored, a computation holds an
exclusive lock on `<key>.lock` (a concurrent run on the same new binary waits for
it instead of sweeping too), and a file is written to a temporary and renamed.
The `pd_sweep` executable is compiled once per compiler and capstone library into
the cache's runtime store (as the runtime's objects are).

`PYDYN_DEBUG_SWEEPS=FILE` appends a line per sweep run to FILE (tests count them).
"""

from __future__ import annotations

import json
import os
import struct
import subprocess
import sys
from array import array
from bisect import bisect_left, bisect_right
from collections.abc import Callable, Iterable, Iterator
from pathlib import Path
from typing import Any

from .build import compiler_path, sha256
from .errors import BuildError

FACTS_FORMAT = 1
SWEEP_SOURCE = Path(__file__).resolve().parent / "pd_sweep.c"
SWEEP_DEBUG_ENV = "PYDYN_DEBUG_SWEEPS"
STORE_DIR = "objfacts"
STORE_KEEP = 64           # fact files kept (least recently used go first)

_root: Path | None = None     # the module cache directory, when the run has one
Facts = tuple[dict[str, Any], dict[str, "array[int]"]]   # a JSON-able header, int64 arrays


def set_cache_root(root: Path | None) -> None:
    """Keep facts in (and read them from) the module cache at `root`; None: this process
    only."""
    global _root
    _root = root


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

    def __ge__(self, other: object) -> bool:
        """`small_set <= sorted_ints`: every element of `other` is here."""
        if not isinstance(other, (set, frozenset)):
            return NotImplemented
        return all(x in self for x in other)


class BranchSources:
    """target -> [(address of the rel field, 4 or 1)] of the direct branches reaching it,
    as three parallel arrays sorted by target."""

    def __init__(self, targets: array[int], fields: array[int], sizes: array[int]) -> None:
        self.targets, self.fields, self.sizes = targets, fields, sizes

    def get(self, target: int) -> list[tuple[int, int]] | None:
        i = bisect_left(self.targets, target)
        j = bisect_right(self.targets, target, i)
        return [(self.fields[k], self.sizes[k]) for k in range(i, j)] or None

    def __contains__(self, target: object) -> bool:
        if not isinstance(target, int):
            return False
        i = bisect_left(self.targets, target)
        return i < len(self.targets) and self.targets[i] == target

    def __len__(self) -> int:
        return len(self.targets)


# -- the sweep tool ----------------------------------------------------------------------

def _capstone_dirs() -> tuple[Path, Path]:
    import capstone
    base = Path(capstone.__file__).resolve().parent
    return base / "include", base / "lib"


def _tool_ident(cc: str) -> str:
    inc, lib = _capstone_dirs()
    real = os.path.realpath(cc)
    st = os.stat(real)
    so = lib / "libcapstone.so"
    lst = os.stat(so)
    return "\n".join([sha256(SWEEP_SOURCE.read_bytes()).hexdigest(), real,
                      f"{st.st_size} {st.st_mtime_ns}", str(so),
                      f"{lst.st_size} {lst.st_mtime_ns}"])


_tool: str | None = None


def sweep_tool() -> str:
    """The path of the compiled `pd_sweep` (BuildError if it cannot be built)."""
    global _tool
    if _tool is not None and os.path.exists(_tool):
        return _tool
    cc = compiler_path("m64")
    if cc is None:
        raise BuildError("no C compiler ($CC, gcc) to build the code analysis tool pd_sweep")
    ident = _tool_ident(cc)
    digest = sha256(ident.encode()).hexdigest()[:24]
    if _root is not None:
        from .cache import RUNTIME_STORE, check_private
        store = _root / RUNTIME_STORE
        store.mkdir(parents=True, exist_ok=True, mode=0o700)
        check_private(store, "runtime object store")
        final = store / f"pd_sweep-{digest}"
        if final.exists():
            check_private(final, "code analysis tool")
            _tool = str(final)
            return _tool
    else:
        import atexit
        import tempfile
        store = Path(tempfile.mkdtemp(prefix="pydyn-sweep-"))
        atexit.register(_rmtree, store)
        final = store / "pd_sweep"
    inc, _lib = _capstone_dirs()
    tmp = final.with_name(f".{final.name}.tmp{os.getpid()}")
    proc = subprocess.run([cc, "-O2", "-std=gnu11", "-I", str(inc), "-o", str(tmp),
                           str(SWEEP_SOURCE), "-ldl"],
                          stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
    if proc.returncode != 0:
        tmp.unlink(missing_ok=True)
        raise BuildError("the code analysis tool pd_sweep failed to compile:\n"
                         + proc.stdout.decode(errors="replace"))
    os.chmod(tmp, 0o700)
    os.replace(tmp, final)     # a concurrent build's identical file may be replaced: fine
    _tool = str(final)
    return _tool


def _rmtree(path: Path) -> None:
    import shutil
    shutil.rmtree(path, ignore_errors=True)


def run_sweep(path: str, bits: int, lo: int, hi: int, got: int,
              text: Iterable[tuple[int, int, int]], data: Iterable[tuple[int, int, int]],
              ) -> tuple[array[int], array[int], array[int], array[int]]:
    """(targets, weak, branch sources as flat triples, padding runs as flat pairs) of the
    file at `path`: `text`/`data` are its (vaddr, file offset, size) sections."""
    args = [sweep_tool(), str(_capstone_dirs()[1] / "libcapstone.so"), path, str(bits),
            f"{lo:x}", f"{hi:x}", f"{got:x}",
            *(f"x:{va:x}:{off:x}:{size:x}" for va, off, size in text),
            *(f"d:{va:x}:{off:x}:{size:x}" for va, off, size in data)]
    proc = subprocess.run(args, capture_output=True)
    if proc.returncode != 0:
        raise OSError(f"pd_sweep failed: {proc.stderr.decode(errors='replace').strip()}")
    debug = os.environ.get(SWEEP_DEBUG_ENV)
    if debug:
        with open(debug, "a") as f:
            f.write(f"{path}\n")
    out = proc.stdout
    pos = 0
    arrays = []
    for _ in range(4):
        (n,) = struct.unpack_from("<Q", out, pos)
        pos += 8
        a = array("q")
        a.frombytes(out[pos:pos + 8 * n])
        pos += 8 * n
        arrays.append(a)
    if sys.byteorder != "little":
        for a in arrays:
            a.byteswap()
    return arrays[0], arrays[1], arrays[2], arrays[3]


# -- the store ---------------------------------------------------------------------------

def binary_key(path: str) -> str:
    """Names the facts of the file at `path`: its build-id, else the sha256 of its bytes,
    with the format and the analysis tool's source (a change to either is another key)."""
    from .cache import read_build_id
    build_id = read_build_id(path)
    if build_id:
        what = f"build-id {build_id}"
    else:
        h = sha256()
        with open(path, "rb") as f:
            while chunk := f.read(1 << 20):
                h.update(chunk)
        what = f"sha256 {h.hexdigest()}"
    ident = f"{FACTS_FORMAT}\n{what}\n{sha256(SWEEP_SOURCE.read_bytes()).hexdigest()}"
    return sha256(ident.encode()).hexdigest()[:32]


def encode(header: dict[str, Any], arrays: dict[str, array[int]]) -> bytes:
    head = dict(header, arrays={k: len(v) for k, v in arrays.items()})
    parts = [json.dumps(head).encode() + b"\n"]
    for a in arrays.values():
        b = array("q", a)
        if sys.byteorder != "little":
            b.byteswap()
        parts.append(b.tobytes())
    return b"".join(parts)


def decode(raw: bytes) -> Facts:
    nl = raw.index(b"\n")
    header = json.loads(raw[:nl])
    pos = nl + 1
    arrays: dict[str, array[int]] = {}
    for name, n in header["arrays"].items():
        a = array("q")
        a.frombytes(raw[pos:pos + 8 * n])
        if len(a) != n:
            raise ValueError("truncated")
        if sys.byteorder != "little":
            a.byteswap()
        arrays[name] = a
        pos += 8 * n
    if pos != len(raw):
        raise ValueError("trailing bytes")
    return header, arrays


def load_or_compute(path: str, compute: Callable[[], Facts]) -> Facts:
    """The facts of the binary at `path`: from the store, else `compute()` (header,
    arrays), stored for the next run."""
    if _root is None:
        return compute()
    import fcntl

    from .cache import CacheRefused, _Lock, _write_atomic, check_private
    key = binary_key(path)
    store = _root / STORE_DIR
    try:
        store.mkdir(mode=0o700, exist_ok=True)
        check_private(store, "object facts store")
    except (OSError, CacheRefused):
        return compute()
    facts = store / f"{key}.facts"
    found = _read(facts)
    if found is not None:
        return found
    with _Lock(store / f"{key}.lock", fcntl.LOCK_EX):
        found = _read(facts)        # computed while we waited for the lock
        if found is not None:
            return found
        header, arrays = compute()
        try:
            _write_atomic(facts, encode(header, arrays))
        except OSError:
            pass
    _trim(store)
    return header, arrays


def _read(facts: Path) -> Facts | None:
    from .cache import CacheRefused, check_private
    try:
        check_private(facts, "object facts")
        raw = facts.read_bytes()
        found = decode(raw)
        os.utime(facts)      # last use
        return found
    except FileNotFoundError:
        return None
    except (OSError, ValueError, KeyError, TypeError, CacheRefused):
        return None          # damaged or not ours: computed again (and replaced if ours)


def _trim(store: Path) -> None:
    files = []
    for p in store.glob("*.facts"):
        try:
            files.append((p.stat().st_mtime, p))
        except OSError:
            pass
    for _, old in sorted(files)[:-STORE_KEEP]:
        old.unlink(missing_ok=True)
        old.with_suffix(".lock").unlink(missing_ok=True)
