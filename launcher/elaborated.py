"""`pydyn -p2`: the elaborated script, printed as `stap -p2` prints it (printscript in
stap's main.cxx, the printsig methods of elaborate.cxx and tapsets.cxx).

    # globals
    hits:long [string]
    # functions
    twice:long (x:long)
    # probes
    process("/p").function("f@/p.c:3") /* pc=.dynamic+0x1139 */ /*  <- process("p").function("f") */
      # locals
      n:long

Each probe is printed once for every concrete point it resolved to, as stap prints its
derived probes: a function as its DWARF names it (`name@file:line`, listing.py), a
mark as stap derives it, the `statement(PC)` of the note's address after the
provider and mark it matched; then, in a comment, the code address (stap's
`pc=SECTION+OFFSET`: `.absolute` in a non-PIE executable, `.dynamic` in a PIE or
library) and the chain of points it was derived from, ending with the probe as the
script wrote it.  Globals, parameters, returns and locals carry the types pass 2
inferred (`unknown` where nothing gives one, `stats` for an aggregate); functions are
sorted by name, as stap keeps them.  `-v` adds global initial values and each body.

pydyn adds, indented below a site, the plan of how it is patched (`plan:`, and
`returns:` for a return probe); stap has no such step.  An alias's definition is not
one of the derivation chain's links: the chain goes from the point to the probe the
script wrote.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Mapping, Sequence

from .elf.functions import FunctionSite
from .elf.stapsdt import ProbeSite
from .errors import SourceLocation
from .pointnames import site_names
from .resolve import Resolution, ResolvedPoint
from .script import ast
from .script.unparse import expression, literal, probe_point, probe_points, quote, statement
from .translate.common import STAT
from .translate.types import GlobalVar, Types


def _type(t: str | None) -> str:
    return "unknown" if t is None else "stats" if t == STAT else t


def global_sig(var: GlobalVar, verbose: int) -> str:
    """`name%[size]:type [key, ...]`, as stap's vardecl::printsig."""
    decl = var.decl
    text = var.name
    if decl is not None and decl.wrap:
        text += "%"
    if decl is not None and decl.size is not None:
        text += f"[{decl.size}]"
    if var.array is not None:
        text += f":{_type(var.array.value)} [{', '.join(_type(k) for k in var.array.keys)}]"
    else:
        text += f":{_type(var.type)}"
    if verbose and decl is not None and decl.init is not None:
        text += " = " + literal(decl.init.value)
    return text


def _locals(names: Mapping[str, str | None], params: Sequence[str] = ()) -> Iterator[str]:
    shown = [(n, t) for n, t in names.items() if n not in params]
    if shown:
        yield "  # locals"
    for name, t in shown:
        yield f"  {name}:{_type(t)}"


def _pc(site: ProbeSite, resolution: Resolution) -> str:
    """stap's `pc=SECTION+OFFSET`: the address relative to the object's first page."""
    info = resolution.objects.get(site.path)
    if info is None or not info.segments:
        return f"pc={site.pc:#x}"
    base = min(seg.vaddr for seg in info.segments) & ~0xFFF
    section = ".absolute" if info.elf_type == "EXEC" else ".dynamic"
    return f"pc={section}+{site.pc - base:#x}"


def _process(path: str) -> str:
    return f"process({quote(path)})"


def derived_points(rp: ResolvedPoint, resolution: Resolution
                   ) -> Iterator[tuple[str, list[str], ProbeSite | None]]:
    """(the point, the links of its derivation before the script's probe, its site) for
    each concrete point a resolved point stands for."""
    if not rp.sites:
        point = rp.point
        if rp.object_path is not None and point.components[0].name == "process":
            point = ast.ProbePoint(
                (ast.Component("process", rp.object_path, point.loc), *point.components[1:]),
                point.optional, point.sufficient, point.condition, point.loc)
        yield probe_point(point), [], None
        return
    for site in rp.sites:
        pc = f"/* {_pc(site, resolution)} */"
        if isinstance(site, FunctionSite):
            yield f"{site_names(rp.point, site, rp.program, True)[0]} {pc}", [], site
            continue
        stmt = f"{_process(site.path)}.statement({site.pc:#x})"
        mark = f"{_process(site.path)}.provider({quote(site.provider)}).mark({quote(site.name)})"
        yield f"{stmt} {pc}", [stmt, mark], site


def iter_elaborated(script: ast.Script, resolution: Resolution, types: Types, *,
                    written: Mapping[SourceLocation, ast.Probe] | None = None,
                    site_lines: Callable[[ProbeSite], list[str]] | None = None,
                    verbose: int = 0) -> Iterator[str]:
    """The lines of `stap -p2`'s print of the typed script.  `written`: each probe as
    the script wrote it, by its location (the alias and brace expansion undone);
    `site_lines`: what pydyn prints below a site (its plan)."""
    written = written or {}
    if script.embedded:
        yield "# global embedded code"
        yield from (expression(e) for e in script.embedded)
    shown = [types.globals[g.name] for g in script.globals if g.name in types.globals]
    if shown:
        yield "# globals"
    yield from (global_sig(var, verbose) for var in shown)
    if types.funcs:
        yield "# functions"
    for name in sorted(types.funcs):
        info = types.funcs[name]
        params = [p.name for p in info.decl.params]
        args = ", ".join(f"{p}:{_type(t)}" for p, t in zip(params, info.params, strict=True))
        yield f"{name}:{_type(info.ret)} ({args})"
        yield from _locals(info.locals, params)
        if verbose:
            body = info.decl.body
            yield expression(body) if isinstance(body, ast.Embedded) else statement(body)
    if script.probes:
        yield "# probes"
    for probe, points, scope in zip(script.probes, resolution.points, types.probe_scopes,
                                    strict=True):
        origin = probe_points(written[probe.loc].points if probe.loc in written
                              else probe.points, ",")
        for rp in points:
            for point, links, site in derived_points(rp, resolution):
                chain = "".join(f" <- {link}" for link in [*links, origin])
                yield f"{point} /* {chain} */ "
                if site is not None and site_lines is not None:
                    yield from site_lines(site)
                yield from _locals(scope.locals)
                if verbose:
                    yield statement(probe.body)
