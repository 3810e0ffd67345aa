"""Acceptance on real Debian programs: under pydyn each behaves byte for byte as it
does untraced (stdout, exit status, the files it writes), while libc function probes
(malloc, free, write) fire in every process of the session and the programs' own
marks count exactly where the count is known.  Each workload runs twice, in two fresh
directories: once bare, once under pydyn (probe output to -o, so stdout stays the
program's own); -v names every process of the session.  x86-64 programs only: this
Debian has no i386 architecture enabled (the m32 runtime is covered by the C programs
of the other tests)."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
from pathlib import Path

import pytest
from cbuild import run_pydyn

LIBC = "/lib/x86_64-linux-gnu/libc.so.6"
PY = "/usr/bin/python3.11"
JAVA = "/usr/lib/jvm/java-17-openjdk-amd64/bin/java"
LIBJVM = "/usr/lib/jvm/java-17-openjdk-amd64/lib/server/libjvm.so"
TIMEOUT = 120
# fixed identities and dates: git's commit ids and tar's headers depend on them
ENV = {"GIT_AUTHOR_NAME": "a", "GIT_AUTHOR_EMAIL": "a@b", "GIT_COMMITTER_NAME": "a",
       "GIT_COMMITTER_EMAIL": "a@b", "GIT_AUTHOR_DATE": "@0 +0000",
       "GIT_COMMITTER_DATE": "@0 +0000", "LC_ALL": "C", "HOME": "/nonexistent"}

LIBC_PROBES = (f'global m, f, w\n'
               f'probe process("{LIBC}").function("malloc") {{ m[pid()]++ }}\n'
               f'probe process("{LIBC}").function("free") {{ f[pid()]++ }}\n'
               f'probe process("{LIBC}").function("write") {{ w[pid()]++ }}\n')
LIBC_END = ('probe end { foreach (p in m) printf("malloc %d %d\\n", p, m[p]); '
            'foreach (p in f) printf("free %d %d\\n", p, f[p]); '
            'foreach (p in w) printf("write %d %d\\n", p, w[p]) }\n')


def need(*paths: str) -> None:
    for p in paths:
        if not (Path(p).exists() or shutil.which(p)):
            pytest.skip(f"{p} is not installed")


def tree(d: Path, skip: tuple[str, ...] = ()) -> dict[str, bytes]:
    return {str(p.relative_to(d)): p.read_bytes() for p in sorted(d.rglob("*"))
            if p.is_file() and not any(part in skip for part in p.relative_to(d).parts)}


class Traced:
    def __init__(self, res: subprocess.CompletedProcess[str], out: Path) -> None:
        self.res = res
        self.pids = {int(m.group(1)) for m in
                     re.finditer(r"^pydyn: attached pid (\d+) ", res.stderr, re.M)}
        self.hits: dict[str, dict[int, int]] = {}
        self.lines = out.read_text().splitlines() if out.exists() else []
        for ln in self.lines:
            parts = ln.split()
            if len(parts) == 3 and parts[0] in ("malloc", "free", "write"):
                self.hits.setdefault(parts[0], {})[int(parts[1])] = int(parts[2])


def compare(cache: Path, tmp_path: Path, cmd: str, script: str = "",
            setup: dict[str, str] | None = None, skip: tuple[str, ...] = (),
            stderr_too: bool = False) -> Traced:
    """Runs `cmd` (sh -c) bare and under pydyn with the libc probes plus `script`;
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
        res = run_pydyn(cache, "-v", "-o", str(out), "-e", LIBC_PROBES + script + LIBC_END,
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


BASH_SCRIPT = """set -e
seq 1 300 | sort -rn | head -5 > top.txt
( mkdir -p sub && cd sub && echo inner > inner.txt )
x=$(echo hello | tr a-z A-Z); echo "$x"
for i in 1 2 3; do echo "$i"; done | wc -l
{ echo a; echo b; } | cat -n > ab.txt
cat top.txt
exit 3
"""


def test_bash_pipes_and_subshells(cache: Path, tmp_path: Path) -> None:
    need("bash")
    t = compare(cache, tmp_path, "bash ./s.sh", setup={"s.sh": BASH_SCRIPT})
    assert t.res.stdout.endswith("exit status 3\n"), t.res.stdout
    assert len(t.pids) >= 8, t.res.stderr   # bash, its subshells, seq, sort, head, tr, ...


def test_coreutils_sort_tar_gzip(cache: Path, tmp_path: Path) -> None:
    need("sort", "tar", "gzip")
    nums = "".join(f"{(i * 7919) % 1000}\n" for i in range(2000))
    cmd = ("sort -n nums > sorted && tar --sort=name --mtime=@0 --owner=0 --group=0 "
           "--numeric-owner -cf a.tar sorted nums && gzip -n -k a.tar && "
           "gzip -dc a.tar.gz | tar -tvf - && sha256sum a.tar.gz")
    t = compare(cache, tmp_path, cmd, setup={"nums": nums})
    assert len(t.pids) >= 6


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


def test_python_threads_and_subprocess(cache: Path, tmp_path: Path) -> None:
    need(PY)
    # python 3.11 reports calls it inlines (f's) only while a "line" probe is armed
    script = (f'global fe, lines\nprobe process("{PY}").mark("function__entry") '
              '{ if (user_string($arg2) == "f") fe[pid()]++ }\n'
              f'probe process("{PY}").mark("line") {{ lines++ }}\n'
              'probe end { foreach (p in fe) printf("f %d %d\\n", p, fe[p]) }\n')
    t = compare(cache, tmp_path, f"{PY} w.py", script=script, setup={"w.py": PY_WORK})
    assert t.res.stdout == "child ok\ndone\nexit status 0\n", t.res.stdout
    counts = sorted(int(ln.split()[2]) for ln in t.lines if ln.startswith("f "))
    assert counts == [50, 4 * 100 + 10], t.lines   # the child, the parent's threads and main


def test_gcc_compiles(cache: Path, tmp_path: Path) -> None:
    need("gcc")
    src = "#include <stdio.h>\nint main(void) { puts(\"compiled\"); return 0; }\n"
    t = compare(cache, tmp_path, "gcc -O2 -o hello hello.c && ./hello",
                setup={"hello.c": src})
    assert len(t.pids) >= 5, t.res.stderr   # gcc, cc1, as, collect2, ld, hello


def test_git_init_commit(cache: Path, tmp_path: Path) -> None:
    need("git")
    cmd = ("git init -q -b main . && git add a.txt && git commit -q -m first && "
           "git rev-parse HEAD && git log --format=%s")
    compare(cache, tmp_path, cmd, setup={"a.txt": "hello\n"}, skip=(".git",))


def test_perl(cache: Path, tmp_path: Path) -> None:
    need("perl")
    prog = ('my %h; $h{$_}++ for split //, "hello world"; '
            'print join(",", map {"$_=$h{$_}"} sort keys %h), "\\n"; '
            'open my $f, ">", "p.txt" or die; print $f "x" x 1000; close $f; '
            'print `echo from-child`;')
    compare(cache, tmp_path, f"perl -e {quote(prog)}")


@pytest.mark.parametrize("argv", ["runuser -u root -- /bin/echo hi",
                                  "su -c 'echo hi' root",
                                  "setpriv --reuid=0 /bin/echo hi"],
                         ids=["runuser", "su", "setpriv"])
def test_privilege_programs(cache: Path, tmp_path: Path, argv: str) -> None:
    if os.geteuid() != 0:
        pytest.skip("runuser, su and setpriv to root need root")
    need(argv.split()[0])
    t = compare(cache, tmp_path, argv)
    assert t.res.stdout == "hi\nexit status 0\n"


def test_java_version(cache: Path, tmp_path: Path) -> None:
    need(JAVA, LIBJVM)
    script = (f'global init\nprobe process("{LIBJVM}").mark("vm__init__end") {{ init++ }}\n'
              'probe end { printf("init %d\\n", init) }\n')
    t = compare(cache, tmp_path, f"{JAVA} -version", script=script, stderr_too=True)
    assert "init 1" in t.lines, t.lines

