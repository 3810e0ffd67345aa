"""The commands README.md, docs/guide.md and docs/language.md show print, run again,
what the pages say.

A code block's `$ CMD` lines are commands (a line whose quotes are still open goes on
on the next lines); the lines after one, up to the next `$`, are its output as a
terminal shows it (stdout and stderr).  `pydyn` and `cat` commands run in a shell at
the top of the checkout, with this interpreter's pydyn first on PATH; `CMD &` starts a
program in the background, and `$!` in later commands of the block is its pid.  Pids,
addresses, hashes and the checkout's path may differ (`normalise`); an HTML comment
right before a block says what else may:

    <!-- doctest: numbers vary -->                 timings and counts that depend on them
    <!-- doctest: unordered, first column varies -->   e.g. one line per pid, any order
    <!-- doctest: skip REASON -->                  not run (the reason is shown)
    <!-- doctest: postgres -->   run against a PostgreSQL 15 server this test starts (as
                                 root, for user postgres): the page's postmaster.pid is
                                 that server's, and psql runs a create, an insert and a
                                 failing select while the session lasts

A command naming a program under /usr that is not installed is skipped, saying which.
"""

from __future__ import annotations

import os
import re
import shlex
import shutil
import signal
import subprocess
import tempfile
import time
from collections.abc import Generator, Iterator
from pathlib import Path

import pytest
from cbuild import pydyn_argv, pydyn_env

ROOT = Path(__file__).resolve().parent.parent
PAGES = ("README.md", "docs/guide.md", "docs/language.md")
DOC_ROOT = "/home/me/pydyn"           # the checkout as the pages show it
DOC_CACHE = "/home/me/.cache/pydyn"   # the module cache as the pages show it
RUNNABLE = ("pydyn", "cat", "sudo")
PG_BIN = Path("/usr/lib/postgresql/15/bin")
PG_PIDFILE = "/var/lib/postgresql/15/main/postmaster.pid"   # as the guide names it


class Example:
    """One `$ CMD` line of a page and the output shown under it."""

    def __init__(self, page: str, line: int, command: str, modes: frozenset[str]) -> None:
        self.page, self.line, self.command, self.modes = page, line, command, modes
        self.expected: list[str] = []

    @property
    def background(self) -> bool:
        return self.command.endswith("&")

    def __str__(self) -> str:
        return f"{self.page}:{self.line}: $ {self.command}"


def _complete(command: str) -> bool:
    try:
        shlex.split(command)
    except ValueError:
        return False
    return True


def iter_blocks(page: str) -> Iterator[list[Example]]:
    """The examples of each code block of `page` that has `$ ` lines, in order."""
    lines = (ROOT / page).read_text().splitlines()
    modes: frozenset[str] = frozenset()
    i = 0
    while i < len(lines):
        text = lines[i]
        directive = re.fullmatch(r"<!-- doctest: (.*) -->", text.strip())
        if directive:
            modes = frozenset(m.strip() for m in directive.group(1).split(","))
        elif text.startswith("```"):
            block: list[Example] = []
            i += 1
            while i < len(lines) and not lines[i].startswith("```"):
                if lines[i].startswith("$ "):
                    example = Example(page, i + 1, lines[i][2:], modes)
                    while not _complete(example.command) and i + 1 < len(lines):
                        i += 1
                        example.command += "\n" + lines[i]
                    block.append(example)
                elif block:
                    block[-1].expected.append(lines[i])
                i += 1
            if block:
                yield block
            modes = frozenset()
        elif text.strip():
            modes = frozenset()
        i += 1


def _blocks() -> list[list[Example]]:
    return [block for page in PAGES for block in iter_blocks(page)]


def normalise(lines: list[str], modes: frozenset[str]) -> list[str]:
    """What must be equal of the shown and the real output."""
    out = []
    for text in lines:
        text = re.sub(r"0x[0-9a-f]{5,}", "0xADDR", text)
        text = re.sub(r"(?<![0-9a-f])[0-9a-f]{16,}(?![0-9a-f])", "HASH", text)
        text = re.sub(r"\b(pid|ppid) \d+", r"\1 N", text)
        text = re.sub(r"stopped for \d+ms", "stopped for Nms", text)
        if "numbers vary" in modes:
            text = re.sub(r"@+", "", re.sub(r"\d+", "N", text))
            text = " ".join(text.split())
        if "first column varies" in modes:
            text = re.sub(r"^\S+", "X", text)
        out.append(text.rstrip())
    if "numbers vary" in modes:   # a histogram's rows: how many depends on the values
        out = [t for k, t in enumerate(out) if k == 0 or t != out[k - 1]]
    return sorted(out) if "unordered" in modes else out


def _missing_program(command: str) -> str | None:
    for path in re.findall(r"/usr/[^\s'\"()]+", command):
        if not any(Path("/").glob(path.lstrip("/"))):
            return path
    return None


def _actual(text: str, cache: Path) -> list[str]:
    text = text.replace(str(cache), DOC_CACHE).replace(str(ROOT), DOC_ROOT)
    lines = text.splitlines()
    return lines


@pytest.fixture(scope="module")
def shell_env(cache: Path, tmp_path_factory: pytest.TempPathFactory) -> dict[str, str]:
    """The environment of the pages' commands: `pydyn` is this checkout's, with `cache`."""
    bindir = tmp_path_factory.mktemp("docbin")
    wrapper = bindir / "pydyn"
    wrapper.write_text("#!/bin/sh\nexec " + shlex.join(pydyn_argv()) + ' "$@"\n')
    wrapper.chmod(0o755)
    env = pydyn_env(cache)
    env["PATH"] = f"{bindir}:{env.get('PATH', '/usr/bin:/bin')}"
    return env


@pytest.fixture(scope="module")
def examples_built() -> None:
    res = subprocess.run(["make", "-s", "-C", str(ROOT), "examples"], capture_output=True,
                         text=True)
    if res.returncode != 0:
        pytest.fail(f"make examples: {res.stderr}")


def _postgres_server(tmp: Path) -> Generator[Path, None, None]:
    """A PostgreSQL 15 cluster of user postgres in `tmp` (a directory postgres can
    reach: pytest's own are root's 0700), started; yields its pid file."""
    import pwd
    try:
        pwd.getpwnam("postgres")
    except KeyError:
        pytest.skip("no user postgres (apt-get install postgresql-15)")
    if os.geteuid() != 0:
        pytest.skip("starting a server as user postgres needs root")
    data = tmp / "pgdata"
    as_pg = ["runuser", "-u", "postgres", "--"]
    subprocess.run(["chown", "postgres", str(tmp)], check=True)
    subprocess.run([*as_pg, str(PG_BIN / "initdb"), "-D", str(data)], check=True,
                   capture_output=True)
    subprocess.run([*as_pg, str(PG_BIN / "pg_ctl"), "-D", str(data), "-w", "-o",
                    f"-p 5439 -k {tmp} -c listen_addresses=''", "-l", str(tmp / "log"),
                    "start"], check=True, capture_output=True)
    try:
        yield data / "postmaster.pid"
    finally:
        subprocess.run([*as_pg, str(PG_BIN / "pg_ctl"), "-D", str(data), "-m", "immediate",
                        "stop"], capture_output=True)


def _psql_once_attached(tmp: Path, pidfile: Path) -> subprocess.Popen[bytes]:
    """The guide's psql session (three commands, one failing), started once the
    postmaster has the probe module mapped, as the user in the guide waits for it."""
    pid = pidfile.read_text().split()[0]
    psql = (f"until grep -q pydyn_ /proc/{pid}/maps; do sleep 0.05; done; sleep 0.5; "
            f"exec runuser -u postgres -- psql -q -h {tmp} -p 5439 postgres "
            "-c 'create table t (a int)' -c 'insert into t values (1)' "
            "-c 'select * from nosuch'")
    return subprocess.Popen(["bash", "-c", psql], stdout=subprocess.DEVNULL,
                            stderr=subprocess.DEVNULL)


@pytest.mark.usefixtures("examples_built")
@pytest.mark.parametrize("block", _blocks(), ids=lambda b: f"{b[0].page}:{b[0].line}")
def test_page_example(block: list[Example], shell_env: dict[str, str], cache: Path,
                      tmp_path: Path) -> None:
    server: Generator[Path, None, None] | None = None
    for example in block:
        skip = next((m for m in example.modes if m.startswith("skip")), None)
        if skip:
            pytest.skip(f"{example}: {skip}")
        missing = _missing_program(example.command)
        if missing:
            pytest.skip(f"{example}: {missing} is not installed")
        assert example.command.split()[0] in RUNNABLE or example.background, \
            f"{example}: only {', '.join(RUNNABLE)} and `PROGRAM &` lines can be run"
        if "postgres" in example.modes and server is None:
            pgdir = Path(tempfile.mkdtemp(prefix="pydyn-doc-pg."))
            pgdir.chmod(0o755)
            server = _postgres_server(pgdir)
    started: list[subprocess.Popen[bytes]] = []
    try:
        pidfile = next(server) if server is not None else None
        for example in block:
            command = example.command.removeprefix("sudo ")
            if pidfile is not None:
                command = command.replace(PG_PIDFILE, str(pidfile))
                started.append(_psql_once_attached(pgdir, pidfile))
            if started:
                command = command.replace("$!", str(started[-1].pid))
            if example.background:
                started.append(subprocess.Popen(["bash", "-c", "exec " + command[:-1]],
                                                cwd=ROOT, env=shell_env,
                                                stdout=subprocess.DEVNULL,
                                                start_new_session=True))
                time.sleep(0.3)   # past the loader: the page's next line attaches
                continue
            res = subprocess.run(["bash", "-c", command], cwd=ROOT, env=shell_env,
                                 stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                                 timeout=240)
            assert res.returncode == 0, f"{example}\n{res.stdout}"
            got = normalise(_actual(res.stdout, cache), example.modes)
            want = normalise(example.expected, example.modes)
            assert got == want, f"{example}\nshown:\n" + "\n".join(example.expected) + \
                "\nprinted:\n" + res.stdout
    finally:
        for proc in started:
            if proc.poll() is None:
                proc.send_signal(signal.SIGKILL)
            proc.wait()
        if server is not None:
            server.close()
            shutil.rmtree(pgdir, ignore_errors=True)


@pytest.mark.unit
def test_pages_have_examples() -> None:
    """The parser finds the pages' commands (a changed fence style would hide them)."""
    commands = [e.command for block in _blocks() for e in block]
    assert sum(c.startswith("pydyn ") for c in commands) >= 10, commands
    assert any(c.startswith("pydyn -x $!") for c in commands)


@pytest.mark.unit
def test_normalise_keeps_what_matters() -> None:
    shown = ["main(argc=0x3 argv=0x7ffed08aa448)", "hits=1000"]
    assert normalise(["main(argc=0x3 argv=0x7ffc00000000)", "hits=1000"], frozenset()) \
        == normalise(shown, frozenset())
    assert normalise(["main(argc=0x4 argv=0x7ffed08aa448)"], frozenset()) \
        != normalise(shown[:1], frozenset())
    assert normalise(["hits=999"], frozenset()) != normalise(["hits=1000"], frozenset())
    assert normalise(["pydyn_0d5b8f174f3857cb43b9b65daac955ce_m64.so"], frozenset()) \
        == normalise(["pydyn_c40d26cd98589679cf6685bbc31f24ad_m64.so"], frozenset())
