"""Target variables through DWARF types in function probes: members through
pointers at any depth (`$n->next->nm->alias`), a struct inside a struct and
array elements (stap spells both `->`), arrays indexed by a script value,
`char[]` and `char *` read with user_string, bitfields (signed and unsigned),
an enum, a typedef chain, an anonymous union's members, a named union, `&`,
globals and statics, `@defined`, `.return` (implicit and explicit `@entry`),
a NULL dereference (a counted error, the program unharmed) and stap's errors
for members that do not exist or are not scalars.

tests/progs/dwarf_tvars.c at -O0 and -O2, m64 and m32; every value is checked
against what the program stores for round i.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from pathlib import Path

import pytest
from cbuild import BUILDS, ERRORS_RUN_ON, PROGS, Build, builder, run_pydyn

SRC = PROGS / "dwarf_tvars.c"
ROUNDS = 3
Progs = Callable[[Build], Path]


@pytest.fixture(scope="module")
def progs(tmp_path_factory: pytest.TempPathFactory) -> Progs:
    return builder(SRC, tmp_path_factory.mktemp("tvars"), "tv")


VALUES = """probe process("{exe}").function("visit") {{
  printf("v %d %d %d %d %d %d %d|%s|%s|%s|%d %d|%s|%d %d %d|%d %d|%d %d\\n",
    $n->a, $n->s, $n->flag, $n->level, $n->wide, $n->color, $n->total,
    user_string($n->nm->text), user_string($n->nm->alias), user_string($n->next->nm->alias),
    $n->arr[$i], $n->arr[3], user_string($n->names[1]->text),
    $n->as_int, $n->bytes[0], $n->u->h[0],
    $global_head->a, $counter_static, &$n->s - $n, $n->next->a)
}}
probe process("{exe}").function("visit").return {{
  printf("r %d %d %d\\n", $return, $n->a, @entry($n->arr[2]))
}}
"""


def expected(i: int) -> list[str]:
    color = {0: 1, 1: 2}.get(i, 7)
    return [f"v {100 + i} {-2 - i} {i & 1} {-3 + i} {1000000 + i} {color} {5000000 * (i + 1)}"
            f"|node-{i}|alias|t-alias|{11 * i} {10 * i + 3}|second-{i}"
            f"|{0x00020304 + i} {4 + i} {-1 - i}|{100 + i} {40 + i}|4 -9",
            f"r {141 + 3 * i} {100 + i} {10 * i + 2}"]


@pytest.mark.parametrize("b", BUILDS, ids=[b.id for b in BUILDS])
def test_values_exact(progs: Progs, cache: Path, b: Build) -> None:
    exe = progs(b)
    res = run_pydyn(cache, "-e", VALUES.format(exe=exe), "-c", f"{exe} {ROUNDS}")
    assert res.returncode == 0, res.stderr
    lines = [ln for ln in res.stdout.splitlines() if ln[:2] in ("v ", "r ")]
    assert lines == [ln for i in range(ROUNDS) for ln in expected(i)], res.stdout
    assert f"sum={sum(141 + 3 * i for i in range(ROUNDS))}" in res.stdout
    assert "ERROR" not in res.stderr and "WARNING" not in res.stderr, res.stderr


@pytest.mark.parametrize("b", BUILDS[1::2], ids=[b.id for b in BUILDS[1::2]])
def test_null_dereference_is_a_counted_error(progs: Progs, cache: Path, b: Build) -> None:
    exe = progs(b)
    # tail.next is NULL: $n->next->next->a reads address 0 + offsetof(a)
    script = (f'probe process("{exe}").function("visit") {{ '
              'printf("d %d %d\\n", @defined($n->nope), @defined($n->next->a)); '
              'println($n->next->next->a) }')
    res = run_pydyn(cache, *ERRORS_RUN_ON, "-e", script, "-c", f"{exe} {ROUNDS}")
    assert res.returncode == 1, res.stderr   # as stap: a run with errors fails
    assert res.stdout.count("d 0 1\n") == ROUNDS, res.stdout
    assert "sum=" in res.stdout   # the program ran to its end
    faults = re.findall(r"ERROR: user memory read fault at 0x0 \(4 bytes\) near identifier "
                        r"'\$n' at <input>:1:\d+", res.stderr)
    assert len(faults) == ROUNDS, res.stderr
    assert f"Number of errors: {ROUNDS}" in res.stderr


@pytest.mark.parametrize(("expr", "message", "caret"), [
    ("$n->nme->text", "unable to find member 'nme' for struct node (alternatives: nm, names)",
     "^~~"),
    ("$n->nm", "'struct name' is being accessed instead of a member such as '->text'", "^~"),
    ("$n->a->b", "invalid access '->b' vs. int", "^"),
    ("$n->a[1]", "invalid access '[...]' vs. int", "^"),
    ("$nosuch", "has no parameter 'nosuch' (parameters: $n $i)",
     "^~~~~~~"),
])
def test_errors_name_the_component(progs: Progs, cache: Path, expr: str, message: str,
                                   caret: str) -> None:
    exe = progs(BUILDS[1])
    script = f'probe process("{exe}").function("visit") {{ println({expr}) }}'
    res = run_pydyn(cache, "-e", script, "-c", f"{exe} 1")
    assert res.returncode == 1
    err = res.stderr.splitlines()
    assert err[0].startswith("<input>:1:") and message in err[0], res.stderr
    assert err[2].strip() == caret and "Traceback" not in res.stderr


PRETTY = """probe process("{exe}").function("visit") {{
  printf("P1 %s\\n", $n$)
  printf("P2 %s\\n", $n$$)
  printf("P3 %s\\n", $n->nm$)
  printf("P4 %s\\n", $$parms)
  printf("P5 %s\\n", $$parms$)
  printf("P6 %s|%s\\n", $$locals, $$vars)
}}
"""


@pytest.mark.parametrize("b", BUILDS, ids=[b.id for b in BUILDS])
def test_pretty_printing_as_stap(progs: Progs, cache: Path, b: Build) -> None:
    exe = progs(b)
    res = run_pydyn(cache, "-e", PRETTY.format(exe=exe), "-c", f"{exe} 2")
    assert res.returncode == 0, res.stderr
    got = {ln[:2]: ln[3:] for ln in res.stdout.splitlines() if ln[:1] == "P"}   # the last hit
    i = 1
    ptr = r"0x[0-9a-f]+"
    shallow = (f".a={100 + i}, .s={-2 - i}, .flag=1, .level={-3 + i}, .wide={1000000 + i}, "
               f".color=2, .total={5000000 * (i + 1)}, ")
    assert re.fullmatch(re.escape("{" + shallow + ".nm={...}, .next=") + ptr + re.escape(
        ", .arr=[...], .names=[...], <union>={...}, .u={...}}"), got["P1"]), got
    bytes_ = "".join(f"\\{b:03o}" for b in (0x04 + i, 0x03, 0x02))
    assert re.fullmatch(re.escape("{" + shallow + f'.nm={{.text="node-{i}", .alias="alias"}}'
                                  ", .next=") + ptr + re.escape(
        f', .arr=[{10 * i}, ...], .names=[{{.text="", .alias=0x0}}, ...], '
        f'<union>={{.as_int={0x00020304 + i}, .bytes="{bytes_}"}}, '
        f".u={{.l={-1 - i}, .h=[{-1 - i}, ...]}}}}"), got["P2"]), got["P2"]
    assert got["P3"] == '{.text=[...], .alias="alias"}'
    assert re.fullmatch(f"n={ptr} i=0x1", got["P4"]), got
    assert got["P5"] == "n=" + got["P1"] + " i=1"
    assert got["P6"] == "|" + got["P4"]   # visit has no locals


CASTS = """probe process("{exe}").function("visit") {{
  printf("c %d|%s|%d|%d|%s|%d %d\\n", @cast($n, "struct node")->a,
    user_string(@cast($n, "struct node", "{exe}")->nm->text), @var("counter_static"),
    @var("global_head@dwarf_tvars.c")->arr[$i],
    user_string(@cast(@var("global_head"), "struct node")->next->nm->alias),
    @defined(@cast($n, "struct node")->zz), @defined(@var("global_head")->s))
}}
"""


@pytest.mark.parametrize("b", BUILDS, ids=[b.id for b in BUILDS])
def test_cast_and_var(progs: Progs, cache: Path, b: Build) -> None:
    exe = progs(b)
    res = run_pydyn(cache, "-e", CASTS.format(exe=exe), "-c", f"{exe} {ROUNDS}")
    assert res.returncode == 0, res.stderr
    assert [ln for ln in res.stdout.splitlines() if ln.startswith("c ")] == [
        f"c {100 + i}|node-{i}|{40 + i}|{11 * i}|t-alias|0 1" for i in range(ROUNDS)]


def test_cast_of_an_unknown_type(progs: Progs, cache: Path) -> None:
    exe = progs(BUILDS[1])
    script = f'probe process("{exe}").function("visit") {{ println(@cast($n, "struct nope")->a) }}'
    res = run_pydyn(cache, "-e", script, "-c", f"{exe} 1")
    assert res.returncode == 1
    assert f"error: type 'struct nope' not found in the DWARF of {exe}" in res.stderr


def test_skip_badvars(progs: Progs, cache: Path) -> None:
    """--skip-badvars: a variable that cannot be read is 0, with a warning naming it;
    the others are read as usual."""
    exe = progs(BUILDS[1])
    script = (f'probe process("{exe}").function("visit") {{ '
              'printf("b %d %d %d\\n", $nosuch, $n->nope, $n->a) }')
    res = run_pydyn(cache, "-e", script, "-c", f"{exe} 2")
    assert res.returncode == 1 and "has no parameter 'nosuch'" in res.stderr
    res = run_pydyn(cache, "--skip-badvars", "-e", script, "-c", f"{exe} 2")
    assert res.returncode == 0, res.stderr
    assert [ln for ln in res.stdout.splitlines() if ln.startswith("b ")] == [
        "b 0 0 100", "b 0 0 101"]
    warnings = [ln for ln in res.stderr.splitlines() if "--skip-badvars" in ln]
    assert len(warnings) == 2 and "unable to find member 'nope'" in warnings[1], res.stderr
