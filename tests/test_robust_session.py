"""A session is transparent and ends in bounded time with an honest report:
target() right from the first instruction, a consumer that goes away, deep
expressions, commands a shell would run, clear refusals of what pydyn cannot do."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from cbuild import build_c, have_m32, run_pydyn

EARLY_C = r"""
#include <sys/sdt.h>
#include <stdio.h>
int main(void) {
    DTRACE_PROBE(early, first);            /* main's first instructions */
    for (int i = 0; i < 3; i++)
        DTRACE_PROBE(early, first);
    return 0;
}
"""

BUSY_C = r"""
#include <sys/sdt.h>
#include <stdio.h>
#include <stdlib.h>
int main(int argc, char **argv) {
    long n = atol(argv[1]);
    for (long i = 0; i < n; i++)
        DTRACE_PROBE1(busy, tick, i);
    fprintf(stderr, "busy done %ld\n", n);
    return 0;
}
"""


@pytest.fixture(scope="module")
def cache(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("cache")


def _build(tmp: Path, name: str, src: str, abi: str) -> Path:
    m32 = abi == "m32"
    if m32 and not have_m32():
        pytest.skip("no -m32 toolchain (gcc-multilib)")
    c = tmp / f"{name}.c"
    c.write_text(src)
    return build_c(c, tmp / f"{name}_{abi}", m32=m32)


@pytest.fixture(scope="module", params=["m64", "m32"])
def early(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory,
          sdt_cflags: object) -> Path:
    return _build(tmp_path_factory.mktemp("early"), "early", EARLY_C, request.param)


@pytest.fixture(scope="module", params=["m64", "m32"])
def busy(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory,
         sdt_cflags: object) -> Path:
    return _build(tmp_path_factory.mktemp("busy"), "busy", BUSY_C, request.param)


# -- target() --------------------------------------------------------------------------

@pytest.mark.parametrize("shape,who", [("{p}", "pid()"), ("sh -c 'exec {p}'", "pid()"),
                                       ("sh -c '{p}'", "ppid()")])
def test_target_is_right_from_the_first_hit(early: Path, cache: Path, shape: str,
                                            who: str) -> None:
    """target() is the -c command's process from its first instruction on: the
    program itself, or the shell when the shell forks it (stap's semantics)."""
    script = (f'global bad, good probe process("{early}").mark("first") '
              f'{{ if ({who} != target() || target() == 0) bad++; else good++ }} '
              'probe end { printf("bad=%d good=%d\\n", bad, good) }')
    cmd = shape.format(p=early)
    for _ in range(20):
        res = run_pydyn(cache, "-e", script, "-c", cmd, timeout=60)
        assert res.returncode == 0, res.stderr
        assert "bad=0 good=4\n" in res.stdout, res.stdout + res.stderr


# -- a consumer that goes away -----------------------------------------------------------

def _cpu_ticks(pid: int) -> int:
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return int(fields[11]) + int(fields[12])   # utime + stime


def test_reader_that_goes_away_ends_the_session_and_frees_the_target(busy: Path,
                                                                     cache: Path) -> None:
    """`pydyn ... | head -1`: one line read, the pipe closed; pydyn ends promptly as a
    tool killed by SIGPIPE, no traceback; the target runs on, not blocked on the ring."""
    script = (f'probe process("{busy}").mark("tick") {{ printf("tick %d\\n", $arg1) }}')
    env = dict(os.environ, PYDYN_CACHE_DIR=str(cache))
    warm = run_pydyn(cache, "-p4", "-e", script, "-c", f"{busy} 1")   # build outside the clock
    assert warm.returncode == 0, warm.stderr
    proc = subprocess.Popen([sys.executable, "-m", "pydyn.launcher.cli", "-v", "-e", script,
                             "-c", f"{busy} 2000000000"], env=env,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    target = 0
    try:
        assert proc.stdout is not None and proc.stderr is not None
        assert proc.stdout.readline() == b"tick 0\n"
        proc.stdout.close()                       # the reader goes away
        closed = time.monotonic()
        proc.wait(timeout=30)
        ended = time.monotonic() - closed
        err = proc.stderr.read1(1 << 20).decode()   # what pydyn wrote (the target holds it)
        target = int(err.split("started ")[1].split(" as pid ")[1].split()[0])
        assert proc.returncode == -signal.SIGPIPE, err
        assert "Traceback" not in err and "BrokenPipe" not in err, err
        assert ended < 10, ended
        # Still running, and running: not asleep on a full ring.
        first = _cpu_ticks(target)
        time.sleep(1.0)
        assert _cpu_ticks(target) - first >= 3, Path(f"/proc/{target}/stat").read_text()
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
        if target:
            try:
                os.kill(target, signal.SIGKILL)
            except ProcessLookupError:
                pass


# -- deep expressions ----------------------------------------------------------------------

@pytest.mark.parametrize("expr", [" + ".join(["1"] * 900), "!" * 900 + "1",
                                  " = ".join(["a"] * 900),
                                  "0; if (a) x = 1 " + "else if (a) x = 2 " * 900],
                         ids=["sum", "not", "assign", "else-if"])
def test_deep_chains_are_one_clean_error(cache: Path, expr: str) -> None:
    res = run_pydyn(cache, "-p3", "-e", f"global a probe begin {{ x = {expr} }}")
    assert res.returncode == 1, res.stderr[-2000:]
    assert "Traceback" not in res.stderr and "RecursionError" not in res.stderr, \
        res.stderr[-2000:]
    assert res.stderr.startswith("<input>:1:"), res.stderr[:300]
    assert "error: script nested too deeply" in res.stderr.splitlines()[0]


@pytest.mark.parametrize("expr", [" + ".join(["1"] * 450), "-~" * 220 + "1",
                                  '"a"' + ' . "a"' * 450],
                         ids=["sum", "unary", "concat"])
def test_chains_within_the_limit_translate(cache: Path, expr: str) -> None:
    res = run_pydyn(cache, "-p3", "--disable-cache", "-e",
                    f"probe begin {{ x = {expr}; println(x) }}")
    assert res.returncode == 0, res.stderr[-3000:]
    assert "probe_" in res.stdout
