"""SystemTap's printf, reproduced in Python.

Probes only ship a format id and raw argument values; the launcher renders
them here, so the output must match stap byte for byte.  Two stap sources
define the behaviour:

* `print_format::string_to_components` (staptree.cxx) decides what a format
  string means.  It is stricter than C: at most ONE flag per conversion (a
  second flag is an invalid conversion, and `%#05x` means flag `#`, width 5 --
  the `0` is a width digit, not zero-padding), and no `%n`.
* the compiled printf that translate.cxx emits (`emit_compiled_printfs`),
  which calls the runtime helpers of runtime/vsprintf.c: `number()`,
  `_stp_vsprint_char()`, `_stp_vsprint_memory()`, `_stp_vsprint_binary()`.
  Every integer is an int64 argument, so `%u %x %X %o` show all 64 bits
  (-1 -> ffffffffffffffff), `%#x` of 0 is `0x0`, `%p` is `%#x`, zero-padding
  still applies when a precision is given, and a dynamic (`*`) width or
  precision is clamped to >= 0 (a negative `*` width does not left-justify).

Output is a `str` whose code points 0-255 stand for bytes: `%c` and `%b`
produce `chr(byte)`.  Decode script strings as latin-1 and encode the result
as latin-1 to get stap's exact bytes.

Deliberate differences from stap, all for inputs stap rejects or mishandles:
length modifiers `h hh l ll z j t` are accepted and ignored (stap takes a
single `l` only); a trailing lone `%` or `%.` is reported as an incomplete
conversion (stap reads past the end of the string); `%m`/`%M` are rejected,
since the launcher never sees the traced process's memory.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import NamedTuple

from .errors import ScriptError, SourceLocation

# `print_format::string_to_components` accepts exactly one of these.
FLAG_CHARS = "0+- #"
LENGTH_MODIFIERS = ("hh", "ll", "h", "l", "z", "j", "t")
NUMBER_CONVERSIONS = "diuoxXp"
CONVERSIONS = NUMBER_CONVERSIONS + "csbmM"

# stap clamps every width and precision to the print buffer (STP_BUFFER_SIZE,
# runtime/transport/transport.h).
STP_BUFFER_SIZE = 8192

_MASK64 = (1 << 64) - 1


class Conversion(NamedTuple):   # not a dataclass: see shmlayout/layout.py
    """One `%` directive.

    `width`/`precision` are None when absent and -1 for `*` (taken from the
    next argument).  `flags` is "" or the single flag character.
    """

    flags: str
    width: int | None
    precision: int | None
    length: str
    conv: str
    text: str  # the directive as written, for error messages

    @property
    def arg_types(self) -> tuple[str, ...]:
        """Types of the arguments this directive consumes, in order."""
        types: list[str] = []
        if self.width == -1:
            types.append("long")
        if self.precision == -1:
            types.append("long")
        types.append("string" if self.conv == "s" else "long")
        return tuple(types)


class FormatSpec(NamedTuple):
    """A parsed format: literal text and conversions, plus argument types."""

    pieces: tuple[str | Conversion, ...]
    arg_types: tuple[str, ...]  # 'long' | 'string' per consumed argument


def _invalid(directive: str, loc: SourceLocation | None, hint: str | None = None) -> ScriptError:
    return ScriptError(f"invalid conversion '{directive}' in format string", loc, hint)


def _incomplete(directive: str, loc: SourceLocation | None) -> ScriptError:
    return ScriptError(
        f"trailing incomplete conversion '{directive}' in format string", loc,
        "write '%%' for a literal percent sign")


def _parse_conversion(fmt: str, start: int, loc: SourceLocation | None) -> tuple[Conversion, int]:
    """Parse the directive whose '%' is at `start`; return it and the next index."""
    n = len(fmt)
    i = start + 1

    def directive() -> str:
        return fmt[start:i + 1]

    flags = ""
    if i < n and fmt[i] in FLAG_CHARS:
        flags = fmt[i]
        i += 1

    width: int | None = None
    if i < n and fmt[i] == "*":
        width = -1
        i += 1
    elif i < n and fmt[i].isdigit():
        j = i
        while i < n and fmt[i].isdigit():
            i += 1
        width = int(fmt[j:i])

    precision: int | None = None
    if i < n and fmt[i] == ".":
        i += 1
        if i < n and fmt[i] == "*":
            precision = -1
            i += 1
        elif i < n and fmt[i].isdigit():
            j = i
            while i < n and fmt[i].isdigit():
                i += 1
            precision = int(fmt[j:i])

    length = ""
    for mod in LENGTH_MODIFIERS:
        if fmt.startswith(mod, i):
            length = mod
            i += len(mod)
            break

    if i >= n:
        raise _incomplete(fmt[start:], loc)
    conv = fmt[i]
    if conv not in CONVERSIONS:
        hint = None
        if flags and conv in FLAG_CHARS:
            hint = "stap accepts at most one flag per conversion"
        elif conv == "%":
            hint = "write '%%' for a literal percent sign"
        raise _invalid(directive(), loc, hint)
    if conv in "mM":
        raise ScriptError(
            f"conversion '{directive()}' is not supported", loc,
            "memory dumps need the traced process's memory; copy the bytes into a string")
    return Conversion(flags, width, precision, length, conv, directive()), i + 1


def parse_format(fmt: str, loc: SourceLocation | None = None, *,
                 legacy_p: bool = False) -> FormatSpec:
    """Parse a printf format string as stap does; ScriptError on a bad directive.
    `legacy_p` (--compatible < 1.3): `%p` is stap's old one, conversion "P": the value
    as an unsigned long, `0x` and at least 2 * sizeof(void *) digits by default; a width
    W pads the digits to W - 2 (at most 2 * sizeof(void *) unless left-justified);
    the precision is ignored.  It depends on the process's pointer size, so a format
    holding one is formatted in the probe (translate/emit.py)."""
    pieces: list[str | Conversion] = []
    arg_types: list[str] = []
    literal: list[str] = []
    i, n = 0, len(fmt)
    while i < n:
        c = fmt[i]
        if c != "%":
            literal.append(c)
            i += 1
            continue
        if i + 1 < n and fmt[i + 1] == "%":
            literal.append("%")
            i += 2
            continue
        if i + 1 == n:
            raise _incomplete("%", loc)
        conversion, i = _parse_conversion(fmt, i, loc)
        if legacy_p and conversion.conv == "p":
            conversion = conversion._replace(conv="P")
        if literal:
            pieces.append("".join(literal))
            literal.clear()
        pieces.append(conversion)
        arg_types.extend(conversion.arg_types)
    if literal:
        pieces.append("".join(literal))
    return FormatSpec(tuple(pieces), tuple(arg_types))


# ---------------------------------------------------------------- rendering


def _to_int(value: int | str) -> int:
    """The int64 a numeric conversion sees (defensive: the translator checks types)."""
    if isinstance(value, str):
        try:
            value = int(value, 0)
        except ValueError:
            return 0
    v = int(value) & _MASK64
    return v - (1 << 64) if v >> 63 else v


def _to_str(value: int | str) -> str:
    return value if isinstance(value, str) else str(int(value))


def _clamp_field(value: int | str) -> int:
    """A `*` width or precision: `clamp_t(int, arg, 0, ...)` -- int32, then >= 0."""
    v = _to_int(value) & 0xFFFFFFFF
    if v >> 31:
        v -= 1 << 32
    return max(0, min(v, STP_BUFFER_SIZE))


def _number(num: int, base: int, size: int, precision: int, flags: str, conv: str) -> str:
    """runtime/vsprintf.c `number()`; size/precision are -1 when unspecified."""
    left = flags == "-"
    zeropad = flags == "0" and not left
    special = flags == "#" or conv == "p"
    signed = conv in "di"
    u = num & _MASK64

    sign = ""
    if signed:
        if u >> 63:
            sign = "-"
            u = (-(u - (1 << 64))) & _MASK64
            size -= 1
        elif flags == "+":
            sign = "+"
            size -= 1
        elif flags == " ":
            sign = " "
            size -= 1
    prefix = ""
    if special:
        if base == 16:
            prefix = "0X" if conv == "X" else "0x"
            size -= 2
        elif base == 8:
            prefix = "0"
            size -= 1

    if base == 16:
        digits = f"{u:X}" if conv == "X" else f"{u:x}"
    elif base == 8:
        digits = f"{u:o}"
    else:
        digits = str(u)
    precision = max(precision, len(digits))
    size -= precision

    out = []
    if not (zeropad or left) and size > 0:
        out.append(" " * size)
        size = 0
    out.append(sign)
    out.append(prefix)
    if not left and size > 0:
        out.append(("0" if zeropad else " ") * size)
        size = 0
    out.append("0" * (precision - len(digits)))
    out.append(digits)
    if size > 0:
        out.append(" " * size)
    return "".join(out)


_CHAR_ESCAPES = {0x07: "a", 0x08: "b", 0x0C: "f", 0x0A: "n", 0x0D: "r", 0x09: "t",
                 0x0B: "v", 0x27: "'", 0x5C: "\\"}


def _char(value: int, width: int, flags: str) -> str:
    """`_stp_vsprint_char`: one byte; `#` escapes it C-style."""
    byte = value & 0xFF
    if flags == "#" and (not 0x20 <= byte <= 0x7E or byte in (0x27, 0x5C)):
        esc = _CHAR_ESCAPES.get(byte)
        text = "\\" + esc if esc else f"\\{byte:03o}"
    else:
        text = chr(byte)
    pad = " " * max(width - len(text), 0)
    return text + pad if flags == "-" else pad + text


def _string(value: str, width: int, precision: int, flags: str) -> str:
    """`_stp_vsprint_memory` for 's': strnlen, so a NUL ends the string."""
    value = value.split("\0", 1)[0]
    if precision >= 0:
        value = value[:precision]
    else:
        value = value[:STP_BUFFER_SIZE]
    pad = " " * max(width - len(value), 0)
    text = value + pad if flags == "-" else pad + value
    # The runtime writes a NUL after a zero-padded string (`%0s`).
    return text + "\0" if flags == "0" else text


def _check_binary_precision(precision: int) -> int:
    return precision if precision in (1, 2, 4, 8) else -1


def _binary(value: int, width: int, precision: int, flags: str) -> str:
    """`_stp_vsprint_binary`: the value's low bytes, little-endian, NUL-padded."""
    precision = _check_binary_precision(precision)
    if width == -1:
        if precision == -1:
            width = precision = 8
        else:
            width = precision
    elif precision == -1:
        precision = _check_binary_precision(width)
        if precision == -1:
            precision = 8
    raw = (value & _MASK64).to_bytes(8, "little")[:precision].decode("latin-1")
    pad = "\0" * max(width - precision, 0)
    return raw + pad if flags == "-" else pad + raw


def _render(c: Conversion, args: Sequence[int | str], ai: int) -> tuple[str, int]:
    width = -1
    if c.width == -1:
        width = _clamp_field(args[ai])
        ai += 1
    elif c.width is not None:
        width = min(c.width, STP_BUFFER_SIZE)
    precision = -1
    if c.precision == -1:
        precision = _clamp_field(args[ai])
        ai += 1
    elif c.precision is not None:
        precision = min(c.precision, STP_BUFFER_SIZE)
    value = args[ai]
    ai += 1

    conv = c.conv
    if conv == "s":
        return _string(_to_str(value), width, precision, c.flags), ai
    if conv == "c":
        return _char(_to_int(value), width, c.flags), ai
    if conv == "b":
        return _binary(_to_int(value), width, precision, c.flags), ai
    base = 16 if conv in "xXp" else 8 if conv == "o" else 10
    return _number(_to_int(value), base, width, precision, c.flags, conv), ai


def format_values(spec: FormatSpec, args: Sequence[int | str], limit: int | None = None) -> str:
    """Render `spec` with `args` (one per `spec.arg_types` entry).

    `limit` truncates the result like stap's output buffer: MAXSTRINGLEN - 1
    for sprintf, STP_BUFFER_SIZE for printf.  (stap also narrows the one field
    that crosses the limit to the space left; that edge is not reproduced.)
    """
    if len(args) != len(spec.arg_types):
        raise ValueError(f"format takes {len(spec.arg_types)} arguments, got {len(args)}")
    out: list[str] = []
    ai = 0
    for piece in spec.pieces:
        if isinstance(piece, str):
            out.append(piece)
        else:
            text, ai = _render(piece, args, ai)
            out.append(text)
    result = "".join(out)
    return result if limit is None else result[:limit]


def format_printf(fmt: str, args: Sequence[int | str]) -> str:
    """Parse and render in one step (for tests and one-off formats)."""
    return format_values(parse_format(fmt), args)
