"""Probes on libc's own memory, string and allocation functions (memcpy, strlen, memset,
memcmp, strcmp, strchrnul, malloc, free) count the program's calls exactly, and
pydyn's handlers -- printing strings, sprintf, user_string -- neither add to the counts
nor re-enter the probes: the module carries its own copies of the libc routines it
calls (runtime/pd_libc.c).  What a handler still calls in libc (clock_gettime, getpid,
...) re-enters a probe on it: the exit report names that cause.
"""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest
from cbuild import PROGS, build_c, have_m32, run_pydyn

ROUNDS = 300
# On i386 libc's memcpy, strlen, memset, memcmp and strcmp are IFUNCs, whose selected
# implementation the x86-64 launcher cannot ask its own loader for (elf/ifunc.py):
# m32 probes the functions that are plain ones there.
FUNCTIONS = {
    "m64": ("memcpy", "memset", "strlen", "memcmp", "strcmp", "strchrnul", "malloc", "free"),
    "m32": ("strchrnul", "malloc", "free"),
}
# What a printing handler prints of each function's call (its arguments as strings).
PRINTS = {
    "memcpy": 'printf("memcpy %s %d\\n", user_string($arg2), $arg3); '
              's = sprintf("%s|%-4d|%x", user_string_n($arg2, 6), $arg3, $arg3)',
    "memset": 'printf("memset %c %d %s\\n", $arg2, $arg3, s)',
    "strlen": 'printf("strlen %s\\n", user_string($arg1))',
    "memcmp": 'printf("memcmp %s\\n", sprintf("%.5s", user_string($arg2)))',
    "strcmp": 'printf("strcmp %s %s\\n", user_string($arg1), user_string($arg2))',
    "strchrnul": 'printf("strchrnul %s %c\\n", user_string($arg1), $arg2)',
    "malloc": 'printf("malloc %d %s\\n", $arg1, execname())',
    "free": 'printf("free %s\\n", sprintf("%p", $arg1) . " " . sprint($arg1 != 0))',
}


@pytest.fixture(scope="module", params=["m64", "m32"])
def target(request: pytest.FixtureRequest,
           tmp_path_factory: pytest.TempPathFactory) -> tuple[str, Path]:
    abi = request.param
    if abi == "m32" and not have_m32():
        pytest.skip("no -m32 toolchain (gcc -m32 / gcc-multilib missing)")
    out = tmp_path_factory.mktemp("libc") / f"libc_calls_{abi}"
    return abi, build_c(PROGS / "libc_calls.c", out, m32=abi == "m32")


def script(exe: Path, functions: tuple[str, ...], printing: bool) -> str:
    lib = f'process("{exe}").library("libc.so.6")'
    # s: the memcpy handler's sprintf, which the memset handler prints
    lines = ["global on, n" + (", s" if printing and "memcpy" in functions else ""),
             f'probe process("{exe}").function("window_open") {{ on = 1 }}',
             f'probe process("{exe}").function("window_close") {{ on = 0 }}']
    for f in functions:
        body = f'n["{f}"]++' + (f"; {PRINTS[f]}" if printing else "")
        lines.append(f'probe {lib}.function("{f}") {{ if (on) {{ {body} }} }}')
    lines.append('probe end { foreach (f in n) printf("count %s %d\\n", f, n[f]) }')
    return "\n".join(lines) + "\n"


@pytest.mark.parametrize("printing", [False, True], ids=["count", "print"])
def test_libc_calls_counted_exactly(target: tuple[str, Path], cache: Path,
                                    printing: bool) -> None:
    abi, exe = target
    functions = FUNCTIONS[abi]
    res = run_pydyn(cache, "-e", script(exe, functions, printing), "-c", f"{exe} {ROUNDS}")
    assert res.returncode == 0, res.stderr
    out = res.stdout.splitlines()
    assert f"rounds={ROUNDS}" in out
    counts = sorted(ln for ln in out if ln.startswith("count "))
    assert counts == sorted(f"count {f} {ROUNDS}" for f in functions), res.stdout
    # no hit skipped, none caused by pydyn: no warning at all
    assert res.stderr == "", res.stderr
    if printing:
        for f in functions:
            printed = [ln for ln in out if ln.startswith(f + " ")]
            assert len(printed) == ROUNDS, (f, printed[:3])
        text = "a string pydyn's handlers read and print"
        if abi == "m64":
            assert out.count(f"memcpy {text} 77") == ROUNDS
            assert out.count(f"memset x 77 {text[:6]}|77  |4d") == ROUNDS
            assert out.count(f"strlen {text}") == ROUNDS
            assert out.count("memcmp a str") == ROUNDS
        assert out.count(f"strchrnul {text} z") == ROUNDS
        assert out.count(f"malloc 77 {exe.name}") == ROUNDS
        assert all(ln.endswith(" 1") and " 0x" in ln for ln in out if ln.startswith("free "))


def test_reentered_probe_named(target: tuple[str, Path], cache: Path) -> None:
    """A handler that reads the time calls libc's clock_gettime: a probe on it is
    re-entered from inside the handler, skipped, and the report says so and which."""
    abi, exe = target
    lib = f'process("{exe}").library("libc.so.6")'
    text = (f'global n, t\nprobe {lib}.function("clock_gettime") {{ n++ }}\n'
            f'probe process("{exe}").function("do_malloc") {{ t += gettimeofday_ns() > 0 }}\n'
            'probe end { printf("t=%d\\n", t) }\n')
    res = run_pydyn(cache, "-e", text, "-c", f"{exe} 20")
    assert res.returncode == 0, res.stderr
    assert "t=21" in res.stdout.splitlines(), res.stdout
    lines = res.stderr.splitlines()
    skipped = [ln for ln in lines if ln.startswith("WARNING: Number of errors: 0, skipped")]
    reentered = [ln for ln in lines if ln.startswith("WARNING: Skipped due to reentrancy: ")]
    assert len(skipped) == 1 and len(reentered) == 1, res.stderr
    n = int(skipped[0].rsplit(" ", 1)[1])   # (a thread's first clock read at least)
    assert n >= 1 and reentered[0].startswith(f"WARNING: Skipped due to reentrancy: {n} ")
    assert f'(last: {lib}.function("clock_gettime"), hit while its thread ran a handler' \
        in reentered[0], reentered[0]


# The libc functions the module must not import: it defines its own (pd_libc.c).
OWN = {"memcpy", "memmove", "mempcpy", "memset", "memcmp", "bcmp", "memchr", "strlen",
       "strnlen", "strcmp", "strncmp", "strchr", "strchrnul", "strrchr", "strcspn",
       "strspn", "strstr", "strcpy", "stpcpy", "strcat", "strncpy", "strtol", "strtoll",
       "strtoull", "qsort", "snprintf", "vsnprintf", "sprintf", "vsprintf"}


def test_module_imports_no_libc_string_function(cache: Path) -> None:
    res = run_pydyn(cache, "-p4", "-e",
                    'probe begin { printf("%s %d\\n", sprintf("%x", 5), strlen("ab")) }')
    assert res.returncode == 0, res.stderr
    modules = [Path(p) for p in res.stdout.split()]
    assert modules and any(p.name.endswith("_m64.so") for p in modules), res.stdout
    for module in modules:
        nm = subprocess.run(["nm", "-D", "--undefined-only", str(module)],
                            capture_output=True, text=True, check=True)
        imported = {ln.split()[-1].split("@")[0] for ln in nm.stdout.splitlines()}
        assert "clock_gettime" in imported   # (the listing is real)
        assert not imported & OWN, (module.name, sorted(imported & OWN))


@pytest.mark.parametrize("m32", [False, True], ids=["m64", "m32"])
def test_own_routines_match_libc(tmp_path: Path, m32: bool) -> None:
    """pd_libc.c's routines give what libc's give (tests/progs/libc_own.c)."""
    runtime = Path(__file__).resolve().parent.parent / "runtime"
    exe = build_c(PROGS / "libc_own.c", tmp_path / "own", m32=m32,
                  extra=("-I", str(runtime), "-fno-strict-aliasing", "-ldl"))
    res = subprocess.run([str(exe)], capture_output=True, text=True, timeout=120)
    assert (res.returncode, res.stdout) == (0, "ok\n"), res.stdout
