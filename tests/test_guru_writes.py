"""Guru mode's writes to target variables, as stap's -g has them: `$param = v` at a
function's entry (in a register: the saved register is what the function goes on
with; on i386's stack: the caller's slot), `$return = v` in a .return probe, locals at a
statement (callee-saved registers at -O2), `$p->m`, `$p->arr[$i]`, statics, `@var`
globals and their members, bitfields of every kind (signed and unsigned, narrow and
wide, across a byte boundary), each read back and seen by the program
(tests/progs/guru_writes.c at -O0 and -O2, m64 and m32; trampolines and patched exits,
traps, the return-address hijack).  stap's refusals are translate-time errors; a write
through a bad pointer is a counted error and the program runs on.
"""

from __future__ import annotations

import re
import subprocess
from collections.abc import Callable
from pathlib import Path

import pytest
from cbuild import BUILDS, ERRORS_RUN_ON, PROGS, Build, builder, run_pydyn

SRC = PROGS / "guru_writes.c"
KEEP = next(i for i, ln in enumerate(SRC.read_text().splitlines(), 1) if "/* KEEP */" in ln)
Progs = Callable[[Build], Path]


@pytest.fixture(scope="module")
def progs(tmp_path_factory: pytest.TempPathFactory) -> Progs:
    return builder(SRC, tmp_path_factory.mktemp("guru"), "gw")


WRITES = """function set_scalar(v) {{ @var("gscalar", "{exe}") = v }}
probe process("{exe}").function("compute") {{ $x = 20; $y = $y + 1; set_scalar(33) }}
probe process("{exe}").function("local_fn") {{ $x = 10 }}
probe process("{exe}").function("retval").return {{ $return = $return * 100 }}
probe process("{exe}").function("touch") {{
  $r->v = 70; $r->l = -8; $r->arr[$i] = 22; $r->arr[3] = -4; $counter_static = 50
  $r->bf->a = 6; $r->bf->b = -9; $r->bf->c = 4000; $r->bf->d = 60
  $r->bf->e = 0xabcdef1234; $r->bf->f = -2; $r->bf->g = 1
  @var("global_rec")->v = 77; @var("garr@guru_writes.c")[4] = 44
  @var("gpk")->a = 2; @var("gpk")->w = 0x2fedcba98765432; @var("gpk")->z = 33
  printf("read %d %d %d|%d %d %d %d %d %d %d|%d %d\\n", $r->v, $r->arr[1], $counter_static,
         $r->bf->a, $r->bf->b, $r->bf->c, $r->bf->d, $r->bf->e, $r->bf->f, $r->bf->g,
         @var("global_rec")->v, @var("garr")[4])
}}
probe process("{exe}").statement("keep@guru_writes.c:{keep}") {{
  $a = 9; $b = 8; $c = 7; $d = 6; $e = 5
}}
"""

SEEN = ["compute=44", "local=34", "retval=200",
        "touch=142 v=70 l=-8 arr=1,22,3,-4 static=50",
        f"bits a=6 b=-9 c=4000 d=60 e={0xabcdef1234} f=-2 g=1",
        "global v=77 garr=11,44 scalar=33",
        "packed k=1 a=2 w=2fedcba98765432 z=33", "keep=756789", "by_value=-8679"]
UNTOUCHED = ["compute=5", "local=7", "retval=2", "touch=14 v=7 l=8 arr=1,2,3,4 static=5",
             "bits a=1 b=-1 c=100 d=-3 e=12345 f=1 g=0", "global v=1 garr=11,14 scalar=3",
             "packed k=1 a=5 w=123456789abcdef z=-7",
             "keep=765432", "by_value=-8679"]


@pytest.mark.parametrize("b", BUILDS, ids=[b.id for b in BUILDS])
def test_the_program_sees_what_was_written(progs: Progs, cache: Path, b: Build) -> None:
    exe = progs(b)
    alone = subprocess.run([str(exe)], capture_output=True, text=True, timeout=60)
    assert alone.stdout.splitlines() == UNTOUCHED, alone.stdout
    res = run_pydyn(cache, "-g", "-e", WRITES.format(exe=exe, keep=KEEP), "-c", str(exe))
    assert res.returncode == 0, res.stderr
    assert "ERROR" not in res.stderr, res.stderr
    lines = res.stdout.splitlines()
    # the probe's line is printed by the launcher, the program's by itself
    assert f"read 70 22 50|6 -9 4000 60 {0xabcdef1234} -2 1|77 44" in lines, res.stdout
    assert [ln for ln in lines if not ln.startswith("read ")] == SEEN, res.stdout


@pytest.mark.parametrize("b", BUILDS[1:], ids=[b.id for b in BUILDS[1:]])
def test_members_of_a_struct_passed_by_value(progs: Progs, cache: Path, b: Build) -> None:
    """x86-64 -O2: in two registers, an int the upper half of one, bitfields part of a
    third; i386: on the stack.  (x86-64 -O0 has it only in the frame its prologue
    builds: not readable at the entry.)"""
    exe = progs(b)
    script = (f'probe process("{exe}").function("by_value") {{ '
              '$s->a = 5; $s->c = 7; $t->x = 9; $t->y = -3 }')
    res = run_pydyn(cache, "-g", "-e", script, "-c", str(exe))
    assert res.returncode == 0, res.stderr
    assert "by_value=-20275" in res.stdout.splitlines(), res.stdout


@pytest.mark.parametrize("how", [["--probe-mode=trap"], ["-D", "PD_RETURN_HIJACK=1"]],
                         ids=["trap", "hijack"])
@pytest.mark.parametrize("b", BUILDS[1::2], ids=[b.id for b in BUILDS[1::2]])
def test_traps_and_the_return_hijack_keep_the_writes(progs: Progs, cache: Path, b: Build,
                                                     how: list[str]) -> None:
    """A trapped probe's registers go back into the signal context; the return
    trampoline loads $return back."""
    exe = progs(b)
    res = run_pydyn(cache, "-g", *how, "-e", WRITES.format(exe=exe, keep=KEEP), "-c", str(exe))
    assert res.returncode == 0, res.stderr
    assert [ln for ln in res.stdout.splitlines() if not ln.startswith("read ")] == SEEN, \
        res.stdout


@pytest.mark.parametrize("b", [BUILDS[1], BUILDS[3]], ids=[BUILDS[1].id, BUILDS[3].id])
def test_a_bad_address_is_a_counted_error(progs: Progs, cache: Path, b: Build) -> None:
    exe = progs(b)
    script = (f'probe process("{exe}").function("touch") {{ @var("null_rec")->v = 5 }}\n'
              f'probe process("{exe}").function("touch") {{ @var("null_rec")->bf->c = 5 }}\n'
              f'probe process("{exe}").function("touch") {{ $r->next->l = 5 }}\n'
              f'function f() {{ @var("gscalar", "{exe}") = 1 }} probe begin {{ f() }}')
    res = run_pydyn(cache, "-g", *ERRORS_RUN_ON, "-e", script, "-c", str(exe))
    assert res.returncode == 1, res.stderr
    assert res.stdout.splitlines() == UNTOUCHED, res.stdout   # the program ran on
    assert re.search(r"ERROR: user memory write fault at 0x0 \(4 bytes\) near operator "
                     r"'@var' at <input>:1:", res.stderr), res.stderr
    assert re.search(r"ERROR: user memory read fault at 0x[0-9a-f]+ \([248] bytes\) near "
                     r"operator '@var' at <input>:2:", res.stderr), res.stderr
    assert re.search(r"ERROR: user memory write fault at 0x[0-9a-f]+ \([48] bytes\) near "
                     r"identifier '\$r' at <input>:3:", res.stderr), res.stderr
    # begin runs in the launcher, where the program is not loaded
    assert f"ERROR: @var: {exe} is not loaded in this process near operator '@var' at " \
        "<input>:4:" in res.stderr, res.stderr
    assert "Number of errors: 4" in res.stderr, res.stderr


@pytest.mark.parametrize(("probe", "stmt", "message"), [
    ("function(\"compute\")", "$x = 1",
     "write to target variable not permitted; need stap -g"),
    ("function(\"compute\")", "$x++", "Only the following assign operator is implemented on "
     "target variables: ="),
    ("function(\"compute\")", "$x += 2", "Only the following assign operator is implemented "
     "on target variables: ="),
    ("function(\"compute\").return", "$x = 1", "write to target variable not permitted in "
     ".return probes"),
    ("function(\"compute\")", "delete $x", "Only the following assign operator is "
     "implemented on target variables: ="),
    ("function(\"compute\")", "$$parms = \"\"", "cannot write to context variable"),
    ("function(\"compute\").return", "$$return = \"\"", "cannot write to context variable"),
    ("function(\"compute\")", "$return = 1", "'$return' is only available in function "
     ".return probes"),
    ("function(\"touch\")", "$r->bf = 1", "'struct bits' is being accessed instead of a "
     "member such as '->a'"),
    ("function(\"touch\")", "$r->arr = 1", "cannot write to array address"),
    ("function(\"touch\")", "@var(\"gpk\")->wide = 1", "a bitfield of 62 bits across "
     "more than 8 bytes is not supported"),
    ("function(\"touch\")", "$r$ = 1", "cannot write to pretty-printed variable"),
])
def test_stap_refusals(progs: Progs, cache: Path, probe: str, stmt: str,
                       message: str) -> None:
    exe = progs(BUILDS[1])
    script = f'probe process("{exe}").{probe} {{ {stmt} }}'
    guru = () if "need stap -g" in message else ("-g",)
    res = run_pydyn(cache, *guru, "-p2", "-e", script)
    assert res.returncode == 1, res.stderr
    first = res.stderr.splitlines()[0]
    assert first.startswith("<input>:1:") and message in first, res.stderr
    assert "Traceback" not in res.stderr


def test_cast_and_var_writes_need_guru_mode(progs: Progs, cache: Path) -> None:
    exe = progs(BUILDS[1])
    for expr, what in (('@var("global_rec")->v', "@var variable"),
                       (f'@cast($r, "struct rec", "{exe}")->v', "@cast context variable")):
        script = f'probe process("{exe}").function("touch") {{ {expr} = 1 }}'
        res = run_pydyn(cache, "-p2", "-e", script)
        assert res.returncode == 1 and f"write to {what} not permitted; need stap -g" in \
            res.stderr, res.stderr
