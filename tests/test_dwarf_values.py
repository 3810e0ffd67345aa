"""Target variables read with their exact values on real processes, m64 and m32 at
-O0 and -O2: parameters that -O2 keeps only as their value at the function's entry
(`DW_OP_entry_value`: a hidden probe on the entry keeps the registers for the call,
recursion included) read in statement and label probes, and "not accessible at this address" for
a call entered before `-x` attached; floating-point values; structs passed by value.

tests/progs/dwarf_entry.c; each test first checks that gcc emitted the form it is about
where it says so (`pydyn -L -v` prints each variable's location), then compares the
probe's values with what the program computes.
"""

from __future__ import annotations

import os
import re
import signal
import struct
import subprocess
import time
from collections.abc import Callable
from pathlib import Path

import pytest
from cbuild import BUILDS, PROGS, Build, builder, run_pydyn, start_pydyn

ENTRY_SRC = PROGS / "dwarf_entry.c"
Progs = Callable[[Build], Path]
IDS = [b.id for b in BUILDS]


def line_of(src: Path, mark: str) -> int:
    return next(i for i, ln in enumerate(src.read_text().splitlines(), 1) if f"/* {mark} */" in ln)


@pytest.fixture(scope="module")
def entry_progs(tmp_path_factory: pytest.TempPathFactory) -> Progs:
    return builder(ENTRY_SRC, tmp_path_factory.mktemp("dwentry"), "de")


def locations(cache: Path, point: str) -> dict[str, str]:
    """What `-L -v` says each variable's location is at the probe point."""
    res = run_pydyn(cache, "-L", "-v", point)
    assert res.returncode == 0, res.stderr
    m = re.search(r'locations="([^"]*)"', res.stdout)
    assert m, res.stdout
    return dict(part.partition("=")[::2] for part in re.split(r" (?=\w+=)", m.group(1)))


@pytest.mark.parametrize("b", BUILDS, ids=IDS)
def test_entry_values_in_statement_probes(entry_progs: Progs, cache: Path, b: Build) -> None:
    exe = entry_progs(b)
    later, depth = line_of(ENTRY_SRC, "LATER"), line_of(ENTRY_SRC, "DEPTH")
    where = locations(cache, f'process("{exe}").statement("*@dwarf_entry.c:{later}")')
    if b.opt == "-O2":   # the calls reused the argument registers
        assert where["a"] == "DW_OP_entry_value DW_OP_stack_value", where
        assert locations(cache, f'process("{exe}").statement("*@dwarf_entry.c:{depth}")') \
            ["level"] == "DW_OP_entry_value DW_OP_stack_value"
    script = (f'probe process("{exe}").statement("*@dwarf_entry.c:{later}") '
              '{ printf("L a=%d b=%d\\n", $a, $b) } '
              f'probe process("{exe}").statement("*@dwarf_entry.c:{depth}") '
              '{ printf("D level=%d tag=%d %s\\n", $level, $tag, $$parms) } '
              f'probe process("{exe}").function("depth") {{ printf("E\\n") }} '
              f'probe process("{exe}").function("later").label("here") '
              '{ printf("H a=%d b=%d\\n", $a, $b) }')
    res = run_pydyn(cache, "-e", script, "-c", f"{exe} 3")
    assert res.returncode == 0, res.stderr
    assert "s=930" in res.stdout
    out = res.stdout.splitlines()
    assert [ln for ln in out if ln.startswith("L ")] == \
        [f"L a={1000 + i} b={7 * i}" for i in range(3)]
    assert [ln for ln in out if ln.startswith("H ")] == \
        [f"H a={1000 + i} b={7 * i}" for i in range(3)]
    assert out.count("E") == 4   # a function probe shares the entry with the hidden one
    # each level of the recursion reads its own call's entry; -O2 makes the deepest
    # level's path another copy of the line
    levels = [ln for ln in out if ln.startswith("D ")]
    want = [f"D level={n} tag={53 - n} level={n:#x} tag={53 - n:#x}" for n in range(4)]
    assert levels == (want if b.opt == "-O0" else want[-len(levels):]), res.stdout
    assert len(levels) >= 3 and "ERROR" not in res.stderr, res.stderr



@pytest.mark.parametrize("b", BUILDS[2:], ids=IDS[2:])
def test_i386_register_parameters_at_the_entry(entry_progs: Progs, cache: Path,
                                               b: Build) -> None:
    """regparm passes depth()'s parameters in eax and edx: -O2's DWARF says so at the
    entry; -O0's names only the frame slot the prologue stores them in, where the stack
    convention would read the caller's stack: refused, never a wrong value."""
    exe = entry_progs(b)
    script = f'probe process("{exe}").function("depth") {{ printf("E %d %d\\n", $level, $tag) }}'
    res = run_pydyn(cache, "-e", script, "-c", f"{exe} 1")
    if b.opt == "-O0":
        assert res.returncode == 1
        assert "parameter 'level' of depth@" in res.stderr and \
            "passed in a register (regparm or fastcall)" in res.stderr, res.stderr
    else:
        assert res.returncode == 0, res.stderr
        assert [ln for ln in res.stdout.splitlines() if ln.startswith("E ")] == \
            [f"E {n} {53 - n}" for n in (3, 2, 1, 0)], res.stdout

@pytest.mark.skipif(os.uname().machine != "x86_64", reason="-x is implemented for x86-64 hosts")
@pytest.mark.parametrize("b", BUILDS[1::2], ids=IDS[1::2])
def test_entry_value_of_a_call_entered_before_attaching(entry_progs: Progs, cache: Path,
                                                        b: Build) -> None:
    """-x PID while spin() runs: its entry came before the probes, so nothing kept its
    registers and `$a` there is "not accessible at this address" (an error of the
    handler, counted; the program runs on); the calls entered later read theirs."""
    exe = entry_progs(b)
    spin, later = line_of(ENTRY_SRC, "SPIN"), line_of(ENTRY_SRC, "LATER")
    target = subprocess.Popen([str(exe), "3", "wait"], stdout=subprocess.PIPE, text=True)
    try:
        assert target.stdout is not None and target.stdout.readline() == "ready\n"
        script = (f'probe process("{exe}").statement("*@dwarf_entry.c:{spin}") '
                  '{ printf("S %d\\n", $a) } '
                  f'probe process("{exe}").statement("*@dwarf_entry.c:{later}") '
                  '{ printf("L a=%d\\n", $a) }')
        proc = start_pydyn(cache, "-v", "-D", "MAXERRORS=1000", "-e", script,
                           "-x", str(target.pid), start_new_session=False)
        assert proc.stderr is not None
        err = []
        for line in proc.stderr:
            err.append(line)
            if line.startswith(f"pydyn: attached to pid {target.pid} ("):
                break
        time.sleep(0.5)   # spin() hits its line a few times
        target.send_signal(signal.SIGUSR1)
        assert target.wait(timeout=60) == 0
        out, rest = proc.communicate(timeout=60)
    finally:
        target.kill()
    stderr = "".join(err) + rest
    assert "S " not in out, out
    assert [ln for ln in out.splitlines() if ln.startswith("L ")] == \
        [f"L a={1000 + i}" for i in range(3)], out + stderr
    assert "ERROR: not accessible at this address: the value at the function's entry was " \
        "not kept for this call" in stderr, stderr
    assert "Traceback" not in stderr


FLOAT_SRC = PROGS / "dwarf_float.c"


@pytest.fixture(scope="module")
def float_progs(tmp_path_factory: pytest.TempPathFactory) -> Progs:
    return builder(FLOAT_SRC, tmp_path_factory.mktemp("dwfloat"), "df")


def fp_bits(x: float) -> str:
    """A value as stap reads a double (and a float, widened): its bits, `%#x`."""
    return f"{struct.unpack('<Q', struct.pack('<d', x))[0]:#x}"


@pytest.mark.parametrize("b", BUILDS, ids=IDS)
def test_floating_point(float_progs: Progs, cache: Path, b: Build) -> None:
    """A `double` reads as its bits and a `float` as a double's (stap's fp32_to_fp64),
    for fp_to_string(): members, globals and, where the ABI passes them in memory
    (i386) or -O0 spilled them (a statement), parameters; `$$parms` prints the bits,
    the pretty printer "?", as stap's."""
    exe = float_progs(b)
    script = (f'probe process("{exe}").function("scale") {{ printf("F %s %s %s %s %d|%s|%s\\n", '
              'fp_to_string($p->a, 3), fp_to_string($p->b, 3), fp_to_string($gd, 2), '
              'fp_to_string($gf, 2), $p->n, $p$, $$parms$) }')
    if b.m32:
        script += (f'probe process("{exe}").function("scale") {{ printf("P %s %s|%s\\n", '
                   'fp_to_string($d, 3), fp_to_string($f, 3), $$parms) }')
    elif b.opt == "-O0":
        line = line_of(FLOAT_SRC, "SCALE")
        script += (f'probe process("{exe}").statement("*@dwarf_float.c:{line}") '
                   '{ printf("P %s %s|%s\\n", fp_to_string($d, 3), fp_to_string($f, 3), '
                   '$$parms) }')
    res = run_pydyn(cache, "-e", script, "-c", f"{exe} 2")
    assert res.returncode == 0, res.stderr
    assert "s=-6.125" in res.stdout
    out = res.stdout.splitlines()
    assert [ln for ln in out if ln.startswith("F ")] == [
        f"F {1.5 + i:.3f} {-3.25 * (i + 1):.3f} 2.50 -0.75 {i}|{{.a=?, .b=?, .n={i}}}|"
        f"p={{.a=?, .b=?, .n={i}}} d=? f=?" for i in range(2)], res.stdout
    if b.m32 or b.opt == "-O0":
        params = [ln for ln in out if ln.startswith("P ")]
        assert len(params) == 2, res.stdout
        for i, ln in enumerate(params):
            head, parms = ln.split("|")
            assert head == f"P {0.5 + i:.3f} {4.0 * (i + 1):.3f}"
            assert parms.endswith(f" d={fp_bits(0.5 + i)} f={fp_bits(4.0 * (i + 1))}"), ln


def test_floating_point_in_sse_registers(float_progs: Progs, cache: Path) -> None:
    """x86-64 passes floating-point parameters in SSE registers, which a probe does
    not save: reading one at the entry is a translate-time error naming them."""
    exe = float_progs(BUILDS[1])
    res = run_pydyn(cache, "-e", f'probe process("{exe}").function("scale") '
                    '{ println($d) }', "-c", f"{exe} 1")
    assert res.returncode == 1
    assert "parameter 'd' of scale@" in res.stderr and "SSE" in res.stderr, res.stderr


BYVALUE_SRC = PROGS / "dwarf_byvalue.c"


@pytest.fixture(scope="module")
def byvalue_progs(tmp_path_factory: pytest.TempPathFactory) -> Progs:
    return builder(BYVALUE_SRC, tmp_path_factory.mktemp("dwbyval"), "dv")


def byvalue(i: int, members: str) -> str:
    """What the program passes in round i, as the probes print it."""
    values = {"p": f"{10 + i},{-20 - i}", "s": f"{300 + i},{-4 - i},{i + 1},{7 + i}",
              "w": f"{100 * i},{7 if i else 2}"}
    return " ".join(f"{m}={values[m]}" for m in members.split())


READS = {"p": ("%d,%d", "$p->a, $p->b"), "s": ("%d,%d,%d,%d", "$s->x, $s->y, $s->f1, $s->f2"),
         "w": ("%d,%d", "$w->v[1], $w->c")}


def reads(tag: str, members: str) -> str:
    fmt = " ".join(f"{m}={READS[m][0]}" for m in members.split())
    args = ", ".join(READS[m][1] for m in members.split())
    return f'printf("{tag} {fmt}\\n", {args})'


def parms(i: int, b: Build) -> str:
    """`$$parms$` at take()'s entry in round i: x86-64 -O0 has not stored p and s yet."""
    p = "?" if b.id == "m64-O0" else f"{{.a={10 + i}, .b={-20 - i}}}"
    s = "?" if b.id == "m64-O0" else \
        f"{{.x={300 + i}, .y={-4 - i}, .f1={i + 1}, .f2={7 + i}}}"
    return f"p={p} s={s} w={{.v=[...], .c={7 if i else 2}}}"


@pytest.mark.parametrize("b", BUILDS, ids=IDS)
def test_struct_by_value(byvalue_progs: Progs, cache: Path, b: Build) -> None:
    """`$s->m` of a struct passed by value (stap spells `.` as `->`), wherever its
    location puts the member: a register piece (x86-64 -O2 passes a two-long struct
    as `DW_OP_reg5 DW_OP_piece 8 DW_OP_reg4 DW_OP_piece 8`), part of one register
    (bitfields too), memory (an array element, an enum); `$$parms$` prints them as stap."""
    exe = byvalue_progs(b)
    entry = f'process("{exe}").function("take")'
    where = locations(cache, entry)
    if b.id == "m64-O2":
        assert where["p"] == "DW_OP_reg5 DW_OP_piece DW_OP_reg4 DW_OP_piece", where
        assert where["s"] == "%rdx", where
    # the prologue of x86-64 -O0 has not stored the registers yet at the entry
    at_entry = "w" if b.id == "m64-O0" else "p s w"
    # -O2 keeps `s` nowhere once it is summed
    at_line = "p w" if b.opt == "-O2" else "p s w"
    line = line_of(BYVALUE_SRC, "TAKE")
    script = (f"probe {entry} {{ {reads('E', at_entry)}; printf(\"S %s\\n\", $$parms$) }} "
              f'probe process("{exe}").statement("*@dwarf_byvalue.c:{line}") '
              f"{{ {reads('L', at_line)} }}")
    res = run_pydyn(cache, "-e", script, "-c", f"{exe} 2")
    assert res.returncode == 0, res.stderr
    assert "sum=1398" in res.stdout, res.stdout
    out = res.stdout.splitlines()
    assert [ln for ln in out if ln[:2] in ("E ", "L ", "S ")] == [
        ln for i in range(2) for ln in (
            f"E {byvalue(i, at_entry)}", f"S {parms(i, b)}",
            f"L {byvalue(i, at_line)}")], res.stdout


@pytest.mark.parametrize(("expr", "message"), [
    ("$p", "'struct pair' is being accessed instead of a member"),
    ("$p->bb", "unable to find member 'bb' for struct pair (alternatives: b"),
    ("&$p->a", "cannot take the address of a value that is not in memory"),
])
def test_struct_by_value_errors(byvalue_progs: Progs, cache: Path, expr: str,
                                message: str) -> None:
    exe = byvalue_progs(BUILDS[1])
    res = run_pydyn(cache, "-e", f'probe process("{exe}").function("take") {{ println({expr}) }}',
                    "-c", f"{exe} 1")
    assert res.returncode == 1
    assert message in res.stderr and "Traceback" not in res.stderr, res.stderr
