"""What pydyn learns of a binary, kept once per binary in the module cache.

Facts that depend only on a binary's bytes (patch planning's code references, the
function table, ...) are computed the first time a run meets the binary and kept in
`DIR/objfacts/<key>.facts`: a JSON header line, then sorted int64 arrays.  A key names
the binary by its GNU build-id, else the sha256 of its bytes, together with the kind
of facts and its format, so a change to the code that computes them is another key.

The store reuses the module cache's trust checks and locking (cache.py): a file not
ours, or writable by group/others, is ignored; a computation holds an exclusive lock
on `<key>.lock` (a concurrent run on the same new binary waits for it); files are
written to temporaries and renamed.  Without a cache directory (`--disable-cache`,
a refused one) facts live for the process only.  Site plans (plan/stored.py), many
per binary, are `<key>.plans` files, evicted apart from the facts.
"""

from __future__ import annotations

import json
import os
import sys
from array import array
from collections.abc import Callable
from functools import lru_cache
from pathlib import Path
from typing import Any

from .build import sha256

STORE_DIR = "objfacts"
STORE_KEEP = 192          # fact files kept (least recently used go first)
FACTS_SUFFIX = ".facts"
PLANS_SUFFIX = ".plans"   # site plans (plan/stored.py): small, many per binary
PLANS_KEEP = 1024

Facts = tuple[dict[str, Any], dict[str, "array[int]"]]   # a JSON-able header, int64 arrays

_root: Path | None = None     # the module cache directory, when the run has one


def set_cache_root(root: Path | None) -> None:
    """Keep facts in (and read them from) the module cache at `root`; None: this process
    only."""
    global _root
    _root = root


def binary_key(path: str, kind: str) -> str:
    """Names the facts of kind `kind` (what computes them, with its format) of the
    file at `path`."""
    st = os.stat(path)
    ident = f"{kind}\n{_identity(path, st.st_mtime_ns, st.st_size, st.st_ino)}"
    return sha256(ident.encode()).hexdigest()[:32]


@lru_cache(maxsize=64)
def _identity(path: str, _mtime: int, _size: int, _ino: int) -> str:
    from .elf.header import get_build_id
    build_id = get_build_id(path)
    if build_id:
        return f"build-id {build_id}"
    h = sha256()
    with open(path, "rb") as f:
        while chunk := f.read(1 << 20):
            h.update(chunk)
    return f"sha256 {h.hexdigest()}"


def encode(header: dict[str, Any], arrays: dict[str, array[int]]) -> bytes:
    head = dict(header, arrays={k: len(v) for k, v in arrays.items()})
    parts = [json.dumps(head, separators=(",", ":")).encode() + b"\n"]
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


def store_dir() -> Path | None:
    """The store's directory (made if missing), None without a usable cache."""
    from .cache import CacheRefused, check_private
    if _root is None:
        return None
    store = _root / STORE_DIR
    try:
        store.mkdir(mode=0o700, exist_ok=True)
        check_private(store, "object facts store")
    except (OSError, CacheRefused):
        return None
    return store


def load_or_compute(key: str, compute: Callable[[], Facts],
                    valid: Callable[[Facts], bool] = lambda _facts: True,
                    suffix: str = FACTS_SUFFIX) -> Facts:
    """The facts named `key`: from the store (if `valid`), else `compute()`, stored.
    `suffix`: the kind of file, each kind trimmed on its own (PLANS_SUFFIX: a binary's
    many site plans do not push its facts out)."""
    import fcntl

    from .cache import _Lock, _write_atomic
    store = store_dir()
    if store is None:
        return compute()
    facts = store / f"{key}{suffix}"
    found = _read(facts)
    if found is not None and valid(found):
        return found
    with _Lock(store / f"{key}.lock", fcntl.LOCK_EX):
        found = _read(facts)        # computed while we waited for the lock
        if found is not None and valid(found):
            return found
        header, arrays = compute()
        try:
            _write_atomic(facts, encode(header, arrays))
        except OSError:
            pass
    _trim(store, suffix, PLANS_KEEP if suffix == PLANS_SUFFIX else STORE_KEEP)
    return header, arrays


def _read(facts: Path) -> Facts | None:
    from .cache import CacheRefused, check_private
    try:
        check_private(facts, "object facts")
        found = decode(facts.read_bytes())
        os.utime(facts)      # last use
        return found
    except FileNotFoundError:
        return None
    except (OSError, ValueError, KeyError, TypeError, CacheRefused):
        return None          # damaged or not ours: computed again (and replaced if ours)


def _trim(store: Path, suffix: str, keep: int) -> None:
    files = []
    for p in store.glob(f"*{suffix}"):
        try:
            files.append((p.stat().st_mtime, p))
        except OSError:
            pass
    for _, old in sorted(files)[:-keep]:
        old.unlink(missing_ok=True)
        old.with_suffix(".lock").unlink(missing_ok=True)
        rmtree(old.with_suffix(".d"))


def rmtree(path: Path) -> None:
    import shutil
    shutil.rmtree(path, ignore_errors=True)
