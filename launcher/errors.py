"""pydyn's error hierarchy.

Every error a user can cause is one of these; `cli.main()` renders it once and
exits 1.  Library errors (pyelftools, lief, posix_ipc, OSError) are caught at
the boundary of the pass that calls the library and re-raised as one of these.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class SourceLocation:
    """A position in a script: 1-based line and column."""

    file: str
    line: int
    column: int
    source_line: str = ""

    def __str__(self) -> str:
        return f"{self.file}:{self.line}:{self.column}"


class PydynError(Exception):
    """Base of all errors pydyn reports to the user."""

    def render(self) -> str:
        return f"pydyn: error: {self}"


class ScriptError(PydynError):
    """An error in a script, with the place it was found."""

    def __init__(self, message: str, location: SourceLocation | None = None,
                 hint: str | None = None) -> None:
        super().__init__(message)
        self.message = message
        self.location = location
        self.hint = hint

    def render(self) -> str:
        if self.location is None:
            head = f"pydyn: error: {self.message}"
        else:
            head = f"{self.location}: error: {self.message}"
        lines = [head]
        loc = self.location
        if loc is not None and loc.source_line:
            text = loc.source_line.rstrip("\n").expandtabs(1)
            lines.append(f"    {text}")
            lines.append("    " + " " * max(loc.column - 1, 0) + "^")
        if self.hint:
            lines.append(f"note: {self.hint}")
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
