"""docs/functions.md made from the translator's own table of built-in functions.

The signatures come from `translate.types.BUILTINS` (argument and result types as the
type pass checks them), `PRINT_FUNCS` and guru mode's `SET_USER`; this module adds only
what the table cannot say: a name for each parameter and one line on what the function
does.  `docgen.pages()` renders the page with the others, and tests/test_docs.py fails
when a built-in has no line here or the committed page differs from the table.
"""

from __future__ import annotations

from .guru import SET_USER, set_user_params
from .translate.common import LONG, STRING
from .translate.types import BUILTINS, PRINT_FUNCS


class Described:
    """One built-in as the reference shows it: `substr(s:string, start:long, len:long):string`."""

    def __init__(self, name: str, params: tuple[str, ...], types: tuple[str, ...],
                 ret: str | None, text: str) -> None:
        if len(params) != len(types):
            raise ValueError(f"{name}: {len(params)} parameter name(s) for "
                             f"{len(types)} argument type(s) in the translator's table")
        self.name, self.params, self.types, self.ret, self.text = name, params, types, ret, text

    def signature(self) -> str:
        args = ", ".join(f"{p}:{t}" for p, t in zip(self.params, self.types, strict=True))
        return f"{self.name}({args})" + (f":{self.ret}" if self.ret else "")

    def __str__(self) -> str:
        return self.signature()


# name -> (parameter names, one line).  Grouped as the page shows them.
GROUPS: tuple[tuple[str, dict[str, tuple[tuple[str, ...], str]]], ...] = (
    ("Context", {
        "pid": ((), "the process id of the process the probe fired in"),
        "tid": ((), "the thread id (cached per thread: no system call)"),
        "ppid": ((), "the parent's process id"),
        "uid": ((), "the real user id"),
        "euid": ((), "the effective user id"),
        "gid": ((), "the real group id"),
        "cpu": ((), "the CPU the thread runs on now"),
        "target": ((), "the pid of the `-c` command or of the `-x` process"),
        "execname": ((), "the name of the program (the guest's under qemu-user)"),
        "uarch_bytes": ((), "the size of a long in the probed process: 8, or 4 in a "
                            "32-bit one"),
        "pp": ((), "the probe point that fired, `process(\"/bin/x\").mark(\"tick\")`"),
        "pn": ((), "the same as pp()"),
        "ppfunc": ((), "the probed function's name; \"\" outside function probes"),
        "returnval": ((), "the register functions return their value in (rax, eax, x0) as "
                          "the process's long: a guess except at a return; an error in "
                          "begin, end and timer probes"),
        "returnstr": (("format",), "returnval() as `-2 (ENOENT)` for a negated errno "
                                   "value, else in hex (format 2), octal (3) or decimal; "
                                   "`N/A` without registers"),
        "probefunc": ((), "the same as ppfunc()"),
    }),
    ("Time", {
        "gettimeofday_s": ((), "wall-clock seconds since the epoch"),
        "gettimeofday_ms": ((), "wall-clock milliseconds since the epoch"),
        "gettimeofday_us": ((), "wall-clock microseconds since the epoch"),
        "gettimeofday_ns": ((), "wall-clock nanoseconds since the epoch"),
        "local_clock_ns": ((), "CLOCK_MONOTONIC in nanoseconds: for intervals"),
        "get_cycles": ((), "the CPU's cycle counter (x86: rdtsc; aarch64: cntvct_el0)"),
        "ctime": (("secs",), "seconds since the epoch as `Wed Dec  2 13:41:06 2026` (UTC)"),
    }),
    ("Session", {
        "exit": ((), "end the session after this handler: `end` probes run, then the report"),
        "error": (("msg",), "raise an error: the handler stops, the error is counted "
                            "(a `try` block catches it)"),
        "warn": (("msg",), "print `WARNING: msg` on stderr and go on"),
        "log": (("msg",), "print msg and a newline on the output"),
        "raise": (("sig",), "send signal sig to the thread the probe ran in, once the "
                            "handler is done (guru mode, `-g`); in begin, end and timer "
                            "probes that is pydyn itself"),
        "system": (("cmd",), "run cmd with `sh -c` once the handler is done, in the "
                             "background, as the user running pydyn; its output goes "
                             "to pydyn's stdout (stderr with `--json`)"),
    }),
    ("Strings", {
        "strlen": (("s",), "the length of s in bytes"),
        "substr": (("s", "start", "len"), "len bytes of s from start (0-based); "
                                          "`substr(s, start)` takes the rest"),
        "isinstr": (("s1", "s2"), "1 if s2 occurs in s1"),
        "strpos": (("s1", "s2"), "the index of s2's first occurrence in s1, or -1"),
        "stringat": (("s", "pos"), "the byte at index pos of s (an error out of range)"),
        "strtol": (("s", "base"), "s read as an integer in base (2..36, 0: by prefix); "
                                  "`strtol(s)` reads base 10"),
        "str_replace": (("s", "old", "new"), "s with every occurrence of old replaced by new"),
        "text_str": (("s",), "s with non-printable bytes escaped as C does"),
        "text_strn": (("s", "len", "quoted"),
                      "at most len bytes of s, escaped as text_str() does; in double "
                      "quotes if quoted is not 0"),
        "string_quoted": (("s",), "s escaped and in double quotes"),
        "tokenize": (("s", "delim"), "the first token of s; then `tokenize(\"\", delim)` "
                                     "returns the next ones, \"\" at the end"),
        "errno_str": (("err",), "the symbolic name of an errno value, `ENOENT`"),
        "errno_p": (("err",), "|err| when it is an errno value with a name (either sign), "
                              "else 0"),
        "isdigit": (("s",), "1 if the first byte of s is a decimal digit"),
    }),
    ("Reading the target's memory", {
        "user_string": (("addr",), "the NUL-terminated string at addr "
                                   "(at most MAXSTRINGLEN); a fault is an error"),
        "user_string_n": (("addr", "n"), "at most n bytes of the string at addr"),
        "user_string2": (("addr", "err"), "the string at addr, or err where it cannot be read"),
        "user_string_n2": (("addr", "n", "err"), "at most n bytes at addr, or err"),
        "user_string_quoted": (("addr",), "the string at addr escaped and quoted; "
                                          "`NULL` for address 0, `<unknown>` where unreadable"),
        "user_string_n_quoted": (("addr", "n"), "at most n bytes at addr, escaped and quoted"),
        "user_string_nofault": (("addr",), "the string at addr, or \"\" without an error"),
        "user_char": (("addr",), "the signed byte at addr"),
        "user_short": (("addr",), "the signed 16-bit integer at addr"),
        "user_ushort": (("addr",), "the unsigned 16-bit integer at addr"),
        "user_int": (("addr",), "the signed 32-bit integer at addr"),
        "user_uint": (("addr",), "the unsigned 32-bit integer at addr"),
        "user_long": (("addr",), "the C long at addr: 8 bytes in a 64-bit process, "
                                 "4 in a 32-bit one"),
        "user_int8": (("addr",), "the signed 8-bit integer at addr"),
        "user_uint8": (("addr",), "the unsigned 8-bit integer at addr"),
        "user_int16": (("addr",), "the signed 16-bit integer at addr"),
        "user_uint16": (("addr",), "the unsigned 16-bit integer at addr"),
        "user_int32": (("addr",), "the signed 32-bit integer at addr"),
        "user_uint32": (("addr",), "the unsigned 32-bit integer at addr"),
        "user_int64": (("addr",), "the signed 64-bit integer at addr"),
        "user_uint64": (("addr",), "the unsigned 64-bit integer at addr (as a long)"),
    }),
    ("Numbers", {
        "abs": (("n",), "the absolute value of n"),
        "randint": (("n",), "a random integer in [0, n)"),
        "fp_add": (("a", "b"), "a + b of two IEEE doubles held in longs"),
        "fp_sub": (("a", "b"), "a - b of two doubles"),
        "fp_mul": (("a", "b"), "a * b of two doubles"),
        "fp_div": (("a", "b"), "a / b of two doubles"),
        "fp_lt": (("a", "b"), "1 if double a < b"),
        "fp_le": (("a", "b"), "1 if double a <= b"),
        "fp_eq": (("a", "b"), "1 if double a == b"),
        "fp32_to_fp64": (("f",), "an IEEE float's bits as a double's"),
        "long_to_fp": (("n",), "n as a double"),
        "fp_to_long": (("d",), "double d truncated to an integer"),
        "string_to_fp": (("s",), "the decimal number in s as a double"),
        "fp_to_string": (("d", "precision"), "double d in decimal with precision digits"),
    }),
    ("Symbols and backtraces", {
        "usymname": (("addr",), "the function containing addr, `main`, or its hex "
                                "when no probed object has it"),
        "usymdata": (("addr",), "a data address as stap writes it: "
                                "`counter+0x0/0x8 [/path/prog]`"),
        "ubacktrace": ((), "the return addresses of the probed thread's stack, "
                           "`0x55d4c1a3f3f0 0x55d4c1a3f50f ...`"),
        "print_ubacktrace": ((), "print the stack, one ` 0xaddr : func+off/size [path]` a "
                                 "line (` 0xaddr [path+off/size]` in an object with no "
                                 "symbol table: add it with `-d` or `--ldd`)"),
        "sprint_ubacktrace": ((), "the stack as `func+0xoff [basename]` lines; "
                                  "`<no user backtrace at PP>` outside process probes"),
        "ustack": (("n",), "the address of frame n (0: the probed pc); an error past the "
                           "stack's end"),
        "ucallers": (("n",), "frames 0 to n as `0x..` words (-1: all); an error if the "
                             "stack ends before frame n"),
        "print_usyms": (("stk",), "print ` WORD : usymdata(WORD)` for each hex word of stk"),
        "print_ustack": (("stk",), "the same as print_usyms"),
        "sprint_usyms": (("stk",), "those lines as a string (whole lines within "
                                   "MAXSTRINGLEN)"),
        "sprint_ustack": (("stk",), "the same as sprint_usyms"),
        "umodname": (("addr",), "the path of the loaded object that maps addr; "
                                "`<unknown>` and an error elsewhere"),
    }),
    ("Registers and arguments (the probed thread's, at the probe)", {
        "uaddr": ((), "the probed pc (0 outside process probes)"),
        "register": (("name",), "a register by stap's name for the arch (`rax`, `eax`, "
                                "`ax`, `al`, `rip`, `eflags`, `xcs`, `x0`, `w0`, `sp`...), "
                                "narrower ones sign-extended"),
        "u_register": (("name",), "the same, zero-extended"),
        "int_arg": (("n",), "argument n (1: the first) at a function's entry as a "
                            "signed int: registers, then the stack as the ABI has them"),
        "uint_arg": (("n",), "argument n as an unsigned int"),
        "long_arg": (("n",), "argument n as a signed long (32 bits in a 32-bit process)"),
        "ulong_arg": (("n",), "argument n as an unsigned long"),
        "longlong_arg": (("n",), "argument n as a 64-bit value (a 32-bit process: words n "
                                 "and n+1)"),
        "ulonglong_arg": (("n",), "the same as longlong_arg"),
        "pointer_arg": (("n",), "argument n as a pointer"),
        "s32_arg": (("n",), "the same as int_arg"),
        "u32_arg": (("n",), "the same as uint_arg"),
        "s64_arg": (("n",), "the same as longlong_arg"),
        "u64_arg": (("n",), "the same as longlong_arg"),
        "asmlinkage": ((), "the function takes no argument in registers (i386; a no-op "
                           "elsewhere)"),
        "fastcall": ((), "i386: the first three arguments are in eax, edx, ecx; a no-op "
                         "elsewhere"),
        "regparm": (("n",), "the first n arguments are in registers (i386: 0-3, "
                            "x86-64: 0-6)"),
        "is_return": ((), "1 in a `.return` probe, else 0"),
    }),
)

PRINTING: dict[str, tuple[str, str]] = {
    "printf": ("printf(fmt:string, ...)", "print the arguments as fmt says "
                                          "(`%d %s %x %c %p %%`, widths, `%-*s`)"),
    "sprintf": ("sprintf(fmt:string, ...):string", "the same, as a string"),
    "print": ("print(v, ...)", "print the values side by side"),
    "println": ("println(v, ...)", "print the values and a newline"),
    "sprint": ("sprint(v, ...):string", "the values as print() writes them"),
    "sprintln": ("sprintln(v, ...):string", "the values and a newline"),
    "printd": ("printd(delim:string, v, ...)", "print the values separated by delim"),
    "printdln": ("printdln(delim:string, v, ...)", "the same, and a newline"),
    "sprintd": ("sprintd(delim:string, v, ...):string", "the values separated by delim"),
    "sprintdln": ("sprintdln(delim:string, v, ...):string", "the same, and a newline"),
}

SET_USER_TEXT = "write v at addr in the target's memory (guru mode, `-g`)"
SET_USER_STRING_TEXT = "write s and its NUL at addr (guru mode, `-g`)"


class MissingDescription(KeyError):
    """A built-in of the translator's table that this module does not describe."""


def _described() -> dict[str, tuple[tuple[str, ...], str]]:
    return {name: entry for _, group in GROUPS for name, entry in group.items()}


def iter_builtins() -> list[tuple[str, list[Described]]]:
    """(section, built-ins) in the page's order; every name of the table, none other."""
    described = _described()
    missing = sorted(set(BUILTINS) - set(described))
    if missing:
        raise MissingDescription(f"describe {', '.join(missing)} in "
                                 "launcher/docgen_functions.py")
    sections = []
    for title, group in GROUPS:
        entries = [Described(name, params, BUILTINS[name][0], BUILTINS[name][1], text)
                   for name, (params, text) in group.items() if name in BUILTINS]
        sections.append((title, entries))
    return sections


def render() -> str:
    out = ["# Built-in functions", "",
           "Generated from the translator's table of built-ins "
           "(`launcher/translate/types.py`) by `python -m pydyn.launcher.docgen docs`; "
           "do not edit.", "",
           f"Types are `{LONG}` (64 bits in every process, 32- or 64-bit) and `{STRING}` "
           "(at most MAXSTRINGLEN bytes). A failing read or a bad argument is an error: "
           "the handler stops and the error is counted (see [guarantees](guarantees.md)). "
           "Statistics operators (`@count`, `@hist_log`, ...) are in the "
           "[language reference](language.md).", ""]
    for title, entries in iter_builtins():
        if not entries:
            continue
        out += [f"## {title}", "", "| function | |", "|---|---|"]
        out += [f"| `{e.signature()}` | {e.text} |" for e in entries]
        out.append("")
    missing = sorted(PRINT_FUNCS - set(PRINTING))
    if missing:
        raise MissingDescription(f"describe {', '.join(missing)} in "
                                 "launcher/docgen_functions.py")
    out += ["## Printing", "", "| function | |", "|---|---|"]
    out += [f"| `{sig}` | {text} |" for name, (sig, text) in PRINTING.items()
            if name in PRINT_FUNCS]
    out += ["", "## Writing the target's memory (guru mode)", "", "| function | |", "|---|---|"]
    for name in SET_USER:
        types = set_user_params(name)
        params = ("addr", "s") if types[1] == STRING else ("addr", "v")
        text = SET_USER_STRING_TEXT if types[1] == STRING else SET_USER_TEXT
        out.append(f"| `{Described(name, params, types, None, text).signature()}` | {text} |")
    out.append("")
    return "\n".join(out)
