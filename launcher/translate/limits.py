"""Pass 3 input, limits: stap's MAXSTRINGLEN and MAXMAPENTRIES as `-D` sets them for
one translation, and the sizes that follow from them (a string slot, an array's hash
table).  The same `-D` reaches the C compiler, so both sides agree."""

from __future__ import annotations

from typing import NamedTuple

from ...shmlayout.globals import ENTRY_HEAD, STAT_SIZE
from ..format import FormatSpec
from .common import LONG, STAT, STRING
from .types import GlobalVar


class Limits(NamedTuple):
    maxstringlen: int = 512    # stap's defaults
    maxmapentries: int = 2048

    @classmethod
    def from_defines(cls, defines: dict[str, str]) -> Limits:
        default = cls()
        return cls(int(defines.get("MAXSTRINGLEN", default.maxstringlen)),
                   int(defines.get("MAXMAPENTRIES", default.maxmapentries)))

    def max_entries(self, var: GlobalVar) -> int:
        """`global a[N]`, else MAXMAPENTRIES."""
        return var.decl.size if var.decl is not None and var.decl.size else self.maxmapentries

    def capacity(self, var: GlobalVar) -> int:
        """Hash slots of an array: a power of two with 25% headroom over its limit."""
        n = self.max_entries(var)
        return _next_pow2(n + n // 4 + 1)

    def type_size(self, t: str | None) -> int:
        # strings keep 8-byte alignment so the slots after them stay aligned
        string_size = (self.maxstringlen + 7) & ~7
        return {LONG: 8, STRING: string_size, STAT: STAT_SIZE}.get(t or LONG, 8)

    def key_size(self, var: GlobalVar) -> int:
        assert var.array is not None
        return sum(self.type_size(k) for k in var.array.keys)

    def entry_size(self, var: GlobalVar) -> int:
        assert var.array is not None
        return ENTRY_HEAD + self.key_size(var) + self.type_size(var.array.value)

    def formats_in_probe(self, spec: FormatSpec) -> bool:
        """Whether printf(spec) can be formatted by the handler (pd_sf_* in pd_string.c, the
        rules format.py applies): integer conversions with fixed widths, whose longest output
        fits a MAXSTRINGLEN string.  Strings and '*' widths stay records formatted here."""
        bound = 0
        for piece in spec.pieces:
            if isinstance(piece, str):
                bound += len(piece.encode())
            elif piece.conv not in "diuxX" or piece.width == -1 or piece.precision == -1:
                return False
            else:
                bound += max(piece.width or 0, piece.precision or 0) + 24   # 2^64 in octal-ish
        return bound < self.maxstringlen


def _next_pow2(n: int) -> int:
    p = 1
    while p < n:
        p <<= 1
    return p
