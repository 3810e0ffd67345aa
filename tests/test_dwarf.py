"""DWARF function probes: `function("NAME@file.c")` and globs in both
parts, parameters by name (`$a`, `$name`), `$$parms`, `-L` with parameter types,
on tests/progs/dwarf_params.c built with -g at -O0 and -O2, m64 and m32.

Values are checked exactly against what the program passes.  At -O2 the
parameters are where DWARF's location lists say at the entry; at -O0 on x86-64
DWARF only knows the prologue's stack slots, so pydyn uses the ABI registers
(`-L -v` says `(ABI)`); a parameter neither can give (`z` after a struct passed
in registers) is a translate-time error naming it.
"""

from __future__ import annotations

import functools
import re
import subprocess
from collections.abc import Callable
from pathlib import Path

import pytest
from cbuild import BUILDS, PROGS, Build, build_c, run_pydyn

from pydyn.launcher.elf.dwarf import get_dwarf
from pydyn.launcher.errors import TargetError

SRC = PROGS / "dwarf_params.c"


def decl_line(func: str) -> int:
    """The line of `func`'s definition in the source, as DWARF records it."""
    for i, line in enumerate(SRC.read_text().splitlines(), 1):
        if re.match(rf"PROBED \w+ \*?{func}\(|int {func}\(", line):
            return i
    raise AssertionError(func)


Progs = Callable[[Build], Path]
NODWARF = Build("m64-O2-nodwarf", False, "-O2")
M64_O2 = Build("m64-O2", False, "-O2")


@pytest.fixture(scope="module")
def progs(tmp_path_factory: pytest.TempPathFactory) -> Progs:
    """`progs(build)`: the test program in that flavour, built once (an
    unavailable -m32 toolchain skips the test)."""
    tmp = tmp_path_factory.mktemp("dwarf")

    @functools.cache
    def one(b: Build) -> Path:
        debug = () if b is NODWARF else ("-g",)
        return build_c(SRC, tmp / f"dp-{b.id}", m32=b.m32, opt=b.opt, extra=debug)
    return one


@pytest.mark.parametrize("b", BUILDS, ids=[b.id for b in BUILDS])
def test_dwarf_functions_and_locations(progs: Progs, cache: Path, b: Build) -> None:
    info = get_dwarf(str(progs(b)))
    funcs = {f.name: f for f in info.functions}
    assert {"add", "fill", "mixed", "show", "shout", "main"} <= set(funcs)
    add = funcs["add"]
    assert add.decl_file == str(SRC) and add.decl_line == decl_line("add")
    assert [(p.name, p.type_name, p.size, p.signed) for p in add.params] == [
        ("a", "int", 4, True), ("b", "long int", 8 if not b.m32 else 4, True)]
    fill = funcs["fill"]
    assert [p.type_name for p in fill.params] == ["char*", "short unsigned int", "char const*"]
    locs = {p.name: p.location.text if p.location else None for p in add.params}
    if b.m32:   # the caller's stack, above the return address
        assert locs == {"a": "4(%esp)", "b": "8(%esp)"}
    else:
        assert locs == {"a": "%rdi", "b": "%rsi"}
    # -O0 x86-64: DWARF has the prologue's slots only; the ABI gives the entry value
    assert [p.via_abi for p in add.params] == [b.id == "m64-O0"] * 2
    z = funcs["mixed"].param("z")
    assert z is not None
    assert (z.location is None) == (b.id == "m64-O0"), z


SCRIPT = """global n
probe process("{exe}").function("add") {{ printf("add %d %d|%s\\n", $a, $b, $$parms) }}
probe process("{exe}").function("fill") {{
  printf("fill %d %s|%s\\n", $n, user_string($name), $$parms) }}
probe process("{exe}").function("main") {{
  printf("main %d %s\\n", $argc, user_string(user_long($argv))) }}
probe process("{exe}").function("mixed") {{ printf("mixed %s|%s\\n", {z}, $$parms) }}
probe process("{exe}").function("add@dwarf_params.c") {{ n["add"]++ }}
probe process("{exe}").function("*@*/progs/dwarf_params.c") {{ n["all"]++ }}
probe process("{exe}").function("*@dwarf_params.c:{fill_line}") {{ n[ppfunc()]++ }}
probe process("{exe}").function("_start"), process("{exe}").function("shout") {{
  printf("p[%s]\\n", $$parms) }}
probe end {{ foreach (k+ in n) printf("%s=%d\\n", k, n[k]) }}
"""


def hexl(v: int) -> str:
    return f"{v & (2**64 - 1):#x}"


@pytest.mark.parametrize("b", BUILDS, ids=[b.id for b in BUILDS])
def test_parameter_values_exact(progs: Progs, cache: Path, b: Build) -> None:
    exe = progs(b)
    # at -O0 on x86-64 $z cannot be read (test_param_after_a_struct)
    z = '"-"' if b.id == "m64-O0" else "sprint($z)"
    script = SCRIPT.format(exe=exe, z=z, fill_line=decl_line("fill"))
    res = run_pydyn(cache, "-e", script, "-c", f"{exe} 4")
    assert res.returncode == 0, res.stderr
    out = res.stdout.splitlines()
    adds = [ln for ln in out if ln.startswith("add ")]
    # add(i - 1, 1000 * i): $a and $b exactly; $$parms as stap prints it
    assert adds == [f"add {i - 1} {1000 * i}|a={hexl(i - 1)} b={hexl(1000 * i)}"
                    for i in range(4)], res.stdout
    fills = [ln for ln in out if ln.startswith("fill ")]
    assert len(fills) == 1
    m = re.fullmatch(r"fill 7 hello world\|buf=(0x[0-9a-f]+) n=0x7 name=(0x[0-9a-f]+)",
                     fills[0])
    assert m, fills
    assert f"main 2 {exe}" in out
    # mixed(1.5, {2, 3}, 4): a double is readable only from the i386 stack (IEEE bits);
    # a struct is "{...}" in $$parms, as stap prints it
    x = "0x3ff8000000000000" if b.m32 else "?"
    want = {"m64-O0": "mixed -|x=? p={...} z=?"}.get(b.id, f"mixed 4|x={x} p={{...}} z=0x4")
    assert want in out, res.stdout
    # $$parms of a probe that also covers a function without DWARF (_start)
    assert "p[]" in out and any(re.fullmatch(r"p\[s=0x[0-9a-f]+\]", ln) for ln in out), out
    # NAME@FILE, globs in both parts, :LINE; 4 add + fill + mixed + show + shout + main
    assert out[-3:] == ["add=4", "all=9", "fill=1"], res.stdout
    assert "total=6012 buf=hello  len=6" in res.stdout   # the program is unchanged
    assert "WARNING" not in res.stderr, res.stderr
    if b.id == "m64-O2":   # a cache hit reads no DWARF (no ELF parse at all)
        again = run_pydyn(cache, "-e", script, "-c", f"{exe} 4",
                          env={"PYDYN_DEBUG_NO_ELF": "1"})
        assert again.returncode == 0, again.stderr
        assert [ln for ln in again.stdout.splitlines() if ln.startswith("add ")] == adds


def test_param_after_a_struct(progs: Progs, cache: Path) -> None:
    exe = progs(Build("m64-O0", False, "-O0"))
    script = f'probe process("{exe}").function("mixed") {{ println($z) }}'
    res = run_pydyn(cache, "-p3", "-e", script)
    assert res.returncode == 1 and res.stdout == ""
    first = res.stderr.splitlines()[0]
    assert first == (f"<input>:1:{script.index('$z') + 1}: error: '$z': {exe}: parameter "
                     f"'z' of mixed@{SRC}:{decl_line('mixed')} cannot be read at the "
                     "entry: in the stack frame the prologue builds, not yet at the "
                     "entry"), res.stderr


def listing(b: Build, exe: Path) -> list[str]:
    def line(func: str, params: str) -> str:
        return (f'process("{exe}").function("{func}@{SRC}:{decl_line(func)}")'
                + (f" {params}" if params else ""))
    return [
        line("add", "$a:int $b:long int"),
        line("fill", "$buf:char* $n:short unsigned int $name:char const*"),
        # stap's -L adds the locals DWARF locates at the entry: at -O2 the stack ones
        line("main", "$argc:int $argv:char** " + (
            "$n:int $total:long int $buf:char[] $len:int $pr:struct pair $v:int $word:char[]"
            if b.opt == "-O0" else "$buf:char[] $v:int $word:char[]")),
        line("mixed", "$x:double $p:struct pair $z:long int"),
        line("shout", "$s:char*"),
        line("show", "$p:int*"),
    ]


@pytest.mark.parametrize("b", BUILDS, ids=[b.id for b in BUILDS])
def test_listing_golden(progs: Progs, cache: Path, b: Build) -> None:
    exe = progs(b)
    res = run_pydyn(cache, "-L", f'process("{exe}").function("*@dwarf_params.c")')
    assert res.returncode == 0, res.stderr
    assert res.stdout.splitlines() == listing(b, exe)
    res = run_pydyn(cache, "-L", f'process("{exe}").function("add").return')
    assert res.stdout.splitlines() == [
        f'process("{exe}").function("add@{SRC}:{decl_line("add")}").return $return:long']
    res = run_pydyn(cache, "-L", "-v", f'process("{exe}").function("add")')
    where = {"m64-O0": "a=%rdi(ABI) b=%rsi(ABI)", "m64-O2": "a=%rdi b=%rsi"}.get(
        b.id, "a=4(%esp) b=8(%esp)")
    assert res.stdout.endswith(f' locations="{where}"\n'), res.stdout
    # functions without DWARF (the C runtime's) are listed by their symbol name
    res = run_pydyn(cache, "-l", f'process("{exe}").function("_start")')
    assert res.stdout == f'process("{exe}").function("_start")\n'


def test_without_dwarf(progs: Progs, cache: Path) -> None:
    exe = progs(NODWARF)
    with pytest.raises(TargetError, match="has no DWARF debug information"):
        get_dwarf(str(exe))
    for script, col in [
        (f'probe process("{exe}").function("add@dwarf_params.c") {{ }}', 7),
        (f'probe process("{exe}").function("add") {{ println($a) }}', 0),
    ]:
        res = run_pydyn(cache, "-e", script)
        assert res.returncode == 1 and res.stdout == "" and "Traceback" not in res.stderr
        first = res.stderr.splitlines()[0]
        assert f"{exe}: has no DWARF debug information (.debug_info); rebuild it with -g" \
            in first, res.stderr
        assert first.startswith(f"<input>:1:{col or script.index('$a') + 1}: error: ")


@pytest.mark.parametrize("script, message", [
    ('probe process("{exe}").function("add") {{ println($nope) }}',
     "'$nope': {exe}: function add@{src}:{line} has no parameter 'nope' "
     "(parameters: $a $b)"),
    ('probe process("{exe}").function("add"), process("{exe}").function("add").return '
     '{{ println($a) }}', "'$a' in a probe on both entries and returns"),
    ('probe process("{exe}").function("add").return {{ println($$parms) }}',
     "'$$parms' is not available in .return probes"),
    ('probe process("{exe}").function("mixed") {{ println($p) }}',
     "'$p': {exe}: 'struct pair' is being accessed instead of a member of parameter 'p'"),
    ('probe process("{exe}").function("add@dwarf_params.c:x") {{ }}', "bad line number 'x'"),
])
def test_bad_parameter_uses(progs: Progs, cache: Path, script: str,
                            message: str) -> None:
    exe = progs(M64_O2)
    res = run_pydyn(cache, "-e", script.format(exe=exe))
    assert res.returncode == 1 and res.stdout == "" and "Traceback" not in res.stderr
    want = message.format(exe=exe, src=SRC, line=decl_line("add"), mline=decl_line("mixed"))
    assert want in res.stderr.splitlines()[0], res.stderr


def fib_entry_sum(n: int) -> tuple[int, int]:
    """(calls, sum of the argument over all calls) of the program's recursive fib(n)."""
    if n < 2:
        return 1, n
    c1, s1 = fib_entry_sum(n - 1)
    c2, s2 = fib_entry_sum(n - 2)
    return 1 + c1 + c2, n + s1 + s2


ENTRY = """global c, s, bad, dc, dbad, ar, abad
probe process("{rec}").function("fib").return {{
  c++; s += @entry($n); if (@entry($n) < 2 && $return != @entry($n)) bad++ }}
probe process("{rec}").function("depth").return {{ dc++; if ($return != $n) dbad++ }}
probe process("{jmp}").function("dive").return {{ println(@entry($n)) }}
probe process("{jmp}").function("after").return {{
  ar++; if ($return != @entry($x) + 1 || @entry($arg1) != $x) abad++ }}
probe end {{ printf("c=%d s=%d bad=%d dc=%d dbad=%d ar=%d abad=%d\\n", c, s, bad, dc, dbad,
                    ar, abad) }}
"""


@pytest.mark.parametrize("b", BUILDS, ids=[b.id for b in BUILDS])
def test_entry_values_in_return_probes(progs: Progs, cache: Path, tmp_path: Path,
                                       b: Build) -> None:
    progs(b)
    rec = build_c(PROGS / "func_rec.c", tmp_path / "rec", m32=b.m32, opt=b.opt, extra=("-g",))
    jmp = build_c(PROGS / "func_jmp.c", tmp_path / "jmp", m32=b.m32, opt=b.opt, extra=("-g",))
    check_entry_session(run_pydyn(cache, "-v", "-e", ENTRY.format(rec=rec, jmp=jmp), "-c",
                                  f"sh -c '{rec} 15 10000; {jmp}; echo status=$?'"))


def check_entry_session(res: subprocess.CompletedProcess[str]) -> None:
    """ENTRY's session on `rec 15 10000; jmp` (also test_aarch64_functions.py)."""
    assert res.returncode == 0, res.stderr
    calls, total = fib_entry_sum(15)
    out = res.stdout.splitlines()
    assert "fib(15)=610 s=40 depth=10000" in out and "s=6" in out and "status=4" in out
    # recursion 10,000 deep, each return with its own entry's value ($x in a .return
    # probe is its value at the entry, as in stap); the 18 dive
    # frames longjmp skipped never return (skipped), and their values never leak
    # into after()'s returns
    assert f"c={calls} s={total} bad=0 dc=10001 dbad=0 ar=3 abad=0" in out, res.stdout
    # the hijack counts the return probes of the 18 dive frames longjmp skipped as
    # skipped; at patched exits (-v names them) those calls never return: nothing to count
    if re.search(r"returns of dive@0x[0-9a-f]+: exits patched", res.stderr):
        assert "skipped probes" not in res.stderr, res.stderr
    else:
        assert "skipped probes: 18" in res.stderr, res.stderr


@pytest.mark.parametrize("script, message", [
    ('probe process("{exe}").function("add") {{ println(@entry($a)) }}',
     "@entry is only available in function .return probes"),
    ('probe process("{exe}").function("add").return {{ println(@entry(@entry($a))) }}',
     "@entry is only available in function .return probes"),
    ('probe process("{exe}").function("add").return {{ println(@entry(execname())) }}',
     "@entry of a string is not supported: only long values"),
])
def test_bad_entry(progs: Progs, cache: Path, script: str, message: str) -> None:
    res = run_pydyn(cache, "-p3", "-e", script.format(exe=progs(M64_O2)))
    assert res.returncode == 1 and res.stdout == "" and "Traceback" not in res.stderr
    assert res.stderr.splitlines()[0].endswith(f"error: {message}"), res.stderr
