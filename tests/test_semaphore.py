"""A mark behind its program's `*_ENABLED()` test is reached only while its semaphore is
up, so pydyn raises the semaphore even for a handler that reads no argument (a FAST
counter): leaving it at 0 would count nothing.  PostgreSQL's `lwlock__acquire` is laid
out this way (docs/probe-points.md).

tests/progs/shared_sites.c: N times the mark "guarded" (i) inside `if (semaphore)`.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from cbuild import PROGS, build_c, run_pydyn

N = 200
SUM = sum(3 * i + 1 for i in range(N))


@pytest.fixture(scope="module", params=["m64", "m32"])
def prog(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("prog") / f"guarded_{request.param}"
    return build_c(PROGS / "shared_sites.c", out, m32=request.param == "m32",
                   extra=("-fno-pie", "-no-pie") if request.param == "m32" else ())


@pytest.mark.parametrize("mode", ["auto", "trap"])
def test_a_counter_without_arguments_raises_the_semaphore(cache: Path, prog: Path,
                                                          mode: str) -> None:
    script = ('global n probe process(@1).mark("guarded") { n++ } '
              'probe end { printf("n=%d\\n", n) }')
    r = run_pydyn(cache, f"--probe-mode={mode}", "-e", script, str(prog), "-c",
                  f"{prog} {N}")
    assert (r.returncode, r.stderr) == (0, ""), r.stderr
    lines = r.stdout.splitlines()
    assert f"done {SUM}" in lines and f"n={N}" in lines, r.stdout
