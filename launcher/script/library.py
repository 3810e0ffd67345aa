"""Tapset files (`-I DIR`, and pydyn's own: tapset.py): what a script uses of them joins
the script.

As stap does, every file is parsed (a syntax error in any is an error), but only what the
script reaches is taken: functions it calls (and the functions and globals those reach),
globals it names (and, once any of a file's functions or globals is taken, the file's
plain probes, which set them up), and every probe
alias (an alias is used by naming it in a probe point, which the alias expansion that
follows decides).  A name the script defines itself wins over a tapset's.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence

from . import ast
from .aliases import AliasDef
from .walk import iter_nodes


@dataclasses.dataclass(frozen=True, slots=True)
class LibraryFile:
    """One parsed file's declarations: a tapset's, or the script's own as written
    (what -p1 prints)."""

    path: str
    probes: tuple[ast.Probe, ...]   # run when the script takes a global or function of it
    functions: tuple[ast.Function, ...]
    globals: tuple[ast.Global, ...]
    aliases: tuple[AliasDef, ...]
    embedded: tuple[ast.Embedded, ...] = ()   # top-level %{ %} (the script's own, -g)


@dataclasses.dataclass(frozen=True, slots=True)
class Taken:
    functions: tuple[ast.Function, ...]
    globals: tuple[ast.Global, ...]
    aliases: tuple[AliasDef, ...]
    probes: tuple[ast.Probe, ...]


def _names(nodes: object) -> tuple[set[str], set[str]]:
    """(called function names, symbol names) below `nodes`."""
    calls: set[str] = set()
    symbols: set[str] = set()
    for n in iter_nodes(nodes):
        if isinstance(n, ast.Call):
            calls.add(n.name)
        elif isinstance(n, ast.Symbol):
            symbols.add(n.name)
    return calls, symbols


def merge_library(probes: Sequence[ast.Probe], functions: Sequence[ast.Function],
                  globals_: Sequence[ast.Global], aliases: Sequence[AliasDef],
                  library: Sequence[LibraryFile]) -> Taken:
    own_funcs = {f.name for f in functions}
    own_globals = {g.name for g in globals_}
    lib_funcs: dict[str, ast.Function] = {}
    lib_globals: dict[str, ast.Global] = {}
    lib_aliases: list[AliasDef] = []
    for f in library:
        for fn in f.functions:
            lib_funcs.setdefault(fn.name, fn)
        for g in f.globals:
            lib_globals.setdefault(g.name, g)
        lib_aliases.extend(f.aliases)
    taken_f: dict[str, ast.Function] = {}
    taken_g: dict[str, ast.Global] = {}
    taken_p: list[ast.Probe] = []
    pending = list(library)
    todo: list[object] = [tuple(probes), tuple(functions), tuple(a.body for a in aliases),
                          tuple(a.body for a in lib_aliases),
                          tuple(p.condition for a in [*aliases, *lib_aliases]
                                for p in a.targets)]
    while todo:
        calls, symbols = _names(todo.pop())
        for name in calls - own_funcs - taken_f.keys():
            if name in lib_funcs:
                taken_f[name] = lib_funcs[name]
                todo.append(lib_funcs[name])
        for name in symbols - own_globals - taken_g.keys():
            if name in lib_globals:
                taken_g[name] = lib_globals[name]
        if not todo:
            # a file one of whose globals or functions is taken brings its plain probes
            # (stap takes the whole file: they set the globals up), and what those reach
            for f in pending:
                if f.probes and (any(g.name in taken_g for g in f.globals)
                                 or any(taken_f.get(fn.name) is fn for fn in f.functions)):
                    todo.append(f.probes)
                    taken_p.extend(f.probes)
            pending = [f for f in pending if not any(p in taken_p for p in f.probes)]
    return Taken(tuple(taken_f.values()), tuple(taken_g.values()), tuple(lib_aliases),
                 tuple(taken_p))
