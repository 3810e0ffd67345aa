"""Finding the shared library a script names, the way ld.so would for a given target.

`process("libc.so.6")` means the libc that the target (64- or 32-bit) loads,
so the search follows ld.so's order — DT_RPATH, LD_LIBRARY_PATH, DT_RUNPATH,
/etc/ld.so.cache, the default directories — and only accepts a candidate whose
ELF class and machine match the target's.  An aarch64 target on another host runs
under qemu-user, whose loader finds its default directories inside the sysroot
(`$QEMU_LD_PREFIX`, else Debian's /usr/aarch64-linux-gnu: what session.py passes
as `-L`), so those are searched before the host's cache and directories.
"""

from __future__ import annotations

import glob
import os
import platform
import struct
from collections.abc import Callable, Iterable, Iterator, Sequence

from ..errors import TargetError
from .reader import ElfInfo, get_elf_info, missing_reason

LD_SO_CACHE = "/etc/ld.so.cache"
_CACHE_MAGIC = b"glibc-ld.so.cache1.1"
_CACHE_HEADER = struct.Struct("<20sII B3x I 12x")   # magic+version nlibs len_strings flags ext
_CACHE_ENTRY = struct.Struct("<iIIIQ")             # flags key value osversion hwcap

DEFAULT_DIRS: dict[str, tuple[str, ...]] = {
    "m64": ("/lib/x86_64-linux-gnu", "/usr/lib/x86_64-linux-gnu", "/lib64", "/usr/lib64",
            "/lib", "/usr/lib"),
    "m32": ("/lib32", "/usr/lib32", "/lib/i386-linux-gnu", "/usr/lib/i386-linux-gnu",
            "/lib", "/usr/lib"),
    "aarch64": ("/lib/aarch64-linux-gnu", "/usr/lib/aarch64-linux-gnu", "/lib64",
                "/usr/lib64", "/lib", "/usr/lib"),
}
_GLOB_CHARS = frozenset("*?[")
QEMU_SYSROOTS = {"aarch64": "/usr/aarch64-linux-gnu"}   # session.QEMU_USER's defaults


def _emulated_dirs(info: ElfInfo) -> list[str]:
    """The default directories of a target qemu-user runs, as the host sees them."""
    if info.machine not in QEMU_SYSROOTS or platform.machine() == info.machine:
        return []
    root = os.environ.get("QEMU_LD_PREFIX", QEMU_SYSROOTS[info.machine])
    return [root + d for d in DEFAULT_DIRS.get(info.abi, ())]


def _matches(candidate: str, info: ElfInfo) -> bool:
    try:
        other = get_elf_info(candidate)
    except TargetError:
        return False
    return other.elf_class == info.elf_class and other.machine == info.machine


def _expand(entry: str, info: ElfInfo) -> str:
    origin = os.path.dirname(info.path)
    return entry.replace("${ORIGIN}", origin).replace("$ORIGIN", origin)


def _iter_ld_cache(name: str, cache_path: str = LD_SO_CACHE) -> Iterator[str]:
    """Paths /etc/ld.so.cache maps `name` to (glibc's 'new' format); nothing if unreadable."""
    try:
        with open(cache_path, "rb") as f:
            data = f.read()
    except OSError:
        return
    start = data.find(_CACHE_MAGIC)
    if start < 0 or len(data) < start + _CACHE_HEADER.size:
        return
    _magic, nlibs, _len_strings, _flags, _ext = _CACHE_HEADER.unpack_from(data, start)
    entries = start + _CACHE_HEADER.size
    if entries + nlibs * _CACHE_ENTRY.size > len(data):
        return
    want = name.encode()

    def string(off: int) -> bytes:
        # String offsets are relative to the header of the new-format cache.
        pos = start + off
        end = data.find(b"\0", pos)
        return data[pos:end] if 0 <= pos < len(data) and end >= 0 else b""

    for i in range(nlibs):
        _flags_e, key, value, _osv, _hwcap = _CACHE_ENTRY.unpack_from(
            data, entries + i * _CACHE_ENTRY.size)
        if string(key) == want:
            path = string(value)
            if path:
                yield path.decode("utf-8", "replace")


def _search_dirs(info: ElfInfo, env_library_path: str | None) -> list[str]:
    dirs: list[str] = []
    runpath = [_expand(p, info) for p in info.runpath]
    if info.runpath_is_rpath:
        dirs.extend(runpath)
    if env_library_path:
        # An empty LD_LIBRARY_PATH entry means the current directory, as in ld.so.
        dirs.extend(p or "." for p in env_library_path.split(":"))
    if not info.runpath_is_rpath:
        dirs.extend(runpath)
    return dirs


def _describe(info: ElfInfo) -> str:
    return f"{info.elf_class}-bit {info.machine}"


def find_library(name: str, info: ElfInfo, env_library_path: str | None = None) -> str:
    """Realpath of the library `name` as a process of `info` would load it.

    `name` is a file name ("libc.so.6"), a path (used as is) or a glob of
    either; `env_library_path` is the target's LD_LIBRARY_PATH, if any.
    TargetError(name, ...) if nothing of the target's class and machine is found.
    """
    is_glob = bool(_GLOB_CHARS & set(name))
    if "/" in name:
        candidates = sorted(glob.glob(name)) if is_glob else [name]
        for cand in candidates:
            if os.path.isfile(cand) and _matches(cand, info):
                return os.path.realpath(cand)
        if not is_glob and os.path.exists(name):
            other = get_elf_info(name)   # TargetError naming what is wrong with it
            raise TargetError(name, f"is a {_describe(other)} file, but {info.path} is "
                                    f"{_describe(info)}")
        raise TargetError(name, "no file matches" if is_glob
                          else missing_reason(name) or "no such file")

    searched = _search_dirs(info, env_library_path)
    ordered: list[str] = []
    for d in searched:
        ordered.append(os.path.join(d, name))
    ordered.extend(os.path.join(d, name) for d in _emulated_dirs(info))
    if not is_glob:
        ordered.extend(_iter_ld_cache(name))
    ordered.extend(os.path.join(d, name) for d in DEFAULT_DIRS.get(info.abi, ()))
    seen: set[str] = set()
    for pattern in ordered:
        for cand in sorted(glob.glob(pattern)) if is_glob else [pattern]:
            if cand in seen:
                continue
            seen.add(cand)
            if os.path.isfile(cand) and _matches(cand, info):
                return os.path.realpath(cand)
    raise TargetError(name, f"library not found for {_describe(info)} target {info.path}")


def symbol_objects(named: Sequence[str], probed: Iterable[ElfInfo], ldd: bool,
                   warn: Callable[[str], None]) -> list[tuple[str, str]]:
    """(realpath, ABI) of the objects stap's `-d PATH` and `--ldd` add to the symbol and
    unwind tables: each `named` file, and with `ldd` every library the probed and named
    objects need, as ld.so would find it for each.  A named file that is missing or no
    ELF file, and a library ld.so would not find, are warned about, not errors: stap
    takes any `-d` path and its --ldd skips what it cannot find."""
    out: dict[str, str] = {}
    todo: list[ElfInfo] = []
    for path in named:
        try:
            if not os.path.exists(path):
                raise TargetError(path, "no such file (named by -d): its symbols are unknown")
            info = get_elf_info(path)
        except TargetError as exc:
            warn(f"-d {exc}")
            continue
        out.setdefault(info.path, info.abi)
        todo.append(info)
    if not ldd:
        return list(out.items())
    for lib, needer in iter_needed_libraries([*todo, *probed],
                                             lambda exc: warn(f"--ldd: {exc}")):
        out.setdefault(lib.path, needer.abi)
    return list(out.items())


def iter_needed_libraries(objects: Iterable[ElfInfo],
                          missing: Callable[[TargetError], None] = lambda exc: None
                          ) -> Iterator[tuple[ElfInfo, ElfInfo]]:
    """(library, the object needing it) for every library `objects` need, directly or
    through another, as ld.so would find each (`ld.so --list`'s set, breadth first),
    each once; `missing` is told of each one it would not find."""
    todo = list(objects)
    seen = {info.path for info in todo}
    while todo:
        info = todo.pop(0)
        for name in info.needed:
            try:
                lib = get_elf_info(find_library(name, info))
            except TargetError as exc:
                missing(exc)
                continue
            if lib.path not in seen:
                seen.add(lib.path)
                todo.append(lib)
                yield lib, info
