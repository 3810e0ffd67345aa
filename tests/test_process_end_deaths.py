"""process.end for every way a process ends, m64 and m32: exit, a fatal signal from
outside (SIGTERM, SIGINT, SIGHUP), a fault (SIGSEGV), abort's SIGABRT, a program's own
SIGTERM handler (signal() that re-raises, SA_RESETHAND), an ignored SIGHUP, and an
execlp of a bare name (PATH searched).  What the program sees is as without pydyn:
its sigaction views, its handlers' output, and each child's status in its parent's
waitpid.  SIGKILL runs nothing in the process, nor do the execve and exit_group system
calls made directly: the launcher names them at the exit, as their parent's waitpid
saw them."""

from __future__ import annotations

import re
import subprocess
from collections import Counter
from pathlib import Path

import pytest
from cbuild import ERRORS_RUN_ON, PROGS, build_c, run_pydyn

MODES = ["exit", "term", "int", "hup", "kill", "segv", "abort", "handler", "oneshot", "ign",
         "execvp", "rawexec", "rawexit"]
# the status each child's parent sees (waitpid), with and without pydyn
STATUS = {"exit": 0x300, "term": 15, "int": 2, "hup": 1, "kill": 9, "segv": 11, "abort": 6,
          "handler": 15, "oneshot": 15, "ign": 0x400, "execvp": 0x300, "rawexec": 0x300,
          "rawexit": 0x500}
NO_END = re.compile(r"WARNING: process\.end not run for (\d+) process\(es\).*")


def _build(tmp_path: Path, abi: str) -> Path:
    return build_c(PROGS / "proc_death.c", tmp_path / f"proc_death_{abi}", m32=abi == "m32")


def _script(exe: Path, views: bool = False) -> str:
    """process.end in `exe`; `views`: a function probe too, whose trampolines bring
    pydyn's own SIGSEGV handler (it hands the program's faults on).  That handler shows
    in the program's sigaction view of SIGSEGV (docs/differences-from-stap.md), so the
    runs compared with the program alone have none."""
    probe = f'probe process("{exe}").function("view") {{ views[pid()]++ }}' if views else ""
    return f"""
global views
probe process("{exe}").end {{ printf("end %d %s views=%d\\n", pid(), execname(), views[pid()]) }}
{probe}
"""


def _pids(out: str) -> dict[str, int]:
    return {m: int(p) for m, p in re.findall(r"^pid (\w+) (\d+)$", out, re.M)}


@pytest.mark.parametrize("abi", ["m64", "m32"])
def test_every_death_fires_process_end_as_stap(cache: Path, tmp_path: Path, abi: str) -> None:
    exe = _build(tmp_path, abi)
    plain = subprocess.run([str(exe), *MODES], capture_output=True, text=True, timeout=60)
    assert plain.returncode == 0, plain.stderr
    res = run_pydyn(cache, "-e", _script(exe), "-c", f"{exe} {' '.join(MODES)}")
    assert res.returncode == 0, res.stderr[-2000:]
    # the program's own lines (sigaction views, handler output, waitpid statuses) as
    # without pydyn
    def own(out: str) -> list[str]:
        return [ln for ln in out.splitlines() if not ln.startswith(("end ", "pid "))]
    assert own(res.stdout) == own(plain.stdout), res.stdout
    for mode, status in STATUS.items():
        assert f"child {mode} status={status:#x}" in res.stdout, res.stdout
    pids = _pids(res.stdout)
    assert sorted(pids) == sorted(MODES)
    ends = Counter(int(p) for p in re.findall(r"^end (\d+) proc_death_\w+ views=\d+$",
                                             res.stdout, re.M))
    want = Counter({pid: 1 for mode, pid in pids.items() if mode not in ("kill", "rawexit")})
    want[pids["execvp"]] = 2   # the image execlp replaced, and the one that exits
    target = set(ends) - set(pids.values())
    assert len(target) == 1 and ends[target.pop()] == 1, res.stdout
    assert ends - Counter({p: 1 for p in set(ends) - set(pids.values())}) == want, res.stdout
    # SIGKILL, and the raw system calls: named at the exit, never silently lost, as
    # their parent's waitpid saw them
    no_end = NO_END.search(res.stderr)
    assert no_end and no_end.group(1) == "3", res.stderr
    name = f"proc_death_{abi}"
    for mode, why in [("kill", "killed by SIGKILL"),
                      ("rawexec", "replaced by an exec pydyn did not see"),
                      ("rawexit", "exit status 5 by an exit pydyn did not see")]:
        assert f"pid {pids[mode]} {name} ({why})" in no_end.group(0), res.stderr


@pytest.mark.parametrize("abi", ["m64", "m32"])
@pytest.mark.parametrize("mode,sig", [("term", "SIGTERM"), ("segv", "SIGSEGV"),
                                      ("abort", "SIGABRT"), ("oneshot", "SIGTERM"),
                                      ("kill", "SIGKILL")])
def test_command_killed_by_signal(cache: Path, tmp_path: Path, abi: str, mode: str,
                                  sig: str) -> None:
    """The -c command itself dies of the signal: the launcher reports that status, and
    process.end ran in it, but for SIGKILL, which the exit report names."""
    exe = _build(tmp_path, abi)
    res = run_pydyn(cache, "-e", _script(exe, views=True), "-c", f"{exe} -c {mode}")
    assert res.returncode == 0, res.stderr[-2000:]
    num = {"SIGTERM": 15, "SIGSEGV": 11, "SIGABRT": 6, "SIGKILL": 9}[sig]
    assert f"Child process exited with signal {num} ({sig})" in res.stderr, res.stderr
    ends = re.findall(r"^end (\d+) ", res.stdout, re.M)
    no_end = NO_END.search(res.stderr)
    if mode == "kill":
        assert ends == [], res.stdout
        assert no_end and no_end.group(1) == "1" and "(killed by SIGKILL)" in no_end.group(0)
    else:
        assert len(ends) == 1 and no_end is None, res.stdout + res.stderr
        assert re.search(r"^end \d+ \S+ views=[1-9]", res.stdout, re.M), res.stdout
    if mode == "oneshot":
        assert "oneshot TERM" in res.stdout and "view after-oneshot TERM dfl" in res.stdout


def test_failing_end_probe_keeps_the_death(cache: Path, tmp_path: Path) -> None:
    """A process.end handler that errors (a read of an unmapped address, a division by
    zero) in a dying process: the errors are counted, the process dies of its signal."""
    exe = _build(tmp_path, "m64")
    script = f"""
probe process("{exe}").end {{ printf("%s\\n", user_string(16)) }}
probe process("{exe}").end {{ printf("%d\\n", 1 / (pid() - pid())) }}
"""
    res = run_pydyn(cache, *ERRORS_RUN_ON, "-e", script, "-c", f"{exe} term segv abort")
    assert "child term status=0xf" in res.stdout, res.stdout + res.stderr[-2000:]
    assert "child segv status=0xb" in res.stdout and "child abort status=0x6" in res.stdout
    # two errors in each of the three children and in the command itself
    assert "Number of errors: 8" in res.stderr, res.stderr[-2000:]
    assert res.returncode == 1
