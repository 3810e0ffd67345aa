"""gcc's clones of a function (`walk.constprop.0`: a copy for constant arguments) are
the function to a script, as stap finds them by their DWARF name: `.function("walk")`
and its `.return` fire in each clone, ppfunc() says `walk`, and the parameters the
clone no longer receives read as the constants DWARF gives (m64, m32, -O3)."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest
from cbuild import PROGS, build_c, run_pydyn

SCRIPT = """global calls, ret
probe process("{exe}").function("walk") {{ calls[ppfunc(), $n, $k]++ }}
probe process("{exe}").function("walk").return {{ ret[$n] += $return }}
probe end {{
    foreach ([f, n+, k] in calls) printf("%s n=%d k=%d calls=%d ret=%d\\n", f, n, k,
                                         calls[f, n, k], ret[n])
}}
"""


@pytest.mark.parametrize("abi", ["m64", "m32"])
def test_constprop_clones_are_the_function(cache: Path, tmp_path: Path, abi: str) -> None:
    exe = build_c(PROGS / "clones.c", tmp_path / "clones", m32=abi == "m32", opt="-O3",
                  extra=("-g",))
    symbols = subprocess.run(["nm", str(exe)], capture_output=True, text=True).stdout
    if "walk.constprop" not in symbols:
        pytest.fail(f"gcc made no clone of walk: {symbols}")
    res = run_pydyn(cache, "-e", SCRIPT.format(exe=exe), "-c", f"{exe} 6")
    assert res.returncode == 0, res.stderr[-2000:]
    # a[i..] for i = 0, 1 alternately, three times each: (36 + 44) * 3 * 3 and (10 + 14) * 9
    assert res.stdout.splitlines() == [
        "s=936", "walk n=4 k=3 calls=6 ret=216", "walk n=8 k=3 calls=6 ret=720"], \
        res.stdout + res.stderr[-2000:]
