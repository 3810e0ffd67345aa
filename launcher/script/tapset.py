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

# stap's target_set tapset: the target and its descendants, each with its parent.
# Every process of a session is the -c command, the -x process or a descendant, so
# each process.begin adds itself, as in stap's dyninst tapset.  An ended process is
# not removed: a script's own process.end (run after this group's probes) may still
# ask about it, and no process outside the session can reuse its pid and hit a probe.
_TARGET_SET = """
global __target_set
function target_set_pid:long(pid:long) { return [pid] in __target_set }
function target_set_report() {
  printf("target set:\\n")
  foreach (p in __target_set+) printf("%d begat %d\\n", __target_set[p], p)
}
probe begin(-9223372036854775807) { if (target()) __target_set[target()] = pid() }
probe process.begin { __target_set[pid()] = ppid() }
"""

# stap's speculative tapset: output kept per speculation id, in order, until commit
# prints it or discard drops it; the oldest entries give way when the arrays are full.
_SPECULATION = """
global __spec_last, __spec_n%, __spec_out%
function speculation:long() { return ++__spec_last }
function speculate(id:long, output:string) { __spec_out[id, ++__spec_n[id]] = output }
function discard(id:long) { delete __spec_out[id, *]; delete __spec_n[id] }
function commit(id:long) {
  foreach ([i, k+] in __spec_out[id, *]) printf("%s", __spec_out[i, k])
  discard(id)
}
"""

# return_str(format, ret): a return value as stap's syscall tapset prints it
_RETURN_STR = """
function return_str:string(format:long, ret:long) {
  if (ret < 0 && errno_p(ret)) return sprintf("%d (%s)", ret, errno_str(ret))
  if (format == 2) return sprintf("0x%x", ret)
  if (format == 3) return sprintf("%#o", ret)
  return sprintf("%d", ret)
}
"""

# stap's uconversions tapset, the forms that are the C built-ins (user_string_n,
# user_int_error, user_string_utf16...) with a default, a warning or quoting around
# them.  A _warn form warns as stap's does (its message; -14: the kernel's EFAULT,
# which stap's string copy reports) and returns the default; the plain integer
# forms return 0 silently and are built-ins (pd_user_read_or0).
def _int_warn(kind: str, what: str, at: str = "") -> str:
    return (f"function user_{kind}_warn:long(addr:long) {{\n"
            f"  try {{ return user_{kind}_error(addr) }} catch {{\n"
            f'    warn(sprintf("user {what} copy fault {at}%p [man error::fault]", addr))\n'
            "    return 0\n  }\n}\n")


_UCONVERSIONS = """
function __user_string_fault(addr:long) {
  warn(sprintf("user string copy fault -14 at 0x%x [man error::fault]", addr))
}
function user_string_warn:string(addr:long) { return user_string2_warn(addr, "") }
function user_string2_warn:string(addr:long, warn_msg:string) {
  try { return user_string(addr) } catch { __user_string_fault(addr); return warn_msg }
}
function user_string_n_warn:string(addr:long, n:long) {
  return user_string2_n_warn(addr, n, "")
}
function user_string2_n_warn:string(addr:long, n:long, warn_msg:string) {
  try { return user_string_n(addr, n) } catch { __user_string_fault(addr); return warn_msg }
}
function user_string_n_nofault:string(addr:long, n:long) {
  try { return user_string_n(addr, n) } catch { return "" }
}
function user_string_n2_quoted:string(addr:long, inlen:long, outlen:long) {
  try {
    s = string_quoted(user_string_n(addr, inlen))
    # room for the quotes, and "... after the cut
    if (strlen(s) > outlen - 2) s = substr(s, 0, outlen - 4) . "\\"..."
    return s
  } catch { return sprintf("0x%x", addr) }
}
function user_string2_utf32:string(addr:long, err_msg:string) {
  try { return user_string_utf32(addr) } catch { return err_msg }
}
function user_string2_utf16:string(addr:long, err_msg:string) {
  try { return user_string_utf16(addr) } catch { return err_msg }
}
function user_string_quoted_utf32:string(addr:long) {
  try { return string_quoted(user_string_utf32(addr)) } catch { return sprintf("0x%x", addr) }
}
function user_string_quoted_utf16:string(addr:long) {
  try { return string_quoted(user_string_utf16(addr)) } catch { return sprintf("0x%x", addr) }
}
""" + "".join([_int_warn("char", "char", "at "), _int_warn("short", "short"),
               _int_warn("ushort", "unsigned short"), _int_warn("int", "int"),
               _int_warn("long", "long"), _int_warn("ulong", "unsigned long")])

# stap's tapsets name a function by its number of arguments where their bpf runtime
# cannot overload one name: a call of the name with that many arguments is a call of
# the other name (the parser renames it), whose group then defines it.
ARITY_NAMES: dict[tuple[str, int], str] = {
    ("user_string_warn", 2): "user_string2_warn",
    ("user_string_n_warn", 3): "user_string2_n_warn",
    ("user_string_n_quoted", 3): "user_string_n2_quoted",
    ("user_string_utf32", 2): "user_string2_utf32",
    ("user_string_utf16", 2): "user_string2_utf16",
}

GROUPS: tuple[tuple[str, str], ...] = (
    ("<pydyn tapset: print_char>", 'function print_char(c:long) { printf("%c", c) }\n'),
    ("<pydyn tapset: arch_bytes>", f"function arch_bytes:long() {{ return {_BYTES} }}\n"),
    ("<pydyn tapset: endian>", _ENDIAN),
    ("<pydyn tapset: indent>", _INDENT),
    ("<pydyn tapset: argv>", _ARGV),
    ("<pydyn tapset: return_str>", _RETURN_STR),
    ("<pydyn tapset: target_set>", _TARGET_SET),
    ("<pydyn tapset: speculation>", _SPECULATION),
    ("<pydyn tapset: uconversions>", _UCONVERSIONS),
    # stap's tapset/null.stp: NULL is a long, so comparing a string with it is an error
    ("<pydyn tapset: null>", "global NULL = 0\n"),
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
    words |= {other for (name, _), other in ARITY_NAMES.items() if name in words}
    return [(body, name) for name, body in GROUPS
            if any(n in words for n in _DEFINES.findall(body))]
