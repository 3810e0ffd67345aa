"""pp() and pn() of function, return, statement, label, wildcard, library and mark probes
name the point each site resolved to, as stap's derived probes do (tapsets.cxx:
`process("/abs").function("NAME@FILE:LINE")`, a mark as `.statement(0xPC)`), and
`$$vars`/`$$locals` at a statement in a nested block list the innermost scope first;
on a real process, m64 and m32, -O0 and -O2."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from cbuild import BUILDS, Build, build_c, have_sdt_h, mark_pc, run_pydyn

MAIN = """#include <stdio.h>
#include <stdlib.h>
#include <sys/sdt.h>

int lib_twice(int x);

__attribute__((noinline, noclone)) int scale(int n, int k)
{
    int total = 0;
    for (int i = 0; i < n; i++) {
        int sq = i * k;
        if (sq > 2) {
            int big = sq * 2;
            total += big;   /* INNER */
        }
        total += sq;
    }
    if (total > 1000)
        goto out;
    total++;
out:                        /* LABEL */
    return total;
}

int main(int argc, char **argv)
{
    int n = argc > 1 ? atoi(argv[1]) : 3;   /* CALL */
    STAP_PROBE1(pptest, tick, n);
    printf("r=%d\\n", scale(n, 2) + lib_twice(n));
    return 0;
}
"""
LIB = "int lib_twice(int x)\n{\n    return 2 * x;\n}\n"


def _line(text: str, marker: str) -> int:
    return next(i for i, ln in enumerate(text.splitlines(), 1) if marker in ln)


SCALE, MAIN_AT = _line(MAIN, "int scale("), _line(MAIN, "int main(")
INNER, LABEL = _line(MAIN, "/* INNER */"), _line(MAIN, "/* LABEL */")
CALL = _line(MAIN, "/* CALL */")


def _build(tmp_path: Path, b: Build) -> tuple[Path, Path, Path, Path]:
    if not have_sdt_h():
        pytest.skip("no <sys/sdt.h>")
    src, lib_src = tmp_path / "pp.c", tmp_path / "pplib.c"
    src.write_text(MAIN)
    lib_src.write_text(LIB)
    lib = build_c(lib_src, tmp_path / "libpp.so", m32=b.m32, opt=b.opt,
                  extra=("-g", "-shared", "-fPIC"))
    exe = build_c(src, tmp_path / "pp", m32=b.m32, opt=b.opt,
                  extra=("-g", f"-L{tmp_path}", "-lpp", f"-Wl,-rpath,{tmp_path}"))
    return exe, src, lib, lib_src


@pytest.mark.parametrize("b", BUILDS, ids=[b.id for b in BUILDS])
def test_pp_and_pn(tmp_path: Path, cache: Path, b: Build) -> None:
    exe, src, lib, lib_src = _build(tmp_path, b)
    script = f'''
probe process("{exe}").function("scale") {{ printf("entry %s|%s\\n", pp(), pn()) }}
probe process("{exe}").function("scale").return {{ printf("return %s|%s\\n", pp(), pn()) }}
probe process("{exe}").function("scale").call {{ printf("call %s\\n", pp()) }}
probe process("{exe}").statement("main@pp.c:{CALL}") {{ printf("stmt %s|%s\\n", pp(), pn()) }}
probe process("{exe}").function("[ms]*") {{ printf("wild %s|%s\\n", pp(), pn()) }}
probe process("{exe}").library("{lib}").function("lib_*") {{ printf("lib %s|%s\\n", pp(), pn()) }}
probe process("{exe}").mark("t*") {{ printf("mark %s|%s\\n", pp(), pn()) }}
'''
    res = run_pydyn(cache, "-e", script, "-c", f"{exe} 3")
    assert res.returncode == 0, res.stderr
    scale = f'process("{exe}").function("scale@{src}:{SCALE}")'
    main = f'process("{exe}").function("main@{src}:{MAIN_AT}")'
    lib_fn = f'function("lib_twice@{lib_src}:1")'
    mark = f'process("{exe}").statement({mark_pc(exe, "tick"):#x})'
    assert sorted(ln for ln in res.stdout.splitlines() if not ln.startswith("r=")) == sorted([
        f"entry {scale}|{scale}",
        f"return {scale}.return|{scale}.return",
        f"call {scale}.call",
        f'stmt process("{exe}").statement("main@{src}:{CALL}")|'
        f'process("{exe}").statement("main@{src}:{CALL}")',
        f"wild {main}|{main}",
        f"wild {scale}|{scale}",
        f'lib process("{lib}").{lib_fn}|process("{exe}").library("{lib}").{lib_fn}',
        f'mark {mark}|process("{exe}").mark("tick")',
    ]), res.stdout
    # -l lists each site by its pn(), -p2 by its pp(); a function DWARF does not
    # describe (the C runtime's _start) is its bare name
    listed = run_pydyn(cache, "-l", f'process("{exe}").function("[ms]*")')
    assert listed.stdout.splitlines() == [main, scale], listed.stderr
    listed = run_pydyn(cache, "-l", f'process("{exe}").library("{lib}").function("l*")')
    assert listed.stdout.splitlines() == [f'process("{exe}").library("{lib}").{lib_fn}']
    elaborated = run_pydyn(cache, "-u", "-p2", "-e", f'probe process("{exe}").function("_start"), '
                           f'process("{exe}").mark("tick") {{}}')
    assert elaborated.returncode == 0, elaborated.stderr
    assert re.search(rf'^process\("{re.escape(str(exe))}"\)\.function\("_start"\) /\* pc=',
                     elaborated.stdout, re.M), elaborated.stdout
    assert f"{mark} /* pc=" in elaborated.stdout, elaborated.stdout


@pytest.mark.parametrize("b", [b for b in BUILDS if b.opt == "-O0"],
                         ids=[b.id for b in BUILDS if b.opt == "-O0"])
def test_label_and_nested_block_vars(tmp_path: Path, cache: Path, b: Build) -> None:
    exe, src, _, _ = _build(tmp_path, b)
    script = f'''
probe process("{exe}").statement("scale@pp.c:{INNER}") {{
    printf("vars %s\\nlocals %s\\nparms %s\\n", $$vars, $$locals, $$parms)
}}
probe process("{exe}").function("scale").label("o*") {{ printf("label %s|%s\\n", pp(), pn()) }}
'''
    res = run_pydyn(cache, "-e", script, "-c", f"{exe} 3")
    assert res.returncode == 0, res.stderr
    # n=3, k=2: the inner block runs once, at i=2 (sq=4, big=8), with total=0+0+2
    assert [ln for ln in res.stdout.splitlines() if not ln.startswith("r=")] == [
        "vars big=0x8 sq=0x4 i=0x2 n=0x3 k=0x2 total=0x2",
        "locals big=0x8 sq=0x4 i=0x2 total=0x2",
        "parms n=0x3 k=0x2",
        # stap names a label's probe by the function at the label's line
        f'label process("{exe}").function("scale@{src}:{LABEL}")|'
        f'process("{exe}").function("scale@{src}:{LABEL}").label("out")',
    ], res.stdout
    listed = run_pydyn(cache, "-L", f'process("{exe}").statement("scale@pp.c:{INNER}")')
    assert listed.stdout.splitlines() == [
        f'process("{exe}").statement("scale@{src}:{INNER}") $big:int $sq:int $i:int $n:int '
        "$k:int $total:int"], listed.stderr
