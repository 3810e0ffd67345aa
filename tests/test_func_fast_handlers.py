"""The FAST path of function entry + return probes, x86-64.

A function site whose probes are all FAST (`n++`) runs them from pd_func_fire_sp (its
stub builds no pd_regs) and pd_ret_fast with one state check and the thread's own
context, and pd_ret_tramp then saves only what C may clobber.  Checked here on real
processes: that a counting pair really takes that path and a pair that is not FAST the
full one (gdb counts the runtime functions' hits), that every register a local callee
leaves alone survives the return (gcc's IPA-RA lets its caller rely on them) either
way, on trampolines and traps, and that a FAST function probe's MAXACTION error is
reported.
"""

from __future__ import annotations

import os
import re
import shutil
from pathlib import Path

import pytest
from cbuild import PROGS, build_c, run_pydyn

FAST = """global n, r
probe process("{b}").function("leaf_fn") {{ n++ }}
probe process("{b}").function("leaf_fn").return {{ r++ }}
probe end {{ printf("n=%d r=%d\\n", n, r) }}
"""
# printf and $return are not FAST: pd_run_probe on entry, pd_regs for the return
SLOW = """probe process("{b}").function("leaf_fn") {{ printf("c %d\\n", $arg1) }}
probe process("{b}").function("leaf_fn").return {{ printf("r %d\\n", $return) }}
"""
# FAST and not FAST on one site, two return probes: pd_ret_handler runs both in order
MIXED = """global n, r, r2
probe process("{b}").function("leaf_fn") {{ n++ }}
probe process("{b}").function("leaf_fn") {{ printf("c %d\\n", $arg1) }}
probe process("{b}").function("leaf_fn").return {{ r++ }}
probe process("{b}").function("leaf_fn").return {{ r2 += 2 }}
probe end {{ printf("n=%d r=%d r2=%d\\n", n, r, r2) }}
"""
SCRIPTS = {"fast": FAST, "slow": SLOW, "mixed": MIXED}


@pytest.fixture(scope="module")
def prog(tmp_path_factory: pytest.TempPathFactory) -> Path:
    if os.uname().machine != "x86_64":
        pytest.skip("x86-64 only (the fast return path and the test's assembly)")
    out = tmp_path_factory.mktemp("prog") / "func_fast"
    return build_c([PROGS / "func_fast_main.c", PROGS / "func_fast_regs.S"], out)


def check_output(kind: str, text: str, n: int) -> None:
    if kind == "fast":
        assert f"n={n} r={n}" in text, text
        return
    lines = text.splitlines()
    assert [ln for ln in lines if ln.startswith("c ")] == [f"c {i}" for i in range(n)], text
    if kind == "slow":
        assert [ln for ln in lines if ln.startswith("r ")] == \
            [f"r {i + 1}" for i in range(n)], text
    else:
        assert f"n={n} r={n} r2={2 * n}" in text, text


GDB_COMMANDS = """set breakpoint pending on
set debuginfod enabled off
break pd_ret_fast
break pd_ret_handler
break pd_run_probe
break pd_func_fire
break pd_func_fire_sp
ignore 1 1000000000
ignore 2 1000000000
ignore 3 1000000000
ignore 4 1000000000
ignore 5 1000000000
run
info breakpoints
"""


def hits(info: str, fn: str) -> int:
    """How often gdb's `info breakpoints` says the breakpoint on fn was hit."""
    m = re.search(rf"<{fn}(?:\+\d+)?>\n(?:\s+breakpoint already hit (\d+) times?)?", info)
    assert m, f"no breakpoint on {fn}:\n{info}"
    return int(m.group(1) or 0)


@pytest.mark.parametrize("kind", ["fast", "slow"])
def test_which_return_path_is_taken(tmp_path: Path, cache: Path, prog: Path, kind: str) -> None:
    gdb = shutil.which("gdb")
    if gdb is None:
        pytest.skip("no gdb (Debian package gdb): it counts the runtime's calls")
    n = 300
    cmds = tmp_path / "gdb.cmds"
    cmds.write_text(GDB_COMMANDS)
    out = tmp_path / "out.txt"
    r = run_pydyn(cache, "-o", str(out), "-e", SCRIPTS[kind].format(b=prog),
                  "-c", f"{gdb} -nx -batch -x {cmds} --args {prog} {n}")
    assert r.returncode == 0, r.stdout + r.stderr
    assert f"bad 0\ndone {n}\n" in r.stdout, r.stdout
    check_output(kind, out.read_text(), n)
    fast, full, run_probe, fire, fire_sp = (
        hits(r.stdout, f) for f in ("pd_ret_fast", "pd_ret_handler", "pd_run_probe",
                                    "pd_func_fire", "pd_func_fire_sp"))
    assert fast == n, r.stdout          # tried first on every return (without -x)
    if kind == "fast":  # no pd_regs (entry stub or return), no pd_run_probe
        assert (full, run_probe, fire, fire_sp) == (0, 0, 0, n), r.stdout
    else:
        assert (full, fire, fire_sp) == (n, n, 0) and run_probe >= 2 * n, r.stdout


@pytest.mark.parametrize("mode", ["auto", "trap"])
@pytest.mark.parametrize("kind", ["fast", "slow", "mixed"])
def test_registers_survive_the_return(tmp_path: Path, cache: Path, prog: Path, kind: str,
                                      mode: str) -> None:
    n = 2000
    out = tmp_path / "out.txt"
    r = run_pydyn(cache, "-v", f"--probe-mode={mode}", "-o", str(out),
                  "-e", SCRIPTS[kind].format(b=prog), "-c", f"{prog} {n}")
    assert r.returncode == 0, r.stderr
    assert f"bad 0\ndone {n}\n" in r.stdout, r.stdout
    if mode == "auto":                  # the plan's tactic: a trampoline
        assert re.search(r"sites: 1 total, 0 trap", r.stderr), r.stderr
    check_output(kind, out.read_text(), n)


@pytest.mark.parametrize("side", ["entry", "return"])
def test_fast_function_probe_maxaction(tmp_path: Path, cache: Path, prog: Path,
                                       side: str) -> None:
    point = "leaf_fn" + ('").return' if side == "return" else '")')
    script = f'global n probe process("{prog}").function("{point} {{ n++; n++ }}'
    r = run_pydyn(cache, "-D", "MAXACTION=1", "-e", script, "-c", f"{prog} 5")
    assert r.returncode == 1, r.stdout + r.stderr
    assert re.search(r"ERROR: MAXACTION exceeded near operator '\+\+' at <input>:1:\d+",
                     r.stderr), r.stderr
    assert "bad 0\ndone 5" in r.stdout
