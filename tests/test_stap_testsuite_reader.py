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
