"""`.function("*").exported`: only the functions a library's `.dynsym` exports
(not its static or hidden ones), on a real process, m64 and m32, -O0 and -O2."""

from __future__ import annotations

from pathlib import Path

import pytest
from cbuild import BUILDS, PROGS, Build, build_c, run_pydyn

MAIN = """#include <stdio.h>
int api_one(int); int api_two(int);
int main(void) { printf("r=%d\\n", api_one(1) + api_two(2)); return 0; }
"""


@pytest.mark.parametrize("b", BUILDS, ids=[b.id for b in BUILDS])
def test_exported_only(tmp_path: Path, b: Build, cache: Path) -> None:
    lib = build_c(PROGS / "exported_lib.c", tmp_path / "libexp.so", m32=b.m32, opt=b.opt,
                  extra=("-g", "-shared", "-fPIC"))
    (tmp_path / "main.c").write_text(MAIN)
    exe = build_c(tmp_path / "main.c", tmp_path / "main", m32=b.m32, opt=b.opt,
                  extra=(f"-L{tmp_path}", "-lexp", f"-Wl,-rpath,{tmp_path}"))
    script = (f'global n probe process("{lib}").function("*").exported {{ n[ppfunc()]++ }} '
              'probe end { foreach (k+ in n) printf("%s=%d\\n", k, n[k]) }')
    res = run_pydyn(cache, "-e", script, "-c", str(exe), timeout=120)
    assert res.returncode == 0, res.stderr
    assert "r=12" in res.stdout
    assert [ln for ln in res.stdout.splitlines() if "=" in ln and not ln.startswith("r=")] \
        == ["api_one=2", "api_two=1"], res.stdout
    # without .exported the hidden and static ones are probed too
    res = run_pydyn(cache, "-l", f'process("{lib}").function("*")')
    assert sum("internal@" in ln or "helper@" in ln for ln in res.stdout.splitlines()) == 2
