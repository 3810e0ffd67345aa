"""Diagnostics: gcc's shape (`FILE:LINE:COL: error:`, the line, `^~~~` under the range,
`hint:`), colour only when asked or on a tty, for a table of broken scripts."""

from __future__ import annotations

import os
import pty
import subprocess
from dataclasses import dataclass
from pathlib import Path

import pytest
from cbuild import run_pydyn, start_pydyn

PY = "/usr/bin/python3.11"


@dataclass(frozen=True)
class Broken:
    id: str
    text: str
    line: int
    col: int
    message: str
    underlined: str          # exactly the text under ^~~~
    hint: str | None = None
    args: tuple[str, ...] = ()


TABLE = [
    Broken("unknown-function", "probe begin {\n  x = fooo(1)\n}\n", 2, 7,
           "unresolved function 'fooo'", "fooo"),
    Broken("missing-expr", "probe begin { x = 1 + }\n", 1, 23,
           "expected an expression but found '}'", "}"),
    Broken("unknown-probe", "probe bgin { }\n", 1, 7, "unknown probe point 'bgin'",
           "bgin", "did you mean begin?"),
    Broken("bad-string", 'probe begin { printf("%d\\n", "s") }\n', 1, 30, "", '"s"'),
    Broken("type-mismatch", "global s\nprobe begin { s = \"a\"; s <<= 2 }\n", 2, 24,
           "type mismatch for global 's'", "s"),
    Broken("aggregate", "probe begin { x = 1 <<< 2 }\n", 1, 19, "need a global statistic",
           "1"),
    # stap's tapset makes NULL a global 0: a long, never a string
    Broken("null-is-long", 'probe begin { if ("foo" == NULL) log("boo") }\n', 1, 28,
           "type mismatch for global 'NULL'", "NULL"),
    Broken("print-statistic", "global s\nprobe begin { s <<< 1; println(s) }\n", 2, 32,
           "a statistic has no value to print", "s", "print @count(x)"),
    # before 2.0 a comment between two string literals keeps them two
    Broken("compat-comment-glue", 'probe begin { println("a" /* x */ "b") }\n', 1, 35,
           "expected ',' or ')' but found string \"b\"", '"b"', args=("--compatible=1.8",)),
]
if os.path.exists(PY):
    TABLE.append(Broken(
        "unknown-mark", f'probe process("{PY}").mark("functon__entry") {{ }}\n', 1, 7,
        f"probe point 'process(\"{PY}\").mark(\"functon__entry\")' matches no mark",
        f'process("{PY}").mark("functon__entry")', "did you mean function__entry"))


@pytest.mark.parametrize("bad", TABLE, ids=[b.id for b in TABLE])
def test_diagnostic_shape(bad: Broken, tmp_path: Path, cache: Path) -> None:
    path = tmp_path / "bad.stp"
    path.write_text(bad.text)
    r = run_pydyn(cache, *bad.args, "-p3", str(path))
    assert r.returncode == 1 and r.stdout == "" and "Traceback" not in r.stderr
    assert "\033[" not in r.stderr            # stderr is a pipe: no colour
    head, source, caret, *rest = r.stderr.splitlines()
    assert head.startswith(f"{path}:{bad.line}:{bad.col}: error: "), r.stderr
    assert bad.message in head
    assert source == "    " + bad.text.splitlines()[bad.line - 1].expandtabs(1)
    stripped = caret.lstrip(" ")
    assert stripped == "^" + "~" * (len(bad.underlined) - 1), r.stderr
    start = len(caret) - len(stripped)
    assert source[start:start + len(stripped)] == bad.underlined
    if bad.hint:
        assert rest and rest[0].startswith("hint: ") and bad.hint in rest[0], r.stderr
    else:
        assert not any(line.startswith("note:") for line in rest)


def test_comments_between_literals_glue_from_2_0(cache: Path) -> None:
    script = 'probe begin { println("a" /* x */ "b"); exit() }'
    for compat in ("2.0", "5.5"):
        r = run_pydyn(cache, f"--compatible={compat}", "-e", script)
        assert (r.returncode, r.stdout) == (0, "ab\n"), r.stderr
    r = run_pydyn(cache, "--compatible=1.8", "-e", 'probe begin { println("a"  "b"); exit() }')
    assert (r.returncode, r.stdout) == (0, "ab\n"), r.stderr


def test_guru_c_that_gcc_refuses_fails_with_gccs_error(cache: Path) -> None:
    # the function's callers make it a string, so its C must fill a string
    script = ('function release() %{ STAP_RETVALUE = 5; %}\n'
              'probe begin { log("kernel " . release()) }\n')
    r = run_pydyn(cache, "-g", "-p4", "-e", script)
    assert r.returncode == 1 and "Traceback" not in r.stderr
    assert r.stderr.startswith("pydyn: error: m64 module failed to compile:"), r.stderr
    assert "STAP_RETVALUE = 5;" in r.stderr
    assert "error: assignment to expression with array type" in r.stderr
    # as a long it builds
    ok = run_pydyn(cache, "-g", "-p4", "-e", 'function release() %{ STAP_RETVALUE = 5; %}\n'
                   "probe begin { log(sprint(release() + 1)) }")
    assert ok.returncode == 0, ok.stderr


def run_on_pty(cache: Path, *args: str) -> tuple[int, bytes]:
    """Run pydyn with stderr on a pseudo-tty; its exit status and what it wrote there."""
    master, slave = pty.openpty()
    try:
        # an empty $NO_COLOR is an unset one
        proc = start_pydyn(cache, *args, env={"NO_COLOR": ""}, stdin=subprocess.DEVNULL,
                           stdout=subprocess.DEVNULL, stderr=slave, start_new_session=False)
        os.close(slave)
        slave = -1
        err = b""
        while True:
            try:
                chunk = os.read(master, 4096)
            except OSError:      # EIO: the last writer closed the tty
                break
            if not chunk:
                break
            err += chunk
        return proc.wait(timeout=120), err
    finally:
        if slave >= 0:
            os.close(slave)
        os.close(master)


def test_color_always_never_and_tty(cache: Path) -> None:
    script = "probe begin { x = fooo(1) }"
    always = run_pydyn(cache, "--color=always", "-p3", "-e", script).stderr
    assert "\033[1;31merror:\033[0m" in always and "\033[1m<input>:1:19:\033[0m" in always
    assert "\033[1;32m^~~~\033[0m" in always
    assert "\033[" not in run_pydyn(cache, "--color", "never", "-p3", "-e", script).stderr
    # auto on a tty colours; --color=never wins over the tty
    for args, coloured in ((["-p3"], True), (["--color=never", "-p3"], False)):
        rc, err = run_on_pty(cache, *args, "-e", script)
        assert rc == 1
        assert (b"\033[1;31merror:" in err) is coloured, err
        assert b"unresolved function 'fooo'" in err


def test_plain_error_has_no_location_and_one_line(cache: Path) -> None:
    r = run_pydyn(cache, "-p3", "/nonexistent/script.stp")
    assert r.returncode == 1
    assert r.stderr.splitlines() == [
        "pydyn: error: cannot read script /nonexistent/script.stp: No such file or directory"]


SITE_SCRIPT = 'probe process("/usr/bin/python3.11").mark("gc__start") { n++ }'
RUN = ["-e", SITE_SCRIPT, "-c", f"{PY} -c pass"]


@pytest.mark.skipif(not os.path.exists(PY), reason="Debian's python3.11 not installed")
def test_cold_build_progress_on_tty_only(tmp_path: Path) -> None:
    # Caches of its own, not linked to the session's runtime objects: the line shows only
    # for a build that outlasts half a second, one that compiles the runtime too.
    tty_cache = tmp_path / "tty"
    rc, err = run_on_pty(tty_cache, *RUN)
    assert rc == 0, err
    text = err.decode()
    assert text.count("pydyn: compiling ") == 1, text
    assert "pydyn: compiling 1 probe site(s) into m64" in text and " modules ..." in text
    assert "\r\033[K" in text, text          # erased when the build is done
    piped = run_pydyn(tmp_path / "pipe", "-p4", "-e", SITE_SCRIPT, timeout=120)
    assert piped.returncode == 0, piped.stderr
    assert piped.stderr == ""
    rc, warm = run_on_pty(tty_cache, *RUN)  # cache hit
    assert rc == 0 and b"compiling" not in warm


def test_version_and_help_examples(cache: Path) -> None:
    r = run_pydyn(cache, "--version")
    assert r.returncode == 0 and r.stdout.startswith("pydyn ") and r.stdout.split()[1][0].isdigit()
    r = run_pydyn(cache, "--help")
    assert r.returncode == 0 and "examples:" in r.stdout and "pydyn -l " in r.stdout


def test_a_line_on_stderr_is_one_write(monkeypatch: pytest.MonkeyPatch) -> None:
    # Under PYTHONUNBUFFERED every write is a system call: a line written in two
    # (print's text, then its newline) lets the drain thread's records in between.
    from pydyn.launcher.errors import say

    writes: list[str] = []

    class Recorder:
        def write(self, text: str) -> int:
            writes.append(text)
            return len(text)

    monkeypatch.setattr("sys.stderr", Recorder())
    say("pydyn: started ./app as pid 7")
    assert writes == ["pydyn: started ./app as pid 7\n"]
