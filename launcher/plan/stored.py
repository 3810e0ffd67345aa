"""The plans of a binary's sites, kept in the facts store (factstore.py) so that a new
script probing places planned before neither imports capstone nor decodes anything.

Plans of one binary are not independent of each other: a plan claims bytes (dead
padding, islands, the windows of function exits) that a later plan of the same run may
then not take, and an exit's plan depends on the function entry's.  So what is kept is
the plans of one run's sites in one binary, in planning order, keyed by

- the binary's identity (its GNU build-id, else the sha256 of its bytes: factstore.py),
- the planner's version: a hash of the planning code (this folder, pd_sweep.c) and of
  the installed capstone (its files' sizes and times), so that a change to either
  plans again,
- each site's request: its pc, how it is patched (mark, function entry, function
  with returns and what its probes read), and the site facts planning reads.

A script that probes the same places as one before (a new handler, another constant)
takes the stored plans; one more or one less site in a binary is another key.  The
store's locking makes concurrent runs on the same new sites plan them once; damaged or
foreign files are planned again (factstore.py).
"""

from __future__ import annotations

import importlib.util
import os
from collections.abc import Callable
from functools import lru_cache
from pathlib import Path
from typing import Any

from .. import factstore
from ..build import sha256
from ..elf.functions import FunctionSite
from ..elf.stapsdt import ProbeSite

PLANS_FORMAT = 1
_HERE = Path(__file__).resolve().parent

# (site, has .return probes, a probe reads $return, a mark is at the entry)
FunctionRequest = tuple[FunctionSite, bool, bool, bool]


@lru_cache(maxsize=1)
def planner_version() -> str:
    """A hash of what computes plans: this folder's code, and capstone as installed
    (found, not imported: importing it is what a stored plan saves)."""
    h = sha256(f"plans {PLANS_FORMAT}\n".encode())
    for p in sorted([*_HERE.glob("*.py"), *_HERE.glob("*.c")]):
        h.update(p.name.encode() + b"\0" + p.read_bytes())
    spec = importlib.util.find_spec("capstone")
    if spec is not None and spec.origin:
        for root, _dirs, files in sorted(os.walk(Path(spec.origin).parent)):
            for name in sorted(files):
                if name.endswith((".py", ".so", ".dylib")) or ".so." in name:
                    st = os.stat(os.path.join(root, name))
                    h.update(f"{root}/{name} {st.st_size} {st.st_mtime_ns}\n".encode())
    return h.hexdigest()


def request_of(marks: list[ProbeSite], functions: list[FunctionRequest],
               forced: bool) -> str:
    """What the plans of one binary's sites are computed from, besides the binary."""
    parts = [f"forced {int(forced)}"]
    parts += [f"m {s.pc} {s.nop_len} {s.machine} {s.elf_class}" for s in marks]
    parts += [f"f {s.pc} {s.nop_len} {s.machine} {s.elf_class} {s.func_addr} {s.func_size} "
              f"{int(ret)} {int(rv)} {int(at_entry)} {s.name}"
              for s, ret, rv, at_entry in functions]
    return "\n".join(parts)


def load_or_plan(path: str, marks: list[ProbeSite], functions: list[FunctionRequest],
                 forced: bool, compute: Callable[[], tuple[list[Any], list[Any]]],
                 ) -> tuple[list[Any], list[Any]]:
    """(the marks' plans, the functions' (entry plan, return plan or None)), in the
    order of the requests: stored ones, else `compute()`'s (then stored)."""
    try:
        key = factstore.binary_key(path, f"site plans {planner_version()}\n"
                                         f"{request_of(marks, functions, forced)}")
    except OSError:
        return compute()
    computed: list[tuple[list[Any], list[Any]]] = []

    def fresh() -> factstore.Facts:
        plans = compute()
        computed.append(plans)
        return {"marks": [encode_patch(p) for p in plans[0]],
                "functions": [[encode_patch(e), None if r is None else encode_returns(r)]
                              for e, r in plans[1]]}, {}

    header, _arrays = factstore.load_or_compute(
        key, fresh, valid=lambda f: _fits(f[0], len(marks), len(functions)),
        suffix=factstore.PLANS_SUFFIX)
    if computed:
        return computed[0]
    try:
        return ([decode_patch(p) for p in header["marks"]],
                [(decode_patch(e), None if r is None else decode_returns(r, site))
                 for (e, r), (site, *_rest) in zip(header["functions"], functions,
                                                   strict=True)])
    except (KeyError, TypeError, ValueError):
        return compute()


def _fits(header: dict[str, Any], marks: int, functions: int) -> bool:
    return isinstance(header.get("marks"), list) and len(header["marks"]) == marks and \
        isinstance(header.get("functions"), list) and len(header["functions"]) == functions


# -- plans as JSON ------------------------------------------------------------------------

def encode_patch(plan: Any) -> dict[str, Any]:
    d = {k: getattr(plan, k) for k in plan.__dataclass_fields__}
    d["orig"] = plan.orig.hex()
    d["code"] = plan.code.hex()
    d["fixups"] = [[f.at, f.kind, f.target, f.anchor] for f in plan.fixups]
    d["redirects"] = [[r.field, r.anchor, r.code_off, r.orig.hex(), r.size, r.island, r.hop]
                      for r in plan.redirects]
    d["bounds"] = [list(b) for b in plan.bounds]
    return d


def decode_patch(d: dict[str, Any]) -> Any:
    from .x86 import Fixup, PatchPlan, Redirect
    return PatchPlan(**dict(
        d, orig=bytes.fromhex(d["orig"]), code=bytes.fromhex(d["code"]),
        fixups=tuple(Fixup(*f) for f in d["fixups"]),
        redirects=tuple(Redirect(a, b, c, bytes.fromhex(o), s, i, h)
                        for a, b, c, o, s, i, h in d["redirects"]),
        bounds=tuple((a, b) for a, b in d["bounds"])))


def encode_returns(rp: Any) -> dict[str, Any]:
    return {"mechanism": rp.mechanism, "reason": rp.reason,
            "exits": [[e.addr, e.kind, e.site.pc, encode_patch(e.plan), e.in_entry]
                      for e in rp.exits]}


def decode_returns(d: dict[str, Any], site: FunctionSite) -> Any:
    """`site`: the function's entry site, whose copies at each exit's window are the
    exits' sites."""
    import dataclasses

    from .returns import Exit, ReturnPlan
    return ReturnPlan(d["mechanism"], d["reason"], tuple(
        Exit(addr, kind, dataclasses.replace(site, pc=pc, nop_len=0), decode_patch(p), inside)
        for addr, kind, pc, p, inside in d["exits"]))
