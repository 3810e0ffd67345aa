"""Long sessions: far more processes one after another than the process table has
entries (256).  The launcher copies out the entry of each process that is gone and
frees it, so every process is listed by -v, counted in the exit summary, and no
probe is reported as skipped; the counts stay exact (m64 and m32)."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from cbuild import PROGS, build_c, have_m32, run_pydyn

TIMEOUT = 240


def attached(stderr: str, exe: Path) -> set[str]:
    return {ln.split()[3] for ln in stderr.splitlines()
            if ln.startswith("pydyn: attached") and f" {exe} " in ln}


def images(stderr: str) -> int:
    m = re.search(r"pydyn: (\d+) process image\(s\) in the session", stderr)
    assert m, stderr[-2000:]
    return int(m.group(1))


def test_shell_loop_of_600_processes(cache: Path, tmp_path: Path) -> None:
    exes = [build_c(PROGS / "one_hit.c", tmp_path / "one64")]
    if have_m32():
        exes.append(build_c(PROGS / "one_hit.c", tmp_path / "one32", m32=True))
    n = 600
    script = "global hits, sum\n" + "".join(
        f'probe process("{e}").mark("one") {{ hits++; sum += $arg1 }}\n' for e in exes)
    script += 'probe end { printf("hits=%d sum=%d\\n", hits, sum) }\n'
    # the programs alternate (m64, m32), each run by sh one after another
    loop = (f"i=0; while [ $i -lt {n} ]; do {exes[0]} $i; i=$((i+1)); "
            + (f"{exes[-1]} $i; i=$((i+1)); " if len(exes) > 1 else "") + "done")
    res = run_pydyn(cache, "-v", "-e", script, "-c", f"sh -c '{loop}'", timeout=TIMEOUT)
    assert res.returncode == 0, res.stderr[-3000:]
    assert f"hits={n} sum={n * (n - 1) // 2}" in res.stdout, res.stdout
    assert "WARNING" not in res.stderr, res.stderr[-3000:]
    # the 64 per-thread slots come back from exited processes too (a main thread never
    # gives its own back): few threads, if any, fall back to the shared one
    m = re.search(r"pydyn: (\d+) thread\(s\) found no free per-thread slot", res.stderr)
    assert m is None or int(m.group(1)) < n // 10, m.group(0)
    listed = set().union(*(attached(res.stderr, e) for e in exes))
    assert len(listed) == n, len(listed)
    # every image -v listed is in the summary (sh's own images among them)
    assert images(res.stderr) == sum(ln.startswith("pydyn: attached")
                                     for ln in res.stderr.splitlines())


@pytest.mark.parametrize("abi", ["m64", "m32"])
def test_10000_forked_processes(cache: Path, tmp_path: Path, abi: str) -> None:
    exe = build_c(PROGS / "rel_target.c", tmp_path / "rel_target", m32=abi == "m32",
                  extra=("-pthread",))
    n = 10000
    script = (f'global hits, sum\nprobe process("{exe}").mark("tick") {{ hits++; sum += $arg1 }}\n'
              'probe end { printf("hits=%d sum=%d\\n", hits, sum) }\n')
    res = run_pydyn(cache, "-v", "-e", script, "-c", f"{exe} forks {n}", timeout=TIMEOUT)
    assert res.returncode == 0, res.stderr[-3000:]
    assert f"forks done {n}" in res.stdout, res.stdout
    assert f"hits={n} sum={n * (n - 1) // 2}" in res.stdout, res.stdout
    assert "WARNING" not in res.stderr, res.stderr[-3000:]
    assert len(attached(res.stderr, exe)) == n + 1, res.stderr[-1000:]   # pids; and the parent
    assert images(res.stderr) == n + 1


def test_more_processes_alive_than_entries(cache: Path, tmp_path: Path) -> None:
    """300 processes alive at once: those that find no free entry (after a short wait)
    run unlisted, their probes counted all the same, and the exit says how many."""
    exe = build_c(PROGS / "one_hit.c", tmp_path / "one64")
    n = 300
    script = (f'global hits, sum\nprobe process("{exe}").mark("one") {{ hits++; sum += $arg1 }}\n'
              'probe end { printf("hits=%d sum=%d\\n", hits, sum) }\n')
    loop = f"i=0; while [ $i -lt {n} ]; do {exe} $i 3000 & i=$((i+1)); done; wait"
    res = run_pydyn(cache, "-e", script, "-c", f"sh -c '{loop}'", timeout=TIMEOUT)
    assert res.returncode == 0, res.stderr[-3000:]
    assert f"hits={n} sum={n * (n - 1) // 2}" in res.stdout, res.stdout
    m = re.search(r"WARNING: (\d+) process\(es\) found the process table full \(256 entries "
                  r"alive at once\)", res.stderr)
    # (sh's forked children take entries too, briefly, before they exec)
    assert m and 0 < int(m.group(1)) < n, res.stderr
    assert "skipped probes" not in res.stderr, res.stderr
