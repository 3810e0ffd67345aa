"""The names of a process probe point's sites, as stap shows them: pp() and pn().

stap replaces each probe it derives from a DWARF or mark point by the point it
resolved to (tapsets.cxx, dwarf_derived_probe's constructor), which pp() returns:

- `process("PATH")`: the object the site is in, by its absolute path (a library's
  own path: `.library()` is dropped);
- `.function("NAME@FILE:LINE")`: the function's name and declaration (DW_AT_decl_file,
  DW_AT_decl_line); a function DWARF does not describe is its bare name.  A
  `.label` is the function with the label's line, a `.callee` the callee's
  declaration; `.statement("NAME@FILE:LINE")` the function with the statement's line;
- then `.call`, `.exported`, `.inline`, `.return`, `.maxactive(N)` as written;
- a statement by address, a mark and a PLT entry are `.statement(0xADDR)` (the
  link-time address: stap turns a mark into that statement, `sdt_query`), with
  `.absolute` or `.return` as written.

pn() is the point as the script wrote it after wildcard expansion
(derived_probe::script_location, what `-l` and `-L` list): every component kept,
the process path resolved, and the function, statement, label, callee, provider
and mark arguments replaced by what matched.

`dwarf=False` names functions without reading DWARF (their bare names): the
translator reads it only for a script that calls pp() or pn().
"""

from __future__ import annotations

import json
from collections.abc import Sequence

from .elf.functions import FunctionSite
from .elf.stapsdt import ProbeSite
from .script import ast

# stap's order of the components after the function (dwarf_derived_probe)
_FUNCTION_TAIL = ("call", "exported", "inline", "return", "maxactive")


def _component(name: str, arg: object) -> str:
    if arg is None:
        return name
    if isinstance(arg, int):
        return f"{name}({arg:#x})" if name == "statement" else f"{name}({arg})"
    return f"{name}({json.dumps(arg)})"


def canonical(name: str, file: str, line: int) -> str:
    """stap's `NAME@FILE:LINE` (dwarf_query::final_function_name): without a file the
    bare name, without a line `NAME@FILE`."""
    if not file or file == "??":
        return name
    return f"{name}@{file}:{line}" if line > 0 else f"{name}@{file}"


def _declared(site: FunctionSite, dwarf: bool) -> str:
    """`NAME@FILE:LINE` of the function a site is in (or, from the resolver, of its
    statement, label or inlined function); the bare name without DWARF."""
    if site.source:
        file, _, line = site.source.rpartition(":")
        return canonical(site.name, file, int(line) if line.isdigit() else 0)
    if dwarf:
        from .elf.dwarf import function_at
        func = function_at(site.path, site.func_addr)
        if func is not None:
            return canonical(site.name, func.decl_file, func.decl_line)
    return site.name


def site_names(point: ast.ProbePoint, site: ProbeSite, program: str,
               dwarf: bool) -> tuple[str, str]:
    """(pp(), pn()) of `site`, one of the sites the process point `point` resolved to;
    `program` is the executable's path (the process of a `.library()` point)."""
    comps = point.components
    names = [c.name for c in comps]
    code = next((i for i, n in enumerate(names)
                 if n in ("function", "statement", "plt", "mark")), len(comps))
    tail = comps[code + 1:]
    head = f'process({json.dumps(site.path)})'
    if not isinstance(site, FunctionSite) or names[code] == "plt" or \
            isinstance(comps[code].arg, int):
        # marks, PLT entries and addresses: a statement at the link-time address
        addr = comps[code].arg if isinstance(comps[code].arg, int) else site.pc
        kept = [c for c in tail if c.name in ("absolute", "return")]
        pp = ".".join([head, _component("statement", addr),
                       *(_component(c.name, c.arg) for c in kept)])
    else:
        canon = _declared(site, dwarf)
        kind = "statement" if names[code] == "statement" else "function"
        kept = sorted((c for c in tail if c.name in _FUNCTION_TAIL),
                      key=lambda c: _FUNCTION_TAIL.index(c.name))
        pp = ".".join([head, _component(kind, canon),
                       *(_component(c.name, c.arg) for c in kept)])
    return pp, _script_name(comps, site, program, dwarf)


def _script_name(comps: Sequence[ast.Component], site: ProbeSite, program: str,
                 dwarf: bool) -> str:
    parts = []
    for c in comps:
        arg = c.arg
        if c.name == "process":
            arg = program or site.path
        elif c.name == "provider":
            arg = site.provider
        elif c.name == "mark":
            arg = site.name
        elif c.name == "plt" and arg is not None:
            arg = site.name
        elif isinstance(site, FunctionSite) and c.name in ("callee", "callees"):
            parts.append(_component("callee", _declared(site, dwarf)))
            continue
        elif isinstance(site, FunctionSite) and c.name in ("function", "statement") \
                and isinstance(arg, str) and \
                not any(x.name in ("callee", "callees") for x in comps):
            arg = _declared(site, dwarf)   # (a callee's caller stays as written)
        elif c.name == "label" and isinstance(site, FunctionSite):
            arg = site.label or arg
        parts.append(_component(c.name, arg))
    return ".".join(parts)
