"""The Tcl reader of bench/stap_testsuite.py: braced words as Tcl reads them."""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "bench"))

import stap_testsuite  # noqa: E402


def braced(src: str) -> str:
    (cmd,) = stap_testsuite.tcl_commands(src)
    return cmd[-1].text


def test_backslash_newline_in_braces_is_one_space() -> None:
    assert braced("set r {one\\\n    two}") == "one two"


def test_escaped_backslash_before_newline_keeps_the_newline() -> None:
    # `\\` is one escaped backslash: the newline after it is a line break
    assert braced("set r {a\\\\\nb}") == "a\\\\\nb"
    # three backslashes: an escaped one, then a backslash-newline
    assert braced("set r {a\\\\\\\n  b}") == "a\\\\ b"


def _interrupted(tmp_path: Path, body: str, expected: str) -> stap_testsuite.Test:
    script = tmp_path / "fake_stap.sh"
    script.write_text("echo 'systemtap starting probe'; echo 'systemtap ending probe'\n" + body)
    t = stap_testsuite.Test("g", "g/t", ["sh", str(script)], tmp_path, mode="interrupt",
                            expected=expected)
    stap_testsuite.run_interrupted(t, {"PATH": "/usr/bin:/bin"}, 20)
    return t


def test_stap_run_matches_stderr_after_stdout_as_one_pty_would(tmp_path: Path) -> None:
    body = ("echo 'ERROR: division by 0 near x' >&2\n"
            "echo 'WARNING: Number of errors: 1, skipped probes: 0' >&2\n")
    t = _interrupted(tmp_path, body, "ERROR: division by 0 near[^\\r\\n]+\\r\\n")
    assert t.passed, t.first_error
    t = _interrupted(tmp_path, body, "ERROR: something else.*")
    assert not t.passed
