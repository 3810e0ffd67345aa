"""SystemTap's own testsuite run against pydyn: `make stap-testsuite STAP=PATH`.

    python bench/stap_testsuite.py PATH [--list-fails] [-j N] [--timeout S] [-k PATTERN]

PATH is a SystemTap source tree (a directory holding testsuite/) or a bare git repository
of one (its HEAD's testsuite/ is read with `git archive`).  Get one with
`git clone https://sourceware.org/git/systemtap.git` (or any mirror of it).  Nothing of
the testsuite is copied into pydyn: the tests are read from PATH at every run.

Each test runs the way its .exp file runs it, with `stap` on PATH being a shim that execs
this checkout's .venv/bin/pydyn:

- parseok, parseko, semok, semko, transok, transko, buildok, buildko, runok: each .stp is
  run as stap_run_batch does (`stap ARGS FILE --runtime=dyninst`, ARGS from its
  `#! stap ARGS` line; a shell script is run as it is).  The -ok directories must exit 0;
  the -ko ones must fail with an error message, not a traceback, a signal or a hang.
- systemtap.maps, systemtap.printf, systemtap.string, systemtap.base: the .exp is read by a
  small Tcl reader that knows `set`, `if`, `foreach runtime`, `target_compile`,
  `stap_run2`, `stap_run3`, `stap_run_exact` and `stap_run_batch`; each stap_run* call is
  one test and compares the output with the .exp's result_string as those procedures do.
  An .exp needing more of Tcl/expect than that is out of scope, and says which command.
- systemtap.exelib: its .exp files are read with more of Tcl (FULL_TCL_DIRS: procs,
  switch, source, objcopy): exelib.exp builds its program/library variants and sources
  every subtest's .tcl for each (the runner enables all of them); a .tcl's spawned stap
  is judged as expect would count its patterns, then by the .tcl's own pass/fail checks.
- The SDT tests of systemtap.base (sdt, sdt_va_args, sdt_casm, sdt_asm, and the types part
  of sdt_misc): each program is built as its .exp builds it, once per flag variant the
  .exp iterates (-O2/-O3, c89/c99/gnu99, the C++ dialects, -pedantic, -DSTAP_SDT_V2, ...)
  and per ABI (`--abi m64|m32|both`), and each build is one test, judged as its .exp
  judges it: the output compared line by line, or every line `sdt_asm PASS: ...`.

In scope for a user-space tool: tests whose probe points are all begin, end, error, never,
oneshot, timer.{s,ms,us,ns,hz,sec,msec,usec,nsec}, process... or aliases the script itself
defines (parseok/parseko are about syntax and are in scope whatever they probe).  Out of
scope: kernel probe points and kernel types (a @cast module "kernel..."), tests SystemTap
itself marks as failing under dyninst (buildok-dyninst.exp, the `dyninst_kfails` lists of
systemtap.pass1-4, setup_kfail/xfail or untested reached with runtime=dyninst in an .exp),
and the deliberate differences listed with their reasons in bench/stap_differences.toml.
"""

from __future__ import annotations

import argparse
import concurrent.futures
import copy
import fnmatch
import functools
import os
import platform
import re
import shlex
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import tomllib

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
DIFFERENCES = HERE / "stap_differences.toml"

PASS_DIRS = {  # directory -> (pass it stops after is in the script's #! line, must succeed)
    "parseok": True, "parseko": False, "semok": True, "semko": False, "transok": True,
    "transko": False, "buildok": True, "buildko": False, "runok": True,
}
OUTPUT_DIRS = ("systemtap.maps", "systemtap.printf", "systemtap.string", "systemtap.base",
               "systemtap.exelib")
# uprobes_p asks for the kernel's uprobes, which pydyn's process probes stand in for.  It
# answers yes where the runner models the .exp files that guard their process probes with it.
UPROBES_DIRS = {"systemtap.exelib"}
# programs an .exp may `exec` while it builds its binaries (objcopy: separate debug info)
EXEC_TOOLS = {"objcopy"}
# Directories whose .exp files the reader runs with the rest of the Tcl and expect it
# knows: procs, switch, source, list commands, exec of EXEC_TOOLS, `if` without `else`,
# a spawned stap judged by its expect block, a failed build step counted as a failed
# test.  Elsewhere these commands leave an .exp out of scope as before, so a directory
# is added here once each of its .exp files has been checked against the reader.
FULL_TCL_DIRS = {"systemtap.exelib"}
FULL_TCL = {"proc", "list", "eval", "split", "lindex", "file", "incr", "switch", "continue",
            "break", "source", "spawn", "expect", "exp_continue", "exp_pid", "kill", "close",
            "wait", "sdt_includes", "prelink_p", "exec"}
USER_HEADS = {"begin", "end", "error", "never", "oneshot", "process"}
# stap_run's load functions that only let time pass (the probes' own timers need it).
SLEEP_LOADS = {"no_load": 0.0, "": 0.0, "sleep_one_sec": 1.0, "wait_5_secs": 5.0,
               "sleep_ten_secs": 10.0}
TIMER_UNITS = {"s", "sec", "ms", "msec", "us", "usec", "ns", "nsec", "hz"}


class Unsupported(Exception):
    """An .exp needs Tcl or expect beyond what this runner models."""


class Test:
    """One stap invocation and how its result is judged."""

    def __init__(self, group: str, name: str, argv: list[str], cwd: Path, *,
                 mode: str, expected: str | None = None, scripts: list[str] | None = None,
                 out_of_scope: str | None = None) -> None:
        self.group = group          # the directory it is counted under
        self.name = name            # group/file, plus the subtest's name for .exp tests
        self.argv = argv
        self.cwd = cwd
        # ok, ko (exit status), run3, exact, interrupt (output compared), expect (an
        # expect block's patterns counted, then the .exp's own pass/fail checks), failed (a
        # step of the .exp before any run failed)
        self.mode = mode
        self.expected = expected
        self.scripts = scripts or []  # script texts, for the probe-point scope check
        self.out_of_scope = out_of_scope
        self.passed = False
        self.first_error = ""
        self.load_secs = 0.0        # stap_run: seconds between the start line and SIGINT
        self.expect: Expect | None = None
        self.build: list[str] | None = None  # the target_compile command run before it
        self.env: dict[str, str] = {}       # added to the environment it runs in
        self.timeout: float | None = None   # instead of --timeout
        self.check_prefix = ""      # checks mode: the word before PASS:/FAIL: in each line
        self.float_exempt = False   # checks mode: FAIL lines of float/double checks pass


class Expect:
    """A spawned stap's expect block and the .exp commands after it that judge the run."""

    def __init__(self, interp: Interp, pairs: list[tuple[str, str]], on_timeout: str,
                 on_eof: str, after: list[list[Word]]) -> None:
        self.interp = interp      # a copy, holding the variables as they were at the spawn
        self.pairs = pairs        # (regular expression, action), tried in this order
        self.on_timeout = on_timeout
        self.on_eof = on_eof
        self.after = after


# ---------------------------------------------------------------------------------------
# The testsuite source

def testsuite_dir(source: Path, tmp: Path) -> Path:
    """testsuite/ of a source tree, or of a bare repository's HEAD extracted into tmp."""
    if (source / "testsuite").is_dir():
        return source / "testsuite"
    if (source / "HEAD").is_file() and (source / "objects").is_dir():
        arch = subprocess.run(["git", "--git-dir", str(source), "archive", "HEAD", "testsuite",
                               "tapset/linux"], capture_output=True)
        subprocess.run(["tar", "-x", "-C", str(tmp)], input=arch.stdout, check=True)
        if (tmp / "testsuite").is_dir():
            return tmp / "testsuite"
        raise SystemExit(f"{source}: git archive HEAD testsuite failed: "
                         f"{arch.stderr.decode(errors='replace').strip()}")
    raise SystemExit(f"{source}: neither a SystemTap source tree (no testsuite/) "
                     "nor a bare git repository")


# ---------------------------------------------------------------------------------------
# Scope: probe points

_PROBE = re.compile(r"(?<![\w$@.])probe\s+(.*?)(=|\+=|\{)", re.S)
_COMMENT = re.compile(r"#[^\n]*|//[^\n]*|/\*.*?\*/", re.S)
_STRING = re.compile(r'"(?:\\.|[^"\\\n])*"')


def _split_points(text: str) -> list[str]:
    depth, cur, out = 0, "", []
    for ch in text:
        if ch in "([":
            depth += 1
        elif ch in ")]":
            depth -= 1
        if ch == "," and depth == 0:
            out.append(cur.strip())
            cur = ""
        else:
            cur += ch
    out.append(cur.strip())
    return [p for p in out if p]


# a @cast (or @cast_module_sizeof) module naming the kernel: "kernel", "kernel<linux/x.h>",
# a search path with "kernel" in it
_KERNEL_TYPES = re.compile(r'@cast(?:_module_sizeof)?\s*\((?:[^()"]|"[^"]*")*?'
                           r'"(?:[^"]*:)?kernel(?:<[^"]*>)*(?::[^"]*)?"')


def kernel_reason(scripts: list[str]) -> str | None:
    """Why tests of these scripts are out of scope for a user-space tool, if they are:
    a kernel probe point, or types read from the kernel's DWARF (pydyn has no kernel)."""
    bad = [p for s in scripts for p in kernel_points(s)]
    if bad:
        return f"kernel probe point {bad[0]}"
    if any(_KERNEL_TYPES.search(_COMMENT.sub(" ", s)) for s in scripts):
        return "kernel types (a @cast module naming the kernel)"
    return None


def kernel_points(script: str) -> list[str]:
    """The probe points of a script that are not user-space ones."""
    # Strings are blanked after comments go, so a "#" inside a string survives as text.
    strings: list[str] = []

    def keep(m: re.Match[str]) -> str:
        strings.append(m.group(0))
        return f'"\x00{len(strings) - 1}"'
    text = _STRING.sub(keep, script)
    text = _COMMENT.sub(" ", text)
    text = re.sub(r'"\x00(\d+)"', lambda m: strings[int(m.group(1))], text)
    defined: set[str] = set()
    uses: list[str] = []
    for m in _PROBE.finditer(text):
        points = _split_points(m.group(1))
        if m.group(2) in ("=", "+="):
            defined.update(points)
            # what the alias expands to follows the '=' up to its body
            rest = text[m.end():]
            body = re.match(r"(.*?)\{", rest, re.S)
            if body:
                uses.extend(_split_points(body.group(1)))
        else:
            uses.extend(points)
    bad = []
    for p in uses:
        p = re.sub(r"\s+", "", p).rstrip("?!")
        head = re.split(r"[.(]", p, maxsplit=1)[0]
        if p in defined or head in defined or head in USER_HEADS or head.startswith("%"):
            continue
        if head == "timer":
            unit = re.split(r"[.(]", p)[1] if "." in p else ""
            if unit in TIMER_UNITS:
                continue
        if p and not p.startswith("@"):
            bad.append(p)
    return bad


# ---------------------------------------------------------------------------------------
# Scope: SystemTap's dyninst markers in systemtap.pass1-4

_TESTNAME = re.compile(r"\b((?:parse|sem|trans|build|run)(?:ok|ko))/([\w.+-]+\.stp)")


def dyninst_marked(suite: Path) -> dict[str, str]:
    """test name -> the marker under which SystemTap expects it to fail with dyninst."""
    marked: dict[str, str] = {}
    p14 = suite / "systemtap.pass1-4"
    for exp in sorted(p14.glob("*.exp")):
        text = exp.read_text(errors="replace")
        if exp.name == "buildok-dyninst.exp":
            region = text
        elif (m := re.search(r'if \{\$runtime != ""\}', text)) and "untested" in (
                body := _braced_after(text, m.end(), skip=0)):
            # a switch in the dyninst branch naming tests it leaves untested (semko.exp)
            for case in re.finditer(r"((?:\s*[\w/.+-]+\.stp\s+-)*\s*[\w/.+-]+\.stp)\s*\{",
                                    body):
                if "untested" in _braced_after(body, case.end() - 1, skip=0):
                    for t in _TESTNAME.finditer(case.group(1)):
                        marked[f"{t.group(1)}/{t.group(2)}"] = f"{exp.name}: untested"
            m = re.search(r"proc dyninst_kfails\b", text)
            if not m:
                continue
            region = _braced_after(text, m.end(), skip=1)
        else:
            m = re.search(r"proc dyninst_kfails\b", text)
            if not m:
                continue
            region = _braced_after(text, m.end(), skip=1)
        for case in re.finditer(r"((?:\s*[\w/.+-]+\.stp\s+-)*\s*[\w/.+-]+\.stp)\s*\{", region):
            body = _braced_after(region, case.end() - 1, skip=0)
            marker = re.search(r"(setup_[xk]fail\s+\S+|untested)", body)
            for t in _TESTNAME.finditer(case.group(1)):
                marked[f"{t.group(1)}/{t.group(2)}"] = (
                    f"{exp.name}: {marker.group(1) if marker else 'listed'}")
    return marked


def _braced_after(text: str, pos: int, skip: int) -> str:
    """The contents of the (skip+1)th {...} group at or after pos."""
    i = pos
    while True:
        i = text.find("{", i)
        if i < 0:
            return ""
        j = _group_end(text, i, "{", "}")
        if not skip:
            return text[i + 1:j - 1]
        skip -= 1
        i = j


# ---------------------------------------------------------------------------------------
# The pass1-4 directories

# parseok/unparser.stp pipes `stap -p1 FILE` into `stap --runtime=dyninst -p1 -` for
# each script of seven directories.  Its first stap runs stap's default kernel runtime,
# which reads the macro libraries of tapset/linux/ (@task, @json_output_...): the test
# gets them as stap's testsuite gets its tapsets, through SYSTEMTAP_TAPSET, a directory
# of those .stpm files alone (their .stp neighbours are kernel code).  stap_run_batch
# waits for it without a timeout; it runs stap over a thousand times.
KERNEL_MACRO_TESTS = {"parseok/unparser.stp"}
LONG_TESTS = {"parseok/unparser.stp": 1800.0}


def kernel_macros(suite: Path, work: Path) -> Path:
    """A directory holding the .stpm files of the suite's tapset/linux/."""
    out = work / "kernel-macros"
    if not out.is_dir():
        out.mkdir(parents=True)
        for f in sorted((suite.parent / "tapset" / "linux").glob("*.stpm")):
            shutil.copy(f, out / f.name)
    return out


def pass_tests(suite: Path, work: Path, marked: dict[str, str]) -> Iterator[Test]:
    for d, ok in PASS_DIRS.items():
        for f in sorted((suite / d).glob("*.stp")):
            name = f"{d}/{f.name}"
            text = f.read_text(errors="replace")
            first = text.split("\n", 1)[0]
            m = re.match(r"#! stap (.*)", first)
            if m:
                argv = ["stap", *shlex.split(m.group(1)), str(f), "--runtime=dyninst"]
            else:
                shell = first[2:].strip().split()[0] if first.startswith("#!") else "/bin/sh"
                argv = [shell, str(f), "--runtime=dyninst"]
            t = Test(d, name, argv, work, mode="ok" if ok else "ko", scripts=[text])
            if name in KERNEL_MACRO_TESTS:
                t.env["SYSTEMTAP_TAPSET"] = str(kernel_macros(suite, work))
            t.timeout = LONG_TESTS.get(name)
            if name in marked:
                t.out_of_scope = f"marked failing under dyninst ({marked[name]})"
            elif d not in ("parseok", "parseko"):
                t.out_of_scope = kernel_reason([text])
            yield t


# ---------------------------------------------------------------------------------------
# A small Tcl reader for the output-comparing .exp files

class Word:
    def __init__(self, text: str, kind: str) -> None:
        self.text = text
        self.kind = kind   # brace (literal), quote or bare (substituted)


def tcl_commands(src: str) -> list[list[Word]]:
    cmds: list[list[Word]] = []
    i, n = 0, len(src)
    words: list[Word] = []
    while i < n:
        c = src[i]
        if c == "\\" and i + 1 < n and src[i + 1] == "\n":
            i += 2
            continue
        if c in " \t\r":
            i += 1
            continue
        if c in "\n;":
            if words:
                cmds.append(words)
                words = []
            i += 1
            continue
        if c == "#" and not words:
            while i < n and src[i] != "\n":
                i += 2 if src[i] == "\\" else 1
            continue
        if c == "{":
            depth, j = 1, i + 1
            while j < n and depth:
                if src[j] == "\\":
                    j += 2
                    continue
                depth += {"{": 1, "}": -1}.get(src[j], 0)
                j += 1
            # a backslash-newline and the blanks after it are one space, in braces too;
            # an escaped backslash (`\\`) before a newline is not one
            words.append(Word(re.sub(r"(?<!\\)((?:\\\\)*)\\\n[ \t]*", r"\1 ",
                                     src[i + 1:j - 1]), "brace"))
            i = j
            continue
        if c == '"':
            j = i + 1
            while j < n and src[j] != '"':
                if src[j] == "\\":
                    j += 1
                elif src[j] == "[":
                    j = _group_end(src, j)
                    continue
                j += 1
            words.append(Word(src[i + 1:j], "quote"))
            i = j + 1
            continue
        j = i
        while j < n and src[j] not in " \t\r\n;":
            if src[j] == "\\":
                j += 2
                continue
            if src[j] == "[":
                j = _group_end(src, j)
                continue
            if src[j] == "{" and j > i and src[j - 1] == "$":
                j = src.index("}", j) + 1
                continue
            j += 1
        words.append(Word(src[i:j], "bare"))
        i = j
    if words:
        cmds.append(words)
    return cmds


def tcl_join(items: list[str]) -> str:
    """A Tcl list of items: an item that is empty or holds blanks is braced."""
    return " ".join("{" + x + "}" if not x or re.search(r"[\s{}\"\\]", x) else x
                    for x in items)


@functools.cache
def arch_compile_flags() -> int:
    """How many of -m64 and -m32 build a program here, as SystemTap's arch_compile_init
    counts them."""
    n = 0
    with tempfile.TemporaryDirectory(prefix="stap-arch-") as d:
        src = Path(d) / "hello.c"
        src.write_text("int main(void) { return 0; }\n")
        for flag in ("-m64", "-m32"):
            r = subprocess.run(["gcc", "-g", flag, str(src), "-o", f"{d}/hello{flag}"],
                               capture_output=True)
            n += r.returncode == 0
    return n


def sdt_includes(srcdir: str) -> str:
    """SystemTap's sdt_includes for an installed test run: the testsuite's sys/sdt.h
    wrapper, then the installed <sys/sdt.h>.  Debian installs it in the multiarch
    directory, which an -m32 compile may only fall back to (-idirafter): searched first,
    its 64-bit headers would shadow the 32-bit ones."""
    flags = f"additional_flags=-isystem{srcdir}"
    multiarch = subprocess.run(["gcc", "-print-multiarch"], capture_output=True,
                               text=True).stdout.strip()
    d = Path("/usr/include") / multiarch
    if multiarch and (d / "sys" / "sdt.h").is_file():
        flags += f" additional_flags=-idirafter{d}"
    return flags


def exp_overrides(exp: Path) -> dict[str, str]:
    """Variables the runner sets for an .exp in place of the .exp's own value."""
    if exp.parent.name == "systemtap.exelib" and exp.name == "exelib.exp":
        # exelib.exp runs its all-in-one subtest only and says to enable the single ones
        # by hand: the runner enables them all, so each script is judged on its own, and
        # keeps the .exp's cleanup last
        subtests = sorted(t.stem for t in exp.parent.glob("*.tcl") if t.stem != "cleanup")
        return {"subtestlist": " ".join([*subtests, "cleanup"])}
    return {}


def _group_end(src: str, j: int, opening: str = "[", closing: str = "]") -> int:
    """The index after the group opened at src[j]: `[command]` (with braced words
    inside skipped whole) or `{word}`."""
    depth = 0
    while j < len(src):
        c = src[j]
        if c == "\\" and opening == "[":
            j += 2
            continue
        if c == opening:
            depth += 1
        elif c == closing:
            depth -= 1
            if depth == 0:
                return j + 1
        elif c == "{" and opening == "[":
            j = _group_end(src, j, "{", "}")
            continue
        j += 1
    return j


_VAR = re.compile(r"\$(?:\{([^}]*)\}|((?:::)?[A-Za-z_]\w*(?:::\w+)*(?:\([^)]*\))?))")
_ESC = {"n": "\n", "t": "\t", "r": "\r", "\\": "\\", '"': '"', "$": "$", "[": "[", "]": "]",
        "{": "{", "}": "}", " ": " ", ";": ";"}


class Interp:
    """Runs the subset of an .exp that describes its stap runs; collects the tests."""

    def __init__(self, suite: Path, exp: Path, work: Path) -> None:
        self.exp = exp
        self.work = work
        self.group = exp.parent.name
        self.vars: dict[str, str] = {
            "srcdir": str(suite), "subdir": exp.parent.name, "runtime": "",
            "test": exp.stem, "verbose": "0", "env(USER)": os.environ.get("USER", "root"),
            "tcl_platform(wordSize)": "8", "all_pass_string": "systemtap test success\r\n",
            "tcl_platform(machine)": platform.machine(),
        }
        # variables the runner sets for an .exp, which the .exp's own `set` leaves alone
        self.fixed = exp_overrides(exp)
        self.vars.update(self.fixed)
        self.tests: list[Test] = []
        self.pending_mark: str | None = None
        self.compiled: dict[str, str] = {}
        self.procs: dict[str, tuple[list[str], str]] = {}
        self.spawned: list[str] | None = None
        self.rest: list[list[Word]] = []   # the commands after the running one, in its block
        # while an expect block is judged: the .exp's pass/fail calls, in order
        self.verdicts: list[tuple[bool, str]] | None = None

    # substitution -----------------------------------------------------------------
    def subst(self, w: Word) -> str:
        if w.kind == "brace":
            return w.text
        s, out, i = w.text, [], 0
        while i < len(s):
            c = s[i]
            if c == "\\" and i + 1 < len(s):
                out.append(_ESC.get(s[i + 1], s[i + 1]))
                i += 2
            elif c == "$":
                m = _VAR.match(s, i)
                if not m:
                    out.append(c)
                    i += 1
                    continue
                name = (m.group(1) or m.group(2)).lstrip(":")
                if name not in self.vars:
                    raise Unsupported(f"variable ${name}")
                out.append(self.vars[name])
                i = m.end()
            elif c == "[":
                j = _group_end(s, i)
                out.append(self.call(s[i + 1:j - 1]))
                i = j
            else:
                out.append(c)
                i += 1
        return "".join(out)

    def tcl_list(self, text: str) -> list[str]:
        """A Tcl list's elements: braces and quotes removed, backslashes resolved."""
        out = []
        for words in tcl_commands(text.replace(";", "\\;")):
            for w in words:
                out.append(w.text if w.kind == "brace" else
                           re.sub(r"\\(.)", lambda m: _ESC.get(m.group(1), m.group(1)), w.text))
        return out

    def call(self, script: str) -> str:
        cmds = tcl_commands(script)
        result = ""
        for words in cmds:
            result = self.command(words)
        return result

    # commands ---------------------------------------------------------------------
    def run(self, script: str) -> None:
        self.run_commands(tcl_commands(script))

    def run_commands(self, cmds: list[list[Word]]) -> None:
        for i, words in enumerate(cmds):
            self.rest = cmds[i + 1:]
            self.command(words)

    def command(self, words: list[Word]) -> str:
        name = self.subst(words[0])
        args = words[1:]
        if name == "set" and len(args) == 2:
            var = self.subst(args[0]).lstrip(":")
            if var not in self.fixed:
                self.vars[var] = self.subst(args[1])
            return self.vars[var]
        if name == "set" and len(args) == 1:
            var = self.subst(args[0]).lstrip(":")
            if var not in self.vars:
                raise Unsupported(f"variable ${var}")
            return self.vars[var]
        if name in ("installtest_p", "dyninst_p"):
            return "1"
        if name in ("uretprobes_p",):
            return "1"
        if name in FULL_TCL and self.group not in FULL_TCL_DIRS and not (
                name == "exec" and [self.subst(a) for a in args] == ["/usr/bin/id", "-u"]):
            raise Unsupported(name)
        if name == "uprobes_p":
            return "1" if self.group in UPROBES_DIRS else "0"
        if name in ("utrace_p", "plt_probes_p", "bpf_p", "server_p",
                    "base_microtest_skip_p"):
            return "0"
        if name == "pwd":
            return str(self.work)
        if name == "get_runtime_list":
            return "dyninst"
        if name == "exec" and [self.subst(a) for a in args] == ["/usr/bin/id", "-u"]:
            return str(os.getuid())
        if name == "exec":
            return self.exec([self.subst(a) for a in args])
        if name == "arch_compile_flags":
            return str(arch_compile_flags()) if self.group in FULL_TCL_DIRS else ""
        if name == "sdt_includes":
            return sdt_includes(self.vars["srcdir"])
        if name == "prelink_p":
            return "1" if Path("/usr/sbin/prelink").exists() else "0"
        if name == "proc" and len(args) == 3:
            self.procs[self.subst(args[0])] = (self.tcl_list(self.subst(args[1])), args[2].text)
            return ""
        if name in self.procs:
            return self.call_proc(name, [self.subst(a) for a in args])
        if name == "list":
            return tcl_join([self.subst(a) for a in args])
        if name == "eval":
            return self.call(" ".join(self.subst(a) for a in args))
        if name == "split" and len(args) in (1, 2):
            text = self.subst(args[0])
            seps = self.subst(args[1]) if len(args) == 2 else " \t\n\r"
            return tcl_join(re.split("[" + re.escape(seps) + "]", text) if seps else list(text))
        if name == "lindex" and len(args) == 2:
            items = self.tcl_list(self.subst(args[0]))
            k = int(self.subst(args[1]))
            return items[k] if 0 <= k < len(items) else ""
        if name == "file" and len(args) == 2 and self.subst(args[0]) in ("tail", "exists"):
            path = self.subst(args[1])
            if self.subst(args[0]) == "tail":
                return os.path.basename(path)
            return "1" if (self.work / path).exists() else "0"
        if name == "incr" and len(args) in (1, 2):
            var = self.subst(args[0]).lstrip(":")
            step = int(self.subst(args[1])) if len(args) == 2 else 1
            self.vars[var] = str(int(self.vars.get(var, "0")) + step)
            return self.vars[var]
        if name == "switch":
            return self.cmd_switch(args)
        if name == "continue":
            raise _Continue()
        if name == "break":
            raise _Break()
        if name == "source" and len(args) == 1:
            try:
                self.run(Path(self.subst(args[0])).read_text(errors="replace"))
            except _Return:
                pass
            return ""
        if name == "spawn":
            self.spawned = [self.subst(a) for a in args]
            return ""
        if name == "expect" and self.verdicts is None:
            self.expect_test(args)
            # the rest of the file judges the run: it is run after the test has run
            raise _Return()
        if name == "exp_continue" and self.verdicts is not None:
            raise _ExpContinue()
        if name == "exp_pid":
            return "0"
        if name in ("kill", "close", "wait") and self.verdicts is not None:
            return ""
        if name == "if":
            return self.cmd_if(args)
        if name == "foreach" and len(args) == 3:
            var = self.subst(args[0])
            for value in self.tcl_list(self.subst(args[1])):
                self.vars[var] = value
                try:
                    self.run(args[2].text if args[2].kind == "brace" else self.subst(args[2]))
                except _Continue:
                    continue
                except _Break:
                    break
            return ""
        if name in ("setup_kfail", "setup_xfail"):
            self.pending_mark = f"{name} {' '.join(self.subst(a) for a in args)}"
            return ""
        if name == "untested":
            raise _Untested(" ".join(self.subst(a) for a in args))
        if name == "return":
            raise _Return()
        if name in ("pass", "fail") and self.verdicts is not None:
            self.verdicts.append((name == "pass", " ".join(self.subst(a) for a in args)))
            return ""
        if name == "fail" and self.group in FULL_TCL_DIRS:
            # a step before any run failed (a compile): counted, not dropped
            msg = " ".join(self.subst(a) for a in args)
            t = Test(self.group, f"{self.group}/{self.exp.name}: {msg}", [], self.work,
                     mode="failed")
            t.first_error = f"the .exp failed a step: {msg}"
            self.tests.append(t)
            return ""
        if name in ("verbose", "send_log", "pass", "fail", "catch", "lappend", "puts", "note"):
            if name == "lappend" and args:
                var = self.subst(args[0])
                new = [self.subst(a) for a in args[1:]]
                if self.group in FULL_TCL_DIRS:
                    self.vars[var] = tcl_join(self.tcl_list(self.vars.get(var, "")) + new)
                else:
                    self.vars[var] = " ".join([self.vars.get(var, ""), *new]).strip()
            return ""
        if name == "target_compile":
            return self.target_compile([self.subst(a) for a in args])
        if name == "stap_run" and len(args) >= 3:
            load = self.subst(args[1])
            if load not in SLEEP_LOADS:
                raise Unsupported(f"stap_run with load {load}")
            self.vars["result_string"] = self.subst(args[2])
            self.stap_run(name, [self.subst(args[0])] + [self.subst(a) for a in args[3:]])
            self.tests[-1].load_secs = SLEEP_LOADS[load]
            return ""
        if name in ("stap_run2", "stap_run3", "stap_run_exact", "stap_run_batch"):
            self.stap_run(name, [self.subst(a) for a in args])
            return ""
        raise Unsupported(name)

    def cmd_if(self, args: list[Word]) -> str:
        i = 0
        while i < len(args):
            cond = self.expr(args[i].text if args[i].kind == "brace" else self.subst(args[i]))
            i += 1
            if i < len(args) and args[i].text == "then" and args[i].kind == "bare":
                i += 1
            body = args[i]
            i += 1
            if cond:
                self.run(body.text)
                return ""
            if i >= len(args):
                return ""
            kw = args[i].text
            if kw == "else":
                self.run(args[i + 1].text)
                return ""
            if kw == "elseif":
                i += 1
                continue
            if i == len(args) - 1 and self.group in FULL_TCL_DIRS:
                # `if {c} {a} {b}`: Tcl's else keyword is optional
                self.run(args[i].text)
                return ""
            raise Unsupported("if")
        return ""

    def cmd_switch(self, args: list[Word]) -> str:
        i, how = 0, "-exact"
        while i < len(args) and args[i].kind == "bare" and args[i].text.startswith("-"):
            if args[i].text == "--":
                i += 1
                break
            if args[i].text not in ("-exact", "-glob", "-regexp"):
                raise Unsupported(f"switch {args[i].text}")
            how = args[i].text
            i += 1
        value = self.subst(args[i])
        body = args[i + 1:]
        items = (self.tcl_list(self.subst(body[0])) if len(body) == 1
                 else [self.subst(w) for w in body])
        matched = False
        for pattern, action in zip(items[::2], items[1::2], strict=True):
            matched = matched or pattern == "default" or (
                re.search(pattern, value) is not None if how == "-regexp" else
                fnmatch.fnmatchcase(value, pattern) if how == "-glob" else pattern == value)
            if matched and action != "-":
                self.run(action)
                return ""
        return ""

    def call_proc(self, name: str, values: list[str]) -> str:
        params, body = self.procs[name]
        if len(values) != len(params):
            raise Unsupported(f"{name} called with {len(values)} arguments")
        # the caller's variables stay visible: enough for the helpers .exp files define,
        # which read their arguments and their own locals only
        saved = self.vars
        self.vars = dict(saved, **dict(zip(params, values, strict=True)))
        try:
            self.run(body)
        except _Return:
            pass
        finally:
            self.vars = saved
        return ""

    def exec(self, argv: list[str]) -> str:
        """`exec` of the build tools an .exp uses to shape its binaries."""
        if not argv or argv[0] not in EXEC_TOOLS:
            raise Unsupported(f"exec {argv[0] if argv else ''}")
        r = subprocess.run(argv, capture_output=True, text=True, cwd=self.work)
        if r.returncode != 0:
            self.command([Word("fail", "bare"),
                          Word(f"{' '.join(argv)}: {r.stderr.strip()}", "brace")])
            raise _Return()
        return r.stdout.rstrip("\n")

    def expect_test(self, args: list[Word]) -> None:
        """The spawned stap as a test: expect's patterns are counted when it has run, and
        the commands after the block then pass or fail it."""
        if self.spawned is None:
            raise Unsupported("expect without spawn")
        # one braced argument holds the pattern-action pairs over several lines, with
        # comment lines between them, as expect reads it
        words = ([w.text if w.kind == "brace" else self.subst(w)
                  for cmd in tcl_commands(args[0].text) for w in cmd]
                 if len(args) == 1 and args[0].kind == "brace" else
                 [self.subst(a) for a in args])
        pairs: list[tuple[str, str]] = []
        on_timeout = on_eof = ""
        i = 0
        while i < len(words):
            if i + 1 >= len(words):
                raise Unsupported(f"expect: {words[i]} without an action")
            w = words[i]
            if w == "-timeout":
                i += 2
            elif w == "-re" and i + 2 < len(words):
                pairs.append((words[i + 1], words[i + 2]))
                i += 3
            elif w in ("timeout", "eof"):
                if w == "timeout":
                    on_timeout = words[i + 1]
                else:
                    on_eof = words[i + 1]
                i += 2
            else:
                raise Unsupported(f"expect pattern {w}")
        argv = self.spawned
        name = self.vars.get("testname", "")
        script = next((a for a in argv if a.endswith(".stp")), argv[0])
        label = f"{self.group}/{self.exp.name}: {Path(script).stem}-{name}"
        scripts = [Path(a).read_text(errors="replace") for a in argv
                   if a.endswith(".stp") and os.path.isfile(a)]
        t = Test(self.group, label, argv, self.work, mode="expect", scripts=scripts)
        judge = copy.copy(self)
        judge.vars = dict(self.vars)
        t.expect = Expect(judge, pairs, on_timeout, on_eof, self.rest)
        t.out_of_scope = kernel_reason(scripts)
        self.spawned = None
        self.tests.append(t)

    def expr(self, e: str) -> bool:
        py = []
        tokens = re.finditer(r'\s+|\$\{[^}]*\}|\$(?:::)?[\w:]+(?:\([^)]*\))?|\[[^\]]*\]|"[^"]*"|'
                             r'\b(eq|ne)\b|&&|\|\||==|!=|<=|>=|[<>!()]|\d+|\w+', e)
        pos = 0
        for t in tokens:
            if t.start() != pos:
                raise Unsupported(f"if {{{e}}}")
            pos = t.end()
            s = t.group(0)
            if s.isspace():
                continue
            if s.startswith("$") or s.startswith("[") or s.startswith('"'):
                v = self.subst(Word(s[1:-1] if s.startswith('"') else s, "quote"))
                py.append(repr(int(v)) if re.fullmatch(r"-?\d+", v) else repr(v))
            elif s in ("eq", "=="):
                py.append("==")
            elif s in ("ne", "!="):
                py.append("!=")
            elif s == "&&":
                py.append(" and ")
            elif s == "||":
                py.append(" or ")
            elif s == "!":
                py.append(" not ")
            elif s in ("(", ")", "<", ">", "<=", ">=") or s.isdigit():
                py.append(s)
            else:
                raise Unsupported(f"if {{{e}}}")
        if pos != len(e):
            raise Unsupported(f"if {{{e}}}")
        try:
            return bool(eval("".join(py), {"__builtins__": {}}))  # noqa: S307 (own tokens only)
        except Exception as exc:
            raise Unsupported(f"if {{{e}}}") from exc

    def target_compile(self, args: list[str]) -> str:
        if len(args) < 3:
            raise Unsupported("target_compile")
        src, dest, kind = args[0], args[1], args[2]
        opts = args[3] if len(args) > 3 else ""
        flags: list[str] = []
        for o in shlex.split(opts):
            if o.startswith("additional_flags="):
                flags += shlex.split(o.split("=", 1)[1])
            elif o == "debug":
                flags.append("-g")
            elif o.startswith(("compiler=", "libs=", "ldflags=")):
                key, val = o.split("=", 1)
                if key == "compiler":
                    raise Unsupported("target_compile compiler=")
                flags += shlex.split(val)
        out = self.work / dest if not os.path.isabs(dest) else Path(dest)
        cmd = ["gcc", *src.split(), "-o", str(out), *flags]
        if kind == "object":
            cmd.append("-c")
        elif kind != "executable":
            raise Unsupported(f"target_compile {kind}")
        key = " ".join(cmd)
        if key not in self.compiled:
            r = subprocess.run(cmd, capture_output=True, text=True, cwd=self.work)
            self.compiled[key] = "" if r.returncode == 0 else (r.stderr.strip() or "failed")
        return self.compiled[key]

    def stap_run(self, proc: str, args: list[str]) -> None:
        expected = self.vars.get("result_string")
        if proc == "stap_run2":
            name, argv = args[0], args
        elif proc in ("stap_run3", "stap_run"):
            name, argv = args[0], args[1:]
        elif proc == "stap_run_exact":
            name, argv = args[0], args[2:] + args[1:2]
        else:
            name, argv = args[0], args
        argv = [a for a in argv if a != ""]
        # stap_run3's name is words: `{name args} file args` -- the words it was given
        mode = {"stap_run_exact": "exact", "stap_run_batch": "ok",
                "stap_run": "interrupt"}.get(proc, "run3")
        if mode != "ok" and expected is None:
            raise Unsupported(f"{proc} without result_string")
        if proc == "stap_run_batch":
            first = Path(argv[0]).read_text(errors="replace").split("\n", 1)[0]
            m = re.match(r"#! stap (.*)", first)
            if not m:
                raise Unsupported("stap_run_batch of a non-stap script")
            argv = [*shlex.split(m.group(1)), *argv]
        name = re.sub(r".*/testsuite/", "", name)
        label = f"{self.group}/{self.exp.name}: {name}"
        k = sum(1 for t in self.tests if t.name.startswith(label))
        if k:
            label += f" #{k + 1}"
        scripts = []
        for j, a in enumerate(argv):
            if a.endswith(".stp") and os.path.isfile(a):
                scripts.append(Path(a).read_text(errors="replace"))
            elif a == "-e" and j + 1 < len(argv):
                scripts.append(argv[j + 1])
        t = Test(self.group, label, ["stap", *argv], self.work, mode=mode,
                 expected=expected, scripts=scripts)
        if self.pending_mark:
            t.out_of_scope = f"marked failing under dyninst ({self.pending_mark})"
            self.pending_mark = None
        else:
            t.out_of_scope = kernel_reason(scripts)
        self.tests.append(t)


class _Untested(Exception):
    pass


class _Continue(Exception):
    pass


class _Break(Exception):
    pass


class _ExpContinue(Exception):
    pass


class _Return(Exception):
    pass


def output_tests(suite: Path, work: Path, abis: list[str]) -> Iterator[Test]:
    for d in OUTPUT_DIRS:
        for exp in sorted((suite / d).glob("*.exp")):
            wdir = work / d / exp.stem
            wdir.mkdir(parents=True, exist_ok=True)
            if d == "systemtap.base" and exp.name in SDT_EXPS:
                try:
                    yield from sdt_tests(suite, exp, wdir, abis)
                except Unsupported as e:
                    yield Test(d, f"{d}/{exp.name}", [], wdir, mode="ok",
                               out_of_scope=f"needs Tcl/expect the runner does not model ({e})")
                continue
            it = Interp(suite, exp, wdir)
            try:
                it.run(exp.read_text(errors="replace"))
            except Unsupported as e:
                yield Test(d, f"{d}/{exp.name}", [], wdir, mode="ok",
                           out_of_scope=f"needs Tcl/expect the runner does not model ({e})")
                continue
            except _Untested:
                if not it.tests:
                    yield Test(d, f"{d}/{exp.name}", [], wdir, mode="ok",
                               out_of_scope="untested under dyninst")
                    continue
            except _Return:
                pass
            except OSError as e:
                yield Test(d, f"{d}/{exp.name}", [], wdir, mode="ok",
                           out_of_scope=f"reads a file the runner lacks ({e})")
                continue
            if not it.tests:
                yield Test(d, f"{d}/{exp.name}", [], wdir, mode="ok",
                           out_of_scope="runs stap in no way the runner models")
            yield from it.tests


# ---------------------------------------------------------------------------------------
# The SDT tests: each .exp compiles its C (or assembly) program once per variant of the
# compiler flags it iterates, then runs stap on each build.  Their loops (for, proc, spawn
# and expect) are more Tcl than the reader above runs, so the loops are modelled here as
# the .exp writes them, with every flag list, message and expected output read from the
# .exp itself; each build is run for each ABI given with --abi.

SDT_EXPS = ("sdt.exp", "sdt_va_args.exp", "sdt_casm.exp", "sdt_asm.exp", "sdt_misc.exp")
ABI_FLAGS = {"m64": ["-m64"], "m32": ["-m32", "-idirafter", "/usr/include/x86_64-linux-gnu"]}
# the one runtime get_runtime_list gives here, as the .exp files spell it in test names
_RT = "dyninst"


def exp_sets(text: str) -> dict[str, str]:
    """The literal values of the `set NAME {...}` / `set NAME "..."` commands of an .exp,
    at any depth of its braced bodies (the first of each name)."""
    found: dict[str, str] = {}

    def walk(src: str, depth: int) -> None:
        try:
            cmds = tcl_commands(src)
        except (ValueError, IndexError):
            return
        for words in cmds:
            if (len(words) == 3 and words[0].text == "set" and words[2].kind != "bare"
                    and "$" not in words[2].text and "[" not in words[2].text):
                found.setdefault(words[1].text.lstrip(":"), words[2].text)
            if depth < 6:
                for w in words[1:]:
                    if w.kind == "brace" and "\n" in w.text:
                        walk(w.text, depth + 1)
    walk(text, 0)
    return found


class _SdtExp:
    """One SDT .exp: its variables, and the Tests of its builds for one ABI."""

    def __init__(self, suite: Path, exp: Path, work: Path, abi: str) -> None:
        self.suite = suite
        self.exp = exp
        self.abi = abi
        self.work = work
        self.it = Interp(suite, exp, work)
        self.vars = exp_sets(exp.read_text(errors="replace"))
        self.tests: list[Test] = []

    def list(self, name: str) -> list[str]:
        if name not in self.vars:
            raise Unsupported(f"{self.exp.name} sets no {name}")
        return self.it.tcl_list(self.vars[name])

    def includes(self) -> str:
        # sdt_includes: the testsuite's sys/sdt.h wrapper (STAP_SDT_V1/V2 forms) first,
        # then the installed <sys/sdt.h> the compiler finds on its own path
        return f"additional_flags=-isystem{self.suite}"

    def add(self, name: str, source: str, prog: str, options: str, argv: list[str], *,
            mode: str, expected: str | None = None, prefix: str = "",
            float_exempt: bool = False) -> None:
        """A build of `source` with target_compile's `options`, and the stap run on it."""
        label = f"{self.exp.parent.name}/{self.exp.name}: {' '.join(name.split())} [{self.abi}]"
        k = sum(1 for t in self.tests if t.name.startswith(label))
        wdir = self.work / f"{self.abi}-{len(self.tests)}"
        wdir.mkdir(parents=True, exist_ok=True)
        compiler, flags = "gcc", []
        for o in shlex.split(options):
            if o == "c++":
                compiler = "g++"
            elif o.startswith("additional_flags="):
                flags.append(o.split("=", 1)[1])
        flags = [f for f in flags if f]
        scripts = [Path(a).read_text(errors="replace") for a in argv
                   if a.endswith(".stp") and os.path.isfile(a)]
        t = Test(self.exp.parent.name, label + (f" #{k + 1}" if k else ""), ["stap", *argv],
                 wdir, mode=mode, expected=expected, scripts=scripts)
        # default_target_compile: the flags come before the sources (so `-x c++` applies)
        t.build = [compiler, *flags, *ABI_FLAGS[self.abi], source, "-o", str(wdir / prog)]
        t.check_prefix = prefix
        t.float_exempt = float_exempt
        self.tests.append(t)

    def path(self, name: str) -> str:
        """$srcdir/$subdir/NAME: a source or script beside the .exp."""
        return str(self.exp.parent / name)

    # one method per .exp, each following that file's loops --------------------------
    def sdt(self) -> None:
        test = "sdt"
        extra_flags, extra_mssgs = self.list("extra_flags"), self.list("extra_mssgs")
        ped_idx, peds = self.list("type_pedantics_idx"), self.list("type_pedantics")
        ped_mssgs = self.list("type_pedantic_mssgs")
        pbtype_flags, pbtype_mssgs = self.list("pbtype_flags"), self.list("pbtype_mssgs")
        r10, r12 = self.vars["result_string10"], self.vars["result_string12"]
        for pbtype_flag, pbtype_mssg in zip(pbtype_flags, pbtype_mssgs, strict=True):
            for i, (extra_flag, extra_mssg) in enumerate(zip(extra_flags, extra_mssgs,
                                                             strict=True)):
                prog = f"sdt.c.exe.{i}"
                for j in range(int(ped_idx[i])):
                    opts = (f"additional_flags=-g {self.includes()} additional_flags=-Wall "
                            f"additional_flags=-Wextra additional_flags=-Werror {pbtype_flag} "
                            f"{extra_flag} {peds[j]}")
                    expected = r10 + (r12 if pbtype_mssg == "uprobe" else "")
                    self.add(f"{test} {extra_mssg} {ped_mssgs[j]} {pbtype_mssg} ({_RT})",
                             self.path("sdt.c"), prog, opts,
                             [f"--runtime={_RT}", "-w", self.path("sdt.stp"), prog,
                              "-c", f"./{prog}"], mode="run3", expected=expected)

    def sdt_va_args(self) -> None:
        test = "sdt_va_args"
        for i, (extra_flag, extra_mssg) in enumerate(zip(
                self.list("extra_flags"), self.list("extra_mssgs"), strict=True)):
            prog = f"{test}.c.exe.{i}"
            opts = (f"additional_flags=-g {self.includes()} additional_flags=-Wall "
                    f"additional_flags=-Wextra additional_flags=-Werror {extra_flag}")
            self.add(f"{test} {extra_mssg} ({_RT})", self.path(f"{test}.c"), prog, opts,
                     [f"--runtime={_RT}", "-w", self.path("sdt.stp"), prog,
                      "-c", f"./{prog}"], mode="run3", expected=self.vars["result_string"])

    def sdt_casm(self) -> None:
        opts = f"{self.includes()} additional_flags=-std=c99"
        self.add(f"sdt_casm ({_RT})", self.path("sdt_casm.c"), "sdt_casm.x", opts,
                 [self.path("sdt_casm.stp"), f"--runtime={_RT}", "-c", "sdt_casm.x"],
                 mode="run3", expected=self.vars["result_string"])

    def sdt_asm(self) -> None:
        opts = f"{self.includes()} additional_flags=-g"
        self.add(f"sdt_misc asm ({_RT})", self.path("sdt_asm.S"), "sdt_asm.x", opts,
                 [f"--runtime={_RT}", "-c", "./sdt_asm.x", self.path("sdt_asm.stp"),
                  "./sdt_asm.x"], mode="checks", prefix="sdt_asm")

    def sdt_misc(self) -> None:
        """Only its types part (sdt_types.c, sdt_types.stp); the rest needs dtrace and
        expect sessions the runner does not model."""
        v_flags, pb_flags = self.list("v_flags"), self.list("pbtype_flags")
        pb_mssgs = self.list("pbtype_mssgs")
        type_flags, type_mssgs = self.list("extra_type_flags"), self.list("extra_type_mssgs")
        long_long, ped_idx = self.list("has_long_long"), self.list("type_pedantics_idx")
        peds, ped_mssgs = self.list("type_pedantics"), self.list("type_pedantic_mssgs")
        for v_flag, pb_flag, pb_mssg in zip(v_flags, pb_flags, pb_mssgs, strict=True):
            if pb_mssg != "V3_uprobe":
                continue   # the .exp runs only V3 builds under dyninst
            pbtype_flag = f"{pb_flag} additional_flags={v_flag}"
            for j, (tflag, tmssg) in enumerate(zip(type_flags, type_mssgs, strict=True)):
                for p in range(int(ped_idx[j])):
                    opts = (f"{self.includes()} additional_flags=-Wall additional_flags=-Werror"
                            f" additional_flags=-I. {pbtype_flag} {tflag} {peds[p]} "
                            f"{long_long[j]}")
                    # stap counts FAIL lines of float and double checks as passes
                    # under dyninst (sdt_misc.exp's float_notok)
                    self.add(f"sdt_misc types {pb_mssg} ({_RT}) {tmssg} {ped_mssgs[p]}",
                             self.path("sdt_types.c"), "sdt_types.x", opts,
                             [f"--runtime={_RT}", "-g", "-c", "./sdt_types.x",
                              self.path("sdt_types.stp"), "./sdt_types.x"],
                             mode="checks", prefix="sdt_types", float_exempt=True)


def sdt_tests(suite: Path, exp: Path, work: Path, abis: list[str]) -> list[Test]:
    tests: list[Test] = []
    for abi in abis:
        e = _SdtExp(suite, exp, work, abi)
        getattr(e, exp.stem)()
        tests += e.tests
    if exp.stem == "sdt_misc":
        tests.append(Test(exp.parent.name, f"{exp.parent.name}/{exp.name}: the rest", [],
                          work, mode="ok", out_of_scope="needs Tcl/expect the runner does "
                          "not model (dtrace -G builds, attach sessions)"))
    return tests


def build_target(t: Test) -> bool:
    """Run the test's target_compile; a failure fails the test with the compiler's line."""
    assert t.build is not None
    r = subprocess.run(t.build, capture_output=True, text=True, cwd=t.cwd)
    if r.returncode == 0:
        return True
    lines = (r.stderr or r.stdout).strip().splitlines()
    t.first_error = "target_compile failed: " + next(
        (ln for ln in lines if "error" in ln), lines[0] if lines else f"exit {r.returncode}")
    return False


def judge_checks(t: Test, res: str) -> None:
    """sdt_asm.exp / sdt_misc.exp: every line must be `PREFIX PASS: ...`, at least one.
    With float_exempt, FAIL lines naming a float or double check do not count."""
    ok, bad = 0, []
    for line in res.splitlines():
        if re.match(rf"{t.check_prefix} PASS: ", line):
            ok += 1
            continue
        m = re.match(rf"{t.check_prefix} FAIL: (\S*)", line)
        if m and t.float_exempt and re.search("float|double", m.group(1)):
            continue
        bad.append(line)
    if bad:
        t.first_error = f"{len(bad)} line(s) not PASS, first: {bad[0][:100]!r}"
    elif not ok:
        t.first_error = "no PASS line"
    else:
        t.passed = True


# ---------------------------------------------------------------------------------------
# Running

def load_differences() -> dict[str, str]:
    data = tomllib.loads(DIFFERENCES.read_text())
    return {d["test"]: d["reason"] for d in data.get("difference", [])}


def make_shim(tmp: Path, pydyn: Path) -> Path:
    bindir = tmp / "bin"
    bindir.mkdir()
    shim = bindir / "stap"
    shim.write_text(f'#!/bin/sh\nexec {shlex.quote(str(pydyn))} "$@"\n')
    shim.chmod(0o755)
    return bindir


# stap_run's warning_regexp (and pydyn's form of it)
_ERROR_COUNT = re.compile(r"WARNING: Number of errors: \d+, skipped probes: \d+")


def _start(t: Test, env: dict[str, str]) -> subprocess.Popen[bytes] | None:
    """The test's command started in a session of its own (None, noted, if it cannot)."""
    try:
        return subprocess.Popen(t.argv, cwd=t.cwd, env={**env, **t.env},
                                stdin=subprocess.DEVNULL,
                                stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                start_new_session=True)
    except OSError as e:
        t.first_error = f"cannot run: {e}"
        return None


def run_interrupted(t: Test, env: dict[str, str], timeout: float) -> None:
    """stap_run: wait for "systemtap starting probe", let the load's time pass, send SIGINT,
    then the rest of stdout must be "systemtap ending probe" and the expected pattern."""
    p = _start(t, env)
    if p is None:
        return
    assert p.stdout is not None and p.stderr is not None
    out: list[bytes] = []
    err: list[bytes] = []
    started = threading.Event()

    def read_out() -> None:
        assert p.stdout is not None
        for line in p.stdout:
            out.append(line)
            if line.rstrip(b"\r\n") == b"systemtap starting probe":
                started.set()
        started.set()
    readers = [threading.Thread(target=read_out, daemon=True),
               threading.Thread(target=lambda: err.extend(p.stderr or []), daemon=True)]
    for r in readers:
        r.start()
    deadline = time.monotonic() + timeout
    ok_start = started.wait(timeout)
    if ok_start and p.poll() is None:
        time.sleep(t.load_secs)
        try:
            os.kill(p.pid, signal.SIGINT)
        except ProcessLookupError:
            pass
    try:
        p.wait(max(1.0, deadline - time.monotonic()))
    except subprocess.TimeoutExpired:
        os.killpg(p.pid, signal.SIGKILL)
        p.wait()
        t.first_error = f"timeout after {timeout:g} s"
        return
    for r in readers:
        r.join(5)
    text = b"".join(out).decode("utf-8", errors="replace")
    etext = b"".join(err).decode("utf-8", errors="replace")
    if "Traceback (most recent call last)" in etext:
        t.first_error = "traceback: " + etext.strip().splitlines()[-1]
        if os.environ.get("STAP_TESTSUITE_TRACEBACKS"):
            print(f"{t.name}:\n{etext}", file=sys.stderr)
        return
    err_line = next((ln for ln in etext.splitlines() if re.search(r"error", ln, re.I)), "")
    head, sep, rest = text.partition("systemtap starting probe\n")
    if not sep:
        t.first_error = err_line or "no 'systemtap starting probe' line"
        return
    pattern = "systemtap ending probe\n" + (t.expected or "").replace("\\r", "").replace("\r", "")
    # expect reads stdout and stderr from one pty, the error lines of the end probe
    # after its output, and consumes stap's error-count warning; Tcl's `.` matches
    # a newline
    merged = rest + "".join(ln for ln in etext.splitlines(keepends=True)
                            if not _ERROR_COUNT.match(ln))
    try:
        m = re.match(pattern, rest, re.S) or re.match(pattern, merged, re.S)
    except re.error as e:
        t.first_error = f"the expected pattern is no Python regex: {e}"
        return
    if m and m.string is merged:
        rest = merged
    if not m:
        first = rest.split("\n")[:3]
        t.first_error = err_line or f"output after start does not match: {first!r}"
        return
    if rest[m.end():].strip():
        t.first_error = f"unexpected output after the expected: {rest[m.end():][:80]!r}"
        return
    t.passed = True


def run_expected(t: Test, env: dict[str, str], timeout: float) -> None:
    """A spawned stap read as expect reads it: stdout and stderr through one pty (a newline
    is \\r\\n), each time the first of the patterns, in the block's order, that matches
    what is not consumed yet runs its action; exp_continue goes on, anything else ends the
    block, as does output no pattern matches.  Then the .exp's commands after the block
    run with the counts its actions made, and their pass/fail calls judge the test."""
    assert t.expect is not None
    spec = t.expect
    judge = copy.copy(spec.interp)
    judge.vars = dict(spec.interp.vars)
    judge.verdicts = []
    p = _start(t, env)
    if p is None:
        return
    timed_out = False
    try:
        out_b, err_b = p.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        os.killpg(p.pid, signal.SIGKILL)
        out_b, err_b = p.communicate()
        timed_out = True
    err = err_b.decode("utf-8", errors="replace")
    if "Traceback (most recent call last)" in err:
        t.first_error = "traceback: " + err.strip().splitlines()[-1]
        return
    buf = (out_b.decode("utf-8", errors="replace") + err).replace("\n", "\r\n")
    end = spec.on_timeout if timed_out else spec.on_eof
    try:
        while True:
            hit = None
            for pattern, action in spec.pairs:
                m = re.search(pattern, buf)
                if m:
                    hit = (m, action)
                    break
            if hit is None:
                judge.run(end)
                break
            buf = buf[hit[0].end():]
            try:
                judge.run(hit[1])
                break
            except _ExpContinue:
                continue
        judge.run_commands(spec.after)
    except _Return:
        pass
    except (Unsupported, _Untested) as e:
        t.first_error = f"the .exp's checks need more than the runner models ({e})"
        return
    fails = [msg for ok, msg in judge.verdicts if not ok]
    t.passed = bool(judge.verdicts) and not fails
    if fails:
        t.first_error = "; ".join(fails)
        if buf.strip():
            t.first_error += f"; unmatched output: {buf.strip()[:120]!r}"
    elif not judge.verdicts:
        t.first_error = "the .exp's checks passed or failed nothing"


def run_one(t: Test, env: dict[str, str], timeout: float) -> None:
    timeout = max(timeout, t.timeout or 0)
    if t.mode == "failed":
        return
    if t.build is not None and not build_target(t):
        return
    if t.mode == "interrupt":
        run_interrupted(t, env, timeout)
        return
    if t.mode == "expect":
        run_expected(t, env, timeout)
        return
    p = _start(t, env)
    if p is None:
        return
    try:
        out_b, err_b = p.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        os.killpg(p.pid, signal.SIGKILL)
        p.communicate()
        t.first_error = f"timeout after {timeout:g} s"
        return
    out = out_b.decode("utf-8", errors="replace")
    err = err_b.decode("utf-8", errors="replace")
    rc = p.returncode
    if "Traceback (most recent call last)" in err:
        t.first_error = "traceback: " + err.strip().splitlines()[-1]
        return
    if rc < 0:
        t.first_error = f"killed by signal {-rc}"
        return
    err_line = next((ln for ln in err.splitlines() if re.search(r"error", ln, re.I)),
                    err.strip().splitlines()[0] if err.strip() else "")
    if t.mode == "ok":
        t.passed = rc == 0
        t.first_error = "" if t.passed else (err_line or f"exit {rc}")
    elif t.mode == "ko":
        t.passed = rc != 0 and bool(err.strip())
        t.first_error = ("" if t.passed else
                         "succeeded but must fail" if rc == 0 else "failed without a message")
    elif t.mode == "checks":
        judge_checks(t, out + err)
    else:
        res = out + err
        if t.mode == "exact" and rc != 0:
            res += "child process exited abnormally"
        res = res[:-1] if res.endswith("\n") else res
        got, want = res.split("\n"), (t.expected or "").split("\n")
        for n, line in enumerate(got):
            if n >= len(want) or line != want[n]:
                if t.mode == "exact" and n >= len(want):
                    break
                exp_line = want[n] if n < len(want) else "<no more lines>"
                t.first_error = (err_line if err_line and rc != 0 else
                                 f"line {n + 1}: expected {exp_line!r}, got {line!r}")
                return
        if t.mode == "run3" and len(got) < len(want):
            t.first_error = err_line or f"too few lines: got {len(got)}, expected {len(want)}"
            return
        t.passed = True


def collect(suite: Path, work: Path, abis: list[str] | None = None) -> list[Test]:
    marked = dyninst_marked(suite)
    tests = list(pass_tests(suite, work / "pass", marked))
    (work / "pass").mkdir(parents=True, exist_ok=True)
    tests += list(output_tests(suite, work, abis or list(ABI_FLAGS)))
    diffs = load_differences()
    for t in tests:
        key = t.name.split(":")[0]
        if t.out_of_scope is None and (t.name in diffs or key in diffs):
            t.out_of_scope = "deliberate difference: " + diffs.get(t.name, diffs.get(key, ""))
    return tests


def report(tests: list[Test], list_fails: bool, out: Callable[[str], None] = print,
           list_tests: bool = False) -> None:
    groups: dict[str, list[Test]] = {}
    for t in tests:
        groups.setdefault(t.group, []).append(t)
    out(f"{'directory':<20} {'in scope':>8} {'pass':>6} {'fail':>6} {'out of scope':>12}")
    tot = [0, 0, 0, 0]
    reasons: dict[str, int] = {}
    for g, ts in groups.items():
        ins = [t for t in ts if t.out_of_scope is None]
        npass = sum(t.passed for t in ins)
        row = [len(ins), npass, len(ins) - npass, len(ts) - len(ins)]
        tot = [a + b for a, b in zip(tot, row, strict=True)]
        out(f"{g:<20} {row[0]:>8} {row[1]:>6} {row[2]:>6} {row[3]:>12}")
        for t in ts:
            if t.out_of_scope is not None:
                r = re.sub(r"\(.*", "", t.out_of_scope).strip()
                r = re.sub(r"kernel probe point .*", "kernel probe point", r)
                reasons[r] = reasons.get(r, 0) + 1
    out(f"{'total':<20} {tot[0]:>8} {tot[1]:>6} {tot[2]:>6} {tot[3]:>12}")
    rate = 100.0 * tot[1] / tot[0] if tot[0] else 0.0
    out(f"pass rate: {tot[1]}/{tot[0]} = {rate:.1f}%")
    out("out of scope:")
    for r, n in sorted(reasons.items(), key=lambda kv: -kv[1]):
        out(f"  {n:>4}  {r}")
    if list_tests:
        out("tests in scope:")
        for t in tests:
            if t.out_of_scope is None:
                out(f"  {'PASS' if t.passed else 'FAIL'} {t.name}"
                    + (f": {t.first_error}" if t.first_error else ""))
    if list_fails:
        out("failures:")
        for t in tests:
            if t.out_of_scope is None and not t.passed:
                out(f"  {t.name}: {t.first_error}")


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(
        description=__doc__.split("\n\n")[0],
        epilog="PATH: a SystemTap source tree or a bare git repository of one, e.g. "
               "`git clone --bare https://sourceware.org/git/systemtap.git stap.git`.",
        formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("source", type=Path, help="SystemTap source tree or bare git repository")
    ap.add_argument("--pydyn", type=Path, default=ROOT / ".venv" / "bin" / "pydyn",
                    help="the pydyn to test (default: this checkout's .venv/bin/pydyn)")
    ap.add_argument("-j", "--jobs", type=int, default=2, help="tests run at once (2)")
    # stap's own expect timeouts are 150 s and more; a 2,000-statement probe compiles
    # for most of a minute on a loaded 2-core machine
    ap.add_argument("--timeout", type=float, default=150, help="seconds per test (150)")
    ap.add_argument("-k", dest="pattern", default="", help="only tests whose name has this")
    ap.add_argument("--list-fails", action="store_true",
                    help="print each failing test with its first error line")
    ap.add_argument("--list-tests", action="store_true",
                    help="print each test in scope with PASS or FAIL")
    ap.add_argument("--abi", choices=[*ABI_FLAGS, "both"], default="both",
                    help="the ABI the SDT tests build their programs for; each build is "
                         "one test (both)")
    ap.add_argument("--list-scope", action="store_true",
                    help="print each out-of-scope test with its reason")
    a = ap.parse_args(argv)
    if not a.pydyn.is_file():
        ap.error(f"{a.pydyn}: no such pydyn (run `make py-deps` first)")
    tmp = Path(tempfile.mkdtemp(prefix="stap-testsuite-"))
    try:
        suite = testsuite_dir(a.source.resolve(), tmp)
        work = tmp / "work"
        work.mkdir()
        tests = collect(suite, work, list(ABI_FLAGS) if a.abi == "both" else [a.abi])
        if a.pattern:
            tests = [t for t in tests if a.pattern in t.name]
        env = dict(os.environ, PATH=f"{make_shim(tmp, a.pydyn)}:{os.environ['PATH']}",
                   PYDYN_CACHE_DIR=os.environ.get("PYDYN_CACHE_DIR",
                                                  str(Path.home() / ".cache" / "pydyn-stap")),
                   LC_ALL="C", SYSTEMTAP_TESTSUITE="1", SRCDIR=str(suite.parent))
        env.pop("COLUMNS", None)
        todo = [t for t in tests if t.out_of_scope is None]
        t0 = time.monotonic()
        with concurrent.futures.ThreadPoolExecutor(a.jobs) as pool:
            list(pool.map(lambda t: run_one(t, env, a.timeout), todo))
        report(tests, a.list_fails, list_tests=a.list_tests)
        if a.list_scope:
            print("out-of-scope tests:")
            for t in tests:
                if t.out_of_scope is not None:
                    print(f"  {t.name}: {t.out_of_scope}")
        print(f"({len(todo)} tests in {time.monotonic() - t0:.0f} s)")
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
