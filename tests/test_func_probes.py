"""Function probes: `.function("NAME")`, globs, `.return` with `$return`,
`.library(...)`, `ppfunc()`, on real m64 and m32 processes at -O0 and -O2.

Counts are exact: a recursive function's entries and returns, recursion 10,000
deep, `$arg1` and `$return` sums computed independently here, the program's output
and exit status unchanged; under trampolines (default) and traps
(`--probe-mode=trap`, where the entry instruction runs out of line).
"""

from __future__ import annotations

from pathlib import Path

import pytest
from cbuild import BUILDS, PROGS, Build, build_c, have_m32, run_pydyn

from pydyn.launcher.elf.functions import ENDBR64, get_functions


def fib_calls(n: int) -> tuple[int, int]:
    """(calls, sum of the values returned) of the program's recursive fib(n)."""
    calls, total = {0: 1, 1: 1}, {0: 0, 1: 1}
    val = {0: 0, 1: 1}
    for k in range(2, n + 1):
        val[k] = val[k - 1] + val[k - 2]
        calls[k] = 1 + calls[k - 1] + calls[k - 2]
        total[k] = val[k] + total[k - 1] + total[k - 2]
    return calls[n], total[n]


@pytest.fixture(scope="module")
def progs(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    tmp = tmp_path_factory.mktemp("functions")
    return {b.id: build_c(PROGS / "func_rec.c", tmp / f"rec-{b.id}", m32=b.m32, opt=b.opt)
            for b in BUILDS if not b.m32 or have_m32()}


def prog(progs: dict[str, Path], b: Build) -> Path:
    if b.id not in progs:
        pytest.skip("no -m32 toolchain (gcc -m32 / gcc-multilib missing)")
    return progs[b.id]


def test_function_table_from_symbols(tmp_path: Path) -> None:
    exe = build_c(PROGS / "func_rec.c", tmp_path / "cet", extra=("-fcf-protection=full",))
    table = get_functions(str(exe))
    names = {f.name for f in table.functions}
    assert {"fib", "read_one", "read_two", "write_one", "depth", "main"} <= names
    fib = next(f for f in table.functions if f.name == "fib")
    with open(exe, "rb") as fh:
        data = fh.read()
    # the probe goes after the endbr64 landing pad
    from pydyn.launcher.elf.reader import get_elf_info
    seg = next(s for s in get_elf_info(str(exe)).segments if s.contains(fib.addr))
    off = seg.file_offset(fib.addr, 4)
    assert off is not None and data[off:off + 4] == ENDBR64
    assert fib.entry == fib.addr + 4 and fib.size > 4
    assert sorted(f.name for f in table.match("read_*")) == ["read_one", "read_two"]


SCRIPT = """global e, r, rs, g, de, dr
probe process("{exe}").function("fib") {{ e++ }}
probe process("{exe}").function("fib").return {{ r++; rs += $return }}
probe process("{exe}").function("read_*") {{ g[ppfunc()] += $arg1 }}
probe process("{exe}").function("depth").call {{ de++ }}
probe process("{exe}").function("depth").return {{ dr++
  if ($return == 10000) printf("top %s\\n", probefunc()) }}
probe end {{ printf("e=%d r=%d rs=%d de=%d dr=%d\\n", e, r, rs, de, dr)
  foreach (k in g+) printf("g %s %d\\n", k, g[k]) }}
"""


# Traps are checked at -O2 only: the -O0 entries displace the same way.
MODES = [(b, mode) for b in BUILDS for mode in ("auto", "trap")
         if not (mode == "trap" and b.opt == "-O0")]


@pytest.mark.parametrize("b, mode", MODES, ids=[f"{mode}-{b.id}" for b, mode in MODES])
def test_entry_return_counts_and_values(progs: dict[str, Path], cache: Path, b: Build,
                                        mode: str) -> None:
    exe = prog(progs, b)
    script = SCRIPT.format(exe=exe)
    n = 12
    res = run_pydyn(cache, f"--probe-mode={mode}", "-e", script, "-c",
                    f"sh -c '{exe} {n} 10000; echo status=$?'")
    assert res.returncode == 0, res.stderr
    calls, total = fib_calls(n)
    out = res.stdout.splitlines()
    assert f"fib({n})=144 s=40 depth=10000" in out         # the program is unchanged
    assert "status=3" in out
    assert f"e={calls} r={calls} rs={total} de=10001 dr=10001" in out, res.stdout
    assert "top depth" in out
    assert [ln for ln in out if ln.startswith("g ")] == ["g read_one 10", "g read_two 10"]
    assert "WARNING" not in res.stderr, res.stderr


@pytest.mark.parametrize("m32", [False, True], ids=["m64", "m32"])
def test_library_function_malloc(progs: dict[str, Path], cache: Path, m32: bool) -> None:
    exe = prog(progs, Build("m32-O2" if m32 else "m64-O2", m32, "-O2"))
    name = exe.name
    script = f"""global n, s, e, r
probe process("{exe}").library("libc.so.6").function("malloc") {{
  if (execname() == "{name}") {{ e++; if ($arg1 >= 100 && $arg1 < 107) {{ n++; s += $arg1 }} }} }}
probe process("{exe}").library("libc.so.6").function("malloc").return {{
  if (execname() == "{name}" && $return != 0) r++ }}
probe end {{ printf("n=%d s=%d same=%d\\n", n, s, e == r && e >= 7) }}
"""
    res = run_pydyn(cache, "-e", script, "-c", f"{exe} 5 10")
    assert res.returncode == 0, res.stderr
    assert "fib(5)=5 s=40 depth=10" in res.stdout
    assert "n=7 s=721 same=1" in res.stdout.splitlines(), res.stdout


@pytest.mark.parametrize("script, message", [
    ('probe process("{exe}").function("fib") {{ println($return) }}',
     "'$return' is only available in function .return probes"),
    ('probe process("{exe}").function("fib").return {{ println($arg1) }}',
     "'$arg1' is not available in .return probes"),
    ('probe process("{exe}").function("fibb") {{ }}',
     "matches no function"),
    ('probe process("{exe}").function("fib").inline.return {{ }}',
     "unsupported function probe point"),
])
def test_bad_function_probes(progs: dict[str, Path], cache: Path, script: str,
                             message: str) -> None:
    exe = prog(progs, BUILDS[1])
    res = run_pydyn(cache, "-p3", "-e", script.format(exe=exe))
    assert res.returncode == 1
    assert message in res.stderr, res.stderr
    assert "Traceback" not in res.stderr


@pytest.mark.parametrize("m32", [False, True], ids=["m64", "m32"])
def test_longjmp_out_of_probed_frames(tmp_path: Path, cache: Path, m32: bool) -> None:
    exe = build_c(PROGS / "func_jmp.c", tmp_path / "jmp", m32=m32, opt="-O2")
    script = f"""global de, dr, ar, as
probe process("{exe}").function("dive") {{ de++ }}
probe process("{exe}").function("dive").return {{ dr++ }}
probe process("{exe}").function("after").return {{ ar++; as += $return }}
probe end {{ printf("de=%d dr=%d ar=%d as=%d\\n", de, dr, ar, as) }}
"""
    # the return-address hijack (patched exits: test_func_exits.py, no skipped probes)
    res = run_pydyn(cache, "-D", "PD_RETURN_HIJACK=1", "-e", script,
                    "-c", f"sh -c '{exe}; echo status=$?'")
    assert res.returncode == 0, res.stderr
    out = res.stdout.splitlines()
    assert out[:2] == ["s=6", "status=4"]
    # the 18 frames longjmp skipped never return: counted as skipped, never misrouted
    assert "de=18 dr=0 ar=3 as=6" in out
    assert "skipped probes: 18" in res.stderr
