"""Patch planning, the step between resolve and translate: how each probe site is
patched, decided offline (the runtime only applies a plan).

One module per architecture (x86.py: x86-64 and i386, aarch64.py), chosen by the
site's machine here and nowhere else (`_ARCHES`); returns.py decides how an x86
function's `.return` probes are reached (aarch64 keeps the return-address swap).
`plan_sites` plans every site of a resolution at once, with the DWARF locations of the
`$name` parameters the script reads, so translation reads no object file.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from functools import partial
from typing import NamedTuple

from ..elf import dwarf
from ..elf.argspec import ArgSpec
from ..elf.dwarf_expr import ExprError, narrow, split_part
from ..elf.functions import FunctionSite, entry_site
from ..elf.stapsdt import ProbeSite
from ..resolve import Resolution
from ..script import ast
from ..script.walk import is_param_name, iter_nodes, reads_return_value
from . import aarch64, stored, x86
from .returns import ReturnPlan, describe_returns, hijack, plan_returns
from .stored import FunctionRequest
from .x86 import PatchPlan, coverage, plan_c, trap

__all__ = ["EntryKeep", "FunctionPlan", "PatchPlan", "ReturnPlan", "SitePlans", "coverage",
           "plan_c", "plan_function", "plan_site", "plan_sites", "prepare", "describe_returns"]

class _Arch(NamedTuple):
    """What planning does on one machine."""

    plan_site: Callable[[ProbeSite], PatchPlan]
    plan_function: Callable[[ProbeSite], PatchPlan]
    # what the whole objects say of the sites, computed for all of them at once
    prepare: Callable[[Iterable[ProbeSite]], None] | None
    exits: bool   # returns.py may patch a function's exits; else the return-address swap


_X86 = _Arch(x86.plan_site, x86.plan_function, x86.prepare, True)
_ARCHES = {
    "x86_64": _X86,
    "i386": _X86,
    "aarch64": _Arch(aarch64.plan_site, aarch64.plan_function, None, False),
}


def plan_site(site: ProbeSite) -> PatchPlan:
    """The plan of a USDT site, or of a function entry (`nop_len` 0)."""
    arch = _ARCHES.get(site.machine)
    return arch.plan_site(site) if arch else trap(
        f"trampolines are not implemented on {site.machine}")


def plan_function(site: ProbeSite) -> PatchPlan:
    """The plan of a function entry (the entry is no nop: see x86.plan_function)."""
    arch = _ARCHES.get(site.machine)
    return arch.plan_function(site) if arch else trap(
        f"trampolines are not implemented on {site.machine}")


def prepare(sites: Iterable[ProbeSite]) -> None:
    """What the objects say of every site, at once per machine (x86.prepare)."""
    by_arch: dict[_Arch, list[ProbeSite]] = {}
    for site in sites:
        arch = _ARCHES.get(site.machine)
        if arch is not None and arch.prepare is not None:
            by_arch.setdefault(arch, []).append(site)
    for arch, some in by_arch.items():
        assert arch.prepare is not None
        arch.prepare(some)


@dataclass(frozen=True)
class FunctionPlan:
    """A probed function: its entry's plan, how its returns are reached (None: no
    `.return` probe), the locations of the script's `$name` parameters in it."""

    entry: PatchPlan
    returns: ReturnPlan | None
    params: dict[str, ArgSpec] = field(default_factory=dict)

    def param_args(self, names: list[str]) -> list[ArgSpec]:
        """The argument descriptors of the script's parameter slots `names`, in order (a
        slot this function lacks is never read: the translator checked)."""
        return [self._arg(n) for n in names]

    def _arg(self, slot: str) -> ArgSpec:
        part = split_part(slot)
        if part is None:
            return self.params.get(slot, dwarf.UNUSED_ARG)
        name, off, size, signed = part
        whole = self.params.get(name)
        if whole is None:
            return dwarf.UNUSED_ARG
        try:
            return narrow(whole, off, size, signed)
        except ExprError:
            return dwarf.UNUSED_ARG   # the translator refused it (tvars.access)


@dataclass(frozen=True)
class EntryKeep:
    """A probe site inside a function whose variables are read from registers' values
    at the function's entry: the entry, where a hidden probe keeps the registers for
    the call, and the CFA at the site as (DWARF register, offset), which finds them
    again (launcher/entry.py)."""

    site: FunctionSite
    entry: FunctionSite
    cfa: tuple[int, int]


@dataclass(frozen=True)
class SitePlans:
    """Every site's plan, by (object path, link-time address); per probe (by index in
    the script) its sites that read values of the function's entry."""

    marks: dict[tuple[str, int], PatchPlan]
    functions: dict[tuple[str, int], FunctionPlan]
    entry_keeps: dict[int, tuple[EntryKeep, ...]] = field(default_factory=dict)

    def mark(self, site: ProbeSite) -> PatchPlan:
        return self.marks[(site.path, site.pc)]

    def function(self, site: FunctionSite) -> FunctionPlan:
        return self.functions[(site.path, site.pc)]


def plan_sites(script: ast.Script, resolution: Resolution,
               defines: dict[str, str]) -> SitePlans:
    """Plan every site `resolution` found for `script`'s probes.

    A function's returns are planned knowing whether a probe on it reads values of
    the entry (@entry, or a `$param` in a `.return` probe) or `$return`: those keep
    the return-address hijack or refuse tail calls (returns.py)."""
    forced = defines.get("PD_RETURN_HIJACK", "0") != "0"
    # the DWARF parameters only when a probe may name one ($fd, $$parms)
    params = any(isinstance(n, ast.TargetSymbol) and (
        is_param_name(n.name) or n.name in ("$$parms", "$$vars", "$$locals"))
        for n in iter_nodes(script.probes))
    mark_sites: dict[tuple[str, int], ProbeSite] = {}
    # per function: its entry site, whether it has return probes, reads $return
    funcs: dict[tuple[str, int], tuple[FunctionSite, bool, bool]] = {}
    keeps: dict[int, tuple[EntryKeep, ...]] = {}
    for pi, (probe, points) in enumerate(zip(script.probes, resolution.points, strict=True)):
        sites = [s for rp in points for s in rp.sites]
        if params:
            keeps_here = _entry_keeps(probe, sites)
            if keeps_here:
                keeps[pi] = keeps_here
                for k in keeps_here:
                    funcs.setdefault((k.entry.path, k.entry.pc), (k.entry, False, False))
        uses_return = reads_return_value(probe)
        for site in sites:
            key = (site.path, site.pc)
            if not isinstance(site, FunctionSite):
                mark_sites.setdefault(key, site)
                continue
            _, ret, rv = funcs.get(key, (site, False, False))
            funcs[key] = (site, ret or site.is_return, rv or (site.is_return and uses_return))
    # plans of one object depend on each other (the bytes they claim): planned, and
    # stored, per object (stored.py)
    by_path: dict[str, tuple[list[ProbeSite], list[FunctionRequest]]] = {}
    for (path, _pc), site in mark_sites.items():
        by_path.setdefault(path, ([], []))[0].append(site)
    for (path, pc), (site, has_returns, uses_return) in funcs.items():
        by_path.setdefault(path, ([], []))[1].append(
            (site, has_returns, uses_return, (path, pc) in mark_sites))
    marks: dict[tuple[str, int], PatchPlan] = {}
    functions: dict[tuple[str, int], FunctionPlan] = {}
    for path, (msites, fsites) in by_path.items():
        mplans, fplans = stored.load_or_plan(path, msites, fsites, forced,
                                             partial(_plan_object, msites, fsites, forced))
        for site, plan in zip(msites, mplans, strict=True):
            marks[(site.path, site.pc)] = plan
        for (site, *_r), (entry, rplan) in zip(fsites, fplans, strict=True):
            functions[(site.path, site.pc)] = FunctionPlan(
                entry, rplan,
                dwarf.param_locations(site.path, site.func_addr, site.pc) if params else {})
    return SitePlans(marks, functions, keeps)


def _plan_object(marks: list[ProbeSite], functions: list[FunctionRequest], forced: bool,
                 ) -> tuple[list[PatchPlan], list[tuple[PatchPlan, ReturnPlan | None]]]:
    """The plans of one object's sites, marks first (in the order given), then each
    function's returns and entry."""
    prepare([*marks, *(site for site, *_r in functions)])
    mplans = [plan_site(site) for site in marks]
    fplans: list[tuple[PatchPlan, ReturnPlan | None]] = []
    for site, has_returns, uses_return, mark_at_entry in functions:
        arch = _ARCHES.get(site.machine)
        if not has_returns:
            rplan = None
        elif arch is None or not arch.exits:
            rplan = hijack(f"{site.machine} keeps the return-address swap")
        else:
            rplan = plan_returns(site, site.func_addr, site.func_size,
                                 return_value=uses_return, forced=forced,
                                 mark_at_entry=mark_at_entry)
        fplans.append((plan_function(site), rplan))
    return mplans, fplans


def _entry_keeps(probe: ast.Probe, sites: list[ProbeSite]) -> tuple[EntryKeep, ...]:
    """The probe's sites inside functions that read a variable from a register's value
    at the function's entry (dwarf.entry_frame)."""
    if any(isinstance(n, ast.Entry) for n in iter_nodes(probe.body)):
        return ()   # a .return probe's hidden entry handler is the @entry one
    symbols = [n.name for n in iter_nodes(probe.body) if isinstance(n, ast.TargetSymbol)]
    names: frozenset[str] | None = frozenset(s[1:] for s in symbols if is_param_name(s))
    if any(s in ("$$parms", "$$vars", "$$locals") for s in symbols):
        names = None   # every variable in scope
    elif not names:
        return ()
    out = []
    for site in sites:
        if not isinstance(site, FunctionSite) or site.is_return:
            continue
        cfa = dwarf.entry_frame(site.path, site.func_addr, site.pc, names)
        if cfa is not None:
            out.append(EntryKeep(site, entry_site(site), cfa))
    return tuple(out)
