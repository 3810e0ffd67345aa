"""End to end: biarch sessions with real processes.

One program, tests/progs/biarch_proc.c, is built -m64 (biarch64), -m32
(biarch32) and -static (biarchst) once per session; it launches children,
forks, execs, scrubs environments and kills children as its options say, and
every process reports its pid, bitness and how many marks it hit.  pydyn is run
as a subprocess (the `pydyn` console script) with a private module cache, and
the counts the script collected in the shared segment are compared with what
the processes say they did.
"""

from __future__ import annotations

import glob
import os
import re
import shlex
import shutil
import signal
import subprocess
import sys
import time
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import pytest
from cbuild import PROGS, build_c, have_cc, have_m32, have_sdt_h, start_pydyn

TIMEOUT = 60
SRC = PROGS / "biarch_proc.c"

pytestmark = pytest.mark.skipif(not (have_cc() and have_sdt_h() and have_m32()),
                                reason="needs gcc with -m32 multilib and <sys/sdt.h>")


# ---- programs and running pydyn ---------------------------------------------

@dataclass(frozen=True)
class Progs:
    b64: str
    b32: str
    dir: Path


@pytest.fixture(scope="session")
def progs(tmp_path_factory: pytest.TempPathFactory) -> Progs:
    d = tmp_path_factory.mktemp("biarch")
    b64 = build_c(SRC, d / "biarch64")
    b32 = build_c(SRC, d / "biarch32", m32=True)
    return Progs(str(b64), str(b32), d)


@pytest.fixture(scope="session")
def static_prog(progs: Progs) -> str:
    out = progs.dir / "biarchst"
    res = subprocess.run(["gcc", "-static", "-O2", "-g0", str(SRC), "-o", str(out)],
                         capture_output=True, text=True)
    if res.returncode != 0:
        pytest.skip(f"cannot link a static program (libc.a missing?): {res.stderr[-300:]}")
    return str(out)


def segments_of(pid: int) -> list[str]:
    return glob.glob(f"/dev/shm/pydyn.{pid}.*")


@dataclass
class Proc:
    pid: int
    ppid: int
    bits: int
    marks: int
    role: str
    foo: int
    t0: int
    t1: int

    @property
    def abi(self) -> str:
        return f"m{self.bits}"


PROC_RE = re.compile(r"^proc pid=(\d+) ppid=(\d+) bits=(\d+) marks=(\d+) role=(\w+) "
                     r"foo=(\d) t0=(\d+) t1=(\d+)$", re.M)


@dataclass
class Run:
    rc: int
    pid: int          # pydyn's own pid
    out: str
    err: str

    @property
    def procs(self) -> list[Proc]:
        return [Proc(int(m[1]), int(m[2]), int(m[3]), int(m[4]), m[5], int(m[6]), int(m[7]),
                     int(m[8])) for m in PROC_RE.finditer(self.out)]

    @property
    def calls(self) -> dict[tuple[int, str], int]:
        return {(int(p), a): int(n)
                for p, a, n in re.findall(r"^calls (\d+) (m\d\d) (\d+)$", self.out, re.M)}

    def value(self, name: str) -> list[int]:
        m = re.search(rf"^{name}((?: -?\d+)+)$", self.out, re.M)
        assert m, f"no '{name}' line in the output:\n{self.out}\n{self.err}"
        return [int(v) for v in m[1].split()]

    def describe(self) -> str:
        return f"pydyn exit {self.rc}\n--- stdout\n{self.out}\n--- stderr\n{self.err}"


def _default_signals() -> None:
    # A background job may have SIGINT ignored, and an ignored signal stays ignored
    # across exec: pydyn would never see the test's Ctrl-C.
    for sig in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP):
        signal.signal(sig, signal.SIG_DFL)


def start_session(cache: Path, script: str, command: Sequence[str]) -> subprocess.Popen[str]:
    """pydyn -e SCRIPT -c COMMAND in its own session (so its whole process group can be
    cleaned up), with faulthandler on: a hung pydyn is sent SIGABRT and prints its
    threads' stacks."""
    return start_pydyn(cache, "-e", script, "-c", shlex.join(command),
                       env={"PYTHONFAULTHANDLER": "1"}, preexec_fn=_default_signals)


def cleanup(proc: subprocess.Popen[str]) -> None:
    """Kill what is left of a run (pydyn, targets: its process group) and its segment."""
    if proc.poll() is None:
        proc.send_signal(signal.SIGABRT)
        try:
            proc.wait(timeout=5)
        except subprocess.TimeoutExpired:
            pass
    try:
        os.killpg(proc.pid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        pass
    proc.wait()
    for seg in segments_of(proc.pid):
        os.unlink(seg)


def run_session(cache: Path, script: str, command: Sequence[str], *,
                timeout: float = TIMEOUT) -> Run:
    proc = start_session(cache, script, command)
    try:
        out, err = proc.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        cleanup(proc)
        out, err = proc.communicate()
        pytest.fail(f"pydyn did not finish in {timeout}s\n{out}\n{err}")
    leaked = segments_of(proc.pid)
    cleanup(proc)
    run = Run(proc.returncode, proc.pid, out, err)
    # Segment hygiene, for every run: nothing of this pydyn is left in /dev/shm.
    assert leaked == [], run.describe()
    return run


# ---- the counting script ------------------------------------------------------

COUNT_STP = """
global calls, total, s, bad
probe process("{b64}").mark("hit") {{
  calls[pid(), "m64"]++; total++; s <<< $arg1
  if ($arg2 != 64) bad++
}}
probe process("{b32}").mark("hit") {{
  calls[pid(), "m32"]++; total++; s <<< $arg1
  if ($arg2 != 32) bad++
}}
probe end {{
  foreach ([p, a] in calls) printf("calls %d %s %d\\n", p, a, calls[p, a])
  printf("total %d\\n", total)
  printf("bad %d\\n", bad)
  if (@count(s)) printf("stat %d %d\\n", @count(s), @sum(s))
}}
"""


def count_script(p: Progs) -> str:
    return COUNT_STP.format(b64=p.b64, b32=p.b32)


def expected_counts(procs: Sequence[Proc]) -> dict[tuple[int, str], int]:
    exp: dict[tuple[int, str], int] = {}
    for p in procs:
        if p.marks:
            exp[(p.pid, p.abi)] = exp.get((p.pid, p.abi), 0) + p.marks
    return exp


def check_exact(run: Run, procs: Sequence[Proc]) -> None:
    """Every process's count, the total and the statistic are exact."""
    assert run.rc == 0, run.describe()
    assert "ERROR" not in run.err and "WARNING" not in run.err, run.describe()
    assert run.calls == expected_counts(procs), run.describe()
    n = sum(p.marks for p in procs)
    assert run.value("total") == [n], run.describe()
    assert run.value("bad") == [0], run.describe()
    # Each process's marks carry j = 0, 1, ..., marks-1 as $arg1.
    assert run.value("stat") == [n, sum(p.marks * (p.marks - 1) // 2 for p in procs)], \
        run.describe()


def by_role(procs: Sequence[Proc], role: str) -> list[Proc]:
    return [p for p in procs if p.role == role]


# ---- 1. concurrency ---------------------------------------------------------------

def test_mixed_workers_concurrently_exact(progs: Progs, cache: Path) -> None:
    n = 4000
    cmd = [progs.b64, "-B", "-m", "100", "-p", "100"]
    for exe in (progs.b32, progs.b64) * 3:
        cmd += ["-c", f"{exe} -m {n}"]
    run = run_session(cache, count_script(progs), cmd)
    procs = run.procs
    assert len(procs) == 7, run.describe()
    workers = [p for p in procs if p.ppid != run.pid]
    assert sorted(p.bits for p in workers) == [32] * 3 + [64] * 3, run.describe()
    assert all(p.marks == n for p in workers)
    check_exact(run, procs)
    # They really ran at once: every worker's marks overlap in time with a
    # worker of the other bitness (they start together behind a barrier and
    # meet again halfway through their marks).
    for w in workers:
        others = [o for o in workers if o.bits != w.bits]
        assert any(o.t0 < w.t1 and w.t0 < o.t1 for o in others), \
            [(p.pid, p.bits, p.t0, p.t1) for p in workers]


# ---- 2. chains ------------------------------------------------------------------

def test_chain_64_exec_32_fork_exec_64(progs: Progs, cache: Path) -> None:
    cmd = [progs.b64, "-m", "300", "-E", progs.b32, "-m", "400", "-x", progs.b64, "-m", "500"]
    run = run_session(cache, count_script(progs), cmd)
    procs = run.procs
    first, = by_role(procs, "execd")
    assert (first.bits, first.marks, first.ppid) == (64, 300, run.pid), run.describe()
    second, = [p for p in procs if p.role == "main" and p.pid == first.pid]
    assert (second.bits, second.marks) == (32, 400), run.describe()
    third, = [p for p in procs if p.ppid == first.pid]
    assert (third.bits, third.marks) == (64, 500), run.describe()
    check_exact(run, procs)
    assert run.calls[(first.pid, "m64")] == 300 and run.calls[(first.pid, "m32")] == 400


def test_32bit_parent_with_64bit_children(progs: Progs, cache: Path) -> None:
    cmd = [progs.b32, "-m", "200", "-p", "100", "-c", f"{progs.b64} -m 600",
           "-c", f"{progs.b64} -m 700", "-c", f"{progs.b32} -m 800"]
    run = run_session(cache, count_script(progs), cmd)
    procs = run.procs
    parent, = [p for p in procs if p.ppid == run.pid]
    assert (parent.bits, parent.marks) == (32, 300), run.describe()
    kids = sorted((p.bits, p.marks) for p in procs if p.ppid == parent.pid)
    assert kids == [(32, 800), (64, 600), (64, 700)], run.describe()
    check_exact(run, procs)


# ---- 3. fork without exec ----------------------------------------------------------

def test_fork_without_exec_keeps_probes(progs: Progs, cache: Path) -> None:
    """Parent hits 1000 marks, forks; the child hits 1500 while the parent hits 700
    more.  The same for a 32-bit process."""
    cmd = [progs.b64, "-m", "1000", "-f", "1500", "-p", "700",
           "-c", f"{progs.b32} -m 1000 -f 1500 -p 700"]
    run = run_session(cache, count_script(progs), cmd)
    procs = run.procs
    assert len(procs) == 4, run.describe()
    for bits in (32, 64):
        parent, = [p for p in procs if p.bits == bits and p.role == "main"]
        child, = [p for p in procs if p.bits == bits and p.role == "forked"]
        assert child.ppid == parent.pid
        assert (parent.marks, child.marks) == (1700, 1500)
        assert run.calls.get((parent.pid, f"m{bits}")) == 1700, run.describe()
        assert run.calls.get((child.pid, f"m{bits}")) == 1500, run.describe()
    check_exact(run, procs)


# ---- 4. scrubbed environments --------------------------------------------------------

def test_execve_with_scrubbed_env(progs: Progs, cache: Path) -> None:
    """execve(path, argv, {"FOO=1", NULL}) in forked children and in the process itself."""
    cmd = [progs.b64, "-m", "100", "-s", "-c", f"{progs.b32} -m 800",
           "-c", f"{progs.b64} -m 900", "-E", progs.b32, "-m", "300"]
    run = run_session(cache, count_script(progs), cmd)
    procs = run.procs
    scrubbed = [p for p in procs if p.foo]
    # The children did get the scrubbed environment (FOO set, unlike ours).
    assert sorted((p.bits, p.marks) for p in scrubbed) == [(32, 300), (32, 800), (64, 900)], \
        run.describe()
    check_exact(run, procs)


def test_env_i_child(progs: Progs, cache: Path) -> None:
    env_exe = shutil.which("env")
    if env_exe is None:
        pytest.skip("no env(1)")
    cmd = [progs.b64, "-m", "50", "-c", f"{env_exe} -i PATH=/usr/bin:/bin {progs.b32} -m 500",
           "-c", f"{env_exe} -i {progs.b64} -m 400"]
    run = run_session(cache, count_script(progs), cmd)
    procs = run.procs
    assert sorted((p.bits, p.marks) for p in procs) == [(32, 500), (64, 50), (64, 400)], \
        run.describe()
    check_exact(run, procs)


PY_SPAWN = """\
import subprocess, sys
kids = [subprocess.Popen([sys.argv[1], "-m", "600"], env={}),
        subprocess.Popen([sys.argv[2], "-m", "700"], env={})]
sys.exit(max(k.wait() for k in kids))
"""


def test_python_popen_env_empty(progs: Progs, cache: Path, tmp_path: Path) -> None:
    python = os.path.realpath(sys.executable)
    script = tmp_path / "spawn.py"
    script.write_text(PY_SPAWN)
    run = run_session(cache, count_script(progs), [python, str(script), progs.b32, progs.b64])
    procs = run.procs
    assert sorted((p.bits, p.marks) for p in procs) == [(32, 600), (64, 700)], run.describe()
    check_exact(run, procs)


# ---- 5. static child -------------------------------------------------------------------

def test_child_execs_static_binary(progs: Progs, static_prog: str, cache: Path) -> None:
    cmd = [progs.b64, "-m", "500", "-p", "200", "-c", f"{static_prog} -m 300",
           "-c", f"{progs.b32} -m 700", "-c", f"{progs.b32} -m 10 -x {static_prog} -m 40"]
    run = run_session(cache, count_script(progs), cmd)
    procs = run.procs
    assert len(procs) == 5, run.describe()     # the static ones ran and reported
    static_pids = {p.pid for p in procs if p.marks in (300, 40)}
    assert len(static_pids) == 2
    assert not any(pid in static_pids for pid, _ in run.calls), run.describe()
    check_exact(run, [p for p in procs if p.pid not in static_pids])


# ---- 6. a worker killed mid-run ----------------------------------------------------------

def test_worker_sigkilled_mid_run(progs: Progs, cache: Path) -> None:
    """Two workers that never stop are SIGKILLed by their parent (one 32-bit, one
    64-bit) while two others hit 20000 marks each at the same time."""
    cmd = [progs.b64, "-b", "-m", "10",
           "-c", f"{progs.b32} -m 20000", "-c", f"{progs.b64} -m 20000",
           "-c", f"{progs.b32} -m -1", "-c", f"{progs.b64} -m -1",
           "-k", "2:150", "-k", "3:200"]
    run = run_session(cache, count_script(progs), cmd)
    assert run.rc == 0, run.describe()
    procs = run.procs
    survivors = [p for p in procs if p.ppid != run.pid]
    assert sorted((p.bits, p.marks) for p in survivors) == [(32, 20000), (64, 20000)], \
        run.describe()
    parent, = [p for p in procs if p.ppid == run.pid]
    calls = run.calls
    for p in [parent, *survivors]:
        assert calls.get((p.pid, p.abi)) == p.marks, run.describe()
    # The two victims were counted too (they ran until killed), one per ABI.
    victims = {k: v for k, v in calls.items() if k[0] not in {p.pid for p in procs}}
    assert sorted(a for _, a in victims) == ["m32", "m64"], run.describe()
    assert all(v > 0 for v in victims.values())
    assert "ERROR" not in run.err, run.describe()


# ---- 7. process.begin / process.end ---------------------------------------------------

LIFECYCLE_STP = """
probe process.begin {{ printf("begin %d %d %s\\n", pid(), ppid(), execname()) }}
probe process.end {{ printf("end %d %s\\n", pid(), execname()) }}
probe process("{b32}").begin {{ printf("begin32 %d\\n", pid()) }}
probe process("{b64}").end {{ printf("end64 %d\\n", pid()) }}
"""


def test_process_begin_end_in_target_context(progs: Progs, cache: Path) -> None:
    """A (64-bit) starts C1 (32-bit) and C2 (64-bit, which forks C2f without exec),
    then execs itself into a 32-bit image."""
    cmd = [progs.b64, "-m", "3", "-c", f"{progs.b32} -m 3", "-c", f"{progs.b64} -m 3 -f 2",
           "-E", progs.b32, "-m", "2"]
    run = run_session(cache, LIFECYCLE_STP.format(b64=progs.b64, b32=progs.b32), cmd)
    assert run.rc == 0, run.describe()
    procs = run.procs
    a64, = by_role(procs, "execd")
    a32, = [p for p in procs if p.pid == a64.pid and p.role == "main"]
    c1, = [p for p in procs if p.ppid == a64.pid and p.bits == 32]
    c2, = [p for p in procs if p.ppid == a64.pid and p.bits == 64]
    c2f, = by_role(procs, "forked")
    assert c2f.ppid == c2.pid and a32.bits == 32 and a64.ppid == run.pid
    # process.begin fires once per process image, as stap's does: in a forked
    # child at fork (still the parent's image), and in every image an exec starts.
    begins = Counter(tuple(int(x) if x.isdigit() else x for x in m)
                     for m in re.findall(r"^begin (\d+) (\d+) (\S+)$", run.out, re.M))
    assert begins == Counter([
        (a64.pid, run.pid, "biarch64"), (a32.pid, run.pid, "biarch32"),
        (c1.pid, a64.pid, "biarch64"), (c1.pid, a64.pid, "biarch32"),
        (c2.pid, a64.pid, "biarch64"), (c2.pid, a64.pid, "biarch64"),
        (c2f.pid, c2.pid, "biarch64")]), run.describe()
    assert run.pid not in {p for p, _, _ in begins}   # never the launcher's context
    # process.end: once at exit, in the final image, and, as in stap, once in each
    # image that execs away.
    ends = Counter(tuple(int(x) if x.isdigit() else x for x in m)
                   for m in re.findall(r"^end (\d+) (\S+)$", run.out, re.M))
    finals = Counter([(a32.pid, "biarch32"), (c1.pid, "biarch32"), (c2.pid, "biarch64"),
                      (c2f.pid, "biarch64")])
    exec_ends = Counter([(a64.pid, "biarch64"), (c1.pid, "biarch64"), (c2.pid, "biarch64")])
    assert ends == finals + exec_ends, run.describe()
    # process("PATH").begin/.end only in processes of that binary.
    assert sorted(re.findall(r"^begin32 (\d+)$", run.out, re.M)) == \
        sorted([str(a32.pid), str(c1.pid)]), run.describe()
    assert sorted(re.findall(r"^end64 (\d+)$", run.out, re.M)) == \
        sorted(str(p) for p in (c2.pid, c2f.pid, a64.pid, c1.pid, c2.pid)), run.describe()


RENAME_STP = """
global names
probe process("{b64}").mark("hit"), process("{b32}").mark("hit") {{ names[pid(), execname()]++ }}
probe process.begin {{ printf("begin %d %s\\n", pid(), execname()) }}
probe end {{ foreach ([p, n] in names) printf("name %d %s %d\\n", p, n, names[p, n]) }}
"""


def test_execname_follows_rename(progs: Progs, cache: Path) -> None:
    """stap's execname() is the task's current comm; here a process renames itself
    after 5 marks (prctl PR_SET_NAME) and hits 7 more.  (Once a bug: the name was
    cached per thread on first use.)"""
    cmd = [progs.b64, "-m", "5", "-n", "renamed64", "-p", "7",
           "-c", f"{progs.b32} -m 4 -n renamed32 -p 6"]
    run = run_session(cache, RENAME_STP.format(b64=progs.b64, b32=progs.b32), cmd)
    assert run.rc == 0, run.describe()
    p64, = [p for p in run.procs if p.bits == 64]
    p32, = [p for p in run.procs if p.bits == 32]
    names = {(int(p), n): int(k)
             for p, n, k in re.findall(r"^name (\d+) (\S+) (\d+)$", run.out, re.M)}
    assert names == {(p64.pid, "biarch64"): 5, (p64.pid, "renamed64"): 7,
                     (p32.pid, "biarch32"): 4, (p32.pid, "renamed32"): 6}, run.describe()


# ---- 8. segment hygiene -------------------------------------------------------------------

def _wait_for_segment(pid: int, deadline: float) -> list[str]:
    while time.monotonic() < deadline:
        segs = segments_of(pid)
        if segs:
            return segs
        time.sleep(0.01)
    return []


def _children(pid: int) -> list[int]:
    try:
        return [int(c) for c in Path(f"/proc/{pid}/task/{pid}/children").read_text().split()]
    except OSError:
        return []


def _alive(pid: int) -> bool:
    """Whether pid runs (a zombie does not)."""
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except (OSError, IndexError):
        return False
    return state not in ("Z", "X")


def test_segment_removed_after_normal_exit(progs: Progs, cache: Path) -> None:
    """The segment exists while the session runs (named after pydyn's pid, which is
    what the per-run check of run_session relies on) and is gone when pydyn exits."""
    cmd = [progs.b64, "-m", "100", "-c", f"{progs.b32} -m -1", "-k", "0:1500"]
    proc = start_session(cache, count_script(progs), cmd)
    try:
        seen = _wait_for_segment(proc.pid, time.monotonic() + 30)
        out, err = proc.communicate(timeout=TIMEOUT)
        leaked = segments_of(proc.pid)
    finally:
        cleanup(proc)
    assert seen, f"pydyn never created /dev/shm/pydyn.{proc.pid}.*\n{err}"
    assert proc.returncode == 0, err
    assert leaked == []


@pytest.mark.parametrize("sig", [
    pytest.param(signal.SIGINT, id="SIGINT"),
    pytest.param(signal.SIGTERM, id="SIGTERM"),
    pytest.param(signal.SIGHUP, id="SIGHUP"),
])
def test_segment_removed_when_pydyn_is_signalled(progs: Progs, cache: Path,
                                                 sig: signal.Signals) -> None:
    """pydyn signalled mid-run (Ctrl-C, kill, timeout(1), a closed terminal): the end
    probe runs, the target is stopped and the segment removed.  (Once a bug for
    SIGTERM/SIGHUP: no handler, so the segment and the target were left behind.)"""
    proc = start_session(cache, count_script(progs), [progs.b64, "-m", "-1"])
    targets: list[int] = []
    try:
        seen = _wait_for_segment(proc.pid, time.monotonic() + 30)
        assert seen, "pydyn never created its segment"
        deadline = time.monotonic() + 10
        while not targets and time.monotonic() < deadline:
            targets = _children(proc.pid)
            time.sleep(0.02)
        time.sleep(0.2)
        proc.send_signal(sig)
        try:
            proc.wait(timeout=TIMEOUT)
        except subprocess.TimeoutExpired:
            pass
        exited = proc.poll() is not None
        leftover = [t for t in targets if _alive(t)]
        leaked = segments_of(proc.pid)
    finally:
        cleanup(proc)       # kills targets left running (they hold the pipes open)
    out, err = proc.communicate()
    assert exited, f"pydyn did not exit after {sig.name}\n{err}"
    assert leaked == [], f"segment left behind\n{err}"
    assert leftover == [], f"pydyn left its target running: {leftover}\n{err}"
    assert re.search(r"^total [1-9]", out, re.M), out + err   # end ran, with counts
