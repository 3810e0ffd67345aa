"""Pass 4: compile the one generated C source into a probe module per ABI.

Both modules come from the same file, so they carry the same checksum and
agree on the segment.  They are laid out for the dynamic loader's `$LIB`
expansion: `LD_PRELOAD=DIR/$LIB/pydyn_<sum>.so` names the m64 module in a
64-bit process and the m32 module in a 32-bit one, with nothing printed by
either loader.
"""

from __future__ import annotations

import json
import os
import subprocess
from collections.abc import Callable, Iterable, Sequence
from functools import cache
from pathlib import Path
from typing import NamedTuple

from .. import shmlayout as shmlayout_package
from ..shmlayout import render_c_header
from .errors import BuildError

# A warm run hashes little and looks up a couple of commands: the builtin sha256 and a
# PATH walk spare it hashlib's OpenSSL binding and shutil (bz2, lzma), ~10 ms together.
try:
    from _sha256 import sha256  # CPython 3.11
except ImportError:
    try:
        from _sha2 import sha256  # CPython 3.12+
    except ImportError:
        from hashlib import sha256


def which(name: str) -> str | None:
    """shutil.which(name) for the default PATH and mode."""
    if "/" in name:
        return name if os.access(name, os.X_OK) and not os.path.isdir(name) else None
    for d in os.get_exec_path():
        path = os.path.join(d, name)
        if os.access(path, os.X_OK) and not os.path.isdir(path):
            return path
    return None


def find_program(name: str) -> str | None:
    """The program a process(NAME) or `-c NAME` means: which(NAME), else, for a bare name
    not on PATH, the file of that name in the current directory (stap's find_executable
    falls back to it, and stapdyn starts a -c command from it)."""
    found = which(name)
    if found is None and "/" not in name and os.path.isfile(name):
        return os.path.join(".", name)
    return found


RUNTIME_DIR = Path(__file__).resolve().parent.parent / "runtime"
# The runtime's arch folders each ABI compiles besides runtime/*.c (their .c and .S
# files): x86-64 and i386 share runtime/arch/x86.
ARCH_DIRS = {"m64": ("x86", "x86_64"), "m32": ("x86", "i386"), "aarch64": ("aarch64",)}
RUNTIME_SUFFIXES = (".c", ".S")   # compiled; headers (.h) are only digested
SHMLAYOUT_DIR = os.path.dirname(os.path.realpath(shmlayout_package.__file__))
# Debian puts <sys/sdt.h> and asm/ under the multiarch dir, which -m32 does not search.
MULTIARCH_INCLUDE = "/usr/include/x86_64-linux-gnu"

# Where each ABI's loader looks when it expands $LIB (Debian multilib, native
# i386 Debian, and Fedora-style lib64/lib).
LIB_DIRS = {
    "m64": ("lib/x86_64-linux-gnu", "lib64"),
    "m32": ("lib32", "lib/i386-linux-gnu", "lib"),
    # Debian's aarch64 ld.so (native, or libc6-arm64-cross under qemu-user with
    # -L /usr/aarch64-linux-gnu) expands $LIB to the multiarch dir: checked by
    # tests/test_aarch64.py.
    "aarch64": ("lib/aarch64-linux-gnu",),
}
ABIS = ("m64", "m32", "aarch64")
# Built only when a session needs them (a probed or -c aarch64 binary): cross builds.
CROSS_ABIS = frozenset({"aarch64"})
# The compiler per cross ABI; $PYDYN_CC_<ABI> overrides it.
CROSS_CC = {"aarch64": "aarch64-linux-gnu-gcc"}
INSTALL_HINT = {
    "m64": "install gcc (apt-get install gcc libc6-dev)",
    "m32": "install the 32-bit toolchain (apt-get install gcc-12-multilib libc6-dev-i386)",
    "aarch64": "install the aarch64 cross toolchain "
               "(apt-get install gcc-aarch64-linux-gnu libc6-dev-arm64-cross)",
}


class Toolchain(NamedTuple):   # not a dataclass: see shmlayout/layout.py
    abi: str
    cc: str
    flags: tuple[str, ...]

    def __str__(self) -> str:
        return f"{self.abi}: {self.cc} {' '.join(self.flags)}"


class ModuleSet(NamedTuple):
    """The built modules of one script, by ABI."""

    directory: Path
    checksum_hex: str
    modules: dict[str, Path]
    from_cache: bool = False

    @property
    def preload_entry(self) -> str:
        return f"{self.directory}/$LIB/pydyn_{self.checksum_hex}.so"

    def get_module(self, abi: str) -> Path | None:
        return self.modules.get(abi)


def iter_source_files(root: str, suffixes: tuple[str, ...]) -> Iterable[tuple[str, str]]:
    """(path relative to `root`, path) of the files under `root` ending in `suffixes`."""
    for dirpath, dirs, files in os.walk(root):
        dirs[:] = [d for d in dirs if d != "__pycache__"]
        rel = os.path.relpath(dirpath, root)
        for f in files:
            if f.endswith(suffixes):
                yield os.path.normpath(os.path.join(rel, f)), os.path.join(dirpath, f)


def source_signature(files: Iterable[tuple[str, str]]) -> bytes:
    """Digest of source files by name and stat (size, mtime, ctime, inode), not bytes:
    reading and hashing the ~0.6 MB of launcher, runtime and layout sources cost ~10 ms
    of every warm run.  Any write changes the ctime, which no tool can set back; a
    touched but unchanged file only costs one rebuild."""
    h = sha256()
    for rel, path in sorted(files):
        st = os.stat(path)
        h.update(f"{rel}\0{st.st_size} {st.st_mtime_ns} {st.st_ctime_ns} {st.st_ino}\n"
                 .encode())
    return h.digest()


@cache   # a run needs it up to five times (cache key, checksum, object store per ABI)
def runtime_digest() -> bytes:
    """Digest of the runtime and of shmlayout (which generates pd_shm.h): part of every
    checksum."""
    return source_signature([
        *(("runtime/" + rel, path) for rel, path in iter_source_files(
            str(RUNTIME_DIR), (*RUNTIME_SUFFIXES, ".h"))),
        *(("shmlayout/" + rel, path) for rel, path in iter_source_files(SHMLAYOUT_DIR,
                                                                        (".py",)))])


@cache
def runtime_sources(abi: str) -> tuple[Path, ...]:
    """The runtime files compiled for `abi`: runtime/*.c, then the .c and .S files of its
    arch folders (ARCH_DIRS).  Their objects are named by stem, so stems are unique."""
    files = sorted(RUNTIME_DIR.glob("*.c"))
    for d in ARCH_DIRS[abi]:
        files += sorted(p for p in (RUNTIME_DIR / "arch" / d).iterdir()
                        if p.suffix in RUNTIME_SUFFIXES)
    return tuple(files)


def _cc() -> str:
    return os.environ.get("CC", "gcc")


def abi_cc(abi: str) -> str:
    """The compiler command for `abi`: `$CC` natively, `$PYDYN_CC_AARCH64` or
    `aarch64-linux-gnu-gcc` for aarch64."""
    if abi in CROSS_CC:
        return os.environ.get(f"PYDYN_CC_{abi.upper()}", CROSS_CC[abi])
    return _cc()


def compiler_path(abi: str = "m64") -> str | None:
    """Where `abi`'s compiler (default `$CC`, gcc) is found on PATH; None if it is not."""
    return which(abi_cc(abi))


def compiler_version(cc: str) -> str:
    """`cc --version` (stdout and stderr), or why it could not be run: part of the cache key."""
    try:
        proc = subprocess.run([cc, "--version"], capture_output=True, timeout=60)
    except (OSError, subprocess.TimeoutExpired) as exc:
        return f"cannot run {cc} --version: {exc}"
    return (proc.stdout + proc.stderr).decode(errors="replace") + f"exit {proc.returncode}\n"


# TLS descriptors: a module's __thread variables cost a call returning a constant when
# the module is preloaded (static TLS), not a __tls_get_addr call per access, and the
# same module still works dlopen'ed (the launcher, -x attach).  aarch64's default.
TLS_DIALECT = "-mtls-dialect=gnu2"


def abi_flags(abi: str) -> tuple[str, ...]:
    if abi == "m32":
        return ("-m32", "-idirafter", MULTIARCH_INCLUDE, TLS_DIALECT)
    if abi in CROSS_CC:
        return ()
    return ("-m64", TLS_DIALECT)


@cache
def get_toolchain(abi: str) -> Toolchain | None:
    """A compiler that can link a shared object for `abi`, or None."""
    cc = compiler_path(abi)
    if cc is None:
        return None
    import tempfile  # cold paths only: its import of random costs a warm run ~2 ms
    flags = abi_flags(abi)
    with tempfile.TemporaryDirectory(prefix="pydyn-cc-") as tmp:
        src = Path(tmp, "t.c")
        src.write_text("#include <stdio.h>\n#include <signal.h>\nint f(void){return puts(\"\");}\n")
        proc = subprocess.run([cc, *flags, "-shared", "-fPIC", "-o", str(Path(tmp, "t.so")),
                               str(src)], capture_output=True)
    return Toolchain(abi, cc, flags) if proc.returncode == 0 else None


# -U_FORTIFY_SOURCE: a compiler that fortifies by default would turn the module's
# memcpy, snprintf, ... into libc's __memcpy_chk, ..., past runtime/pd_libc.c.
COMMON_CFLAGS = (
    "-std=gnu11", "-O2", "-fPIC", "-shared", "-fvisibility=hidden", "-pthread",
    "-U_FORTIFY_SOURCE",
    "-fno-strict-aliasing", "-Wall", "-Werror=implicit-function-declaration",
    "-Wno-unused-function", "-Wno-unused-variable",
    "-Wno-unused-label", "-Wno-unused-but-set-variable", "-Wl,-z,defs",
)


def _write_replace(path: Path, text: str) -> None:
    tmp = path.with_name(f"{path.name}.tmp{os.getpid()}")
    tmp.write_text(text)
    os.replace(tmp, path)


# Object sets kept in a runtime store (one per compiler, ABI flags and -D values).
RUNTIME_STORE_KEEP = 16


def runtime_objects(tc: Toolchain, defines: Sequence[str], store: Path,
                    warn: Callable[[str], None] | None = None) -> list[Path]:
    """The runtime's object files for this toolchain and `-D` values, compiled once into
    `store/<abi>-<hash>/` (checked against their sha256s on every use), so a cold build
    compiles only the generated C.  Concurrent builders each compile and the first rename
    wins; a damaged set is replaced."""
    sources = runtime_sources(tc.abi)
    final = _objects_dir(tc, defines, store)
    objs = [final / f"{p.stem}.o" for p in sources]
    if _objects_sound(final, objs):
        os.utime(final)   # last use, for RUNTIME_STORE_KEEP
        return objs
    if final.exists() and warn is not None:
        warn(f"precompiled runtime {final} is damaged; compiling it again")
    import shutil
    import tempfile
    store.mkdir(parents=True, exist_ok=True, mode=0o700)
    tmp = Path(tempfile.mkdtemp(dir=store, prefix=f".{final.name}."))
    try:
        (tmp / "pd_shm.h").write_text(render_c_header())
        proc = subprocess.run([tc.cc, *tc.flags, *COMMON_CFLAGS, "-c",
                               *(f"-D{d}" for d in defines), "-I", str(tmp),
                               "-I", str(RUNTIME_DIR), *(str(p) for p in sources)],
                              cwd=tmp, stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
        if proc.returncode != 0:
            raise BuildError(f"{tc.abi} runtime failed to compile:\n"
                             f"{proc.stdout.decode(errors='replace')}")
        (tmp / "sha256.json").write_text(json.dumps(
            {p.name: _sha256_file(tmp / p.name) for p in objs}))
        if final.exists():   # damaged (a sound one was taken above): out of the way
            trash = store / f".trash.{final.name}.{os.getpid()}"
            os.rename(final, trash)
            shutil.rmtree(trash, ignore_errors=True)
        try:
            os.rename(tmp, final)
        except OSError:   # a concurrent build renamed its own set first: use that one
            if not _objects_sound(final, objs):
                raise
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    _trim_store(store)
    return objs


def _objects_dir(tc: Toolchain, defines: Sequence[str], store: Path) -> Path:
    real = os.path.realpath(tc.cc)
    st = os.stat(real)
    ident = "\n".join([runtime_digest().hex(), real, f"{st.st_size} {st.st_mtime_ns}",
                       *tc.flags, *COMMON_CFLAGS, *sorted(defines)])
    return store / f"{tc.abi}-{sha256(ident.encode()).hexdigest()[:24]}"


def _stored_toolchain(abi: str, defines: Sequence[str], store: Path | None) -> Toolchain | None:
    """`abi`'s toolchain, without the probe compile of get_toolchain, when this very
    compiler already built the runtime into `store` (it works for the ABI)."""
    cc = compiler_path(abi)
    if store is None or cc is None:
        return None
    tc = Toolchain(abi, cc, abi_flags(abi))
    try:
        return tc if (_objects_dir(tc, defines, store) / "sha256.json").exists() else None
    except OSError:
        return None


def _sha256_file(path: Path) -> str:
    return sha256(path.read_bytes()).hexdigest()


def _objects_sound(directory: Path, objs: Sequence[Path]) -> bool:
    try:
        sums = json.loads((directory / "sha256.json").read_text())
        return all(sums.get(p.name) == _sha256_file(p) for p in objs)
    except (OSError, ValueError, AttributeError):
        return False


def _trim_store(store: Path) -> None:
    import shutil
    sets = sorted((p.stat().st_mtime, p) for p in store.iterdir()
                  if p.is_dir() and not p.name.startswith("."))
    for _, old in sets[:-RUNTIME_STORE_KEEP]:
        shutil.rmtree(old, ignore_errors=True)


def _compile_abi(tc: Toolchain, src: Path, target: Path, defines: Sequence[str],
                 runtime_store: Path | None, warn: Callable[[str], None] | None) -> str | None:
    """Build one ABI's module; None, or why it failed."""
    tmp = target.with_suffix(f".so.tmp{os.getpid()}")
    runtime: Sequence[Path] = runtime_sources(tc.abi)
    if runtime_store is not None:
        try:
            runtime = runtime_objects(tc, defines, runtime_store, warn)
        except BuildError as exc:
            return str(exc)
        except OSError as exc:
            return f"{tc.abi} runtime store {runtime_store}: {exc.strerror or exc}"
    cmd = [tc.cc, *tc.flags, *COMMON_CFLAGS, *(f"-D{d}" for d in defines),
           "-I", str(src.parent), "-I", str(RUNTIME_DIR), "-o", str(tmp),
           str(src), *(str(p) for p in runtime)]
    proc = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
    if proc.returncode != 0:
        tmp.unlink(missing_ok=True)
        return f"{tc.abi} module failed to compile:\n{proc.stdout.decode(errors='replace')}"
    os.replace(tmp, target)
    return None


def build_modules(c_source: str, checksum_hex: str, out_dir: Path,
                  required: Iterable[str], defines: Iterable[str] = (),
                  runtime_store: Path | None = None,
                  warn: Callable[[str], None] | None = None) -> ModuleSet:
    """Compile `c_source` for every ABI the host can build; the `required` ones must build.

    `checksum_hex` names the files (`pydyn_<it>_m64.so` ...): the cache passes its key.
    Whether an earlier build can be reused is the cache's business (`cache.py`), not this
    function's: it always compiles, all ABIs in parallel (a cross ABI, aarch64, only
    when required).  With `runtime_store` the runtime comes precompiled from there
    (`runtime_objects`), else it is compiled from source with the generated C.
    """
    from concurrent.futures import ThreadPoolExecutor  # imports logging: a cold path only
    required = set(required)
    defines = list(defines)
    out_dir.mkdir(parents=True, exist_ok=True, mode=0o700)
    src = out_dir / f"pydyn_{checksum_hex}.c"
    header = out_dir / "pd_shm.h"
    abis = [abi for abi in ABIS if abi not in CROSS_ABIS or abi in required]
    toolchains = {abi: _stored_toolchain(abi, defines, runtime_store) for abi in abis}
    unknown = [abi for abi, tc in toolchains.items() if tc is None]
    with ThreadPoolExecutor(max(1, len(unknown))) as pool:   # probes (one gcc each) at once
        toolchains.update(zip(unknown, pool.map(get_toolchain, unknown), strict=True))
    for abi in required:
        if toolchains.get(abi) is None:
            raise BuildError(f"no {abi} toolchain: {INSTALL_HINT[abi]}")
    _write_replace(src, c_source)
    _write_replace(header, render_c_header())
    jobs = {abi: tc for abi, tc in toolchains.items() if tc is not None}
    targets = {abi: out_dir / f"pydyn_{checksum_hex}_{abi}.so" for abi in jobs}
    with ThreadPoolExecutor(max(1, len(jobs))) as pool:
        errors = dict(zip(jobs, pool.map(
            lambda abi: _compile_abi(jobs[abi], src, targets[abi], defines, runtime_store, warn),
            jobs), strict=True))
    modules = {abi: targets[abi] for abi, err in errors.items() if err is None}
    failures = [err for err in errors.values() if err is not None]
    for abi in required:
        if abi not in modules:
            raise BuildError("\n".join(failures) or f"no {abi} module was built")
    link_lib_dirs(out_dir, checksum_hex, modules)
    return ModuleSet(out_dir, checksum_hex, modules)


def link_lib_dirs(out_dir: Path, checksum_hex: str, modules: dict[str, Path]) -> None:
    """Create DIR/<$LIB>/pydyn_<sum>.so links to each ABI's module."""
    for abi, libdirs in LIB_DIRS.items():
        module = modules.get(abi)
        for libdir in libdirs:
            link = out_dir / libdir / f"pydyn_{checksum_hex}.so"
            if module is None:
                continue
            link.parent.mkdir(parents=True, exist_ok=True)
            rel = os.path.relpath(module, link.parent)
            tmp = link.with_name(link.name + f".tmp{os.getpid()}")
            tmp.unlink(missing_ok=True)
            tmp.symlink_to(rel)
            os.replace(tmp, link)
