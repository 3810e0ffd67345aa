"""`.function("F").callee("G")` fires in G only when F called it (the return address at
G's entry is one of F's DWARF call sites), `.callees(N)` in every function F reaches in N
calls, each level checked up the stack; m64 and m32 at -O2; without call sites (-O0),
a clear error."""

from __future__ import annotations

from pathlib import Path

import pytest
from cbuild import PROGS, build_c, run_pydyn

SCRIPT = """global from_top, from_other, any, v_top, v_other, callees, names
probe process("{exe}").function("top").callee("leaf") {{
    from_top++; v_top += $v; names[pp(), pn()]++
}}
probe process("{exe}").function("other").callee("le*").call {{ from_other++; v_other += $v }}
probe process("{exe}").function("leaf") {{ any++ }}
probe process("{exe}").function("main").callees {{ callees[ppfunc()]++ }}
probe end {{
    printf("top=%d/%d other=%d/%d any=%d\\n", from_top, v_top, from_other, v_other, any)
    foreach (f+ in callees) printf("main calls %s %d\\n", f, callees[f])
    foreach ([a, b] in names) printf("%s|%s %d\\n", a, b, names[a, b])
}}
"""
LEAF = next(i for i, ln in enumerate((PROGS / "callees.c").read_text().splitlines(), 1)
            if "long leaf(" in ln)


@pytest.mark.parametrize("abi", ["m64", "m32"])
def test_a_callee_fires_for_its_caller_only(cache: Path, tmp_path: Path, abi: str) -> None:
    exe = build_c(PROGS / "callees.c", tmp_path / "callees", m32=abi == "m32", opt="-O2",
                  extra=("-g",))
    res = run_pydyn(cache, "-e", SCRIPT.format(exe=exe), "-c", f"{exe} 5")
    assert res.returncode == 0, res.stderr
    # leaf(i) from top, leaf(i + 1) from other, leaf(i) from main, i = 0..4
    # (the program's own line and the script's come through two pipes: any order)
    # pp() names the callee by its declaration, as stap's; pn() keeps the caller written
    leaf = f'function("leaf@{PROGS / "callees.c"}:{LEAF}")'
    assert sorted(res.stdout.splitlines()) == sorted([
        "main calls leaf 5", "main calls top 5", "s=75", "top=5/10 other=5/15 any=15",
        f'process("{exe}").{leaf}|process("{exe}").function("top").'
        f'callee("leaf@{PROGS / "callees.c"}:{LEAF}") 5']), res.stdout + res.stderr


def test_callee_errors(cache: Path, tmp_path: Path) -> None:
    exe = build_c(PROGS / "callees.c", tmp_path / "callees0", opt="-O0", extra=("-g",))
    res = run_pydyn(cache, "-p2", "-e", f'probe process("{exe}").function("top")'
                    '.callee("leaf") { }')
    assert res.returncode == 1
    assert 'function("top").callee("leaf") matches no call' in res.stderr, res.stderr
    assert "DWARF call sites" in res.stderr and "Traceback" not in res.stderr
    res = run_pydyn(cache, "-p2", "-e", f'probe process("{exe}").function("top")'
                    '.callees(0) { }')
    assert res.returncode == 1 and "a depth of 1 or more" in res.stderr, res.stderr


@pytest.mark.parametrize("abi", ["m64", "m32"])
def test_callees_n_levels_deep(cache: Path, tmp_path: Path, abi: str) -> None:
    """Each level's calls are checked up the stack: leaf is reached from main directly,
    through top, and (three deep) through top and other."""
    exe = build_c(PROGS / "callees.c", tmp_path / "callees", m32=abi == "m32", opt="-O2",
                  extra=("-g",))
    for depth, leaf in ((1, 5), (2, 10), (3, 15)):
        script = (f'global d\nprobe process("{exe}").function("main").callees({depth}) '
                  '{ d[ppfunc()]++ }\nprobe end { foreach (f+ in d) printf("%s %d\\n", f, '
                  'd[f]) }\n')
        res = run_pydyn(cache, "-e", script, "-c", f"{exe} 5")
        assert res.returncode == 0, res.stderr
        want = [f"leaf {leaf}", "s=75", "top 5"] + (["other 5"] if depth > 1 else [])
        assert sorted(res.stdout.splitlines()) == sorted(want), (depth, res.stdout)
