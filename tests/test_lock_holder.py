"""A process stopped while it holds the globals lock (SIGSTOP inside a handler, here
raised by the handler itself through guru C) must not stall the others: their
probes give up the wait and are counted as skipped, the launcher's `end` too (and
says so), and pydyn ends in bounded time, also on SIGTERM.  m64 and m32."""

from __future__ import annotations

import os
import signal
import subprocess
import time
from pathlib import Path

import pytest
from cbuild import PROGS, build_c, run_pydyn, start_pydyn

STUCK_MS = 500
HITS = 20


def script(exe: Path) -> str:
    return ("%{\n#include <signal.h>\n%}\n"
            "function stop_here() %{ raise(SIGSTOP); %}\n"
            "global last, works\n"
            f'probe process("{exe}").mark("hold") {{ last = -1; stop_here() }}\n'
            f'probe process("{exe}").mark("work") {{ last = $arg1; works++ }}\n'
            'probe end { printf("works=%d last=%d\\n", works, last) }\n')


def kill_stopped(stdout: str) -> None:
    for line in stdout.splitlines():
        if line.startswith("child "):
            try:
                os.kill(int(line.split()[1]), signal.SIGKILL)
            except ProcessLookupError:
                pass


@pytest.mark.parametrize("abi", ["m64", "m32"])
def test_stopped_holder_skips_the_others(cache: Path, tmp_path: Path, abi: str) -> None:
    exe = build_c(PROGS / "lock_holder.c", tmp_path / "lock_holder", m32=abi == "m32")
    start = time.monotonic()
    try:
        res = run_pydyn(cache, "-g", "-D", f"STUCK_CONTEXT_MS={STUCK_MS}", "-e", script(exe),
                        "-c", f"{exe} {HITS}", timeout=60)
    except subprocess.TimeoutExpired as exc:
        kill_stopped(exc.stdout.decode() if isinstance(exc.stdout, bytes) else exc.stdout or "")
        raise
    kill_stopped(res.stdout)
    took = time.monotonic() - start
    assert f"parent done {HITS}" in res.stdout.splitlines(), res.stdout + res.stderr
    # the parent's hits and `end`: skipped, counted; the stopped handler: an error
    assert f"WARNING: Number of errors: 1, skipped probes: {HITS + 1}" in res.stderr, res.stderr
    assert "probe end skipped: the globals lock is held by thread" in res.stderr, res.stderr
    assert "which is stopped" in res.stderr, res.stderr
    assert "works=" not in res.stdout, res.stdout
    assert res.returncode == 1, res.stderr
    assert took < 30, took


@pytest.mark.parametrize("abi", ["m64", "m32"])
def test_sigterm_ends_the_session(cache: Path, tmp_path: Path, abi: str) -> None:
    exe = build_c(PROGS / "lock_holder.c", tmp_path / "lock_holder", m32=abi == "m32")
    proc = start_pydyn(cache, "-g", "-D", f"STUCK_CONTEXT_MS={STUCK_MS}", "-e", script(exe),
                       "-c", f"{exe} 0 loop")
    lines = []
    try:
        assert proc.stdout is not None
        for line in proc.stdout:
            lines.append(line)
            if line == "looping\n":
                break
        time.sleep(0.3)   # hits of the running parent, each given up and skipped
        sent = time.monotonic()
        proc.send_signal(signal.SIGTERM)
        out, err = proc.communicate(timeout=STUCK_MS / 1000 + 10)
        took = time.monotonic() - sent
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
        kill_stopped("".join(lines))
    assert "looping\n" in lines, "".join(lines) + (proc.stderr.read() if proc.stderr else "")
    # ends within STUCK_CONTEXT_MS plus a little (the launcher's own start of Python
    # and the end of the target are in it too)
    assert took < STUCK_MS / 1000 + 3, (took, err)
    assert "WARNING: Number of errors: 1, skipped probes:" in err, err
    assert "probe end skipped" in err, err


def test_sigterm_ends_a_stopped_command(cache: Path, tmp_path: Path) -> None:
    """The -c command stopped (SIGSTOP, ^Z from elsewhere): SIGTERM to pydyn still ends
    it at once -- it is sent SIGCONT after SIGTERM, as a stopped process acts on
    SIGTERM only once continued (else pydyn would wait its 5 s for the exit, then kill)."""
    exe = build_c(PROGS / "lock_holder.c", tmp_path / "lock_holder")
    proc = start_pydyn(cache, "-v", "-e", f'global n probe process("{exe}").mark("work") {{ n++ }}',
                       "-c", "sleep 60")
    try:
        assert proc.stderr is not None
        pid = 0
        for line in proc.stderr:
            if line.startswith("pydyn: started "):
                pid = int(line.split()[-1])
                break
        assert pid, "no 'started' line"
        os.kill(pid, signal.SIGSTOP)
        time.sleep(0.2)
        sent = time.monotonic()
        proc.send_signal(signal.SIGTERM)
        _, err = proc.communicate(timeout=30)
        took = time.monotonic() - sent
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    assert took < 3, (took, err)
    assert "Child process exited with signal 15 (SIGTERM)" in err, err
