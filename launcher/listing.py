"""`pydyn -l PROBEPOINT` / `-L`: the probe points a pattern matches, as stap lists them.

`-l` prints each matching probe point once, sorted, as stap's pn() names it
(`process("/abs/path").mark("tick")`, `process("/abs/path").function("f@/src/f.c:3")`:
pointnames.py).  `-L` adds the context variables of the
mark, `$argN:long` as stap prints them; `-L -v` names each site on its own line
with the typed variables (`$arg1:int32`), the raw argument spec and the PC, so
duplicate sites of one mark are visible.
"""

from __future__ import annotations

from collections.abc import Iterable

from .elf.argspec import ArgSpec
from .elf.functions import FunctionSite
from .elf.stapsdt import ProbeSite
from .errors import PydynError, ScriptError
from .pointnames import site_names
from .resolve import ResolvedPoint, Resolver, format_point


def arg_type(arg: ArgSpec, typed: bool) -> str:
    """stap's `long` for every argument; with `typed`, the width and sign of the note."""
    if not typed:
        return "long"
    if arg.is_float:
        return "double" if arg.size == 8 else "float"
    return f"{'int' if arg.signed else 'uint'}{arg.size * 8}"


def context_vars(site: ProbeSite, typed: bool) -> str:
    return " ".join(f"$arg{i}:{arg_type(a, typed)}" for i, a in enumerate(site.args, 1))


def function_vars(site: FunctionSite, verbose: int) -> str:
    """` $a:int $b:long int $tmp:char[]`, the variables stap's -L lists after a
    function (its parameters, then its locals), a statement or label inside it (those
    in scope there, the innermost scope's first) or a return (`$return`); with -v each
    one's location ("ABI": not from DWARF)."""
    from .elf.dwarf import function_at, get_dwarf, site_params
    func = function_at(site.path, site.func_addr)
    if func is None:
        return ""
    variables = list(func.params) if not site.is_return else []
    # stap's -L: the locals DWARF locates at the entry (or gives a constant)
    extra = [(v.name, f"${v.name}:{v.type_name}") for v in func.locals if v.at_entry] \
        if not site.is_return else []
    named = [(p.name, f"${p.name}:{p.type_name}") for p in variables]
    if not site.is_return:
        inside = site_params(site.path, site.func_addr, site.pc)
        if inside is not func.params:   # a statement or label inside the function
            variables = list(inside)
            extra = [(v.name, f"${v.name}:{v.type_name}") for v in func.locals if v.static]
            rank = {n: i for i, n in enumerate(get_dwarf(site.path).scope_names(func, site.pc))}
            named = sorted([(p.name, f"${p.name}:{p.type_name}") for p in variables] + extra,
                           key=lambda v: rank.get(v[0], len(rank)))
            extra = []
    line = "".join(f" {text}" for _, text in [*named, *extra])
    if site.is_return:
        line += " $return:long"
    if verbose:
        where_ = " ".join(f"{p.name}={p.location.text}{'(ABI)' if p.via_abi else ''}"
                          if p.location else f"{p.name}=?" for p in variables)
        line += f" pc={site.pc:#x}" + (f' locations="{where_}"' if variables else "")
    return line


def _lines(points: Iterable[ResolvedPoint], with_vars: bool, verbose: int) -> list[str]:
    """Each site by its pn() (stap's -l prints the script-level point of each
    derived probe), with -L its variables."""
    lines: set[str] = set()
    for rp in points:
        if rp.kind not in ("function", "mark") or not rp.sites:
            lines.add(format_point(rp.point).rstrip("?"))
            continue
        for site in rp.sites:
            line = site_names(rp.point, site, rp.program, True)[1]
            if with_vars and isinstance(site, FunctionSite):
                line += function_vars(site, verbose)
            elif with_vars and verbose:
                line = (f"{line} {context_vars(site, True)} "
                        f'args="{site.arg_text}" pc={site.pc:#x}').replace("  ", " ")
            elif with_vars:
                line = f"{line} {context_vars(site, False)}".rstrip()
            lines.add(line)
    return sorted(lines)


def list_probes(pattern: str, *, with_vars: bool, verbose: int,
                target_path: str | None = None) -> list[str]:
    """The listing lines for `pattern`; a PydynError when nothing matches."""
    from .script import parse_script

    warnings: list[str] = []
    try:
        script = parse_script(f"probe {pattern} {{}}", "<-l>")
        if len(script.probes) != 1:
            raise PydynError(f"-l '{pattern}': expected one probe point")
        resolver = Resolver(target_path, warn=warnings.append)
        points: list[ResolvedPoint] = []
        for point in script.probes[0].points:
            points.extend(resolver.resolve_point(point))
    except ScriptError as exc:
        # The location points into the synthetic `probe ... {}`: name the pattern instead.
        hint = f"\nhint: {exc.hint}" if exc.hint else ""
        raise PydynError(f"-l '{pattern}': {exc.message}{hint}") from exc
    lines = _lines(points, with_vars, verbose)
    if not lines:
        raise PydynError(f"-l '{pattern}': no probe point matches")
    return lines
