"""Pass 2: resolve probe points to concrete probe sites.

ELF inspection happens here and only here: every binary a probe point names is
read once, its `.note.stapsdt` entries become ProbeSites (notes that are
dangling or do not point at a nop are reported and skipped), and each probe
point gets the list of sites it covers.
"""

from __future__ import annotations

import dataclasses
import difflib
import fnmatch
import glob
import json
import os
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field

from .build import find_program
from .elf.callees import callee_sites
from .elf.functions import function_sites
from .elf.inlines import inline_sites
from .elf.libraries import find_library, iter_needed_libraries
from .elf.plt import plt_sites
from .elf.reader import ElfInfo, get_elf_info, missing_reason
from .elf.stapsdt import ProbeSite, SiteScan, get_probe_sites
from .elf.statements import label_sites, statement_sites
from .errors import PydynError, ScriptError, TargetError, point_length, say
from .script import ast

PROBE_KINDS = ("begin", "end", "error", "never", "mark", "process_begin", "process_end",
               "thread_begin", "thread_end", "timer")
TIMER_UNITS_NS = {"s": 1_000_000_000, "sec": 1_000_000_000, "ms": 1_000_000, "msec": 1_000_000,
                  "us": 1_000, "usec": 1_000, "ns": 1, "nsec": 1}


def format_point(point: ast.ProbePoint) -> str:
    parts = []
    for comp in point.components:
        if comp.arg is None:
            parts.append(comp.name)
        elif isinstance(comp.arg, int):
            parts.append(f"{comp.name}({comp.arg})")
        else:
            parts.append(f"{comp.name}({json.dumps(comp.arg)})")
    return ".".join(parts) + ("?" if point.optional else "")


@dataclass(frozen=True)
class ResolvedPoint:
    """One probe point of a probe, with what it covers."""

    point: ast.ProbePoint
    kind: str
    sites: tuple[ProbeSite, ...] = ()
    object_path: str | None = None   # process("PATH").begin/end: the binary; None = any
    period_ns: int = 0               # timers
    randomize_ns: int = 0
    priority: int = 0                # begin(N), end(N), error(N)
    program: str = ""                # marks and code points: the process("PATH") binary

    def __str__(self) -> str:
        return f"{format_point(self.point)} -> {self.kind} ({len(self.sites)} sites)"


@dataclass
class Resolution:
    points: list[list[ResolvedPoint]] = field(default_factory=list)  # by probe, script order
    objects: dict[str, ElfInfo] = field(default_factory=dict)              # path -> info
    skipped_notes: int = 0
    dropped: list[str] = field(default_factory=list)   # probes whose points all failed `?`

    def iter_sites(self) -> Iterable[ProbeSite]:
        for pts in self.points:
            for rp in pts:
                yield from rp.sites


def _pp_error(point: ast.ProbePoint, message: str, hint: str | None = None) -> ScriptError:
    loc = point.loc
    if loc.source_line and not loc.length:   # underline the whole probe point
        text = loc.source_line.rstrip("\n").expandtabs(1)
        loc = loc._replace(length=point_length(text, loc.column))
    return ScriptError(message, loc, hint)


def _is_glob(path: str) -> bool:
    return any(c in path for c in "*?[")


def _with_path(point: ast.ProbePoint, path: str) -> ast.ProbePoint:
    """The point with process("GLOB") replaced by one of the paths it matched."""
    first = dataclasses.replace(point.components[0], arg=path)
    return dataclasses.replace(point, components=(first, *point.components[1:]))


class Resolver:
    def __init__(self, target_path: str | None = None,
                 warn: Callable[[str], None] | None = None) -> None:
        self.target_path = target_path
        self.warn = warn or (lambda m: say(f"pydyn: warning: {m}"))
        self._scans: dict[str, SiteScan] = {}
        self._elf_paths: dict[str, str] = {}   # path as found -> the ELF file's path
        self.resolution = Resolution()

    def _scan(self, path: str) -> SiteScan:
        scan = self._scans.get(path)
        if scan is None:
            scan = get_probe_sites(path)
            self._scans[path] = scan
            self.resolution.objects[scan.info.path] = scan.info
            self.resolution.skipped_notes += len(scan.skipped)
            # One line a binary (a damaged file can carry any number of bad notes),
            # each when it is the only one: the count and the first example.
            if scan.skipped:
                first = scan.skipped[0]
                example = (f"probe {first.provider}:{first.name} at {first.pc:#x}: "
                           f"{first.reason}")
                n = len(scan.skipped)
                self.warn(f"{first.path}: {example}; skipped" if n == 1 else
                          f"{first.path}: {n} probe notes skipped, the first: {example}")
        return scan

    def _binary(self, point: ast.ProbePoint, arg: object) -> str:
        if arg is None:
            if self.target_path is None:
                raise _pp_error(point, "process probe without a path needs a -c target")
            return self.target_path
        if not isinstance(arg, str):
            raise _pp_error(point, "process() takes a path string")
        path = arg
        if "/" not in path:
            found = find_program(path)
            if found is None:
                raise _pp_error(point, f"process(\"{arg}\"): no such program in PATH "
                                "or the current directory")
            path = found
        missing = missing_reason(path)
        if missing is not None:
            raise _pp_error(point, f"process(\"{arg}\"): {missing}")
        # once per path: a script may name one binary in thousands of probe points, and
        # reading its headers (pyelftools builds the dynamic section's hash table) costs
        # tens of milliseconds
        known = self._elf_paths.get(path)
        if known is not None:
            return known
        try:
            known = self._elf_paths[path] = get_elf_info(path).path
        except TargetError as exc:
            raise _pp_error(point, f"process(\"{arg}\"): {exc.reason}") from exc
        return known

    def resolve(self, script: ast.Script) -> Resolution:
        for probe in script.probes:
            points: list[ResolvedPoint] = []
            for point in probe.points:
                try:
                    points.extend(self.resolve_point(point))
                except PydynError:
                    if not point.optional:
                        raise
            self.resolution.points.append(points)
        return self.resolution

    def resolve_script(self, script: ast.Script) -> tuple[ast.Script, Resolution]:
        """resolve(), then the script without the probes whose points were all optional
        and matched nothing: stap drops such a probe, body and all, so its body is
        never checked against sites it does not have (`$arg1` of a mark that is not
        there).  Each is named in resolution.dropped (pydyn -v prints them)."""
        resolution = self.resolve(script)
        keep = [i for i, points in enumerate(resolution.points) if points]
        if len(keep) == len(script.probes):
            return script, resolution
        for i, probe in enumerate(script.probes):
            if not resolution.points[i]:
                resolution.dropped.append(f"{probe.loc.file}:{probe.loc.line}: probe "
                                          "dropped, its optional probe points match nothing")
        resolution.points = [resolution.points[i] for i in keep]
        return dataclasses.replace(script, probes=tuple(script.probes[i] for i in keep)), \
            resolution

    def resolve_point(self, point: ast.ProbePoint) -> list[ResolvedPoint]:
        comps = point.components
        names = [c.name for c in comps]
        head = names[0]
        if len(comps) == 1 and head in ("begin", "end", "error", "never"):
            arg = comps[0].arg
            if arg is not None and (head == "never" or not isinstance(arg, int)):
                raise _pp_error(point, f"probe point '{head}' takes no argument"
                                if head == "never" else f"'{head}' takes a numeric priority")
            return [ResolvedPoint(point, head, priority=arg if isinstance(arg, int) else 0)]
        if head == "timer":
            return [self._timer(point)]
        if head == "process":
            return self._process(point)
        known = ["begin", "end", "error", "never", "timer", "process"]
        close = difflib.get_close_matches(head, known, n=3)
        raise _pp_error(point, f"unknown probe point '{format_point(point)}'",
                        f"did you mean {', '.join(close)}?" if close else None)

    def _timer(self, point: ast.ProbePoint) -> ResolvedPoint:
        comps = point.components
        if len(comps) < 2:
            raise _pp_error(point, "timer probe needs a unit, e.g. timer.ms(100)")
        unit, value = comps[1].name, comps[1].arg
        if not isinstance(value, int) or value <= 0:
            raise _pp_error(point, f"timer.{unit}() needs a positive number")
        if unit in ("hz",):
            period = 1_000_000_000 // value
        elif unit in TIMER_UNITS_NS:
            period = value * TIMER_UNITS_NS[unit]
        else:
            raise _pp_error(point, f"unknown timer unit '{unit}'",
                            "use s, ms, us, ns or hz")
        rand = 0
        if len(comps) >= 3:
            if comps[2].name != "randomize" or not isinstance(comps[2].arg, int):
                raise _pp_error(point, f"unknown timer component '{comps[2].name}'")
            if unit == "hz":   # stap: a frequency has no randomize
                raise _pp_error(point, "timer.hz() cannot be randomized",
                                "randomize a period instead, e.g. timer.ms(N).randomize(M)")
            rand = comps[2].arg * (period // value if unit != "hz" else 1)
        if len(comps) > 3:
            raise _pp_error(point, f"unexpected component '{comps[3].name}'")
        return ResolvedPoint(point, "timer", period_ns=period, randomize_ns=rand)

    def _process(self, point: ast.ProbePoint) -> list[ResolvedPoint]:
        arg = point.components[0].arg
        if isinstance(arg, str) and _is_glob(arg):
            # A path glob names every ELF it matches; other files are skipped silently.
            binaries = self._glob_binaries(point, arg)
            return self._any_of(point, [_with_path(point, b) for b in binaries],
                                self._process, f"the {len(binaries)} ELF files '{arg}' names")
        return self._process_one(point)

    def _any_of(self, point: ast.ProbePoint, variants: list[ast.ProbePoint],
                resolve: Callable[[ast.ProbePoint], list[ResolvedPoint]],
                what: str) -> list[ResolvedPoint]:
        """The points a glob expanded to, each resolved; those that do not resolve are
        dropped (a glob means any), and none resolving is an error: the one variant's
        own, else "matches nothing in `what`"."""
        out: list[ResolvedPoint] = []
        misses: list[PydynError] = []
        for v in variants:
            try:
                out.extend(resolve(v))
            except PydynError as exc:
                misses.append(exc)
        if not out:
            if len(variants) == 1 and misses:
                raise misses[0]
            raise _pp_error(point, f"probe point '{format_point(point)}' matches nothing "
                            f"in {what}")
        return out

    def _glob_binaries(self, point: ast.ProbePoint, pattern: str) -> list[str]:
        found: list[str] = []
        for path in sorted(glob.glob(pattern)):
            if not os.path.isfile(path):
                continue
            try:
                real = get_elf_info(path).path
            except TargetError:
                continue
            if real not in found:
                found.append(real)
        if not found:
            raise _pp_error(point, f"process(\"{pattern}\"): no ELF file matches")
        return found

    def _process_one(self, point: ast.ProbePoint) -> list[ResolvedPoint]:
        comps = list(point.components)
        binary = self._binary(point, comps[0].arg) if comps[0].arg is not None or (
            len(comps) > 1 and comps[1].name in ("mark", "provider", "library")) else None
        rest = comps[1:]
        if not rest:
            raise _pp_error(point, "incomplete process probe point")
        if rest[0].name in ("begin", "end") and len(rest) == 1:
            return [ResolvedPoint(point, f"process_{rest[0].name}", object_path=binary)]
        if rest[0].name == "thread" and len(rest) == 2 and rest[1].name in ("begin", "end") \
                and rest[0].arg is None and rest[1].arg is None:
            return [ResolvedPoint(point, f"thread_{rest[1].name}", object_path=binary)]
        if binary is None:
            binary = self._binary(point, None)
        program = binary
        if rest[0].name == "library":
            lib = rest[0].arg
            if not isinstance(lib, str):
                raise _pp_error(point, "library() takes a name or path string")
            exe = self.resolution.objects.get(binary) or get_elf_info(binary)
            if _is_glob(lib) and "/" not in lib:
                return self._library_glob(point, exe, lib)
            try:
                binary = get_elf_info(find_library(lib, exe)).path
            except TargetError as exc:
                raise _pp_error(point, f"library(\"{lib}\"): {exc.reason}") from exc
            rest = rest[1:]
        provider = None
        if rest and rest[0].name == "provider":
            if not isinstance(rest[0].arg, str):
                raise _pp_error(point, "provider() takes a string")
            provider = rest[0].arg
            rest = rest[1:]
        # code probe points: .plt (elf/plt.py), .statement and .function().label
        # (elf/statements.py), .function (elf/functions.py)
        finder = None
        if rest and provider is None:
            if rest[0].name == "plt":
                finder = plt_sites
            elif rest[0].name == "statement":
                finder = statement_sites
            elif len(rest) == 2 and rest[0].name == "function" and rest[1].name == "label":
                finder = label_sites
            elif len(rest) == 2 and rest[0].name == "function" and rest[1].name == "inline":
                finder = inline_sites
            elif len(rest) >= 2 and rest[0].name == "function" and \
                    rest[1].name in ("callee", "callees"):
                finder = callee_sites
            elif rest[0].name == "function":
                finder = function_sites
        if finder is not None:
            self.resolution.objects.setdefault(binary, get_elf_info(binary))
            return [ResolvedPoint(point, "function", finder(point, binary, rest),
                                  object_path=binary, program=program)]
        if len(rest) != 1 or rest[0].name != "mark" or not isinstance(rest[0].arg, str):
            raise _pp_error(point, f"unsupported process probe point '{format_point(point)}'",
                            "supported: process(\"PATH\").mark(\"NAME\"), .provider(\"P\"), "
                            ".library(\"LIB\"), .function(\"NAME\")[.return|.label(\"L\")], "
                            ".statement(\"FUNC@FILE:LINE\"), .plt(\"NAME\"), .begin, .end, "
                            ".thread.begin, .thread.end (docs/probe-points.md)")
        return [ResolvedPoint(point, "mark", self._marks(point, binary, provider, rest[0].arg),
                              object_path=binary, program=program)]

    def _library_glob(self, point: ast.ProbePoint, exe: ElfInfo,
                      pattern: str) -> list[ResolvedPoint]:
        """`.library("GLOB")`: each library the program loads (what `ld.so --list`
        shows) whose path matches "*GLOB", as stap's query_one_library matches them;
        as with a process("GLOB"), those where the rest of the point resolves."""
        loaded = [lib.path for lib, _ in iter_needed_libraries([exe])]
        libs = [path for path in loaded if fnmatch.fnmatchcase(path, "*" + pattern)]
        if not libs:
            names = ", ".join(os.path.basename(path) for path in loaded)
            raise _pp_error(point, f"library(\"{pattern}\") matches none of the "
                            f"{len(loaded)} libraries {exe.path} loads",
                            f"it loads {names}" if names else None)
        at = next(i for i, c in enumerate(point.components) if c.name == "library")
        variants = [dataclasses.replace(point, components=(
            *point.components[:at], dataclasses.replace(point.components[at], arg=path),
            *point.components[at + 1:])) for path in libs]
        return self._any_of(point, variants, self._process_one,
                            f"the {len(libs)} libraries of {exe.path} that "
                            f"library(\"{pattern}\") names")

    def _marks(self, point: ast.ProbePoint, binary: str, provider: str | None,
               pattern: str) -> tuple[ProbeSite, ...]:
        try:
            scan = self._scan(binary)
        except TargetError as exc:
            raise _pp_error(point, str(exc)) from exc
        # stap: a '-' in a mark name stands for the '__' that dtrace -h makes of it.
        name_pat = pattern.replace("-", "__")
        sites = tuple(s for s in scan.sites
                      if fnmatch.fnmatchcase(s.name, name_pat)
                      and (provider is None or fnmatch.fnmatchcase(s.provider, provider)))
        if not sites:
            names = sorted({s.name for s in scan.sites})
            close = difflib.get_close_matches(name_pat, names, n=3)
            hint = (f"did you mean {', '.join(close)}?" if close else
                    f"{binary} has marks: {', '.join(names[:10])}" if names else
                    f"{binary} has no usable USDT marks")
            raise _pp_error(point, f"probe point '{format_point(point)}' matches no mark", hint)
        return sites
