"""pydyn's own tapset: SystemTap tapset functions and globals written in the script
language (those that need C are built-ins: runtime/pd_tapset.c).  Each group is parsed
only when a script names one of its names, and then only what the script uses is
taken (library.py), as from a tapset directory given with -I.  The code is pydyn's,
written after the tapset reference (stap's tapset/*.stp document each function).
"""

from __future__ import annotations

import re

_BYTES = "%( arch == \"i386\" || arch == \"i686\" || arch == \"arm\" %? 4 %: 8 %)"


def _swap(name: str, nbytes: int) -> str:
    parts = " | ".join(f"(((x >> {8 * i}) & 0xff) << {8 * (nbytes - 1 - i)})"
                       for i in range(nbytes))
    return f"function {name}:long(x:long) {{ return {parts} }}\n"


def _same(name: str, nbytes: int) -> str:
    mask = "" if nbytes == 8 else f" & {hex((1 << (8 * nbytes)) - 1)}"
    return f"function {name}:long(x:long) {{ return x{mask} }}\n"


# Every architecture pydyn runs on (x86-64, i386, aarch64) is little-endian: network and
# big-endian orders swap, little-endian is the value itself (masked to its width).
_ENDIAN = "".join([
    _swap("ntohll", 8), _swap("ntohl", 4), _swap("ntohs", 2),
    _swap("htonll", 8), _swap("htonl", 4), _swap("htons", 2),
    _swap("big_endian8", 8), _swap("big_endian4", 4), _swap("big_endian2", 2),
    _same("little_endian8", 8), _same("little_endian4", 4), _same("little_endian2", 2),
])

_INDENT = """
global __indent_counters, __indent_starts
function __indent(idx:long, desc:string, delta:long) {
  now = gettimeofday_us()
  if (!__indent_counters[idx]) __indent_starts[idx] = now
  # an entry (delta > 0) indents its own line; an exit (delta < 0) the next one
  depth = __indent_counters[idx] + (delta > 0 ? delta : 0)
  __indent_counters[idx] += delta
  return sprintf("%6d %s:%-*s", now - __indent_starts[idx], desc, depth > 0 ? depth - 1 : 0, "")
}
function thread_indent:string(delta:long) {
  return __indent(tid(), sprintf("%s(%d)", execname(), tid()), delta)
}
function indent:string(delta:long) { return __indent(-1, "", delta) }
function __indent_depth:long(idx:long, delta:long) {
  depth = __indent_counters[idx] + (delta > 0 ? delta : 0)
  __indent_counters[idx] += delta
  return depth > 0 ? depth - 1 : 0
}
function thread_indent_depth:long(delta:long) { return __indent_depth(tid(), delta) }
function indent_depth:long(delta:long) { return __indent_depth(-1, delta) }
"""

# $# and @N as globals, so -G can set them (argc=2 -G argv_1=hello ...); argv[] is
# filled before any other begin probe
_ARGV = ("global argc = $#\nglobal argv\n"
         + "".join(f'global argv_{i} = %( $# >= {i} %? @{i} %: "" %)\n' for i in range(1, 33))
         + "probe begin(-9223372036854775807) {\n"
         + "".join(f"  argv[{i}] = argv_{i}\n" for i in range(1, 33)) + "}\n")

# return_str(format, ret): a return value as stap's syscall tapset prints it
_RETURN_STR = """
function return_str:string(format:long, ret:long) {
  if (ret < 0 && errno_p(ret)) return sprintf("%d (%s)", ret, errno_str(ret))
  if (format == 2) return sprintf("0x%x", ret)
  if (format == 3) return sprintf("%#o", ret)
  return sprintf("%d", ret)
}
"""

GROUPS: tuple[tuple[str, str], ...] = (
    ("<pydyn tapset: print_char>", 'function print_char(c:long) { printf("%c", c) }\n'),
    ("<pydyn tapset: arch_bytes>", f"function arch_bytes:long() {{ return {_BYTES} }}\n"),
    ("<pydyn tapset: endian>", _ENDIAN),
    ("<pydyn tapset: indent>", _INDENT),
    ("<pydyn tapset: argv>", _ARGV),
    ("<pydyn tapset: return_str>", _RETURN_STR),
)

# stap's macro libraries (.stpm): @prints(s) prints a statistic as the exit report
# does, @printsN(a) each entry of an N-index array of statistics; @try_assign(v, try,
# catch) assigns the try expression, or the catch one if it raises an error;
# @choose_defined(a, b) is a if @defined(a), else b; @cast_sizeof(T) and
# @cast_module_sizeof(M, T) the size of a type
def _prints_n(n: int) -> str:
    keys = ",".join(f"__k{i}" for i in range(n))
    label = ', ",", '.join(f"__k{i}" for i in range(n))
    # stap's own @prints7 prints a comma after the last index; kept, scripts compare it
    tail = ', ","' if n == 7 else ""
    return (f"@define prints{n}(s) %(\n  foreach ([{keys}] in @s -) {{\n"
            f'    print("[", {label}{tail}, "] ")\n    @prints(@s[{keys}])\n  }}\n%)\n')


_MACROS = ('@define prints(s) %(\n  printf("@count=%d @min=%d @max=%d @sum=%d @avg=%d\\n",\n'
           "         @count(@s), @min(@s), @max(@s), @sum(@s), @avg(@s))\n%)\n"
           + "".join(_prints_n(n) for n in range(1, 10))
           + "@define try_assign(v, try_expr, catch_expr) %(\n"
           "  try { @v = @try_expr } catch { @v = @catch_expr }\n%)\n"
           + "@define choose_defined(value_if_defined, alternate) %(\n"
           "  ( @defined(@value_if_defined) ? (@value_if_defined) : (@alternate) )\n%)\n"
           # the size of a type: the address of the second of an array of them at 0
           + "@define cast_sizeof(type) %(\n  ( & @cast(0, @type) [1] )\n%)\n"
           + "@define cast_module_sizeof(module, type) %(\n"
           "  ( & @cast(0, @type, @module) [1] )\n%)\n")

MACRO_GROUPS: tuple[tuple[str, str], ...] = (("<pydyn tapset macros>", _MACROS),)


def macro_groups_for(text: str) -> list[tuple[str, str]]:
    """(text, name) of pydyn's macro libraries when `text` invokes one of their macros."""
    invoked = set(re.findall(r"@(\w+)", text))
    return [(body, name) for name, body in MACRO_GROUPS
            if invoked & set(re.findall(r"@define\s+(\w+)", body))]


_DEFINES = re.compile(r"\b(?:function|global)\s+(\w+)")


def groups_for(text: str) -> list[tuple[str, str]]:
    """(text, name) of every group defining a function or global `text` names."""
    words = set(re.findall(r"\w+", text))
    return [(body, name) for name, body in GROUPS
            if any(n in words for n in _DEFINES.findall(body))]
