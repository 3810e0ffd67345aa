"""Acceptance on real Debian programs: under pydyn each behaves byte for byte as it
does untraced (stdout, exit status, the files it writes), while libc function probes
(malloc, free, write) fire in every process of the session and the programs' own
marks count exactly where the count is known.  Each workload runs twice, in two fresh
directories: once bare, once under pydyn (probe output to -o, so stdout stays the
program's own); -v names every process of the session.  x86-64 programs here;
Debian's i386 programs are test_real_programs_i386.py's."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
from realprog import PY_WORK, check_python_work, compare, need, python_marks, quote

PY = "/usr/bin/python3.11"
JAVA = "/usr/lib/jvm/java-17-openjdk-amd64/bin/java"
LIBJVM = "/usr/lib/jvm/java-17-openjdk-amd64/lib/server/libjvm.so"


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


def test_python_threads_and_subprocess(cache: Path, tmp_path: Path) -> None:
    need(PY)
    check_python_work(compare(cache, tmp_path, f"{PY} w.py", script=python_marks(PY),
                              setup={"w.py": PY_WORK}))


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

