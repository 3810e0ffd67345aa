"""Pass 4: compile the one generated C source into a probe module per ABI.

Both modules come from the same file, so they carry the same checksum and
agree on the segment.  They are laid out for the dynamic loader's `$LIB`
expansion: `LD_PRELOAD=DIR/$LIB/pydyn_<sum>.so` names the m64 module in a
64-bit process and the m32 module in a 32-bit one, with nothing printed by
either loader.
"""

from __future__ import annotations

import hashlib
import os
import shutil
import subprocess
import tempfile
from collections.abc import Iterable
from dataclasses import dataclass, field
from functools import cache
from pathlib import Path

from pydyn.launcher.errors import BuildError
from pydyn.shmlayout import render_c_header

RUNTIME_DIR = Path(__file__).resolve().parent.parent / "runtime"
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


@dataclass(frozen=True)
class Toolchain:
    abi: str
    cc: str
    flags: tuple[str, ...]

    def __str__(self) -> str:
        return f"{self.abi}: {self.cc} {' '.join(self.flags)}"


@dataclass(frozen=True)
class ModuleSet:
    """The built modules of one script, by ABI."""

    directory: Path
    checksum_hex: str
    modules: dict[str, Path] = field(default_factory=dict)
    from_cache: bool = False

    @property
    def preload_entry(self) -> str:
        return f"{self.directory}/$LIB/pydyn_{self.checksum_hex}.so"

    def get_module(self, abi: str) -> Path | None:
        return self.modules.get(abi)


def runtime_sources() -> list[Path]:
    """The runtime files compiled into (or included by) every module."""
    files = sorted(RUNTIME_DIR.glob("*.c")) + sorted(RUNTIME_DIR.glob("*.h"))
    files += sorted(RUNTIME_DIR.glob("arch/*/*.h"))
    return files


def runtime_digest() -> bytes:
    """Digest of the runtime and the segment layout: part of every checksum."""
    h = hashlib.sha256()
    for path in runtime_sources():
        h.update(path.name.encode() + b"\0" + path.read_bytes())
    h.update(render_c_header().encode())
    return h.digest()


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
    return shutil.which(abi_cc(abi))


def compiler_version(cc: str) -> str:
    """`cc --version` (stdout and stderr), or why it could not be run: part of the cache key."""
    try:
        proc = subprocess.run([cc, "--version"], capture_output=True, timeout=60)
    except (OSError, subprocess.TimeoutExpired) as exc:
        return f"cannot run {cc} --version: {exc}"
    return (proc.stdout + proc.stderr).decode(errors="replace") + f"exit {proc.returncode}\n"


def abi_flags(abi: str) -> tuple[str, ...]:
    if abi == "m32":
        return ("-m32", "-idirafter", MULTIARCH_INCLUDE)
    if abi in CROSS_CC:
        return ()
    return ("-m64",)


@cache
def get_toolchain(abi: str) -> Toolchain | None:
    """A compiler that can link a shared object for `abi`, or None."""
    cc = compiler_path(abi)
    if cc is None:
        return None
    flags = abi_flags(abi)
    with tempfile.TemporaryDirectory(prefix="pydyn-cc-") as tmp:
        src = Path(tmp, "t.c")
        src.write_text("#include <stdio.h>\n#include <signal.h>\nint f(void){return puts(\"\");}\n")
        proc = subprocess.run([cc, *flags, "-shared", "-fPIC", "-o", str(Path(tmp, "t.so")),
                               str(src)], capture_output=True)
    return Toolchain(abi, cc, flags) if proc.returncode == 0 else None


def require_toolchains(required: Iterable[str]) -> None:
    for abi in required:
        if get_toolchain(abi) is None:
            raise BuildError(f"no {abi} toolchain: {INSTALL_HINT[abi]}")


COMMON_CFLAGS = (
    "-std=gnu11", "-O2", "-fPIC", "-shared", "-fvisibility=hidden", "-pthread",
    "-fno-strict-aliasing", "-Wall", "-Wno-unused-function", "-Wno-unused-variable",
    "-Wno-unused-label", "-Wno-unused-but-set-variable", "-Wl,-z,defs",
)


def _write_replace(path: Path, text: str) -> None:
    tmp = path.with_name(f"{path.name}.tmp{os.getpid()}")
    tmp.write_text(text)
    os.replace(tmp, path)


def build_modules(c_source: str, checksum_hex: str, out_dir: Path,
                  required: Iterable[str], defines: Iterable[str] = ()) -> ModuleSet:
    """Compile `c_source` for every ABI the host can build; the `required` ones must build.

    `checksum_hex` names the files (`pydyn_<it>_m64.so` ...): the cache passes its key.
    Whether an earlier build can be reused is the cache's business (`cache.py`), not this
    function's: it always compiles, all ABIs in parallel (a cross ABI, aarch64, only
    when required).
    """
    required = set(required)
    out_dir.mkdir(parents=True, exist_ok=True, mode=0o700)
    src = out_dir / f"pydyn_{checksum_hex}.c"
    header = out_dir / "pd_shm.h"
    require_toolchains(required)
    _write_replace(src, c_source)
    _write_replace(header, render_c_header())
    jobs: list[tuple[str, Path, subprocess.Popen[bytes]]] = []
    for abi in ABIS:
        if abi in CROSS_ABIS and abi not in required:
            continue
        tc = get_toolchain(abi)
        if tc is None:
            continue
        target = out_dir / f"pydyn_{checksum_hex}_{abi}.so"
        tmp = target.with_suffix(f".so.tmp{os.getpid()}")
        cmd = [tc.cc, *tc.flags, *COMMON_CFLAGS, *(f"-D{d}" for d in defines),
               "-I", str(out_dir), "-I", str(RUNTIME_DIR), "-o", str(tmp),
               str(src), *(str(p) for p in sorted(RUNTIME_DIR.glob("*.c")))]
        jobs.append((abi, target, subprocess.Popen(cmd, stdout=subprocess.PIPE,
                                                   stderr=subprocess.STDOUT)))
    modules: dict[str, Path] = {}
    failures: list[str] = []
    for abi, target, proc in jobs:
        out, _ = proc.communicate()
        tmp = target.with_suffix(f".so.tmp{os.getpid()}")
        if proc.returncode != 0:
            tmp.unlink(missing_ok=True)
            failures.append(f"{abi} module failed to compile:\n{out.decode(errors='replace')}")
            continue
        os.replace(tmp, target)
        modules[abi] = target
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
