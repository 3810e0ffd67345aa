"""Probe aliases, expanded as stap's elaborate.cxx does before anything resolves.

`probe NAME = TARGETS { PROLOGUE }` and `probe NAME += TARGETS { EPILOGUE }` define NAME; a
probe on NAME becomes a probe on TARGETS whose body is the alias's block then the user's
(`=`) or the user's then the alias's (`+=`), one body, so they share their locals.  Several
definitions of one name each give their own probe.  A user point longer than the alias
name carries the rest to the targets (`probe a.return` on `probe a = f { }` probes
`f.return`); the user's condition and `?` apply to every target.  Expansion repeats for
aliases of aliases, up to a depth that catches a cycle.

SystemTap's own aliases that need no kernel come with pydyn (BUILTIN): `oneshot` is
`begin` followed by `exit()`, as in its tapset/oneshot.stp.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Sequence
from fnmatch import fnmatchcase

from ..errors import ScriptError, SourceLocation
from . import ast

MAX_DEPTH = 32   # an alias naming itself (through others) is an error past this

BUILTIN = "probe oneshot += begin { exit() }\n"


@dataclasses.dataclass(frozen=True, slots=True)
class AliasDef:
    """One `probe NAMES = TARGETS { BODY }` (`epilogue`: written with `+=`)."""

    names: tuple[ast.ProbePoint, ...]
    targets: tuple[ast.ProbePoint, ...]
    body: ast.Block
    epilogue: bool
    loc: SourceLocation

    def __str__(self) -> str:
        names = ", ".join(point_name(p) for p in self.names)
        targets = ", ".join(point_name(p) for p in self.targets)
        return f"probe {names} {'+=' if self.epilogue else '='} {targets}"


def point_name(p: ast.ProbePoint) -> str:
    return ".".join(c.name if c.arg is None else
                    f'{c.name}({c.arg!r})'.replace("'", '"') for c in p.components)


def _suffix(alias: ast.ProbePoint, user: ast.ProbePoint) -> tuple[ast.Component, ...] | None:
    """The user's components past the alias name when the point names this alias."""
    a, u = alias.components, user.components
    if len(u) < len(a):
        return None
    for ac, uc in zip(a, u, strict=False):
        if not fnmatchcase(ac.name, uc.name) or ac.arg != uc.arg:
            return None
    return u[len(a):]


def _and(a: ast.Expr | None, b: ast.Expr | None, loc: SourceLocation) -> ast.Expr | None:
    if a is None or b is None:
        return a or b
    return ast.Logical("&&", a, b, loc)


def expand(probes: Sequence[ast.Probe], aliases: Sequence[AliasDef],
           builtin: Callable[[], Sequence[AliasDef]]) -> list[ast.Probe]:
    """Every probe with its alias points replaced by probes on their targets.

    `builtin()` gives pydyn's own aliases; called only when a point is no user alias and
    names one of BUILTIN's names (parsing them costs time)."""
    builtin_names = {"oneshot"}
    loaded: list[AliasDef] = []

    def defs_for(p: ast.ProbePoint) -> list[tuple[AliasDef, tuple[ast.Component, ...]]]:
        found = [(d, s) for d in aliases for n in d.names
                 if (s := _suffix(n, p)) is not None]
        if not found and p.components[0].name in builtin_names:
            if not loaded:
                loaded.extend(builtin())
            found = [(d, s) for d in loaded for n in d.names
                     if (s := _suffix(n, p)) is not None]
        return found

    def expand_one(probe: ast.Probe, depth: int) -> list[ast.Probe]:
        plain: list[ast.ProbePoint] = []
        expanded: list[ast.Probe] = []
        for p in probe.points:
            found = defs_for(p)
            if not found:
                plain.append(p)
                continue
            if depth >= MAX_DEPTH:
                raise ScriptError(f"probe alias '{point_name(p)}' expands more than "
                                  f"{MAX_DEPTH} levels deep (an alias naming itself?)", p.loc)
            for d, suffix in found:
                points = tuple(
                    ast.ProbePoint(t.components + suffix, t.optional or p.optional,
                                   t.sufficient or p.sufficient,
                                   _and(t.condition, p.condition, p.loc), p.loc)
                    for t in d.targets)
                parts = (probe.body, d.body) if d.epilogue else (d.body, probe.body)
                body = ast.Block(parts, probe.body.loc)
                expanded.extend(expand_one(ast.Probe(points, body, probe.loc), depth + 1))
        if plain:
            expanded.insert(0, probe if len(plain) == len(probe.points)
                            else ast.Probe(tuple(plain), probe.body, probe.loc))
        return expanded

    # source order is kept: begin probes run in it
    return [e for pr in probes for e in expand_one(pr, 0)]
