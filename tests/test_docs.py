"""The generated reference pages match the parsers, and `--help`'s examples run."""

from __future__ import annotations

import os
import shlex
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import pytest
from cbuild import build_c

from pydyn.launcher import docgen, docgen_functions
from pydyn.launcher.cli import EXAMPLES
from pydyn.launcher.guru import SET_USER
from pydyn.launcher.translate.types import BUILTINS, PRINT_FUNCS

DOCS = Path(__file__).resolve().parent.parent / "docs"

APP_C = r"""
#include <sys/sdt.h>
int main(void) { for (int i = 0; i < 7; i++) DTRACE_PROBE1(app, tick, i); return 0; }
"""


def test_generated_pages_are_current() -> None:
    for name, text in docgen.pages().items():
        committed = (DOCS / name).read_text()
        assert committed == text, \
            f"docs/{name} is stale: run `python -m pydyn.launcher.docgen docs`"


@pytest.mark.unit
def test_every_builtin_is_in_the_reference() -> None:
    """functions.md lists each built-in the translator accepts, with its table's types."""
    functions_md = (DOCS / "functions.md").read_text()
    for _, entries in docgen_functions.iter_builtins():
        for entry in entries:
            assert f"| `{entry.signature()}` |" in functions_md, entry
    for name in [*BUILTINS, *PRINT_FUNCS, *SET_USER]:
        assert f"`{name}(" in functions_md, name


@pytest.mark.unit
def test_an_undescribed_builtin_fails_the_generator(monkeypatch: pytest.MonkeyPatch) -> None:
    """A built-in added to the table without a line in docgen_functions stops the page."""
    monkeypatch.setitem(BUILTINS, "no_such_builtin", ((), "long"))
    with pytest.raises(docgen_functions.MissingDescription, match="no_such_builtin"):
        docgen_functions.render()


def test_every_option_is_in_the_reference() -> None:
    cli_md = (DOCS / "cli.md").read_text()
    for opt in docgen.iter_options(docgen.pydyn_parser()):
        assert f"`{opt.synopsis()}`" in cli_md, opt


def _examples() -> list[str]:
    """--help's example commands, continuation lines joined."""
    commands: list[str] = []
    for line in EXAMPLES.splitlines()[1:]:
        text = line.strip()
        if text.startswith("pydyn "):
            commands.append(text)
        elif commands and commands[-1].count("'") % 2 == 1:
            commands[-1] += "\n" + text
    return commands


def _command_part(example: str) -> str:
    """The example without its trailing comment (set off by two spaces outside quotes)."""
    quote = ""
    for i, ch in enumerate(example):
        if quote:
            quote = "" if ch == quote else quote
        elif ch in "'\"":
            quote = ch
        elif example.startswith("  ", i):
            return example[:i]
    return example


def _run_example(example: str, cwd: Path, cache: Path) -> subprocess.CompletedProcess[str]:
    """One example with this interpreter's pydyn and a module cache of the test's own."""
    words = shlex.split(_command_part(example))
    assert words[0] == "pydyn"
    env = dict(os.environ, PYDYN_CACHE_DIR=str(cache))
    return subprocess.run([sys.executable, "-m", "pydyn.launcher.cli", *words[1:]], cwd=cwd,
                          env=env, capture_output=True, text=True, timeout=300)


def test_first_help_example_counts(tmp_path: Path, new_cache: Callable[[str], Path]) -> None:
    """The one-liner a new user copies first prints the number of hits, not 0."""
    src = tmp_path / "app.c"
    src.write_text(APP_C)
    build_c(src, tmp_path / "app")
    first = _examples()[0]
    assert "-c ./app" in first
    res = _run_example(first, tmp_path, new_cache("help"))
    assert res.returncode == 0, res.stderr
    assert res.stdout.strip() == "7", res.stdout


def test_listing_help_examples_run(tmp_path: Path) -> None:
    """The -l and -L examples list what they promise on this machine's Python."""
    listing = [c for c in _examples() if c.startswith(("pydyn -l", "pydyn -L"))]
    assert listing
    for command in listing:
        binary = shlex.split(_command_part(command))[2].split('"')[1]
        if not any(Path("/").glob(binary.lstrip("/"))):
            continue
        res = _run_example(command, tmp_path, tmp_path / "cache")
        assert res.returncode == 0, (command, res.stderr)
        assert res.stdout.startswith("process("), (command, res.stdout)


SERVED_APP_C = r"""
#include <stdio.h>
#include <string.h>
#include <sys/sdt.h>
#include <unistd.h>
int main(int argc, char **argv)
{
    if (argc > 1 && !strcmp(argv[1], "wait")) {   /* for -x: ticks until killed */
        printf("ready\n");
        fflush(stdout);
        for (long i = 0; i < 6000; i++) {
            DTRACE_PROBE1(app, tick, i);
            usleep(10000);
        }
        return 0;
    }
    for (int i = 0; i < 7; i++)
        DTRACE_PROBE1(app, tick, i);
    return 0;
}
"""


def test_every_other_help_example_runs(tmp_path: Path,
                                       new_cache: Callable[[str], Path]) -> None:
    """The script examples of --help, on a script.stp, ./app and ./server of the test's
    own: ./server N runs N ./app at once.  `-x 1234 -T 10` attaches to a real ./app and
    waits 1 second, not 10."""
    src = tmp_path / "app.c"
    src.write_text(SERVED_APP_C)
    build_c(src, tmp_path / "app")
    server = tmp_path / "server"
    server.write_text('#!/bin/sh\ni=0\nwhile [ $i -lt "$1" ]; do ./app & i=$((i+1)); done\n'
                      'wait\n')
    server.chmod(0o755)
    (tmp_path / "script.stp").write_text(
        'global n\nprobe process("./app").mark("tick") { n++ }\n'
        'probe end { printf("n=%d\\n", n) }\n')
    cache = new_cache("examples")
    scripted = [c for c in _examples() if " script.stp" in c]
    assert len(scripted) == 4, scripted
    for example in scripted:
        if " -x 1234" in example:
            app = subprocess.Popen(["./app", "wait"], cwd=tmp_path, stdout=subprocess.PIPE,
                                   text=True)
            try:
                assert app.stdout is not None and app.stdout.readline() == "ready\n"
                res = _run_example(example.replace("1234", str(app.pid))
                                   .replace("-T 10", "-T 1"), tmp_path, cache)
                assert app.poll() is None, "the attached process did not run on"
            finally:
                app.kill()
                app.wait()
            assert res.returncode == 0, (example, res.stderr)
            assert int(res.stdout.removeprefix("n=")) > 10, (example, res.stdout)
            continue
        res = _run_example(example, tmp_path, cache)
        assert res.returncode == 0, (example, res.stderr)
        if "-p3" in example:
            assert "#include" in res.stdout, (example, res.stdout[:500])
        elif "--json" in example:
            assert '"n=7\\n"' in res.stdout, (example, res.stdout)
        else:
            assert res.stdout == "n=28\n", (example, res.stdout)
