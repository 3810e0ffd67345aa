"""`process(P).plt("NAME")`: calls through the PLT, by the callee's name (globs;
`$$name` is the callee), on a real process: m64 and m32, -O0 and -O2, and the
IBT layout (`.plt.sec`, -fcf-protection) on m64."""

from __future__ import annotations

from pathlib import Path

import pytest
from cbuild import BUILDS, Build, build_c, run_pydyn

SRC = r"""
#include <stdio.h>
#include <stdlib.h>
int main(int argc, char **argv)
{
    for (int i = 0; i < 3; i++)
        puts(argv[0]);
    return argc > 5 ? abort(), 1 : 0;
}
"""
CASES = [(b, ()) for b in BUILDS] + [(BUILDS[1], ("-fcf-protection=full",))]


@pytest.mark.parametrize(("b", "flags"), CASES,
                         ids=[b.id + ("-ibt" if f else "") for b, f in CASES])
def test_plt_calls(tmp_path: Path, b: Build, flags: tuple[str, ...], cache: Path) -> None:
    (tmp_path / "p.c").write_text(SRC)
    exe = build_c(tmp_path / "p.c", tmp_path / "p", m32=b.m32, opt=b.opt, extra=flags)
    script = (f'global n probe process("{exe}").plt("pu*") {{ n[$$name, ppfunc()]++ }} '
              'probe end { foreach ([a, f] in n) printf("%s %s %d\\n", a, f, n[a, f]) }')
    res = run_pydyn(cache, "-e", script, "-c", str(exe), timeout=120)
    assert res.returncode == 0, res.stderr
    assert res.stdout.splitlines()[-1] == "puts puts 3", res.stdout
    res = run_pydyn(cache, "-e", f'probe process("{exe}").plt("nosuch") {{}}')
    assert res.returncode == 1 and "matches no PLT entry" in res.stderr
