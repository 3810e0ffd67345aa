"""FAST handlers (issue 6): probes a trampoline may run without saving the vector
registers.

A handler qualifies only if every line of its generated C is one of the shapes below
(a statement count, a counter add of a constant -- pd_counter_add, a plain add to the
thread's slot or an atomic one -- the error check): no
call, no local, no string, so gcc compiles it `general-regs-only` (PD_FAST_FN) with
nothing that can reach libc.  Anything else keeps the ordinary path.
"""

from __future__ import annotations

import re

PD_PROBE_FAST = 2  # pd_probe.locks bit (runtime/pd_runtime.h)

_C_STR = r'"(?:[^"\\]|\\.)*"'
_ACTION = re.compile(rf"PD_ACTION\(c, ({_C_STR})\);")
_SAFE = re.compile("|".join((
    _ACTION.pattern,
    r"pd_counter_add\(c, \d+, \d+, \d+, \d+, -?\(int64_t\)\(-?(?:\d+|INT64_C\(-?\d+\))\)\);",
    r"if \(PD_UNLIKELY\(c->error\)\) goto out;",
)))


def is_fast(decls: list[str], lines: list[str]) -> bool:
    """Whether a handler with these local declarations and body lines is FAST."""
    return not decls and bool(lines) and all(_SAFE.fullmatch(ln.strip()) for ln in lines)


def fast_lines(pi: int, lines: list[str]) -> tuple[list[str], list[str]]:
    """A FAST handler's body, and the table of its statements' `where` strings that
    must precede it (`probe_<pi>_where`, named by its pd_probes row): each statement
    compares its number with the MAXACTION budget (no loop: the numbers are static)
    and only a failing one stores its `where`, found through c->probe."""
    out: list[str] = []
    wheres: list[str] = []
    for ln in lines:
        m = _ACTION.fullmatch(ln.strip())
        if m:
            wheres.append(m.group(1))
            ln = ln[:len(ln) - len(ln.lstrip())] + f"PD_ACTION_FAST(c, {len(wheres)});"
        out.append(ln)
    table = [f"static const char *const probe_{pi}_where[] = {{{', '.join(wheres) or 'NULL'}}};"]
    return out, table
