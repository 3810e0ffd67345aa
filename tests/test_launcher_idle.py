"""The launcher's own CPU while the session runs: it shares the machine with the traced
programs (a server under load takes every CPU), so while nothing happens -- the
processes run, the probes count, nothing is printed -- it sleeps instead of polling.

A real session on a real process tree (m64 and m32): a program that forks two children,
all three firing a counted mark every 20 ms for a few seconds.  The launcher's CPU time
over a stretch of that (the kernel's per-thread run time, summed over its threads) must
stay a small share of the stretch.  The bound is generous: a launcher that wakes to poll
every few milliseconds spends several times more, even on an idle machine."""

from __future__ import annotations

import os
import time
from pathlib import Path

import pytest
from cbuild import BUILDS, Build, build_c, start_pydyn

SRC = r"""
#include <stdio.h>
#include <sys/sdt.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>
int main(int argc, char **argv)
{
    int rounds = atoi(argv[1]);
    pid_t kids[2];
    for (int k = 0; k < 2; k++)
        if ((kids[k] = fork()) == 0)
            break;
    int child = kids[0] == 0 || kids[1] == 0;
    if (!child) {
        printf("ready\n");
        fflush(stdout);
    }
    struct timespec nap = {0, 20 * 1000 * 1000};
    for (int i = 0; i < rounds; i++) {
        DTRACE_PROBE1(idle, tick, i);
        nanosleep(&nap, NULL);
    }
    if (child)
        return 0;
    waitpid(kids[0], NULL, 0);
    waitpid(kids[1], NULL, 0);
    return 0;
}
"""
ROUNDS = 300          # 6 s of the program
WINDOW = 4.0          # seconds of it measured, after the start-up
BOUND = 0.01          # of one CPU: 40 ms over the window


def run_time(pid: int) -> float:
    """CPU seconds of all of pid's threads so far: the scheduler's nanoseconds
    (schedstat), else the ticks of /proc/PID/stat."""
    total = 0.0
    for tid in os.listdir(f"/proc/{pid}/task"):
        try:
            total += int(Path(f"/proc/{pid}/task/{tid}/schedstat").read_text().split()[0]) / 1e9
        except FileNotFoundError:    # the thread ended, or no schedstat in this kernel
            if not Path(f"/proc/{pid}/task/{tid}").exists():
                continue
            f = Path(f"/proc/{pid}/task/{tid}/stat").read_text().rsplit(")", 1)[1].split()
            total += (int(f[11]) + int(f[12])) / os.sysconf("SC_CLK_TCK")
    return total


@pytest.mark.parametrize("b", [b for b in BUILDS if b.opt == "-O2"], ids=lambda b: b.id)
def test_launcher_sleeps_while_the_target_runs(tmp_path: Path, b: Build, cache: Path) -> None:
    (tmp_path / "p.c").write_text("#include <stdlib.h>\n" + SRC)
    exe = build_c(tmp_path / "p.c", tmp_path / "p", m32=b.m32, opt=b.opt)
    script = (f'global n probe process("{exe}").mark("tick") {{ n++ }} '
              'probe end { printf("n=%d\\n", n) }')
    proc = start_pydyn(cache, "-e", script, "-c", f"{exe} {ROUNDS}")
    try:
        assert proc.stdout is not None
        assert proc.stdout.readline() == "ready\n"    # module built, target running
        time.sleep(0.5)
        before = run_time(proc.pid)
        time.sleep(WINDOW)
        spent = run_time(proc.pid) - before
        out, err = proc.communicate(timeout=120)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.communicate()
    assert proc.returncode == 0, err
    assert out.splitlines()[-1] == f"n={3 * ROUNDS}", out
    assert spent < BOUND * WINDOW, f"the launcher ran {spent * 1e3:.1f} ms in {WINDOW} s"


SPARSE = r"""
#include <stdio.h>
#include <sys/sdt.h>
#include <time.h>
int main(void)
{
    struct timespec nap = {0, 400 * 1000 * 1000};
    for (int i = 0; i < 4; i++) {
        nanosleep(&nap, NULL);      /* the ring idle: the drain sleeps until a record */
        DTRACE_PROBE1(sparse, hit, i);
        printf("fired %d\n", i);
        fflush(stdout);
    }
    nanosleep(&nap, NULL);
    return 0;
}
"""


@pytest.mark.parametrize("b", [b for b in BUILDS if b.opt == "-O2"], ids=lambda b: b.id)
def test_a_record_after_a_quiet_while_is_printed_at_once(tmp_path: Path, b: Build,
                                                         cache: Path) -> None:
    """The drain thread sleeps on a ring idle for a while until the next record wakes
    it: each line a probe prints after 400 ms of silence comes out right after the
    target's own line (a drain left to wake on its own would be up to a second late)."""
    (tmp_path / "s.c").write_text(SPARSE)
    exe = build_c(tmp_path / "s.c", tmp_path / "s", m32=b.m32, opt=b.opt)
    script = f'probe process("{exe}").mark("hit") {{ printf("hit %d\\n", $arg1) }}'
    proc = start_pydyn(cache, "-e", script, "-c", str(exe))
    late: list[float] = []
    seen: dict[str, float] = {}
    try:
        assert proc.stdout is not None
        for line in proc.stdout:
            seen[line] = time.monotonic()
            kind, _, i = line.partition(" ")
            other = ("hit " if kind == "fired" else "fired ") + i
            if other in seen:    # the probe's line and the target's, in either order
                late.append(seen[line] - seen[other])
        err = proc.communicate(timeout=60)[1]
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.communicate()
    assert proc.returncode == 0, err
    assert sorted(seen) == [f"{k} {i}\n" for k in ("fired", "hit") for i in range(4)], seen
    assert max(late) < 0.25, late
