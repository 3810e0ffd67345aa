"""`.function("NAME").inline`: a probe at each copy the compiler inlined, with the
copy's own parameters ($k is a constant in one copy, in a register in another: its
location lists, location views included), m64 and m32, -O0 and -O2.  `.function`
alone keeps to the out-of-line copy, and `.inline` matching nothing is an error."""

from __future__ import annotations

from pathlib import Path

import pytest
from cbuild import PROGS, build_c, run_pydyn

SCRIPT = """global n, kv, pps
probe process("{exe}").function("scale").inline {{ n++; kv[ppfunc(), $k] += $v; pps[pp()]++ }}
probe end {{
    printf("n=%d\\n", n)
    foreach ([f, k] in kv+) printf("%s k=%d sum_v=%d\\n", f, k, kv[f, k])
    foreach (p in pps) printf("%s %d\\n", p, pps[p])
}}
"""
SCALE = next(i for i, ln in enumerate((PROGS / "inline_copies.c").read_text().splitlines(), 1)
             if " scale(long v" in ln)


@pytest.mark.parametrize("opt", ["-O0", "-O2"])
@pytest.mark.parametrize("abi", ["m64", "m32"])
def test_each_inlined_copy_fires_with_its_parameters(cache: Path, tmp_path: Path, abi: str,
                                                      opt: str) -> None:
    exe = build_c(PROGS / "inline_copies.c", tmp_path / "inl", m32=abi == "m32", opt=opt,
                  extra=("-g",))
    res = run_pydyn(cache, "-e", SCRIPT.format(exe=exe), "-c", f"{exe} 5")
    assert res.returncode == 0, res.stderr[-2000:]
    # pp(), as stap's: the inlined function's declaration, both copies one name
    assert res.stdout.splitlines() == [
        "s=60", "n=10", "scale k=2 sum_v=10", "scale k=3 sum_v=10",
        f'process("{exe}").function("scale@{PROGS / "inline_copies.c"}:{SCALE}").inline 10'], \
        res.stdout + res.stderr


def test_inline_needs_an_inlined_copy(cache: Path, tmp_path: Path) -> None:
    exe = build_c(PROGS / "inline_copies.c", tmp_path / "inl", extra=("-g",))
    res = run_pydyn(cache, "-p2", "-e",
                    f'probe process("{exe}").function("twice").inline {{ }}')
    assert res.returncode == 1
    assert 'function("twice").inline matches no inlined copy' in res.stderr, res.stderr
    assert "Traceback" not in res.stderr
    res = run_pydyn(cache, "-p2", "-e",
                    f'probe process("{exe}").function("scale").inline.return {{ }}')
    assert res.returncode == 1 and "no .return" in res.stderr, res.stderr
    # the out-of-line functions only, as stap's .call
    res = run_pydyn(cache, "-e", f'global n\nprobe process("{exe}").function("t*") {{ n++ }}\n'
                    'probe end { printf("n=%d\\n", n) }', "-c", f"{exe} 5")
    assert res.returncode == 0 and "n=10" in res.stdout, res.stdout + res.stderr
