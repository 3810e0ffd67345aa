"""Handlers still running when the session stops (nothing is lost silently).

After it stores STOPPING the launcher waits, before `end`, until no handler that saw
RUNNING still runs (runtime/pd_quiesce.c: a busy word per thread in the segment and a
membarrier), at most -D STUCK_CONTEXT_MS; the ones still running then are an error of
the exit report.  tests/progs/quiesce.c: a slow handler in a second thread while the
main thread's probe calls exit(); threads hammering FAST counters while it does; a
process SIGKILLed inside a handler.
"""

from __future__ import annotations

import re
import shutil
import time
from pathlib import Path

import pytest
from cbuild import PROGS, abi_binary, build_abis, have_sdt_h, run_pydyn
from test_aarch64 import A64_CC, QEMU, SYSROOT, a64dir, build_a64  # noqa: F401 (fixture)

ITER = 100_000          # the slow handler's loop: ~0.2 s here, 50 ms after which exit()
SUM = ITER * (ITER - 1) // 2
STUCK = re.compile(r"^ERROR: 1 probe handler\(s\) still running (\d+) ms after the session "
                   r'stopped \(process\("[^"]+"\)\.mark\("slow"\)\): their output may be '
                   r"incomplete \(-D STUCK_CONTEXT_MS=N waits longer\)$", re.M)


@pytest.fixture(scope="module")
def progs(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    if not have_sdt_h():
        pytest.skip("no <sys/sdt.h> (systemtap-sdt-dev)")
    return build_abis(PROGS / "quiesce.c", tmp_path_factory.mktemp("quiesce") / "q")


def slow_script(tmp: Path, binary: Path) -> Path:
    """A slow handler that takes no lock (locals and a counter): without the wait, `end`
    would run beside it, and its line and its n++ would come after the last drain."""
    script = tmp / "slow.stp"
    script.write_text(
        "global n\n"
        f'probe process("{binary}").mark("slow") {{ x = 0; for (i = 0; i < $arg1; i++) '
        'x += i; printf("slow done %d\\n", x); n++ }\n'
        f'probe process("{binary}").mark("stop") {{ exit() }}\n'
        'probe end { printf("end n=%d\\n", n) }\n')
    return script


@pytest.mark.parametrize("mode", ["auto", "trap"])
@pytest.mark.parametrize("abi", ["m64", "m32"])
def test_slow_handler_finishes_before_end(cache: Path, tmp_path: Path,
                                          progs: dict[str, Path], abi: str, mode: str) -> None:
    binary = abi_binary(progs, abi)
    r = run_pydyn(cache, f"--probe-mode={mode}", "-D", "MAXACTION=100000000",
                  str(slow_script(tmp_path, binary)), "-c", f"{binary} slow {ITER}")
    assert r.returncode == 0, r.stderr
    assert r.stderr == "", r.stderr
    lines = r.stdout.splitlines()
    assert f"slow done {SUM}" in lines, r.stdout
    assert "end n=1" in lines, r.stdout
    assert lines.index(f"slow done {SUM}") < lines.index("end n=1")


@pytest.mark.parametrize("abi", ["m64", "m32"])
def test_stuck_handler_counted_and_reported(cache: Path, tmp_path: Path,
                                            progs: dict[str, Path], abi: str) -> None:
    """Still running after the bound: `end` runs anyway, the exit report says so (an
    error, as stap's "context stuck"), exit status 1."""
    binary = abi_binary(progs, abi)
    r = run_pydyn(cache, "-D", "MAXACTION=100000000", "-D", "STUCK_CONTEXT_MS=30",
                  str(slow_script(tmp_path, binary)), "-c", f"{binary} slow {ITER * 5}")
    assert r.returncode == 1, r.stderr
    m = STUCK.search(r.stderr)
    assert m and m.group(1) == "30", r.stderr
    assert "WARNING: Number of errors: 1, skipped probes: 0" in r.stderr.splitlines()
    assert r.stderr.index("ERROR: 1 probe") < r.stderr.index("WARNING: Number of errors")
    assert "end n=0" in r.stdout.splitlines(), r.stdout


@pytest.mark.skipif(shutil.which(A64_CC) is None or QEMU is None or
                    not Path(SYSROOT, "lib", "ld-linux-aarch64.so.1").exists(),
                    reason="no aarch64 cross compiler, qemu-aarch64 or sysroot")
def test_slow_handler_finishes_before_end_aarch64(cache: Path, tmp_path: Path,
                                                  a64dir: Path) -> None:  # noqa: F811
    """The same under qemu-user: the guest's threads are host threads, which the
    launcher's membarrier reaches like any other."""
    if not have_sdt_h():
        pytest.skip("no <sys/sdt.h> (systemtap-sdt-dev)")
    binary = build_a64(a64dir, [PROGS / "quiesce.c"], "quiesce", extra=["-pthread"])
    n = ITER // 4       # emulated: several times slower
    r = run_pydyn(cache, "-D", "MAXACTION=100000000", str(slow_script(tmp_path, binary)),
                  "-c", f"{binary} slow {n}")
    assert r.returncode == 0, r.stderr
    lines = r.stdout.splitlines()
    done = f"slow done {n * (n - 1) // 2}"
    assert done in lines and "end n=1" in lines, r.stdout
    assert lines.index(done) < lines.index("end n=1")


def test_killed_handler_not_waited_for(cache: Path, tmp_path: Path,
                                       progs: dict[str, Path]) -> None:
    """A process SIGKILLed inside a handler leaves its busy word set: a dead (here a
    zombie) owner is not waited for, nor reported."""
    binary = abi_binary(progs, "m64")
    t0 = time.monotonic()
    r = run_pydyn(cache, "-D", "MAXACTION=100000000", str(slow_script(tmp_path, binary)),
                  "-c", f"{binary} killed {ITER * 100}")
    assert r.returncode == 0, r.stderr
    assert r.stderr == "", r.stderr
    assert "end n=0" in r.stdout.splitlines(), r.stdout
    assert time.monotonic() - t0 < 30   # the handler alone would run ~20 s


@pytest.mark.parametrize("nthreads", [8, 70])
@pytest.mark.parametrize("abi", ["m64", "m32"])
def test_fast_counters_stop_with_end(cache: Path, tmp_path: Path, progs: dict[str, Path],
                                     abi: str, nthreads: int) -> None:
    """Threads hammer FAST counters (a mark and a function entry) while exit() stops the
    session: `end` reads n, the exit report reads m afterwards, both added by the same
    handlers, so an add after `end` read would show as m > n.  70 threads: the ones
    beyond the 64 slots count themselves in the header."""
    binary = abi_binary(progs, abi)
    script = tmp_path / "hammer.stp"
    script.write_text(
        "global n, m, fn, fm\n"
        f'probe process("{binary}").mark("hit") {{ n++; m++ }}\n'
        f'probe process("{binary}").function("tick") {{ fn++; fm++ }}\n'
        f'probe process("{binary}").mark("stop") {{ exit() }}\n'
        'probe end { printf("n=%d fn=%d\\n", n, fn) }\n')
    r = run_pydyn(cache, str(script), "-c", f"{binary} hammer {nthreads}")
    assert r.returncode == 0, r.stderr
    assert r.stderr == "", r.stderr
    got = re.search(r"^n=(\d+) fn=(\d+)$", r.stdout, re.M)
    late = re.search(r"^m=(\d+)$", r.stdout, re.M)      # the exit report: %d as stap's
    flate = re.search(r"^fm=(\d+)$", r.stdout, re.M)
    assert got and late and flate, r.stdout
    n, fn = int(got.group(1)), int(got.group(2))
    assert n > 0 and fn > 0, r.stdout
    assert (int(late.group(1)), int(flate.group(1))) == (n, fn), r.stdout
