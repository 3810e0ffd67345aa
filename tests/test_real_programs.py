"""Real programs under a root session: targets that change user on their way.

A root session's command may drop privileges before it loads the module
(`runuser`, `setpriv`) or after (a daemon calling setuid): every process of the
session must still load the module and reach the segment, so the counts are
exact.  PostgreSQL started by root through `runuser -u postgres` is traced too.
"""

from __future__ import annotations

import os
import pwd
import re
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from cbuild import build_c, have_m32, run_pydyn

pytestmark = pytest.mark.skipif(os.geteuid() != 0, reason="needs root (changes user)")

DROP_C = r"""
#include <sys/sdt.h>
#include <grp.h>
#include <pwd.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
int main(int argc, char **argv) {
    int n = atoi(argv[1]);
    DTRACE_PROBE1(drop, hit, -1);          /* once before, as whoever started us */
    if (argc > 2 && strcmp(argv[2], "setuid") == 0) {
        struct passwd *pw = getpwnam("nobody");
        if (!pw || setgroups(0, NULL) || setgid(pw->pw_gid) || setuid(pw->pw_uid)) {
            perror("drop");
            return 2;
        }
    }
    for (int i = 0; i < n; i++)
        DTRACE_PROBE1(drop, hit, i);
    printf("uid %d\n", (int)geteuid());
    return 0;
}
"""


@pytest.fixture(scope="module")
def shared_dir() -> Iterator[Path]:
    """A directory `nobody` can search: pytest's tmp_path lives under a 0700 dir."""
    d = Path(tempfile.mkdtemp(prefix="pydyn-test-users-"))
    d.chmod(0o755)
    yield d
    shutil.rmtree(d, ignore_errors=True)


@pytest.fixture(scope="module", params=["m64", "m32"])
def drop_prog(request: pytest.FixtureRequest, shared_dir: Path, sdt_cflags: object) -> Path:
    m32 = request.param == "m32"
    if m32 and not have_m32():
        pytest.skip("no -m32 toolchain (gcc-multilib)")
    src = shared_dir / "drop.c"
    src.write_text(DROP_C)
    out = build_c(src, shared_dir / f"drop_{request.param}", m32=m32)
    out.chmod(0o755)
    return out


def _count(prog: Path) -> str:
    return (f'global n, bad probe process("{prog}").mark("hit") {{ n++ }} '
            'probe end { printf("n=%d\\n", n) }')


NOBODY = pwd.getpwnam("nobody").pw_uid


@pytest.mark.parametrize("how", ["setuid", "setpriv", "runuser"])
def test_command_that_changes_user_is_traced(drop_prog: Path, cache: Path, how: str) -> None:
    n = 250
    cmd = {"setuid": f"{drop_prog} {n} setuid",
           "setpriv": f"setpriv --reuid=nobody --regid=nogroup --clear-groups {drop_prog} {n}",
           "runuser": f"runuser -u nobody -- {drop_prog} {n}"}[how]
    if shutil.which(cmd.split()[0]) is None and how != "setuid":
        pytest.skip(f"{how} not installed")
    res = run_pydyn(cache, "-e", _count(drop_prog), "-c", cmd, timeout=60)
    assert res.returncode == 0, res.stderr
    assert f"uid {NOBODY}\n" in res.stdout, res.stdout + res.stderr
    assert f"n={n + 1}\n" in res.stdout, res.stdout + res.stderr
    assert "cannot be preloaded" not in res.stderr, res.stderr


def test_staged_modules_are_root_s_readable_and_removed(drop_prog: Path,
                                                       cache: Path) -> None:
    """What the processes load: root's, 0755 and 0644, and gone once the session ended."""
    cmd = ("sh -c 'd=${PYDYN_PRELOAD%%/\\$LIB/*}; echo dir=$d; "
           "stat -c \"%U %a %n\" $d $d/*.so'")
    res = run_pydyn(cache, "-e", _count(drop_prog), "-c", cmd, timeout=60)
    assert res.returncode == 0, res.stderr
    lines = res.stdout.splitlines()
    staged = next(ln[4:] for ln in lines if ln.startswith("dir="))
    assert "/.cache/" not in staged and staged.startswith("/"), staged
    modes = [ln.split()[:2] for ln in lines if ln.startswith("root ")]
    assert modes[0] == ["root", "755"], lines
    assert len(modes) >= 3 and all(m == ["root", "644"] for m in modes[1:]), lines
    assert not os.path.exists(staged), staged


POSTGRES_BIN = Path("/usr/lib/postgresql/15/bin")


@pytest.fixture(scope="module")
def pg_cluster(shared_dir: Path) -> Path:
    if not (POSTGRES_BIN / "postgres").exists() or shutil.which("psql") is None:
        pytest.skip("PostgreSQL 15 is not installed (apt-get install postgresql-15)")
    try:
        pw = pwd.getpwnam("postgres")
    except KeyError:
        pytest.skip("no postgres user")
    data = shared_dir / "pgdata"
    data.mkdir()
    os.chown(data, pw.pw_uid, pw.pw_gid)
    res = subprocess.run(["runuser", "-u", "postgres", "--", str(POSTGRES_BIN / "initdb"),
                          "-D", str(data), "-A", "trust", "-U", "postgres"],
                         capture_output=True, text=True, timeout=120)
    assert res.returncode == 0, res.stderr
    return data


def _psql(port: int, sock: Path, *sql: str) -> subprocess.CompletedProcess[str]:
    """One connection (one backend); each statement its own -c, its own transaction."""
    return subprocess.run(["psql", "-X", "-q", "-tA", "-h", str(sock), "-p", str(port), "-U",
                           "postgres", "-d", "postgres", *(a for q in sql for a in ("-c", q))],
                          capture_output=True, text=True, timeout=30)


def test_postgres_started_through_runuser_is_traced(pg_cluster: Path, shared_dir: Path,
                                                    cache: Path) -> None:
    """Root runs the postmaster as postgres; every backend's commits are counted."""
    postgres = POSTGRES_BIN / "postgres"
    marks = subprocess.run(["readelf", "-n", str(postgres)], capture_output=True,
                           text=True).stdout
    if "transaction__commit" not in marks:
        pytest.skip("this postgres has no USDT marks (built without --enable-dtrace)")
    sock = shared_dir / "sock"
    sock.mkdir(exist_ok=True)
    os.chown(sock, pwd.getpwnam("postgres").pw_uid, -1)
    port = 54321 + os.getpid() % 1000
    n = 15
    script = (f'global commits probe process("{postgres}").mark("transaction__commit") '
              '{ commits[pid()]++ } '
              'probe end { foreach (p in commits) printf("pid %d commits %d\\n", p, commits[p]) }')
    env = dict(os.environ, PYDYN_CACHE_DIR=str(cache))
    proc = subprocess.Popen(
        [sys.executable, "-m", "pydyn.launcher.cli", "-e", script, "-c",
         f"runuser -u postgres -- {postgres} -D {pg_cluster} -k {sock} -p {port} "
         "-c listen_addresses= -c autovacuum=off"],
        env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        deadline = time.monotonic() + 60
        while _psql(port, sock, "select 1").returncode != 0:
            assert proc.poll() is None, proc.communicate()
            assert time.monotonic() < deadline, "postgres did not start"
            time.sleep(0.3)
        _psql(port, sock, "create table pydyn_t (i int)")
        # Two backends that differ by n autocommitted inserts: whatever a backend
        # commits on its own (start-up, catalog reads), the difference is exactly n.
        base = _psql(port, sock, "select pg_backend_pid()")
        work = _psql(port, sock, "select pg_backend_pid()",
                     *(f"insert into pydyn_t values ({i})" for i in range(n)))
        assert base.returncode == 0 and work.returncode == 0, base.stderr + work.stderr
        subprocess.run(["runuser", "-u", "postgres", "--", str(POSTGRES_BIN / "pg_ctl"),
                        "-D", str(pg_cluster), "-m", "fast", "stop"],
                       capture_output=True, timeout=60)
        out, err = proc.communicate(timeout=60)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.communicate()
    assert proc.returncode == 0, err
    assert "cannot be preloaded" not in err, err
    commits = {int(ln.split()[1]): int(ln.split()[3]) for ln in out.splitlines()
               if ln.startswith("pid ")}
    base_pid, work_pid = int(base.stdout.split()[0]), int(work.stdout.split()[0])
    assert base_pid in commits and work_pid in commits, (out, err)
    assert commits[work_pid] - commits[base_pid] == n, out


def test_staged_directories_of_dead_launchers_are_removed(drop_prog: Path,
                                                          cache: Path) -> None:
    """A launcher killed with SIGKILL leaves its staged modules; the next root session
    removes them once no process maps them, and keeps those still mapped."""
    from pydyn.launcher.share import PREFIX, stage_parent
    dead = subprocess.Popen(["true"])
    dead.wait()
    parent = Path(stage_parent())
    stale, busy = parent / f"{PREFIX}{dead.pid}.aaaa", parent / f"{PREFIX}{dead.pid}.bbbb"
    for d in (stale, busy):
        (d / "lib").mkdir(parents=True)
        (d / "lib" / "m.so").write_bytes(b"\0" * 4096)
    holder = subprocess.Popen([sys.executable, "-c", "import mmap, sys; f = open(sys.argv[1]); "
                               "m = mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ); "
                               "print('mapped', flush=True); sys.stdin.read()",
                               str(busy / "lib" / "m.so")],
                              stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    try:
        assert holder.stdout is not None and holder.stdout.readline() == "mapped\n"
        res = run_pydyn(cache, "-e", _count(drop_prog), "-c", f"{drop_prog} 1", timeout=60)
        assert res.returncode == 0, res.stderr
        assert not stale.exists()
        assert busy.exists()
    finally:
        holder.communicate("")
        shutil.rmtree(busy, ignore_errors=True)
        shutil.rmtree(stale, ignore_errors=True)


LIBPAM = "/lib/x86_64-linux-gnu/libpam.so.0"


def test_root_runs_su_itself_with_pam_probes(cache: Path, shared_dir: Path) -> None:
    """`su` is setuid root: root running it is no secure-mode exec, so LD_PRELOAD holds and
    `-c su ...` (no shell line around it) is traced, PAM's functions counted; a setuid
    program of another owner is still refused in one line."""
    if shutil.which("su") is None or not Path(LIBPAM).exists():
        pytest.skip("su or libpam is not installed")
    script = (f'global c probe process("{LIBPAM}").function("pam_start"), '
              f'process("{LIBPAM}").function("pam_end") {{ c[ppfunc()]++ }} '
              'probe end { foreach (f+ in c) printf("%s %d\\n", f, c[f]) }')
    res = run_pydyn(cache, "-e", script, "-c", "su -s /bin/sh -c 'id -un' nobody",
                    timeout=180)
    assert res.returncode == 0, res.stderr
    lines = res.stdout.splitlines()   # su's child ends its copy of the PAM handle too
    assert lines[0] == "nobody" and lines[2] == "pam_start 1", res.stdout
    assert re.fullmatch(r"pam_end [12]", lines[1]), res.stdout
    other = shared_dir / "setuid_true"
    shutil.copy("/bin/true", other)
    os.chown(other, NOBODY, -1)
    other.chmod(0o4755)
    res = run_pydyn(cache, "-e", "probe process.begin { next }", "-c", str(other))
    assert res.returncode == 1 and "Traceback" not in res.stderr
    assert res.stderr.strip() == (f"pydyn: error: {other}: is setuid/setgid: the dynamic "
                                  "linker ignores LD_PRELOAD for it (unless its owner runs it)")


def test_attach_to_a_running_postgres_backend(pg_cluster: Path, shared_dir: Path,
                                              cache: Path) -> None:
    """`-x` on a backend serving a psql session: its queries from `query__start`, the
    parse calls with a backtrace through postgres's own functions, and the session ends
    with the backend, the backend unharmed (the queries after the attach answer)."""
    postgres = POSTGRES_BIN / "postgres"
    marks = subprocess.run(["readelf", "-n", str(postgres)], capture_output=True,
                           text=True).stdout
    if "query__start" not in marks:
        pytest.skip("this postgres has no USDT marks (built without --enable-dtrace)")
    sock = shared_dir / "sock-x"
    sock.mkdir(exist_ok=True)
    os.chown(sock, pwd.getpwnam("postgres").pw_uid, -1)
    port = 55321 + os.getpid() % 1000
    pg_ctl = ["runuser", "-u", "postgres", "--", str(POSTGRES_BIN / "pg_ctl"), "-D",
              str(pg_cluster)]
    script = (f'global q probe process("{postgres}").mark("query__start") '
              '{ q[user_string($arg1)]++ } '
              f'probe process("{postgres}").function("pg_parse_query") '
              '{ printf("parse\\n"); print_ubacktrace() } '
              'probe end { foreach (s+ in q) printf("query %s\\n", s) }')
    # built first: the attach must come while the backend sleeps
    assert run_pydyn(cache, "-p4", "-e", script, timeout=300).returncode == 0
    subprocess.run([*pg_ctl, "-o", f"-k {sock} -p {port} -c listen_addresses=", "-w",
                    "start"], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                   check=True, timeout=60)   # the server keeps what it inherits open
    try:
        psql = subprocess.Popen(
            ["psql", "-X", "-q", "-tA", "-h", str(sock), "-p", str(port), "-U", "postgres",
             "-c", "select pg_backend_pid()", "-c", "select pg_sleep(4)",
             "-c", "select 40 + 2", "-c", "select count(*) > 0 from pg_class"],
            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        assert psql.stdout is not None
        backend = int(psql.stdout.readline())
        res = run_pydyn(cache, "-x", str(backend), "-T", "120", "-e", script, timeout=180)
        out, err = psql.communicate(timeout=60)
    finally:
        subprocess.run([*pg_ctl, "-m", "fast", "-w", "stop"], stdout=subprocess.DEVNULL,
                       stderr=subprocess.DEVNULL, timeout=60)
    assert psql.returncode == 0 and out.splitlines() == ["", "42", "t"], out + err
    assert res.returncode == 0 and "Traceback" not in res.stderr, res.stderr
    lines = res.stdout.splitlines()
    assert [ln for ln in lines if ln.startswith("query ")] == [
        "query select 40 + 2", "query select count(*) > 0 from pg_class"], res.stdout
    assert lines.count("parse") == 2, res.stdout
    assert re.search(r"^ 0x[0-9a-f]+ : pg_parse_query\+0x0/0x[0-9a-f]+ \[.*postgres\]$",
                     res.stdout, re.M), res.stdout
    assert re.search(r"^ 0x[0-9a-f]+ : PostgresMain\+0x", res.stdout, re.M), res.stdout
