"""`.function("F").callee("G")` and `.function("F").callees(N)`: G where F calls it.

The calls come from F's DWARF call sites (`DW_TAG_call_site`, gcc's older
`DW_TAG_GNU_call_site`: gcc emits them when optimizing), each naming its callee and
the address the call returns to.  The probe goes on G's entry and fires only when the
return address there is one of those; `.callees(N)` goes N calls deep and checks the
return addresses of every level up the stack (stap checks the same; calls through
pointers and into other objects have no static call site, as in stap).
"""

from __future__ import annotations

import fnmatch
from dataclasses import replace
from typing import Any

from ..errors import ScriptError, TargetError
from .functions import FunctionSite, get_functions

_CALL_SITES = ("DW_TAG_call_site", "DW_TAG_GNU_call_site")


def iter_calls(info: Any, func: Any) -> list[tuple[str, int]]:
    """(callee name, return address) of each direct call DWARF records in `func`
    (a DwarfFunction), nested scopes and inlined copies included."""
    from .dwarf import die_attr

    cu = info.dwarf.get_CU_at(func.cu_offset)
    todo = [info.dwarf.get_DIE_from_refaddr(func.die_offset, cu)]
    out: list[tuple[str, int]] = []
    while todo:
        for child in todo.pop().iter_children():
            if child.tag in ("DW_TAG_lexical_block", "DW_TAG_inlined_subroutine"):
                todo.append(child)
                continue
            if child.tag not in _CALL_SITES:
                continue
            origin = next((a for a in ("DW_AT_call_origin", "DW_AT_abstract_origin")
                           if a in child.attributes), None)
            ret = child.attributes.get("DW_AT_call_return_pc") or \
                child.attributes.get("DW_AT_low_pc")
            if origin is None or ret is None:
                continue   # a call through a pointer
            name = die_attr(child.get_DIE_from_attribute(origin), "DW_AT_name")
            if name is not None:
                out.append((name.decode(errors="replace"), int(ret.value)))
    return out


def callee_sites(point: Any, binary: str, rest: list[Any]) -> tuple[FunctionSite, ...]:
    """The sites of `.function("F").callee("G")[.call]` and `.callees[(N)]`."""
    from .dwarf import get_dwarf

    caller = rest[0].arg
    kind = rest[1]
    tail = [c.name for c in rest[2:]]
    if not isinstance(caller, str) or tail not in ([], ["call"]) or \
            any(c.arg is not None for c in rest[2:]):
        raise ScriptError('callee probes are .function("F").callee("G")[.call] or '
                          '.function("F").callees', point.loc,
                          "a callee's .return is not supported")
    depth = 1
    if kind.name == "callee":
        if not isinstance(kind.arg, str):
            raise ScriptError('callee() takes a function name or glob', point.loc)
        pattern = kind.arg
    else:
        if kind.arg is not None and (not isinstance(kind.arg, int) or kind.arg < 1):
            raise ScriptError("callees(N) takes a depth of 1 or more", point.loc)
        pattern, depth = "*", kind.arg or 1
    try:
        table = get_functions(binary)
        info = get_dwarf(binary)
    except TargetError as exc:
        raise ScriptError(f'function("{caller}").{kind.name}: {exc}', point.loc) from exc
    # callee name -> the chains of return addresses that reach it, innermost first;
    # level by level down from F, up to `depth` calls deep (stap's .callees(N))
    chains: dict[str, set[tuple[int, ...]]] = {}
    level: list[tuple[Any, tuple[int, ...]]] = [(f, ()) for f in table.match(caller)]
    for _ in range(depth):
        below: list[tuple[Any, tuple[int, ...]]] = []
        for f, chain in level:
            func = info.function_at(f.addr)
            if func is None:
                continue
            for name, ret in iter_calls(info, func):
                if not fnmatch.fnmatchcase(name, pattern):
                    continue
                reached = (ret, *chain)
                chains.setdefault(name, set()).add(reached)
                below.extend((g, reached) for g in table.match(name) if g.name == name)
        level = below
    sites: list[FunctionSite] = []
    for name, reach in sorted(chains.items()):
        for site in table.sites([f for f in table.match(name) if f.name == name], False):
            sites.append(replace(site, callers=tuple(sorted(reach))))
    if not sites:
        arg = "" if kind.arg is None else f'("{kind.arg}")' if isinstance(kind.arg, str) \
            else f"({kind.arg})"
        raise ScriptError(f'function("{caller}").{kind.name}{arg} matches no call in {binary}',
                          point.loc,
                          "the calls come from DWARF call sites, which gcc writes when "
                          "it optimizes (-O1 and up); calls through pointers have none")
    return tuple(sites)

