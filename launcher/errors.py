"""pydyn's error hierarchy.

Every error a user can cause is one of these; `cli.main()` renders it once and
exits 1.  Library errors (pyelftools, lief, posix_ipc, OSError) are caught at
the boundary of the pass that calls the library and re-raised as one of these.
"""

from __future__ import annotations

import re
import sys
from typing import NamedTuple

RED, BOLD, GREEN, CYAN, RESET = "\033[1;31m", "\033[1m", "\033[1;32m", "\033[1;36m", "\033[0m"
MAGENTA = "\033[1;35m"   # stap's colour of WARNING:

# What a caret range covers when the error does not say: the token at the column.
_TOKEN = (r'"(?:[^"\\]|\\.)*"?|[A-Za-z_$@][A-Za-z0-9_$@]*|[0-9][A-Za-z0-9]*'
          r"|<<=|>>=|[-+*/%<>=!&|^.]=|&&|\|\||<<<|<<|>>|\+\+|--|->|\S")


# Control characters (C0 but tab and newline, DEL, C1) and the lone surrogates that
# carry undecodable bytes: a script's text must never drive the user's terminal.
_CONTROLS = "[\x00-\x08\x0b-\x1f\x7f-\x9f\udc80-\udcff]"


def say(line: str) -> None:
    """One line on stderr in one write: stderr is unbuffered under PYTHONUNBUFFERED, and
    print() writes the text and its newline apart, so a record the drain thread prints
    could land between the two."""
    sys.stderr.write(line + "\n")


def _escape_one(m: re.Match[str]) -> str:
    code = ord(m.group(0))
    return f"\\x{code - 0xDC00 if code >= 0xDC00 else code:02x}"


def escape_controls(text: str, newline: bool = False) -> str:
    """`text` with control characters written as `\\xNN` (tab kept; a newline too
    unless `newline`, for text that must stay on one line)."""
    pattern = _CONTROLS[:-1] + "\n]" if newline else _CONTROLS
    return re.sub(pattern, _escape_one, text)


def token_length(text: str, column: int) -> int:
    """Length of the token starting at 1-based `column` of `text` (1 if none)."""
    # Compiled on first use (re caches it), not at import: a warm run reports no error.
    m = re.compile(_TOKEN).match(text, max(column - 1, 0))
    return len(m.group(0)) if m else 1


def point_length(text: str, column: int) -> int:
    """Length of the probe point starting at `column`: up to a space, ',' or '{'
    outside quotes and parentheses."""
    depth, quoted, i = 0, False, max(column - 1, 0)
    while i < len(text):
        ch = text[i]
        if quoted:
            if ch == "\\":
                i += 1
            elif ch == '"':
                quoted = False
        elif ch == '"':
            quoted = True
        elif ch == "(":
            depth += 1
        elif ch == ")":
            depth -= 1
        elif depth <= 0 and (ch.isspace() or ch in ",{"):
            break
        i += 1
    return max(i - (column - 1), 1)


class SourceLocation(NamedTuple):   # not a dataclass: see shmlayout/layout.py
    """A position in a script: 1-based line and column; `length` columns are
    underlined (0: the token found at the column)."""

    file: str
    line: int
    column: int
    source_line: str = ""
    length: int = 0

    def __str__(self) -> str:
        return f"{self.file}:{self.line}:{self.column}"


class ScriptWarning(NamedTuple):
    """A warning about a script, in SystemTap's words and shape, since stap users and
    their tools look for these texts: `WARNING: MESSAGE: TOKEN at FILE:LINE:COL`, then
    ` source: LINE` and a caret under the token.  `token` is stap's name of the token
    the warning points at: `identifier 'x'`, `operator '='`, `keyword`."""

    message: str
    token: str
    location: SourceLocation

    def __str__(self) -> str:
        return f"WARNING: {self.message}: {self.token} at {self.location}"

    def render(self, color: bool = False) -> str:
        def paint(code: str, text: str) -> str:
            return f"{code}{text}{RESET}" if color else text

        loc = self.location
        head = (f"{paint(MAGENTA, 'WARNING:')} {escape_controls(self.message)}: "
                f"{escape_controls(self.token, True)} at {escape_controls(str(loc), True)}")
        if not loc.source_line:
            return head
        text = escape_controls(loc.source_line.rstrip("\n").expandtabs(1), True)
        # stap's alignment: " source: " then the line; the caret under the token's column
        before = escape_controls(loc.source_line.expandtabs(1)[:max(loc.column - 1, 0)], True)
        return "\n".join([head, f" source: {text}", " " * (9 + len(before)) + paint(GREEN, "^")])

    def to_json(self) -> dict[str, object]:
        return {"message": self.message, "token": self.token, "file": self.location.file,
                "line": self.location.line, "column": self.location.column,
                "source_line": self.location.source_line}

    @classmethod
    def from_json(cls, obj: dict[str, object]) -> ScriptWarning:
        def text(key: str) -> str:
            return str(obj[key])
        return cls(text("message"), text("token"),
                   SourceLocation(text("file"), int(text("line")), int(text("column")),
                                  text("source_line")))


class PydynError(Exception):
    """Base of all errors pydyn reports to the user."""

    def render(self, color: bool = False) -> str:
        head = f"{RED}error:{RESET}" if color else "error:"
        return f"pydyn: {head} {escape_controls(str(self))}"


class ScriptError(PydynError):
    """An error in a script, with the place it was found."""

    def __init__(self, message: str, location: SourceLocation | None = None,
                 hint: str | None = None) -> None:
        super().__init__(message)
        self.message = message
        self.location = location
        self.hint = hint

    def render(self, color: bool = False) -> str:
        """gcc's shape: `FILE:LINE:COL: error: MESSAGE`, the line, `^~~~` under the
        range, `hint: ...`; with `color`, a bold location, red error, green range."""
        def paint(code: str, text: str) -> str:
            return f"{code}{text}{RESET}" if color else text

        where = "pydyn:" if self.location is None else \
            paint(BOLD, f"{escape_controls(str(self.location), True)}:")
        lines = [f"{where} {paint(RED, 'error:')} {escape_controls(self.message)}"]
        loc = self.location
        if loc is not None and loc.source_line:
            text = loc.source_line.rstrip("\n").expandtabs(1)
            n = loc.length or token_length(text, loc.column)
            n = max(1, min(n, len(text) - loc.column + 1))
            # The caret stays under its text once control characters are escaped.
            start = max(loc.column - 1, 0)
            before = escape_controls(text[:start], True)
            marked = escape_controls(text[start:start + n], True)
            lines.append(f"    {before}{marked}{escape_controls(text[start + n:], True)}")
            lines.append("    " + " " * len(before) +
                         paint(GREEN, "^" + "~" * (max(len(marked), 1) - 1)))
        if self.hint:
            lines.append(f"{paint(CYAN, 'hint:')} {escape_controls(self.hint)}")
        return "\n".join(lines)


class TargetError(PydynError):
    """A target binary or probe site that cannot be used: names the path and why."""

    def __init__(self, path: str, reason: str) -> None:
        super().__init__(f"{path}: {reason}")
        self.path = path
        self.reason = reason


class BuildError(PydynError):
    """The probe modules could not be built (missing toolchain, compiler error)."""


class SessionError(PydynError):
    """The session could not be set up or run (segment, spawn, attach)."""
