"""What translation hands to a session: the `Program` and its histogram formats.

Kept apart from translate/ so a cache hit (which rebuilds the Program from the
manifest) and a session import neither the translator nor the parser.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, NamedTuple

from .format import FormatSpec

if TYPE_CHECKING:
    from .elf.stapsdt import ProbeSite
    from .errors import ScriptError, ScriptWarning
    from .plan import PatchPlan


class HistFormat(NamedTuple):   # not a dataclass: see shmlayout/layout.py
    """A histogram record: its arguments are the bucket counts."""

    kind: str  # "log" | "linear"
    lo: int = 0
    hi: int = 0
    step: int = 1


Format = FormatSpec | HistFormat
ReportTag = tuple[str, str, tuple[str, ...], str]


class Program:
    """What translation produces: the C source and what the launcher needs to run it.

    A plain class: a warm run builds one from the cache and imports no dataclasses."""

    def __init__(self, c_source: str, checksum: bytes, formats: list[Format],
                 required_abis: frozenset[str], globals_size: int, needs_wait: bool,
                 timers: list[tuple[int, int, int]] | None = None,
                 sites: list[ProbeSite] | None = None,
                 warnings: list[ScriptWarning | str] | None = None,
                 plans: list[PatchPlan] | None = None,
                 report: dict[int, ReportTag] | None = None,
                 scalars: dict[str, tuple[int, str, int]] | None = None,
                 objects: list[tuple[str, list[str]]] | None = None) -> None:
        self.c_source = c_source
        self.checksum = checksum
        self.formats = formats
        self.required_abis = required_abis
        self.globals_size = globals_size
        self.needs_wait = needs_wait   # has probes that fire outside begin/end (marks, timers)
        self.timers = timers or []     # (probe, period, rand)
        self.sites = sites or []
        self.warnings = warnings or []
        self.plans = plans or []       # one per site, same order
        # Exit-report formats (never shared with a printf): id -> (record type "map" or
        # "stats", global name, key types, value type "long"/"string"/"stat"/"empty").
        self.report = report or {}
        # Scalar globals by name: (offset in the globals area, "long" | "string", size),
        # so a launcher can set them before `begin` (pydyn-run NAME=VALUE).
        self.scalars = scalars or {}
        # The module's pd_objects in order, each with the probe points that name it: the
        # exit report says which no process of the session loaded (pd_header.objects_loaded).
        self.objects = objects or []
        # (function, its return mechanism) for `pydyn -v` (plan/returns.py; set by translate)
        self.return_plans: list[tuple[str, str]] = []
        # set by translate: why the C does not build (given after -p3, as stap's gcc would)
        self.build_error: ScriptError | None = None

    @property
    def checksum_hex(self) -> str:
        return self.checksum.hex()[:16]
