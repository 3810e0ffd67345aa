"""What translation hands to a session: the `Program` and its histogram formats.

Kept apart from translate.py so a cache hit (which rebuilds the Program from the
manifest) and a session import neither the translator nor the parser.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from pydyn.launcher.format import FormatSpec

if TYPE_CHECKING:
    from pydyn.launcher.elf.stapsdt import ProbeSite
    from pydyn.launcher.patchplan import PatchPlan


@dataclass(frozen=True)
class HistFormat:
    """A histogram record: its arguments are the bucket counts."""

    kind: str  # "log" | "linear"
    lo: int = 0
    hi: int = 0
    step: int = 1


Format = FormatSpec | HistFormat
ReportTag = tuple[str, str, tuple[str, ...], str]


@dataclass
class Program:
    """What translation produces: the C source and what the launcher needs to run it."""

    c_source: str
    checksum: bytes
    formats: list[Format]
    required_abis: frozenset[str]
    globals_size: int
    needs_wait: bool              # has probes that fire outside begin/end (marks, timers)
    timers: list[tuple[int, int, int]] = field(default_factory=list)  # (probe, period, rand)
    sites: list[ProbeSite] = field(default_factory=list)
    warnings: list[str] = field(default_factory=list)
    plans: list[PatchPlan] = field(default_factory=list)   # one per site, same order
    # Exit-report formats (never shared with a printf): id -> (record type "map" or
    # "stats", global name, key types, value type "long"/"string"/"stat"/"empty").
    report: dict[int, ReportTag] = field(default_factory=dict)
    # Scalar globals by name: (offset in the globals area, "long" | "string", size),
    # so a launcher can set them before `begin` (pydyn-run NAME=VALUE).
    scalars: dict[str, tuple[int, str, int]] = field(default_factory=dict)

    @property
    def checksum_hex(self) -> str:
        return self.checksum.hex()[:16]
