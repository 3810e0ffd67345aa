"""Building C test programs: `build_c(src, out, m32=..., opt=..., extra=...)`.

Imported by tests as `from cbuild import build_c` (conftest.py puts tests/ on
sys.path).  A missing compiler or -m32 multilib skips the test; a compile
error fails it with the compiler's message.
"""

from __future__ import annotations

import functools
import os
import re
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

CC = os.environ.get("CC", "gcc")
PROGS = Path(__file__).resolve().parent / "progs"
# Debian keeps <sys/sdt.h> (and other arch headers) under the x86_64 triplet only;
# -idirafter lets an -m32 compile fall back to them after its own directories.
MULTIARCH_INCLUDE = "/usr/include/x86_64-linux-gnu"

Source = str | os.PathLike[str]

# -D values of a run whose handler errors must not end the session: those
# --suppress-handler-errors adds.  Each set of -D values compiles the runtime once per
# session and ABI (conftest.py's runtime_store), so the tests that count errors share one.
ERRORS_RUN_ON = ("-D", "MAXERRORS=1000000000")


@dataclass(frozen=True)
class Build:
    """One flavour of a test program: ABI and optimisation level."""

    id: str
    m32: bool
    opt: str


BUILDS = [Build(f"{abi}-{opt[1:]}", abi == "m32", opt)
          for abi in ("m64", "m32") for opt in ("-O0", "-O2")]


def m32_cflags() -> tuple[str, ...]:
    return ("-m32", "-idirafter", MULTIARCH_INCLUDE)


@functools.cache
def have_cc() -> bool:
    return shutil.which(CC) is not None


@functools.cache
def have_m32() -> bool:
    """Whether CC can build and link an -m32 program (gcc-multilib installed)."""
    if not have_cc():
        return False
    with tempfile.TemporaryDirectory() as tmp:
        src = Path(tmp, "hello.c")
        src.write_text("#include <stdio.h>\nint main(void) { puts(\"hi\"); return 0; }\n")
        res = subprocess.run([CC, *m32_cflags(), str(src), "-o", str(Path(tmp, "hello"))],
                             capture_output=True)
        return res.returncode == 0


@functools.cache
def have_cxx(m32: bool = False) -> bool:
    """Whether CC can build and link a C++ program (-lstdc++) of that ABI (g++-multilib)."""
    if not have_cc() or (m32 and not have_m32()):
        return False
    with tempfile.TemporaryDirectory() as tmp:
        src = Path(tmp, "hello.cc")
        src.write_text("#include <stdexcept>\nint main() { try { throw std::exception(); }"
                       " catch (...) {} }\n")
        res = subprocess.run([CC, *(m32_cflags() if m32 else ()), str(src), "-lstdc++",
                              "-o", str(Path(tmp, "hello"))], capture_output=True)
        return res.returncode == 0


@functools.cache
def have_sdt_h() -> bool:
    return have_cc() and (Path(MULTIARCH_INCLUDE, "sys", "sdt.h").exists() or
            Path("/usr/include/sys/sdt.h").exists())


def build_c(src: Source | Sequence[Source], out: Source, *, m32: bool = False,
            opt: str = "-O2", extra: Sequence[str] = ()) -> Path:
    """Compile and link `src` (one file or several) into `out`; returns `out` as a Path."""
    if not have_cc():
        pytest.skip(f"no C compiler ({CC})")
    if m32 and not have_m32():
        pytest.skip("no -m32 toolchain (gcc-multilib)")
    sources = [src] if isinstance(src, (str, os.PathLike)) else list(src)
    out = Path(out)
    cmd = [CC, *(m32_cflags() if m32 else ()), opt, "-g0", "-Wall",
           *(str(s) for s in sources), *extra, "-o", str(out)]
    res = subprocess.run(cmd, capture_output=True, text=True)
    if res.returncode != 0:
        pytest.fail(f"compile failed: {' '.join(cmd)}\n{res.stderr}", pytrace=False)
    return out


def builder(src: Source, out_dir: Path, prefix: str, extra: Sequence[str] = ("-g",)
            ) -> Callable[[Build], Path]:
    """`one(build)`: `src` built as OUT_DIR/PREFIX-<build id> once per flavour."""
    @functools.cache
    def one(b: Build) -> Path:
        return build_c(src, out_dir / f"{prefix}-{b.id}", m32=b.m32, opt=b.opt, extra=extra)
    return one


def build_abis(src: Source, out: Source, extra: Sequence[str] = ("-pthread",)
               ) -> dict[str, Path]:
    """`src` built as OUT64 and, with an -m32 toolchain, OUT32: {"m64": ..., "m32": ...}."""
    built = {"m64": build_c(src, f"{out}64", extra=extra)}
    if have_m32():
        built["m32"] = build_c(src, f"{out}32", m32=True, extra=extra)
    return built


def abi_program_fixture(src: Path | None, stem: str, name: str = "target", *,
                        text: str | None = None) -> Any:
    """A module-scoped fixture `name`: `src` (or the C source `text`, written as
    STEM.c) built against <sys/sdt.h>, once for m64 and once for m32 (a parameter each:
    every test using it runs for both ABIs)."""
    @pytest.fixture(scope="module", params=["m64", "m32"], name=name)
    def program(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory,
                sdt_cflags: Callable[[bool], tuple[str, ...]]) -> Path:
        m32 = request.param == "m32"
        d = tmp_path_factory.mktemp(stem)
        source = src
        if source is None:
            source = d / f"{stem}.c"
            source.write_text(text or "")
        return build_c(source, d / f"{stem}_{request.param}", m32=m32, extra=sdt_cflags(m32))
    return program


def mark_pc(exe: Path, name: str) -> int:
    """The link-time address of the USDT mark `name` in `exe`, as readelf -n shows it."""
    notes = subprocess.run(["readelf", "-n", str(exe)], capture_output=True, text=True,
                           check=True).stdout
    found = re.search(rf"Name: {re.escape(name)}\s+Location: (0x[0-9a-f]+)", notes)
    assert found, notes
    return int(found.group(1), 16)


def abi_binary(built: dict[str, Path], abi: str) -> Path:
    """build_abis' program for `abi`; skips when it could not be built."""
    if abi not in built:
        pytest.skip("no -m32 toolchain (gcc -m32 / gcc-multilib missing)")
    return built[abi]


# The 8-thread programs (test_trampolines's THREADS_C, rel_target's `threads` mode)
# fire "hammer" with (thread id, i) for i < per: one script and one check serve them.
def thread_sums_script(binary: Path, handler_extra: str = "", end_extra: str = "") -> str:
    return (f'global hits, ids\nprobe process("{binary}").mark("hammer") '
            f'{{ hits++; ids[$arg1] += $arg2{handler_extra} }}\n'
            f'probe end {{ printf("hits=%d\\n", hits);{end_extra} foreach (k in ids) '
            'printf("id %d %d\\n", k, ids[k]) }\n')


def assert_thread_sums(stdout: str, per: int, threads: int = 8) -> None:
    """Every hit of every thread counted once: the total and each thread's sum exact."""
    lines = stdout.splitlines()
    assert f"hits={threads * per}" in lines, stdout
    want = per * (per - 1) // 2
    assert sorted(ln for ln in lines if ln.startswith("id ")) == \
        sorted(f"id {i} {want}" for i in range(threads)), stdout


def pydyn_argv(*args: str, command: str = "cli") -> list[str]:
    """The command line of `pydyn ARGS` (`pydyn-run ARGS` with command="run_module"): this
    interpreter's launcher, whatever is first on PATH (or whether anything is at all)."""
    return [sys.executable, "-m", f"pydyn.launcher.{command}", *args]


def pydyn_env(cache: Path, env: Mapping[str, str] | None = None) -> dict[str, str]:
    """The environment of a run: this one, the module cache in `cache`, then `env`."""
    return {**os.environ, "PYDYN_CACHE_DIR": str(cache), **(env or {})}


def start_pydyn(cache: Path, *args: str, env: Mapping[str, str] | None = None,
                **popen: Any) -> subprocess.Popen[str]:
    """`pydyn ARGS` started with its module cache in `cache`, as text; by default in a
    session of its own (a test can kill its whole process group, targets included) with
    stdout and stderr piped; `popen` overrides those."""
    kw: dict[str, Any] = {"stdout": subprocess.PIPE, "stderr": subprocess.PIPE,
                          "start_new_session": True, **popen}
    return subprocess.Popen(pydyn_argv(*args), text=True, env=pydyn_env(cache, env), **kw)


def run_pydyn(cache: Path, *args: str, timeout: float = 180,
              env: Mapping[str, str] | None = None, prefix: Sequence[str] = (),
              command: str = "cli", **run: Any) -> subprocess.CompletedProcess[str]:
    """`pydyn ARGS` run to its end with its module cache in `cache` (the `cache` fixture of
    conftest.py) and `env` added to the environment; output captured as text.  `prefix`
    runs pydyn under a command (`setarch -R`: what it starts inherits the personality);
    `run` goes to subprocess.run (cwd, input, umask)."""
    return subprocess.run([*prefix, *pydyn_argv(*args, command=command)],
                          capture_output=True, text=True, env=pydyn_env(cache, env),
                          timeout=timeout, **run)


def run_pydyn_clean(cache: Path, *args: str, rc: int = 0,
                    **kw: Any) -> subprocess.CompletedProcess[str]:
    """run_pydyn that must exit with `rc` and, when it succeeds without -v (which talks on
    stderr), print nothing on stderr."""
    r = run_pydyn(cache, *args, **kw)
    assert r.returncode == rc, r.stderr
    if rc == 0 and "-v" not in args:
        assert r.stderr == "", r.stderr
    return r


def run_module(cache: Path, *args: str, **kw: Any) -> subprocess.CompletedProcess[str]:
    """`pydyn-run ARGS` (launcher/run_module.py: a module pair that `pydyn -p4` built), as
    run_pydyn runs pydyn."""
    return run_pydyn(cache, *args, command="run_module", **kw)
