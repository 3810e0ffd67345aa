"""docs/functions.md made from the translator's own table of built-in functions.

The signatures come from `translate.types.BUILTINS` (argument and result types as the
type pass checks them), `PRINT_FUNCS` and guru mode's `SET_USER`; this module adds only
what the table cannot say: a name for each parameter, one line on what the function
does and an example of its use.  `docgen.pages()` renders the page with the others, and
tests/test_docs.py fails when a built-in has no line or no example here or the committed
page differs from the table; tests/test_docs_examples.py translates every example and
runs those that show their output on EXAMPLE_PROGRAM, 64- and 32-bit.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from dataclasses import dataclass

from .guru import SET_USER, set_user_params
from .translate.common import LONG, STRING
from .translate.types import BUILTINS, PRINT_FUNCS

# The program the examples probe, shown at the top of the page: the output an example
# shows is what it prints there.  A mark with an int, a string and a pointer to a
# 64-bit -1, in a function that returns -ENOENT (a long: the whole return register
# holds it in both ABIs).
EXAMPLE_PROGRAM = """\
#include <errno.h>
#include <sys/sdt.h>

static long long limit = -1;

__attribute__((noinline)) long handle(int fd, const char *path)
{
    DTRACE_PROBE3(app, req, fd, path, &limit);
    return -ENOENT;
}

int main(void)
{
    return handle(42, "/etc/hosts") == -ENOENT ? 0 : 1;
}
"""
PROGRAM = "./app"
# Where an example's statements run: the mark (no need to say so on the page), the
# entry of handle() or its return.
MARK = 'mark("req")'
ENTRY = 'function("handle")'
RETURN = 'function("handle").return'


@dataclass(frozen=True)
class Example:
    """A use of a built-in: statements of a handler at `at` in PROGRAM (or, starting
    with `probe`, whole probes), what they print there (`prints`, empty: not shown) and,
    where that differs by run or ABI (pids, times, addresses), a regular expression
    the output matches instead.  `uses` names the globals the statements assume."""

    code: str
    prints: str = ""
    varies: str = ""
    at: str = MARK
    uses: tuple[str, ...] = ()
    guru: bool = False

    def probe(self) -> str:
        """The example as a probe of a script."""
        if self.code.startswith("probe "):
            return self.code
        return f'probe process("{PROGRAM}").{self.at} {{ {self.code} }}'

    def pattern(self) -> re.Pattern[str]:
        """What the printed output must match, its lines' trailing newline included."""
        text = self.varies or re.escape(self.prints)
        return re.compile(text + r"\n")

    def markdown(self) -> str:
        shown = self.code if self.at == MARK else self.probe()
        cell = _code(shown)
        if self.prints:
            cell += " → " + "<br>".join(_code(line) for line in self.prints.splitlines())
        return cell

    def __str__(self) -> str:
        return self.probe()


def _code(text: str) -> str:
    """text as a code span in a table cell: its pipes escaped, backticks around it."""
    return "`" + text.replace("|", "\\|") + "`"


class Described:
    """One built-in as the reference shows it: `substr(s:string, start:long, len:long):string`."""

    def __init__(self, name: str, params: tuple[str, ...], types: tuple[str, ...],
                 ret: str | None, text: str, example: Example) -> None:
        if len(params) != len(types):
            raise ValueError(f"{name}: {len(params)} parameter name(s) for "
                             f"{len(types)} argument type(s) in the translator's table")
        self.name, self.params, self.types, self.ret, self.text = name, params, types, ret, text
        self.example = example

    def signature(self) -> str:
        args = ", ".join(f"{p}:{t}" for p, t in zip(self.params, self.types, strict=True))
        return f"{self.name}({args})" + (f":{self.ret}" if self.ret else "")

    def row(self) -> str:
        return f"| `{self.signature()}` | {self.text} | {self.example.markdown()} |"

    def __str__(self) -> str:
        return self.signature()


# name -> (parameter names, one line, example).  Grouped as the page shows them.
GROUPS: tuple[tuple[str, dict[str, tuple[tuple[str, ...], str, Example]]], ...] = (
    ("Context", {
        "pid": ((), "the process id of the process the probe fired in",
            Example('printf("%d\\n", pid())', "4242", r"\d+")),
        "tid": ((), "the thread id (cached per thread: no system call)",
            Example('printf("%s[%d]\\n", execname(), tid())', "app[4242]", r"app\[\d+\]")),
        "ppid": ((), "the parent's process id",
            Example('printf("%d started by %d\\n", pid(), ppid())', "4242 started by 4241",
                    r"\d+ started by \d+")),
        "uid": ((), "the real user id",
            Example('printf("uid %d\\n", uid())', "uid 1000", r"uid \d+")),
        "euid": ((), "the effective user id",
            Example('if (euid() != uid()) printf("%s is setuid\\n", execname())')),
        "gid": ((), "the real group id",
            Example('printf("gid %d\\n", gid())', "gid 1000", r"gid \d+")),
        "cpu": ((), "the CPU the thread runs on now",
            Example('n[cpu()]++', uses=("n",))),
        "target": ((), "the pid of the `-c` command or of the `-x` process",
            Example('if (pid() != target()) printf("child %d\\n", pid())')),
        "execname": ((), "the name of the program (the guest's under qemu-user)",
            Example('printf("%s\\n", execname())', "app")),
        "uarch_bytes": ((), "the size of a long in the probed process: 8, or 4 in a "
                            "32-bit one",
            Example('printf("%d-bit\\n", uarch_bytes() * 8)', "64-bit", r"(64|32)-bit")),
        "pp": ((), "the point the probe resolved to, as stap names it: "
                   "`process(\"/bin/x\").function(\"f@/src/x.c:12\")` (`.return`, "
                   "`.statement(\"f@FILE:LINE\")`; a mark, a PLT entry or an address "
                   "`.statement(0xADDR)`)",
            Example('println(pp())',
                    'process("/home/me/app").function("handle@/home/me/app.c:6")',
                    r'process\("/.*/app"\)\.function\("handle@/.*/app\.c:6"\)',
                    at=ENTRY)),
        "pn": ((), "the point as the script wrote it, its path resolved and what a "
                   "wildcard matched filled in: `process(\"/bin/x\").mark(\"tick\")`",
            Example('println(pn())', 'process("/home/me/app").mark("req")',
                    r'process\("/.*/app"\)\.mark\("req"\)')),
        "ppfunc": ((), "the probed function's name; \"\" outside function probes",
            Example('printf("%s\\n", ppfunc())', "handle", at=ENTRY)),
        "returnval": ((), "the register functions return their value in (rax, eax, x0) as "
                          "the process's long: a guess except at a return; an error in "
                          "begin, end and timer probes",
            Example('printf("%d\\n", returnval())', "-2", at=RETURN)),
        "returnstr": (("format",), "returnval() as `-2 (ENOENT)` for a negated errno "
                                   "value, else in hex (format 2), octal (3) or decimal; "
                                   "`N/A` without registers",
            Example('printf("%s = %s\\n", ppfunc(), returnstr(1))', "handle = -2 (ENOENT)",
                    at=RETURN)),
        "probefunc": ((), "the same as ppfunc()",
            Example('calls[probefunc()]++', at=ENTRY, uses=("calls",))),
    }),
    ("Time", {
        "gettimeofday_s": ((), "wall-clock seconds since the epoch",
            Example('printf("%d\\n", gettimeofday_s())', "1796236189", r"\d{10}")),
        "gettimeofday_ms": ((), "wall-clock milliseconds since the epoch",
            Example('if (gettimeofday_ms() - last_ms > 1000) { last_ms = gettimeofday_ms(); '
                    'printf("%d req/s\\n", n_req); n_req = 0 }', uses=("last_ms", "n_req"))),
        "gettimeofday_us": ((), "wall-clock microseconds since the epoch",
            Example('t[tid()] = gettimeofday_us()', at=ENTRY, uses=("t",))),
        "gettimeofday_ns": ((), "wall-clock nanoseconds since the epoch",
            Example('printf("%d\\n", gettimeofday_ns())', "1796236189648371042", r"\d{19}")),
        "local_clock_ns": ((), "CLOCK_MONOTONIC in nanoseconds: for intervals",
            Example('lat <<< local_clock_ns() - t0[tid()]', at=RETURN, uses=("lat", "t0"))),
        "get_cycles": ((), "the CPU's cycle counter (x86: rdtsc; aarch64: cntvct_el0)",
            Example('c0[tid()] = get_cycles()', at=ENTRY, uses=("c0",))),
        "ctime": (("secs",), "seconds since the epoch as `Wed Dec  2 13:41:06 2026` (UTC)",
            Example('printf("%s\\n", ctime(gettimeofday_s()))', "Wed Dec  2 13:41:06 2026",
                    r"\w{3} \w{3} [ \d]\d \d\d:\d\d:\d\d \d{4}")),
    }),
    ("Session", {
        "exit": ((), "end the session after this handler: `end` probes run, then the report",
            Example('if (++n_req >= 100) exit()', uses=("n_req",))),
        "error": (("msg",), "raise an error: the handler stops, the error is counted "
                            "(a `try` block catches it)",
            Example('if ($arg1 < 0) error(sprintf("bad fd %d", $arg1))')),
        "warn": (("msg",), "print `WARNING: msg` on stderr and go on",
            Example('if ($arg1 > 1000) warn(sprintf("fd %d", $arg1))')),
        "log": (("msg",), "print msg and a newline on the output",
            Example('log(user_string($arg2))', "/etc/hosts")),
        "raise": (("sig",), "send signal sig to the thread the probe ran in, once the "
                            "handler is done (guru mode, `-g`); in begin, end and timer "
                            "probes that is pydyn itself",
            Example('if ($arg1 == 42) raise(6)', guru=True)),
        "system": (("cmd",), "run cmd with `sh -c` once the handler is done, in the "
                             "background, as the user running pydyn; its output goes "
                             "to pydyn's stdout (stderr with `--json`)",
            Example('system(sprintf("grep VmRSS /proc/%d/status", pid()))')),
    }),
    ("Strings", {
        "strlen": (("s",), "the length of s in bytes",
            Example('printf("%d\\n", strlen(user_string($arg2)))', "10")),
        "substr": (("s", "start", "len"), "len bytes of s from start (0-based); "
                                          "`substr(s, start)` takes the rest",
            Example('printf("%s\\n", substr(user_string($arg2), 1, 3))', "etc")),
        "matched": (("n",), "after a successful `s =~ \"re\"` in the handler: group n of "
                            "the leftmost-longest match (POSIX's rule: each group, left to "
                            "right, as long as it can be), 0 the whole match, \"\" for a "
                            "group that took no part; an error after a failed match or for "
                            "a group the pattern lacks",
            Example('if (user_string($arg2) =~ "^/([a-z]+)/(.*)$") '
                    'printf("%s %s\\n", matched(1), matched(2))', "etc hosts")),
        "matched_str": ((), "what the last successful `=~` matched: matched(0)",
            Example('if (user_string($arg2) =~ "[a-z]+$") println(matched_str())', "hosts")),
        "ngroups": ((), "the number of groups of the last successful `=~`'s pattern, the "
                        "whole match included (those that took no part too)",
            Example('if (user_string($arg2) =~ "/(e)(t|x)c") printf("%d\\n", ngroups())', "3")),
        "isinstr": (("s1", "s2"), "1 if s2 occurs in s1",
            Example('if (isinstr(user_string($arg2), "/etc/")) printf("config\\n")', "config")),
        "strpos": (("s1", "s2"), "the index of s2's first occurrence in s1, or -1",
            Example('printf("%d\\n", strpos(user_string($arg2), "hosts"))', "5")),
        "stringat": (("s", "pos"), "the byte at index pos of s (an error out of range)",
            Example('printf("%c\\n", stringat(user_string($arg2), 1))', "e")),
        "strtol": (("s", "base"), "s read as an integer in base (2..36, 0: by prefix); "
                                  "`strtol(s)` reads base 10",
            Example('printf("%d\\n", strtol("0755", 8))', "493")),
        "str_replace": (("s", "old", "new"), "s with every occurrence of old replaced by new",
            Example('println(str_replace(user_string($arg2), "/", ":"))', ":etc:hosts")),
        "text_str": (("s",), "s with non-printable bytes escaped as C does",
            Example('println(text_str("a\\tb\\n"))', "a\\tb\\n")),
        "text_strn": (("s", "len", "quoted"),
                      "at most len bytes of s, escaped as text_str() does; in double "
                      "quotes if quoted is not 0",
            Example('println(text_strn(user_string($arg2), 8, 1))', '"/et"...')),
        "string_quoted": (("s",), "s escaped and in double quotes",
            Example('println(string_quoted(user_string($arg2)))', '"/etc/hosts"')),
        "tokenize": (("s", "delim"), "the first token of s; then `tokenize(\"\", delim)` "
                                     "returns the next ones, \"\" at the end",
            Example('println(tokenize(user_string($arg2), "/"))', "etc")),
        "errno_str": (("err",), "the symbolic name of an errno value, `ENOENT`",
            Example('println(errno_str(-returnval()))', "ENOENT", at=RETURN)),
        "errno_p": (("err",), "|err| when it is an errno value with a name (either sign), "
                              "else 0",
            Example('if (errno_p(returnval())) '
                    'printf("failed: %s\\n", errno_str(-returnval()))',
                    "failed: ENOENT", at=RETURN)),
        "isdigit": (("s",), "1 if the first byte of s is a decimal digit",
            Example('printf("%d %d\\n", isdigit("42x"), isdigit(user_string($arg2)))', "1 0")),
    }),
    ("Reading the target's memory", {
        "user_string": (("addr",), "the NUL-terminated string at addr "
                                   "(at most MAXSTRINGLEN); a fault is an error",
            Example('printf("open %s\\n", user_string($arg2))', "open /etc/hosts")),
        "user_string_n": (("addr", "n"), "at most n bytes of the string at addr",
            Example('println(user_string_n($arg2, 4))', "/etc")),
        "user_string2": (("addr", "err"), "the string at addr, or err where it cannot be read",
            Example('println(user_string2($arg1, "<bad address>"))', "<bad address>")),
        "user_string_n2": (("addr", "n", "err"), "at most n bytes at addr, or err",
            Example('println(user_string_n2($arg2, 4, "?"))', "/etc")),
        "user_string_quoted": (("addr",), "the string at addr escaped and quoted; "
                                          "the address as `0x...` where it cannot be read",
            Example('println(user_string_quoted($arg2))', '"/etc/hosts"')),
        "user_string_n_quoted": (("addr", "n"), "at most n bytes at addr, escaped and quoted",
            Example('println(user_string_n_quoted($arg2, 4))', '"/etc"')),
        "user_string_nofault": (("addr",), "the string at addr, or \"\" without an error",
            Example('printf("[%s]\\n", user_string_nofault(0))', "[]")),
        "user_char": (("addr",), "the signed byte at addr (0 where it cannot be read)",
            Example('printf("%d %c\\n", user_char($arg2), user_char($arg2))', "47 /")),
        "user_short": (("addr",), "the signed 16-bit integer at addr",
            Example('println(user_short($arg3))', "-1")),
        "user_ushort": (("addr",), "the unsigned 16-bit integer at addr",
            Example('println(user_ushort($arg3))', "65535")),
        "user_int": (("addr",), "the signed 32-bit integer at addr",
            Example('printf("limit %d\\n", user_int($arg3))', "limit -1")),
        "user_uint": (("addr",), "the unsigned 32-bit integer at addr",
            Example('println(user_uint($arg3))', "4294967295")),
        "user_long": (("addr",), "the C long at addr: 8 bytes in a 64-bit process, "
                                 "4 in a 32-bit one",
            Example('println(user_long($arg3))', "-1")),
        "user_int8": (("addr",), "the signed 8-bit integer at addr",
            Example('println(user_int8($arg3))', "-1")),
        "user_uint8": (("addr",), "the unsigned 8-bit integer at addr",
            Example('println(user_uint8($arg3))', "255")),
        "user_int16": (("addr",), "the signed 16-bit integer at addr",
            Example('println(user_int16($arg3))', "-1")),
        "user_uint16": (("addr",), "the unsigned 16-bit integer at addr",
            Example('println(user_uint16($arg3))', "65535")),
        "user_int32": (("addr",), "the signed 32-bit integer at addr",
            Example('println(user_int32($arg3))', "-1")),
        "user_uint32": (("addr",), "the unsigned 32-bit integer at addr",
            Example('printf("%#x\\n", user_uint32($arg3))', "0xffffffff")),
        "user_int64": (("addr",), "the signed 64-bit integer at addr",
            Example('println(user_int64($arg3))', "-1")),
        "user_uint64": (("addr",), "the unsigned 64-bit integer at addr (as a long)",
            Example('println(user_uint64($arg3))', "-1")),
        "user_ulong": (("addr",), "the C unsigned long at addr (8 or 4 bytes, as user_long)",
            Example('printf("%#x\\n", user_ulong($arg3) & 0xffffffff)', "0xffffffff")),
        "user_char_error": (("addr",), "user_char(addr), but an error where addr cannot be "
                                       "read (the forms without _error return 0 there)",
            Example('try { println(user_char_error($arg1)) } '
                    'catch (msg) { println("bad pointer") }',
                    "bad pointer")),
        "user_short_error": (("addr",), "user_short(addr), or an error",
            Example('println(user_short_error($arg3))', "-1")),
        "user_ushort_error": (("addr",), "user_ushort(addr), or an error",
            Example('println(user_ushort_error($arg3))', "65535")),
        "user_int_error": (("addr",), "user_int(addr), or an error",
            Example('println(user_int_error($arg3))', "-1")),
        "user_long_error": (("addr",), "user_long(addr), or an error",
            Example('println(user_long_error($arg3))', "-1")),
        "user_ulong_error": (("addr",), "user_ulong(addr), or an error",
            Example('top = user_ulong_error($arg3)', uses=("top",))),
        "user_int8_error": (("addr",), "user_int8(addr), or an error",
            Example('println(user_int8_error($arg3))', "-1")),
        "user_uint8_error": (("addr",), "user_uint8(addr), or an error",
            Example('println(user_uint8_error($arg3))', "255")),
        "user_int16_error": (("addr",), "user_int16(addr), or an error",
            Example('println(user_int16_error($arg3))', "-1")),
        "user_uint16_error": (("addr",), "user_uint16(addr), or an error",
            Example('println(user_uint16_error($arg3))', "65535")),
        "user_int32_error": (("addr",), "user_int32(addr), or an error",
            Example('println(user_int32_error($arg3))', "-1")),
        "user_uint32_error": (("addr",), "user_uint32(addr), or an error",
            Example('printf("%#x\\n", user_uint32_error($arg3))', "0xffffffff")),
        "user_int64_error": (("addr",), "user_int64(addr), or an error",
            Example('println(user_int64_error($arg3))', "-1")),
        "user_uint64_error": (("addr",), "user_uint64(addr), or an error",
            Example('println(user_uint64_error($arg3))', "-1")),
        "user_string_utf16": (("addr",), "the NUL-terminated UTF-16 string at addr as UTF-8 "
                                         "(surrogate pairs joined); an error where it cannot "
                                         "be read or holds a lone surrogate",
            Example('name = user_string_utf16(pointer_arg(2))', at=ENTRY, uses=("name",))),
        "user_string_utf32": (("addr",), "the NUL-terminated UTF-32 string at addr as UTF-8; "
                                         "an error where it cannot be read or holds no "
                                         "character (a surrogate, past U+10FFFF)",
            Example('name = user_string_utf32(pointer_arg(2))', at=ENTRY, uses=("name",))),
        "user_buffer_quoted": (("addr", "inlen", "outlen"),
                               "the inlen bytes at addr, NULs included, escaped and quoted "
                               "in at most outlen bytes; `0x...` where they cannot be read",
            Example('println(user_buffer_quoted($arg2, 11, 40))', '"/etc/hosts\\0"')),
        "user_buffer_quoted_error": (("addr", "inlen", "outlen"),
                                     "the same, but an error where they cannot be read",
            Example('println(user_buffer_quoted_error($arg2, 4, 40))', '"/etc"')),
    }),
    ("Numbers", {
        "abs": (("n",), "the absolute value of n",
            Example('println(abs(returnval()))', "2", at=RETURN)),
        "randint": (("n",), "a random integer in [0, n)",
            Example('if (randint(100) == 0) printf("sampled fd %d\\n", $arg1)')),
        "fp_add": (("a", "b"), "a + b of two IEEE doubles held in longs",
            Example('println(fp_to_string(fp_add(long_to_fp($arg1), string_to_fp("0.5")), 1))',
                    "42.5")),
        "fp_sub": (("a", "b"), "a - b of two doubles",
            Example('println(fp_to_string(fp_sub(long_to_fp($arg1), string_to_fp("0.5")), 1))',
                    "41.5")),
        "fp_mul": (("a", "b"), "a * b of two doubles",
            Example('println(fp_to_string(fp_mul(long_to_fp($arg1), string_to_fp("1.5")), 1))',
                    "63.0")),
        "fp_div": (("a", "b"), "a / b of two doubles",
            Example('println(fp_to_string(fp_div(long_to_fp($arg1), long_to_fp(8)), 3))', "5.250")),
        "fp_lt": (("a", "b"), "1 if double a < b",
            Example('println(fp_lt(string_to_fp("0.1"), string_to_fp("0.2")))', "1")),
        "fp_le": (("a", "b"), "1 if double a <= b",
            Example('println(fp_le(long_to_fp($arg1), long_to_fp(42)))', "1")),
        "fp_eq": (("a", "b"), "1 if double a == b",
            Example('println(fp_eq(string_to_fp("0.5"), fp_div(long_to_fp(1), long_to_fp(2))))',
                    "1")),
        "fp_sqrt": (("d",), "the square root of double d (IEEE's, as stap's SoftFloat)",
            Example('println(fp_to_string(fp_sqrt(long_to_fp($arg1 * 42)), 1))', "42.0")),
        "fp32_to_fp64": (("f",), "an IEEE float's bits as a double's",
            Example('println(fp_to_string(fp32_to_fp64(0x3fc00000), 2))', "1.50")),
        "long_to_fp": (("n",), "n as a double",
            Example('println(fp_to_string(long_to_fp($arg1), 2))', "42.00")),
        "fp_to_long": (("d",), "double d truncated to an integer; stap's `fp_to_long(d, mode, "
                               "exact)` rounds by SoftFloat's mode (0 nearest even, 1 toward "
                               "zero, 2 down, 3 up, 4 nearest away from zero), out of range "
                               "the long nearest, a NaN 0",
            Example('println(fp_to_long(string_to_fp("2.75")))', "2")),
        "string_to_fp": (("s",), "the decimal number in s (`[+-]digits[.digits][e[+-]digits]`) "
                                 "as a double, computed as stap does; anything else is an "
                                 "`invalid format` error",
            Example('println(fp_to_string(string_to_fp("3.14159"), 2))', "3.14")),
        "fp_to_string": (("d", "precision"), "double d in decimal with precision digits, as "
                                             "stap writes it: digits cut, the last one rounded "
                                             "on its own, `eN` after a number of 1e18 or more "
                                             "divided by ten N times",
            Example('println(fp_to_string(fp_div(long_to_fp(1), long_to_fp(3)), 4))', "0.3333")),
    }),
    ("Symbols and backtraces", {
        "usymname": (("addr",), "the function containing addr, `main`, or its hex "
                                "when no probed object has it",
            Example('println(usymname(uaddr()))', "handle", at=ENTRY)),
        "usymdata": (("addr",), "a data address as stap writes it: "
                                "`counter+0x0/0x8 [/path/prog]`",
            Example('println(usymdata($arg3))', "limit+0x0/0x8 [/home/me/app]",
                    r"limit\+0x0/0x8 \[/.*/app\]")),
        "ubacktrace": ((), "the return addresses of the probed thread's stack, "
                           "`0x55d4c1a3f3f0 0x55d4c1a3f50f ...`",
            Example('stacks[ubacktrace()]++', uses=("stacks",))),
        "print_ubacktrace": ((), "print the stack, one ` 0xaddr : func+off/size [path]` a "
                                 "line (` 0xaddr [path+off/size]` in an object with no "
                                 "symbol table: add it with `-d` or `--ldd`)",
            Example('print_ubacktrace()')),
        "print_ubacktrace_brief": ((), "print the stack, one `func+0xoff` a line (`0xaddr` "
                                       "where no symbol is known)",
            Example('print_ubacktrace_brief()')),
        "sprint_ubacktrace": ((), "the stack as `func+0xoff [basename]` lines; "
                                  "`<no user backtrace at PP>` outside process probes",
            Example('printf("%s\\n", sprint_ubacktrace())')),
        "ustack": (("n",), "the address of frame n (0: the probed pc); an error past the "
                           "stack's end",
            Example('println(usymname(ustack(1)))', "main")),
        "ucallers": (("n",), "frames 0 to n as `0x..` words (-1: all); an error if the "
                             "stack ends before frame n",
            Example('println(ucallers(1))', "0x55d4c1a3f157 0x55d4c1a3f051",
                    r"0x[0-9a-f]+ 0x[0-9a-f]+")),
        "print_usyms": (("stk",), "print ` WORD : usymdata(WORD)` for each hex word of stk",
            Example('print_usyms(ucallers(1))',
                    " 0x55d4c1a3f157 : handle+0x7/0x10 [/home/me/app]\n"
                    " 0x55d4c1a3f051 : main+0x11/0x1c [/home/me/app]",
                    r" 0x[0-9a-f]+ : handle\+0x[0-9a-f]+/0x[0-9a-f]+ \[/.*/app\]\n"
                    r" 0x[0-9a-f]+ : main\+0x[0-9a-f]+/0x[0-9a-f]+ \[/.*/app\]")),
        "print_ustack": (("stk",), "the same as print_usyms",
            Example('print_ustack(ubacktrace())')),
        "sprint_usyms": (("stk",), "those lines as a string (whole lines within "
                                   "MAXSTRINGLEN)",
            Example('printf("%s", sprint_usyms(ucallers(1)))')),
        "sprint_ustack": (("stk",), "the same as sprint_usyms",
            Example('stack_text[tid()] = sprint_ustack(ubacktrace())', uses=("stack_text",))),
        "umodname": (("addr",), "the path of the loaded object that maps addr; "
                                "`<unknown>` and an error elsewhere",
            Example('println(umodname(uaddr()))', "/home/me/app", r"/.*/app")),
    }),
    ("Registers and arguments (the probed thread's, at the probe)", {
        "uaddr": ((), "the probed pc (0 outside process probes)",
            Example('printf("%s at %p\\n", usymname(uaddr()), uaddr())', "handle at 0x55d4c1a3f150",
                    r"handle at 0x[0-9a-f]+", at=ENTRY)),
        "register": (("name",), "a register by stap's name for the arch (`rax`, `eax`, "
                                "`ax`, `al`, `rip`, `eflags`, `xcs`, `x0`, `w0`, `sp`...), "
                                "narrower ones sign-extended",
            Example('println(register("eax"))', "-2", at=RETURN)),
        "u_register": (("name",), "the same, zero-extended",
            Example('printf("%#x\\n", u_register("eax"))', "0xfffffffe", at=RETURN)),
        "int_arg": (("n",), "argument n (1: the first) at a function's entry as a "
                            "signed int: registers, then the stack as the ABI has them",
            Example('printf("fd %d\\n", int_arg(1))', "fd 42", at=ENTRY)),
        "uint_arg": (("n",), "argument n as an unsigned int",
            Example('println(uint_arg(1))', "42", at=ENTRY)),
        "long_arg": (("n",), "argument n as a signed long (32 bits in a 32-bit process)",
            Example('println(long_arg(1))', "42", at=ENTRY)),
        "ulong_arg": (("n",), "argument n as an unsigned long",
            Example('printf("%#x\\n", ulong_arg(1))', "0x2a", at=ENTRY)),
        "longlong_arg": (("n",), "argument n as a 64-bit value (a 32-bit process: words n "
                                 "and n+1)",
            Example('size = longlong_arg(3)', at=ENTRY, uses=("size",))),
        "ulonglong_arg": (("n",), "the same as longlong_arg",
            Example('size = ulonglong_arg(3)', at=ENTRY, uses=("size",))),
        "pointer_arg": (("n",), "argument n as a pointer",
            Example('println(user_string(pointer_arg(2)))', "/etc/hosts", at=ENTRY)),
        "s32_arg": (("n",), "the same as int_arg",
            Example('println(s32_arg(1))', "42", at=ENTRY)),
        "u32_arg": (("n",), "the same as uint_arg",
            Example('println(u32_arg(1))', "42", at=ENTRY)),
        "s64_arg": (("n",), "the same as longlong_arg",
            Example('size = s64_arg(3)', at=ENTRY, uses=("size",))),
        "u64_arg": (("n",), "the same as longlong_arg",
            Example('size = u64_arg(3)', at=ENTRY, uses=("size",))),
        "asmlinkage": ((), "the function takes no argument in registers (i386; a no-op "
                           "elsewhere)",
            Example('asmlinkage(); println(int_arg(1))', "42", at=ENTRY)),
        "fastcall": ((), "i386: the first three arguments are in eax, edx, ecx; a no-op "
                         "elsewhere",
            Example('fastcall(); fd = int_arg(1)', at=ENTRY)),
        "regparm": (("n",), "the first n arguments are in registers (i386: 0-3, "
                            "x86-64: 0-6)",
            Example('regparm(2); fd = int_arg(1)', at=ENTRY)),
        "is_return": ((), "1 in a `.return` probe, else 0",
            Example('probe process("./app").function("handle"), '
                    'process("./app").function("handle").return '
                    '{ println(is_return() ? "return" : "entry") }', "entry\nreturn")),
    }),
)

PRINTING: dict[str, tuple[str, str, Example]] = {
    "printf": ("printf(fmt:string, ...)", "print the arguments as fmt says "
                                          "(`%d %s %x %c %p %%`, widths, `%-*s`)",
               Example('printf("%s fd=%03d %x %s\\n", execname(), $arg1, $arg1, '
                       'user_string($arg2))', "app fd=042 2a /etc/hosts")),
    "sprintf": ("sprintf(fmt:string, ...):string", "the same, as a string",
                Example('req[tid()] = sprintf("%d:%s", $arg1, user_string($arg2))',
                        uses=("req",))),
    "print": ("print(v, ...)", "print the values side by side",
              Example('print(execname(), ":", $arg1, "\\n")', "app:42")),
    "println": ("println(v, ...)", "print the values and a newline",
                Example("println($arg1)", "42")),
    "sprint": ("sprint(v, ...):string", "the values as print() writes them",
               Example('printf("[%s]\\n", sprint($arg1))', "[42]")),
    "sprintln": ("sprintln(v, ...):string", "the values and a newline",
                 Example('printf("%s", sprintln("fd", $arg1))', "fd42")),
    "printd": ("printd(delim:string, v, ...)", "print the values separated by delim",
               Example('printd(",", execname(), $arg1); print("\\n")', "app,42")),
    "printdln": ("printdln(delim:string, v, ...)", "the same, and a newline",
                 Example('printdln(" ", pid(), execname(), user_string($arg2))',
                         "4242 app /etc/hosts", r"\d+ app /etc/hosts")),
    "sprintd": ("sprintd(delim:string, v, ...):string", "the values separated by delim",
                Example('println(sprintd(":", $arg1, user_string($arg2)))', "42:/etc/hosts")),
    "sprintdln": ("sprintdln(delim:string, v, ...):string", "the same, and a newline",
                  Example('print(sprintdln(",", $arg1, user_string($arg2)))',
                          "42,/etc/hosts")),
}

SET_USER_TEXT = "write v at addr in the target's memory (guru mode, `-g`)"
SET_USER_STRING_TEXT = "write s and its NUL at addr (guru mode, `-g`)"
# name -> example: each writes through the mark's pointer to `limit` (a string through
# $arg2 would write the program's read-only literal: an error, counted) and reads back
# what it wrote.
WRITES: dict[str, Example] = {
    "set_user_char": Example('set_user_char($arg3, 65); printf("%c\\n", user_char($arg3))', "A",
                             guru=True),
    "set_user_short": Example("set_user_short($arg3, -2); println(user_short($arg3))", "-2",
                              guru=True),
    "set_user_int": Example("set_user_int($arg3, 100); println(user_int($arg3))", "100",
                            guru=True),
    "set_user_long": Example("set_user_long($arg3, 1000000); println(user_long($arg3))",
                             "1000000", guru=True),
    "set_user_pointer": Example('set_user_pointer($arg3, 0x1000); printf("%#x\\n", '
                                'user_long($arg3))', "0x1000", guru=True),
    "set_user_int8": Example("set_user_int8($arg3, -128); println(user_int8($arg3))", "-128",
                             guru=True),
    "set_user_uint8": Example("set_user_uint8($arg3, 200); println(user_uint8($arg3))", "200",
                              guru=True),
    "set_user_int16": Example("set_user_int16($arg3, -300); println(user_int16($arg3))",
                              "-300", guru=True),
    "set_user_uint16": Example("set_user_uint16($arg3, 65000); println(user_uint16($arg3))",
                               "65000", guru=True),
    "set_user_int32": Example("set_user_int32($arg3, $arg1 * 2); println(user_int32($arg3))",
                              "84", guru=True),
    "set_user_uint32": Example('set_user_uint32($arg3, 0xffff); printf("%#x\\n", '
                               'user_uint32($arg3))', "0xffff", guru=True),
    "set_user_int64": Example("set_user_int64($arg3, 1 << 40); println(user_int64($arg3))",
                              "1099511627776", guru=True),
    "set_user_uint64": Example("set_user_uint64($arg3, 0); println(user_uint64($arg3))", "0",
                               guru=True),
    "set_user_ushort": Example("set_user_ushort($arg3, 8080); println(user_ushort($arg3))",
                               "8080", guru=True),
    "set_user_uint": Example("set_user_uint($arg3, 4096); println(user_uint($arg3))", "4096",
                             guru=True),
    "set_user_string": Example('set_user_string($arg3, "ok"); println(user_string($arg3))',
                               "ok", guru=True),
}


class MissingDescription(KeyError):
    """A built-in of the translator's table that this module does not describe."""


def _described() -> dict[str, tuple[tuple[str, ...], str, Example]]:
    return {name: entry for _, group in GROUPS for name, entry in group.items()}


def _check(names: Iterable[str], table: Iterable[str], what: str) -> None:
    missing = sorted(set(names) - set(table))
    if missing:
        raise MissingDescription(f"{what} {', '.join(missing)} in "
                                 "launcher/docgen_functions.py")


def iter_builtins() -> list[tuple[str, list[Described]]]:
    """(section, built-ins) in the page's order; every name of the table, none other."""
    _check(BUILTINS, _described(), "describe")
    sections = []
    for title, group in GROUPS:
        entries = [Described(name, params, BUILTINS[name][0], BUILTINS[name][1], text,
                             example)
                   for name, (params, text, example) in group.items() if name in BUILTINS]
        sections.append((title, entries))
    return sections


def iter_examples() -> list[tuple[str, Example]]:
    """(name, example) of every built-in: the table's, printing's and guru mode's writes."""
    _check(PRINT_FUNCS, PRINTING, "describe")
    _check(SET_USER, WRITES, "give an example of")
    return [*((e.name, e.example) for _, entries in iter_builtins() for e in entries),
            *((name, entry[2]) for name, entry in PRINTING.items() if name in PRINT_FUNCS),
            *((name, WRITES[name]) for name in SET_USER)]


HEADER = ["| function | | example |", "|---|---|---|"]


def render() -> str:
    out = ["# Built-in functions", "",
           "Generated from the translator's table of built-ins "
           "(`launcher/translate/types.py`) by `python -m pydyn.launcher.docgen docs`; "
           "do not edit.", "",
           f"Types are `{LONG}` (64 bits in every process, 32- or 64-bit) and `{STRING}` "
           "(at most MAXSTRINGLEN bytes). A failing read or a bad argument is an error "
           "(but `user_int` and the other integer reads without `_error` give 0): "
           "the handler stops and the error is counted (see [guarantees](guarantees.md)). "
           "Statistics operators (`@count`, `@hist_log`, ...) are in the "
           "[language reference](language.md).", "",
           "Each example is the body of "
           f"`probe process(\"{PROGRAM}\").{MARK} {{ ... }}` unless it shows its probe; "
           f"`{PROGRAM}` is the program below, and `→` shows what the example prints there "
           "(pids, times and addresses vary). Names used as arrays or assigned "
           "(`t[tid()]`, `size`) are globals. tests/test_docs_examples.py translates every "
           "example and runs those that show their output, 64- and 32-bit.", "",
           "```c", *EXAMPLE_PROGRAM.splitlines(), "```", ""]
    for title, entries in iter_builtins():
        if not entries:
            continue
        out += [f"## {title}", "", *HEADER]
        out += [e.row() for e in entries]
        out.append("")
    _check(PRINT_FUNCS, PRINTING, "describe")
    out += ["## Printing", "", *HEADER]
    out += [f"| `{sig}` | {text} | {example.markdown()} |"
            for name, (sig, text, example) in PRINTING.items() if name in PRINT_FUNCS]
    out += ["", "## Writing the target's memory (guru mode)", "", *HEADER]
    _check(SET_USER, WRITES, "give an example of")
    for name in SET_USER:
        types = set_user_params(name)
        params = ("addr", "s") if types[1] == STRING else ("addr", "v")
        text = SET_USER_STRING_TEXT if types[1] == STRING else SET_USER_TEXT
        out.append(Described(name, params, types, None, text, WRITES[name]).row())
    out.append("")
    return "\n".join(out)
