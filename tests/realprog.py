"""Running real programs bare and under pydyn and comparing them (the acceptance tests
test_real_programs_accept.py, x86-64, and test_real_programs_i386.py, Debian's i386
programs): `compare` runs a command (sh -c) twice in two fresh directories, once bare,
once under pydyn with libc function probes (malloc, free, write) on every libc named,
asserts the same stdout, exit status and files, and returns what the probes saw
(`Traced`)."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
from collections.abc import Sequence
from pathlib import Path

import pytest
from cbuild import run_pydyn

LIBC = "/lib/x86_64-linux-gnu/libc.so.6"
TIMEOUT = 120
# fixed identities and dates: git's commit ids and tar's headers depend on them
ENV = {"GIT_AUTHOR_NAME": "a", "GIT_AUTHOR_EMAIL": "a@b", "GIT_COMMITTER_NAME": "a",
       "GIT_COMMITTER_EMAIL": "a@b", "GIT_AUTHOR_DATE": "@0 +0000",
       "GIT_COMMITTER_DATE": "@0 +0000", "LC_ALL": "C", "HOME": "/nonexistent"}
LIBC_FUNCTIONS = ("malloc", "free", "write")
LIBC_END = ('probe end { foreach (p in m) printf("malloc %d %d\\n", p, m[p]); '
            'foreach (p in f) printf("free %d %d\\n", p, f[p]); '
            'foreach (p in w) printf("write %d %d\\n", p, w[p]) }\n')


def libc_probes(libcs: Sequence[str]) -> str:
    """Counts per pid of malloc, free and write in m, f, w: one probe per libc, so a
    session of 64- and 32-bit processes counts each process in its own libc."""
    return "global m, f, w\n" + "".join(
        f'probe process("{libc}").function("{fn}") {{ {fn[0]}[pid()]++ }}\n'
        for libc in libcs for fn in LIBC_FUNCTIONS)


def need(*paths: str) -> None:
    for p in paths:
        if not (Path(p).exists() or shutil.which(p)):
            pytest.skip(f"{p} is not installed")


def tree(d: Path, skip: tuple[str, ...] = ()) -> dict[str, bytes]:
    return {str(p.relative_to(d)): p.read_bytes() for p in sorted(d.rglob("*"))
            if p.is_file() and not any(part in skip for part in p.relative_to(d).parts)}


class Traced:
    """A traced run: its result, the pids -v named with each one's ABI and executables
    (an exec names a pid again), the probe output's lines and the libc counts per pid."""

    def __init__(self, res: subprocess.CompletedProcess[str], out: Path) -> None:
        self.res = res
        self.abis: dict[int, str] = {}
        self.exes: dict[int, list[str]] = {}
        for m in re.finditer(r"^pydyn: attached pid (\d+) \(ppid \d+\) (m64|m32) (\S+)",
                             res.stderr, re.M):
            self.abis[int(m.group(1))] = m.group(2)
            self.exes.setdefault(int(m.group(1)), []).append(m.group(3))
        self.pids = set(self.abis)
        self.hits: dict[str, dict[int, int]] = {}
        self.lines = out.read_text().splitlines() if out.exists() else []
        for ln in self.lines:
            parts = ln.split()
            if len(parts) == 3 and parts[0] in LIBC_FUNCTIONS:
                self.hits.setdefault(parts[0], {})[int(parts[1])] = int(parts[2])

    def pids_of(self, abi: str) -> set[int]:
        return {p for p, a in self.abis.items() if a == abi}


def compare(cache: Path, tmp_path: Path, cmd: str, script: str = "",
            setup: dict[str, str] | None = None, skip: tuple[str, ...] = (),
            stderr_too: bool = False, libcs: Sequence[str] = (LIBC,)) -> Traced:
    """Runs `cmd` (sh -c) bare and under pydyn with the probes on `libcs` plus `script`;
    asserts the same stdout, status and files; returns what the probes saw."""
    dirs = []
    for name in ("bare", "traced"):
        d = tmp_path / name
        d.mkdir()
        for rel, text in (setup or {}).items():
            (d / rel).parent.mkdir(parents=True, exist_ok=True)
            (d / rel).write_text(text)
        dirs.append(d)
    cmd = f"{cmd}\necho \"exit status $?\""   # pydyn's own status is not the command's
    env = dict(os.environ, **ENV)
    bare = subprocess.run(["sh", "-c", cmd], cwd=dirs[0], env=env, capture_output=True,
                          text=True, timeout=TIMEOUT)
    out = tmp_path / "probes.out"
    old = os.getcwd()
    saved = {k: os.environ.get(k) for k in ENV}
    os.chdir(dirs[1])
    os.environ.update(ENV)
    try:
        res = run_pydyn(cache, "-v", "-o", str(out), "-e",
                        libc_probes(libcs) + script + LIBC_END,
                        "-c", f"sh -c {quote(cmd)}", timeout=TIMEOUT)
    finally:
        os.chdir(old)
        for k, v in saved.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v
    assert "Traceback" not in res.stderr, res.stderr
    assert res.returncode == 0, res.stderr[-3000:]
    assert res.stdout == bare.stdout
    if stderr_too:
        own = [ln for ln in res.stderr.splitlines()
               if not ln.startswith(("pydyn: ", "Pass ", "sites:"))]
        assert own == bare.stderr.splitlines(), res.stderr
    assert tree(dirs[1], skip) == tree(dirs[0], skip)
    assert "WARNING" not in res.stderr and "ERROR" not in res.stderr, res.stderr[-3000:]
    traced = Traced(res, out)
    assert traced.pids, res.stderr[-2000:]
    # the libc probes fired in every process of the session
    assert traced.pids <= set(traced.hits.get("malloc", {})), (traced.pids, traced.lines)
    assert set(traced.hits.get("free", {})) and set(traced.hits.get("write", {}))
    return traced


def quote(s: str) -> str:
    return "'" + s.replace("'", "'\\''") + "'"


PY_WORK = """import json, subprocess, sys, threading
def f(n):
    return n * 2
def work(k):
    for i in range(100):
        f(i)
ts = [threading.Thread(target=work, args=(k,)) for k in range(4)]
for t in ts: t.start()
for t in ts: t.join()
child = subprocess.run([sys.executable, "-c",
                        "def f(n):\\n    return n\\nfor i in range(50): f(i)\\nprint('child ok')"],
                       capture_output=True, text=True, check=True)
print(child.stdout.strip())
with open("out.json", "w") as fh:
    json.dump({"sum": sum(f(i) for i in range(10))}, fh)
print("done")
"""


def python_marks(*pys: str) -> str:
    """Counts per pid of calls of Python functions named f, from the function__entry
    mark of each interpreter of `pys`."""
    # python 3.11 reports calls it inlines (f's) only while a "line" probe is armed
    return ("global fe, lines\n" + "".join(
        f'probe process("{py}").mark("function__entry") '
        '{ if (user_string($arg2) == "f") fe[pid()]++ }\n'
        f'probe process("{py}").mark("line") {{ lines++ }}\n' for py in pys) +
        'probe end { foreach (p in fe) printf("f %d %d\\n", p, fe[p]) }\n')


def python_calls(t: Traced) -> list[int]:
    """python_marks' counts, one per process that called an f, sorted."""
    return sorted(int(ln.split()[2]) for ln in t.lines if ln.startswith("f "))


def check_python_work(t: Traced) -> None:
    """PY_WORK's output, and its calls of f counted exactly in both its processes."""
    assert t.res.stdout == "child ok\ndone\nexit status 0\n", t.res.stdout
    # the child, the parent's threads and main
    assert python_calls(t) == [50, 4 * 100 + 10], t.lines
