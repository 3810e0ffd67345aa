"""`@defined` decided per site: a probe whose sites disagree is split.

stap expands a probe into one derived probe per site and decides each `@defined($x)`
there, so `if (@defined($mem)) ...` on a libc with DWARF and one without runs the
branch in the first and drops it in the second.  pydyn types one handler a probe
for all its sites; `split_by_defined` gives a probe whose `@defined` operands
resolve at some of its sites and not at others one copy per group of sites that
agree, each a probe of its own, which the translator then types and emits with
the branches its sites take (`Types.static_truth`).  Operands that depend on a
local's type (autocast) are decided with the whole probe, as before.
"""

from __future__ import annotations

import copy
import dataclasses
from collections.abc import Sequence

from ..elf.stapsdt import ProbeSite
from ..resolve import Resolution, ResolvedPoint
from ..script import ast
from ..script.walk import iter_nodes
from .types import Scope, Types

SITE_DEPENDENT = (ast.TargetSymbol, ast.Cast, ast.AtVar)


def _signature(types: Types, operands: Sequence[ast.Expr], site: ProbeSite,
               kinds: tuple[str, ...]) -> tuple[bool, ...]:
    scope = Scope("probe", sites=(site,), probe_kinds=kinds)
    return tuple(types.is_defined(e, scope) for e in operands)


def split_by_defined(script: ast.Script, resolution: Resolution
                     ) -> tuple[ast.Script, Resolution]:
    """The script and resolution with each probe whose sites disagree on an
    `@defined` split into one probe per group of agreeing sites (in the order of
    their first site); the others as they were."""
    types: Types | None = None
    probes: list[ast.Probe] = []
    points: list[list[ResolvedPoint]] = []
    for probe, rps in zip(script.probes, resolution.points, strict=True):
        operands = [n.operand for n in iter_nodes(probe.body)
                    if isinstance(n, ast.Defined) and isinstance(n.operand, SITE_DEPENDENT)]
        sites = [s for rp in rps for s in rp.sites]
        if not operands or len(sites) < 2:
            probes.append(probe)
            points.append(rps)
            continue
        if types is None:
            types = Types(script, resolution)
        kinds = tuple(rp.kind for rp in rps)
        groups: dict[tuple[bool, ...], list[ProbeSite]] = {}
        for s in sites:
            groups.setdefault(_signature(types, operands, s, kinds), []).append(s)
        if len(groups) == 1:
            probes.append(probe)
            points.append(rps)
            continue
        for n, group in enumerate(groups.values()):
            ids = {id(s) for s in group}
            part = [dataclasses.replace(rp, sites=tuple(s for s in rp.sites if id(s) in ids))
                    for rp in rps if (rp.sites and any(id(s) in ids for s in rp.sites))
                    or (not rp.sites and n == 0)]
            # a copy of its own: the passes keep facts about a node by its id
            probes.append(probe if n == 0 else copy.deepcopy(probe))
            points.append(part)
    if len(probes) == len(script.probes):
        return script, resolution
    return (dataclasses.replace(script, probes=tuple(probes)),
            dataclasses.replace(resolution, points=points))
