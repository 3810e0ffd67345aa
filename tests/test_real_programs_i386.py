"""Acceptance on Debian's i386 programs: python3.11 and coreutils built for i386, as
tests/fetch_i386.sh unpacks them into .i386/root of the checkout (`make i386-programs`,
which `make test` runs; no multiarch installation), run with the system's i386 loader
and libc (libc6-i386) and the unpacked tree's libraries on LD_LIBRARY_PATH.  As in
test_real_programs_accept.py each workload runs bare and under pydyn and must behave
byte for byte the same, with libc probes firing in every process and Python's marks
counting exactly; the mixed session has 64- and 32-bit processes in one pipeline."""

from __future__ import annotations

import functools
import re
import subprocess
from pathlib import Path

import pytest
from cbuild import run_pydyn
from realprog import LIBC, PY_WORK, Traced, check_python_work, compare, need, python_marks, quote

ROOT = Path(__file__).resolve().parents[1] / ".i386" / "root"
LIBPATH = f"{ROOT}/lib/i386-linux-gnu:{ROOT}/usr/lib/i386-linux-gnu"
LOADER = "/lib/ld-linux.so.2"
PY32 = f"{ROOT}/usr/bin/python3.11"
PY64 = "/usr/bin/python3.11"


def prog(rel: str) -> str:
    """The command starting the unpacked tree's program `rel` (usr/bin/sort, ...)."""
    return f"LD_LIBRARY_PATH={quote(LIBPATH)} {quote(str(ROOT / rel))}"


@functools.cache
def libc32() -> str:
    """The i386 libc the unpacked programs load, as the i386 loader resolves it."""
    need(LOADER)
    if not Path(PY32).exists():
        pytest.skip(f"Debian's i386 programs are not unpacked in {ROOT.parent} "
                    "(run `make i386-programs`)")
    res = subprocess.run([LOADER, "--list", PY32], env={"LD_LIBRARY_PATH": LIBPATH},
                         capture_output=True, text=True, timeout=30)
    m = re.search(r"^\s*libc\.so\.6 => (\S+)", res.stdout, re.M)
    assert res.returncode == 0 and m, res.stdout + res.stderr
    return m.group(1)


def i386_pids(t: Traced, exe: str) -> set[int]:
    """The pids that ran `exe`: each must have run it as an m32 process."""
    pids = {p for p, exes in t.exes.items() if exe in exes}
    assert pids and all(t.abis[p] == "m32" for p in pids), t.res.stderr
    return pids


def test_i386_python_threads_and_subprocess(cache: Path, tmp_path: Path) -> None:
    libc = libc32()
    t = compare(cache, tmp_path, f"{prog('usr/bin/python3.11')} w.py",
                script=python_marks(PY32), setup={"w.py": PY_WORK}, libcs=(LIBC, libc))
    check_python_work(t)
    assert len(i386_pids(t, PY32)) == 2, t.res.stderr   # the parent and its child


def test_i386_coreutils(cache: Path, tmp_path: Path) -> None:
    libc = libc32()
    nums = "".join(f"{(i * 7919) % 1000}\n" for i in range(2000))
    cmd = (f"{prog('usr/bin/sort')} -n nums > sorted && "
           f"{prog('usr/bin/sort')} -rn nums | {prog('usr/bin/uniq')} -c | "
           f"{prog('usr/bin/head')} -3 && {prog('bin/ls')} -1 && "
           f"{prog('usr/bin/sha256sum')} sorted")
    t = compare(cache, tmp_path, cmd, setup={"nums": nums}, libcs=(LIBC, libc))
    assert "sorted\n" in t.res.stdout, t.res.stdout
    for rel in ("usr/bin/sort", "usr/bin/uniq", "usr/bin/head", "bin/ls",
                "usr/bin/sha256sum"):
        i386_pids(t, str(ROOT / rel))
    assert len(t.pids_of("m32")) == 6, t.res.stderr   # sort twice, uniq, head, ls, sha256sum


GEN = """def f(n):
    return (n * 7919) % 1000
for i in range(2000):
    print(f(i))
"""
DOUBLE = """import sys
def f(line):
    return int(line) * 2
for line in sys.stdin:
    print(f(line))
"""


def test_biarch_pipeline(cache: Path, tmp_path: Path) -> None:
    """A 64-bit bash runs one pipeline of i386 and x86-64 programs: the probes on both
    libcs and the marks of both pythons fire, each in the processes of its ABI."""
    libc = libc32()
    need("bash", PY64)
    script = ("set -e -o pipefail\n"
              f"{prog('usr/bin/python3.11')} gen.py | {PY64} double.py | sort -n | "
              f"{prog('usr/bin/uniq')} -c > counts\n"
              f"{prog('usr/bin/head')} -2 counts\nsha256sum counts\nexit 4\n")
    t = compare(cache, tmp_path, "bash ./s.sh", script=python_marks(PY32, PY64),
                setup={"s.sh": script, "gen.py": GEN, "double.py": DOUBLE},
                libcs=(LIBC, libc))
    assert t.res.stdout.endswith("exit status 4\n"), t.res.stdout
    assert t.res.stdout.startswith("      2 0\n      2 2\n"), t.res.stdout
    m32, m64 = t.pids_of("m32"), t.pids_of("m64")
    assert len(m32) == 3 and len(m64) >= 5, t.res.stderr   # sh, bash, its subshells, ...
    calls = {t.abis[int(pid)]: int(n) for _, pid, n in
             (ln.split() for ln in t.lines if ln.startswith("f "))}
    assert calls == {"m32": 2000, "m64": 2000}, t.lines
    i386_pids(t, PY32)


def test_defined_per_abi_in_one_session(cache: Path) -> None:
    """last_100_frees.stp's guard on both libcs at once: the x86-64 one has DWARF
    (libc6-dbg) and takes the @defined branch, the i386 one has none and takes the
    other, each counted in its own processes of one pipeline."""
    libc = libc32()
    need(LIBC)
    if not list(Path("/usr/lib/debug/.build-id").glob("*/*.debug")):
        pytest.skip("libc's DWARF is not installed (apt-get install libc6-dbg)")
    script = ("global named, unnamed\n"
              f'probe process("{LIBC}").function("free"), process("{libc}").function("free") '
              "{ if (@defined($mem)) { if ($mem) named[execname()]++ } "
              "else unnamed[execname()]++ }\n"
              'probe end { foreach (p in named) printf("named %s\\n", p); '
              'foreach (p in unnamed) printf("unnamed %s\\n", p) }')
    res = run_pydyn(cache, "-e", script, "-c",
                    f"sh -c '{prog('bin/ls')} -R /usr/share/doc | /usr/bin/sort > /dev/null'",
                    timeout=180)
    assert res.returncode == 0 and "Traceback" not in res.stderr, res.stderr[-3000:]
    got = {tuple(ln.split()) for ln in res.stdout.splitlines()}
    # the i386 ls alone runs the i386 libc; sort and the shells the x86-64 one
    assert {n for k, n in got if k == "unnamed"} == {"ls"}, res.stdout
    assert "sort" in {n for k, n in got if k == "named"}, res.stdout
    assert ("named", "ls") not in got, res.stdout
