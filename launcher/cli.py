"""pydyn's command line: the pipeline parse → resolve → translate → build → run.

Errors of every pass are PydynErrors; they are rendered here, once, and the
exit status is 1.  Nothing below main() prints a traceback for bad input.
"""

from __future__ import annotations

import argparse
import os
import signal
import sys
import threading
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from .errors import PydynError, ScriptError, ScriptWarning, say

if TYPE_CHECKING:
    from .build import ModuleSet
    from .cache import Lookup, ModuleCache
    from .output import OutputSink
    from .translate import Program

CACHE_ENV = "PYDYN_CACHE_DIR"
TAPSET_ENV = "SYSTEMTAP_TAPSET"

EXAMPLES = """\
examples:
  pydyn -e 'global n probe process("./app").mark("tick") { n++ }
            probe end { printf("%d\\n", n) }' -c ./app
  pydyn script.stp -c './server 4'        run a script on a command and its children
  pydyn script.stp -x 1234 -T 10          attach to pid 1234 for 10 seconds, then detach
  pydyn -l 'process("/usr/bin/python3.11").mark("*")'      list probe points
  pydyn -L 'process("/usr/lib/*/libpython*.so*").mark("function__entry")'
  pydyn --json script.stp -c ./app        newline-delimited JSON records
  pydyn -p3 script.stp                    print the generated C
"""


class _VersionAction(argparse.Action):
    # importlib.metadata costs an import: only when asked.
    def __call__(self, parser: argparse.ArgumentParser, namespace: argparse.Namespace,
                 values: object, option_string: str | None = None) -> None:
        print(f"pydyn {version()}")
        parser.exit()


def version() -> str:
    from importlib.metadata import PackageNotFoundError, version
    try:
        return version("pydyn")
    except PackageNotFoundError:
        return "unknown (not installed)"


class _HelpFormatter(argparse.RawDescriptionHelpFormatter):
    # argparse makes a formatter per add_argument, and without a width each imports
    # shutil (bz2, lzma: ~4 ms of every run) to ask the terminal.
    def __init__(self, prog: str) -> None:
        super().__init__(prog, width=_help_width())


def _help_width() -> int:
    """shutil.get_terminal_size's answer, less argparse's margin of 2."""
    try:
        return int(os.environ["COLUMNS"]) - 2
    except (KeyError, ValueError):
        pass
    out = sys.__stdout__
    try:
        return os.get_terminal_size(out.fileno()).columns - 2 if out else 78
    except (ValueError, OSError):   # not a terminal
        return 78


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="pydyn",
        description="SystemTap-style dynamic instrumentation for 64-bit and 32-bit processes.",
        epilog=EXAMPLES, formatter_class=_HelpFormatter,
    )
    p.add_argument("--version", action=_VersionAction, nargs=0, help="print the version")
    p.add_argument("script", nargs="?", help="script file ('-' for stdin)")
    p.add_argument("-l", dest="list_point", action="store_true",
                   help="list the probe points the first argument matches (wildcards allowed)")
    p.add_argument("-L", dest="list_vars", action="store_true",
                   help="as -l, with context variables; -L -v adds arg specs and PCs")
    p.add_argument("--json", action="store_true",
                   help="newline-delimited JSON records on stdout (see README)")
    p.add_argument("--color", choices=("auto", "always", "never"), default="auto",
                   help="colour diagnostics: auto (on a tty, default), always, never")
    p.add_argument("args", nargs="*", help="script arguments ($1, @1, ...)")
    p.add_argument("-e", dest="program", metavar="SCRIPT", action="append",
                   help="run SCRIPT given inline")
    p.add_argument("-c", dest="command", metavar="CMD", help="start CMD and probe it")
    p.add_argument("-x", dest="attach_pid", metavar="PID", type=int, action="append",
                   help="attach to the running process PID (target() is PID; one -x)")
    p.add_argument("-T", dest="timeout", metavar="SECS", type=float,
                   help="end the session after SECS seconds")
    p.add_argument("-p", dest="pass_", metavar="N", type=int, choices=range(1, 6),
                   help="stop after pass N and print its result, as stap does: 1 the "
                        "parse tree as script text, 2 the resolved, typed script, 3 the C, "
                        "4 the modules' paths")
    p.add_argument("-v", dest="verbose", action="count", default=0, help="more output")
    p.add_argument("-D", dest="defines", action="append", default=[], metavar="NAME=VALUE",
                   help="set a limit such as MAXACTION=10000")
    p.add_argument("-g", dest="guru", action="store_true",
                   help="guru mode: allow embedded C (%%{ %%}) and set_user_* writes")
    p.add_argument("--skip-badvars", action="store_true",
                   help="read a target variable that cannot be read where it is probed "
                        "as 0 (with a warning), instead of an error")
    p.add_argument("--probe-mode", choices=("auto", "trap"), default="auto",
                   help="auto: trampolines where the patch plan allows (default); trap: int3 only")
    p.add_argument("--cache-dir", help=f"module cache (default ${CACHE_ENV} or ~/.cache/pydyn)")
    p.add_argument("--disable-cache", action="store_true",
                   help="build in a temporary directory; neither read nor write the cache")
    p.add_argument("--clean-cache", action="store_true",
                   help="remove every cache entry not in use (then run the script, if any)")
    p.add_argument("--cache-size", type=float, default=256, metavar="MiB",
                   help="cache size limit; least recently used entries go first (default 256)")
    p.add_argument("-s", dest="bufsize", type=int, default=4, metavar="MiB",
                   help="output ring size in MiB (power of two)")
    p.add_argument("-o", dest="output", metavar="FILE",
                   help="write the probes' output to FILE instead of stdout")
    p.add_argument("-G", dest="set_globals", action="append", default=[], metavar="NAME=VALUE",
                   help="initial value of global NAME (a number or a string)")
    p.add_argument("-w", dest="no_warnings", action="store_true",
                   help="suppress warnings (the script's warn() too: counted, not printed)")
    p.add_argument("-W", dest="werror", action="store_true",
                   help="treat warnings as errors: the first one is the error, exit 1 "
                        "(with -w there are none, as in stap)")
    p.add_argument("--suppress-time-limits", action="store_true",
                   help="no MAXACTION limit on a handler's statements (needs -g)")
    p.add_argument("--suppress-handler-errors", action="store_true",
                   help="an error ends only its handler, never the session (each is still "
                        "printed and counted)")
    # SystemTap's options are taken so a stap command line runs as it is; those that
    # mean nothing different for pydyn say so in their help.
    compat = p.add_argument_group("accepted for SystemTap compatibility")
    compat.add_argument("--runtime", choices=("dyninst",), default="dyninst",
                        help="only dyninst: pydyn runs in user space")
    compat.add_argument("--dyninst", dest="runtime", action="store_const", const="dyninst",
                        help="same as --runtime=dyninst")
    compat.add_argument("-u", dest="unoptimized", action="store_true",
                        help="unoptimized: keep functions no probe calls (compiled, typed) "
                             "and probes whose body is empty (armed)")
    compat.add_argument("-b", dest="bulk", action="store_true",
                        help="bulk mode: taken, the output has one ring anyway")
    compat.add_argument("-m", dest="module_name", metavar="NAME",
                        help="module name: checked, not used (modules are named by their key)")
    compat.add_argument("--compatible", metavar="VERSION",
                        help="the version `%%( systemtap_v ... %%)` compares against")
    compat.add_argument("--prologue-searching", nargs="?", const="always",
                        choices=("auto", "always", "never"),
                        help="taken; function probes are at the entry as the patch plan has it")
    compat.add_argument("-I", dest="tapset_dirs", action="append", default=[], metavar="DIR",
                        help="tapset directory: its .stp files are parsed, the functions, "
                             "globals and probe aliases a script uses taken; the macros of "
                             "its .stpm files may be invoked; $SYSTEMTAP_TAPSET names one "
                             "more, read before the -I ones")
    compat.add_argument("-t", dest="timing", action="store_true",
                        help="taken; probe timing is not collected (as stap's -t, no "
                             "warning for an elided probe)")
    compat.add_argument("-k", dest="keep_tmp", action="store_true",
                        help="taken; builds are kept in the cache anyway")
    compat.add_argument("-q", dest="quiet", action="store_true", help="taken; no effect")
    compat.add_argument("-d", dest="symbol_modules", action="append", default=[],
                        metavar="MODULE",
                        help="add the symbols and unwind data of the ELF file MODULE (a library "
                             "or program with no probe) for backtraces and symbol names")
    compat.add_argument("--ldd", action="store_true",
                        help="add the symbols and unwind data of every library the probed and -d "
                             "objects need, as ld.so finds them")
    return p


def cache_dir(option: str | None) -> Path:
    if option:
        return Path(option)
    if os.environ.get(CACHE_ENV):
        return Path(os.environ[CACHE_ENV])
    base = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(base) / "pydyn"


def _check_options(opts: argparse.Namespace) -> None:
    """What stap refuses before it parses, refused as early (-p1 included)."""
    import re
    if opts.command and opts.attach_pid is not None:
        raise PydynError("-c and -x exclude each other: start a command or attach to one")
    ring = opts.bufsize << 20
    if ring <= 0 or ring & (ring - 1):
        raise PydynError(f"-s {opts.bufsize}: the ring size must be a power of two MiB")
    if opts.module_name is not None and not re.fullmatch(r"[A-Za-z0-9_]+", opts.module_name):
        raise PydynError(f"-m {opts.module_name!r}: a module name is letters, digits and '_'")
    if opts.compatible is not None and not re.fullmatch(r"\d+(\.\d+)*", opts.compatible):
        raise PydynError(f"--compatible={opts.compatible}: expected a version such as 4.0")
    tmpdir = os.environ.get("TMPDIR")
    if tmpdir and not os.path.isdir(tmpdir):
        raise PydynError(f"TMPDIR={tmpdir}: not a directory (builds need a temporary "
                         "directory)")
    for d in opts.tapset_dirs:
        if not os.path.isdir(d):
            raise PydynError(f"-I {d}: not a directory")
    if opts.suppress_time_limits and not opts.guru:
        raise PydynError("--suppress-time-limits requires guru mode (-g)")


def _include_path(opts: argparse.Namespace) -> list[str]:
    """stap's include path: the directory $SYSTEMTAP_TAPSET names (in place of stap's
    own tapset directory; pydyn's built-in tapset stays), then each -I DIR.  As in
    stap, the variable names one directory and one that is not there adds nothing."""
    env = os.environ.get(TAPSET_ENV)
    return [*([env] if env and os.path.isdir(env) else []), *opts.tapset_dirs]


def _tapsets(dirs: Sequence[str], suffix: str = ".stp") -> list[tuple[str, str]]:
    """Every .stp (or macro library, .stpm) under each include directory (sorted), as
    (text, path).  As stap does, a file seen already (the same file, or the same path
    below an earlier directory) is read once: the earlier directory's wins."""
    out = []
    seen: set[tuple[int, int] | str] = set()
    for d in dirs:
        for path in sorted(Path(d).rglob("*" + suffix)):
            try:
                st = path.stat()
                tail = str(path.relative_to(d))
                if (st.st_dev, st.st_ino) in seen or tail in seen:
                    continue
                seen.update(((st.st_dev, st.st_ino), tail))
                out.append((path.read_text(errors="surrogateescape"), str(path)))
            except OSError as exc:
                raise PydynError(f"tapset directory {d}: cannot read {path}: "
                                 f"{exc.strerror}") from exc
    return out


def _write_out(text: str) -> None:
    """Script text on stdout, its undecodable bytes (kept as lone surrogates) as read."""
    sys.stdout.flush()
    sys.stdout.buffer.write(text.encode("utf-8", "surrogateescape"))
    sys.stdout.buffer.flush()


def _read_script(opts: argparse.Namespace) -> tuple[str, str]:
    if opts.program is not None:
        if len(opts.program) > 1:
            raise PydynError("-e given more than once: one script a run")
        opts.program = opts.program[0]
        if opts.script is not None:
            opts.args.insert(0, opts.script)
        return opts.program, "<input>"
    if opts.script is None:
        raise PydynError("no script given: pydyn SCRIPT [-c CMD] or pydyn -e 'probe ...'")
    if opts.script == "-":
        return sys.stdin.read(), "<stdin>"
    try:
        return Path(opts.script).read_text(errors="surrogateescape"), opts.script
    except OSError as exc:
        raise PydynError(f"cannot read script {opts.script}: {exc.strerror}") from exc


_LIMITS = {"MAXSTRINGLEN", "MAXMAPENTRIES", "MAXACTION", "MAXNESTING", "MAXERRORS",
           "MAXSKIPPED", "PD_FORCE_TRAPS", "PD_TRAMP_SAVE_XMM", "PD_PRIVATE_STACK",
           "PD_RETURN_HIJACK", "STUCK_CONTEXT_MS", "MAXACTION_INTERRUPTIBLE", "HIST_WIDTH"}


_NO_LIMIT = 1 << 62   # a statement budget no handler reaches


def _check_defines(defines: Sequence[str]) -> list[str]:
    """pydyn's limits must be numbers; any other NAME[=VALUE] goes to the C compiler as
    stap passes it (a script's embedded C may test it)."""
    out = []
    for d in defines:
        name, eq, value = d.partition("=")
        if not name.isidentifier() or not name.isascii():
            raise PydynError(f"-D {d}: expected NAME or NAME=VALUE (a C macro name)")
        if name in _LIMITS and not value.isdigit():
            raise PydynError(f"-D {d}: {name} takes a number, e.g. -D {name}=1000 "
                             f"(limits: {', '.join(sorted(_LIMITS))})")
        if not eq:
            d = f"{name}=1"
        if name == "MAXSTRINGLEN":
            if not 16 <= int(value) <= 65536:
                raise PydynError(f"-D {d}: MAXSTRINGLEN must be between 16 and 65536")
            # string slots in the segment stay 8-aligned on every ABI
            d = f"MAXSTRINGLEN={(int(value) + 7) & ~7}"
        out.append(d)
    return out


def _say_plans(opts: argparse.Namespace, lines: Sequence[str]) -> None:
    """-v: the coverage and `returns of F: HOW` lines, each function's returns as the
    runtime reaches them: the hijack, whatever the plan, where no exit gets a stub
    (--probe-mode=trap, -D PD_FORCE_TRAPS=1) and in a process -x attaches to (a thread
    may be inside the function already: runtime/pd_func.c pd_ret_choose)."""
    forced = [d for d in opts.defines if d.partition("=")[0].strip() == "PD_FORCE_TRAPS"
              and d.partition("=")[2].strip() != "0"]
    why = ""
    if opts.probe_mode == "trap":
        why = "--probe-mode=trap"
    elif forced:
        why = f"-D {forced[-1]}"
    elif opts.attach_pid is not None:
        why = f"-x {opts.attach_pid} attaches to a running process"
    for line in lines:
        head, _, how = line.partition(": ")
        if why and head.startswith("returns of ") and how.startswith("exits patched"):
            line = f"{head}: hijack: {why} (the plan: {how})"
        say(line)


def _warning(opts: argparse.Namespace, line: ScriptWarning | str) -> None:
    """A translation warning: printed, dropped with -w, an error with -W (stap's
    -w and -W: with -w stap gives no warning, so -W has none to turn into an error); a
    script's warning is printed in stap's shape, with its source line."""
    if opts.no_warnings:
        return
    if opts.werror:
        if isinstance(line, ScriptWarning):
            raise ScriptError(line.message, line.location, "-W makes warnings errors")
        raise PydynError(f"{line.removeprefix('pydyn: warning: ')} (a warning; -W makes "
                         "warnings errors)")
    say(line.render(_use_color([f"--color={opts.color}"]))
        if isinstance(line, ScriptWarning) else line)


def _set_globals(script: Any, assigns: Sequence[str]) -> Any:
    """-G NAME=VALUE: NAME's initial value, a number if VALUE reads as one, else a string."""
    import dataclasses
    import re

    from .errors import SourceLocation
    from .script import ast
    values: dict[str, ast.NumberLiteral | ast.StringLiteral] = {}
    for a in assigns:
        name, eq, value = a.partition("=")
        if not eq or not name.isidentifier():
            raise PydynError(f"-G {a}: expected NAME=VALUE")
        loc = SourceLocation("<-G>", 1, 1, a)
        if re.fullmatch(r"-?(0x[0-9a-fA-F]+|0[0-7]*|[1-9][0-9]*)", value):
            values[name] = ast.NumberLiteral(int(value, 0), loc)
        else:
            values[name] = ast.StringLiteral(value.replace("\\", "\\\\").replace('"', '\\"'),
                                             loc)
    known = {g.name for g in script.globals}
    for name in values:
        if name not in known:
            raise PydynError(f"-G {name}=...: the script has no global '{name}'")
    globs = tuple(dataclasses.replace(g, init=values[g.name]) if g.name in values else g
                  for g in script.globals)
    return dataclasses.replace(script, globals=globs)


class _Progress:
    """One progress line on a tty stderr for work that outlasts `delay` seconds;
    erased when the work ends.  Nothing at all when stderr is not a tty."""

    def __init__(self, line: str, delay: float = 0.5) -> None:
        self.line = line
        self.delay = delay
        self.shown = False
        self._lock = threading.Lock()
        self._timer: threading.Timer | None = None

    def _show(self) -> None:
        with self._lock:
            if self._timer is not None:
                sys.stderr.write(self.line)
                sys.stderr.flush()
                self.shown = True

    def __enter__(self) -> _Progress:
        if sys.stderr.isatty():
            self._timer = threading.Timer(self.delay, self._show)
            self._timer.daemon = True
            self._timer.start()
        return self

    def __exit__(self, *exc: object) -> None:
        with self._lock:
            if self._timer is not None:
                self._timer.cancel()
                self._timer = None
            if self.shown:
                sys.stderr.write("\r\033[K")   # the line goes once the work is done
                sys.stderr.flush()


def _compile(opts: argparse.Namespace, script: Any, defines: list[str],
             argv_cmd: list[str] | None, target_path: str | None, cache: ModuleCache | None,
             lookup: Lookup | None, step: Callable[[int, str, float], None],
             parse_warnings: Sequence[str] = (), parsed_files: Sequence[Any] = ()
             ) -> tuple[Program, ModuleSet] | None:
    """Passes 2-4 when the cache has no entry: resolve, translate, build (None after -p2/-p3).
    `parsed_files`: each file's declarations as written (-p2 names the probes so)."""
    from .build import runtime_digest
    from .cache import build_private
    from .elf.functions import FunctionSite
    from .plan import coverage, describe_returns, plan_sites
    from .resolve import Resolver
    from .script import recursion_headroom
    from .session import check_command_target
    from .translate import elide_probes, translate
    from .translate.defined import split_by_defined

    verbose = opts.verbose
    if argv_cmd is not None:
        check_command_target(argv_cmd)
        if cache is not None:
            from .build import which
            cache.remember_target(target_path or which(argv_cmd[0]) or argv_cmd[0])
    # replayed on a cache hit; pass 1's (tapsets skipped) were given already
    warnings: list[ScriptWarning | str] = list(parse_warnings)

    def warn(message: str) -> None:
        report(f"pydyn: warning: {message}")

    def report(warning: ScriptWarning | str) -> None:
        warnings.append(warning)
        _warning(opts, warning)

    t0 = time.monotonic()
    script, resolution = Resolver(target_path, warn=warn).resolve_script(script)
    script, resolution = split_by_defined(script, resolution)
    if verbose:
        for line in resolution.dropped:
            say(line)
    pass2: list[ScriptWarning | str] = []
    gone = False
    if not opts.unoptimized:
        with recursion_headroom():   # the optimiser walks trees as deep as the parser allows
            script, resolution, pass2, gone = elide_probes(script, resolution,
                                                           timing=opts.timing)
    if not script.probes:
        # stap's end of pass 2 with nothing to arm: an error, not a session that waits
        for w in pass2:
            report(w)
        raise ScriptError("no probes found", None,
                          "every probe's body is empty, and empty probes are elided "
                          "(-u keeps them)" if gone else None)
    from .elf.libraries import symbol_objects
    symbols = symbol_objects(opts.symbol_modules, resolution.objects.values(), opts.ldd, warn)
    step(2, f"resolved {sum(1 for _ in resolution.iter_sites())} probe site(s)", t0)
    define_map = dict(d.split("=", 1) for d in defines)
    if opts.pass_ == 2:
        # stap's pass 2 elaborates: types are inferred and checked, so a script with a
        # semantic error fails here, not only at -p3 (the C made for that is dropped).
        # The plans printed are those the translation used (planning claims bytes of
        # the object: a second plan of one site would see them taken).
        from .elaborated import iter_elaborated
        typed: list[Any] = []
        with recursion_headroom():
            plans = plan_sites(script, resolution, define_map)
            translate(script, resolution, plans, defines=define_map, runtime=b"",
                      warn=report, optimize=not opts.unoptimized,
                      skip_badvars=opts.skip_badvars, symbols=symbols, pass2=pass2,
                      typed=lambda s, t: typed.extend((s, t)))

            def site_lines(site: Any) -> list[str]:
                if not isinstance(site, FunctionSite):
                    return [f"    plan: {plans.mark(site)}"]
                fplan = plans.function(site)
                lines = [f"    plan: {fplan.entry}"]
                if site.is_return and fplan.returns is not None:
                    lines.append(f"    returns: {describe_returns(fplan.returns)}")
                return lines

            written = {p.loc: p for f in parsed_files for p in f.probes}
            _write_out("".join(line + "\n" for line in iter_elaborated(
                typed[0], resolution, typed[1], written=written, site_lines=site_lines,
                verbose=verbose)))
        return None
    t0 = time.monotonic()
    with recursion_headroom():   # the passes walk trees as deep as the parser allows
        plans = plan_sites(script, resolution, define_map)
        program = translate(script, resolution, plans, defines=define_map,
                            runtime=runtime_digest(), warn=report,
                            optimize=not opts.unoptimized, skip_badvars=opts.skip_badvars,
                            symbols=symbols, pass2=pass2)
    step(3, "translated to C", t0)
    verbose_lines = [coverage(program.plans),
                     *(f"returns of {f}: {how}" for f, how in program.return_plans)]
    if verbose:
        _say_plans(opts, verbose_lines)
    if opts.pass_ == 3:
        sys.stdout.write(program.c_source)
        return None
    if program.build_error is not None:
        raise program.build_error
    required = set(program.required_abis) | {"m64"}
    if target_path is not None:
        from .session import target_abi
        abi = target_abi(target_path)   # the program headers: a kernel runs no more
        if abi is not None:
            required.add(abi)
    t0 = time.monotonic()
    arches = ", ".join(sorted(required, reverse=True))
    with _Progress(f"pydyn: compiling {len(program.sites)} probe site(s) into {arches} "
                   "modules ..."):
        if cache is not None:
            # the target only if a probe resolved in it; -d and --ldd objects
            deps = [*resolution.objects, *(path for path, _abi in symbols)]
            modules = cache.build(lookup, deps, program, required, defines, warnings,
                                  verbose_lines, keep=opts.pass_ == 4)
        else:
            modules = build_private(program, required, defines, keep=opts.pass_ == 4)
    built = ", ".join(sorted(modules.modules, reverse=True))
    step(4, f"using cached {built} modules" if modules.from_cache
         else f"compiled {built} modules", t0)
    return program, modules


def run(argv: Sequence[str]) -> int:
    from .build import which
    from .cache import NO_ELF_ENV, forbid_elf_parsing, open_cache
    from .session import (
        Session,
        SessionOptions,
        check_command_target,
        read_exec_header,
        split_command,
    )

    opts = _parser().parse_intermixed_args(argv)
    if opts.attach_pid is not None:
        if len(opts.attach_pid) > 1:
            pids = ", ".join(str(p) for p in opts.attach_pid)
            raise PydynError(f"-x given {len(opts.attach_pid)} times ({pids}): a session "
                             "attaches to one process (run one pydyn per process)")
        opts.attach_pid = opts.attach_pid[0]
    if os.environ.get(NO_ELF_ENV):
        forbid_elf_parsing()
    if opts.clean_cache:
        cleaner = open_cache(cache_dir(opts.cache_dir), opts.cache_size)
        if cleaner is not None:
            removed, busy = cleaner.clean()
            say(f"pydyn: cache {cleaner.root}: removed {removed} entr"
                f"{'y' if removed == 1 else 'ies'}" + (f", {busy} in use kept" if busy else ""))
        if opts.script is None and opts.program is None:
            return 0
    if opts.list_point or opts.list_vars:
        from .listing import list_probes
        if opts.attach_pid is not None:
            raise PydynError(f"-l/-L list the probe points of files, not of a process: name "
                             f"its program instead of -x {opts.attach_pid}, e.g. pydyn -l "
                             f"'process(\"/proc/{opts.attach_pid}/exe\").mark(\"*\")'")
        pattern = opts.program[-1] if opts.program is not None else opts.script
        if pattern is None:
            raise PydynError("-l/-L need a probe point, e.g. pydyn -l 'process(\"PATH\")"
                             ".mark(\"*\")'")
        target = None
        if opts.command:
            cmd0 = split_command(opts.command)[0]
            exe = cmd0 if "/" in cmd0 else which(cmd0)
            target = os.path.realpath(exe) if exe else None
        for line in list_probes(pattern, with_vars=opts.list_vars,
                                verbose=opts.verbose, target_path=target):
            print(line)
        return 0
    _check_options(opts)
    if opts.skip_badvars:
        opts.defines.append("STP_SKIP_BADVARS=1")
    if opts.suppress_handler_errors and not any(d.startswith("MAXERRORS=")
                                                for d in opts.defines):
        # errors then never end the session: the exit's WARNING still counts them
        opts.defines.append("MAXERRORS=1000000000")
    if opts.suppress_time_limits:
        # as stap's STAP_SUPPRESS_TIME_LIMITS_ENABLE: handlers count no statements
        opts.defines = [d for d in opts.defines if not d.startswith("MAXACTION")]
        opts.defines += [f"MAXACTION={_NO_LIMIT}", f"MAXACTION_INTERRUPTIBLE={_NO_LIMIT}"]
    defines = _check_defines(opts.defines)
    # The same module either way: the runtime reads the mode when it arms (inherited
    # by every process of the session); -D PD_FORCE_TRAPS=1 compiles the choice in.
    os.environ["PYDYN_PROBE_MODE"] = opts.probe_mode
    text, filename = _read_script(opts)
    verbose = opts.verbose

    def step(n: int, what: str, start: float) -> None:
        if verbose:
            ms = (time.monotonic() - start) * 1000
            say(f"Pass {n}: {what} in {ms:.0f}ms")

    parse_warnings: list[str] = []   # kept with the modules: replayed on a cache hit
    include_path = _include_path(opts)
    parsed_files: list[Any] = []     # each file's declarations as written (-p1 prints them)

    def library_warning(msg: str) -> None:
        """A tapset or macro library skipped: a warning (-w: none; -W: the error)."""
        parse_warnings.append(f"pydyn: warning: {msg}")
        _warning(opts, parse_warnings[-1])

    def parse() -> Any:
        # Only on a cache miss: the parser and the AST cost ~100 ms of imports alone.
        from .script import parse_script
        t0 = time.monotonic()
        script = parse_script(text, filename, args=opts.args, arch=os.uname().machine,
                              guru=opts.guru, compatible=opts.compatible,
                              library=_tapsets(include_path),
                              macro_files=_tapsets(include_path, ".stpm"),
                              warn=library_warning, on_file=parsed_files.append,
                              elaborate=opts.pass_ != 1)
        if opts.set_globals:
            script = _set_globals(script, opts.set_globals)
        if not opts.unoptimized:
            from .script.elide import elide_unused_functions
            script = elide_unused_functions(script)
        step(1, "parsed user script", t0)
        return script

    if opts.pass_ == 1:
        parse()
        from .script import recursion_headroom
        from .script.unparse import parse_tree_dump
        # stap's parse tree dump: the script's file, with -v the tapsets' too
        with recursion_headroom():
            dump = parse_tree_dump([parsed_files[-1], *(parsed_files[:-1] if verbose else ())])
        _write_out(dump)
        return 0
    target_path = None
    argv_cmd = None
    if opts.attach_pid is not None:
        if opts.command:
            raise PydynError("-c and -x exclude each other: start a command or attach to one")
        from .attach import inspect
        exe = inspect(opts.attach_pid).exe
        # the running image when its file was replaced or deleted since it started
        target_path = exe if os.path.isfile(exe) else f"/proc/{opts.attach_pid}/exe"
    if opts.timeout is not None and opts.timeout <= 0:
        raise PydynError(f"-T {opts.timeout:g}: the timeout must be a positive number of seconds")
    if opts.command:
        argv_cmd = split_command(opts.command)
        exe = argv_cmd[0] if "/" in argv_cmd[0] else which(argv_cmd[0])
        # A script (or a file sh runs) is no target to resolve marks in: its
        # interpreter is, and loads the module like any other process.
        if exe and argv_cmd[0] != "/bin/sh" and read_exec_header(exe) is not None:
            target_path = os.path.realpath(exe)
    # A cache hit (key from cheap facts: launcher/cache.py) skips resolve, translate and build.
    cache = None
    facts_root: Path | None = None
    if not opts.disable_cache and (opts.pass_ is None or opts.pass_ >= 4):
        cache = open_cache(cache_dir(opts.cache_dir), opts.cache_size)
    elif not opts.disable_cache:   # -p2/-p3 plan sites too: the binaries' facts are shared
        cache = open_cache(cache_dir(opts.cache_dir), opts.cache_size)
        facts_root = cache.root if cache is not None else None
        cache = None
    t0 = time.monotonic()
    lookup, hit = cache.lookup_text(text, filename, opts.args, defines,
                                    target_path, guru=opts.guru,
                                    extra=[*(("global -G", g) for g in opts.set_globals),
                                           *((("--compatible", opts.compatible),)
                                             if opts.compatible else ()),
                                           *((("-u", "1"),) if opts.unoptimized else ()),
                                           # -t: the same module, without the warnings
                                           # of elided probes to replay
                                           *((("-t", "1"),) if opts.timing else ()),
                                           *(("-d", os.path.realpath(d))
                                             for d in opts.symbol_modules),
                                           *((("--ldd", "1"),) if opts.ldd else ()),
                                           *(("tapset -I", f"{p}\0{t}")
                                             for t, p in _tapsets(include_path)),
                                           *(("macros -I", f"{p}\0{t}")
                                             for t, p in _tapsets(include_path, ".stpm"))],
                                    ) if cache else (None, None)
    if hit is not None and cache is not None and argv_cmd is not None:
        # the modules do not depend on the -c program; what the session needs of it
        # (it can take the preload; its ABI's module exists) is checked here
        from .session import target_abi
        exe_path = target_path or which(argv_cmd[0]) or argv_cmd[0]
        if not cache.target_checked(exe_path):
            check_command_target(argv_cmd)
            cache.remember_target(exe_path)
        abi = target_abi(target_path) if target_path else None
        if abi is not None and abi not in hit.modules.modules:
            hit = None     # built without that ABI: build it now (store keeps the rest)
    if hit is not None:
        step(1, "using the cached entry of this script", t0)
        for warning in hit.warnings:
            _warning(opts, warning)
        step(2, f"using cached probe sites ({hit.site_count} probe site(s))", t0)
        step(3, "using cached C source", time.monotonic())
        if verbose:
            _say_plans(opts, hit.verbose_lines)
        program, modules = hit.program, hit.modules
        built = ", ".join(sorted(modules.modules, reverse=True))
        step(4, f"using cached {built} modules", time.monotonic())
    else:
        script = parse()
        if lookup is not None:
            lookup.bind_script(script)
        if cache is not None:
            facts_root = cache.root
        from .factstore import set_cache_root
        set_cache_root(facts_root)
        compiled = _compile(opts, script, defines, argv_cmd, target_path, cache, lookup, step,
                            parse_warnings, parsed_files)
        if compiled is None:
            return 0   # -p2, -p3
        program, modules = compiled
    if opts.pass_ == 4:
        for abi in ("m64", "m32"):
            path = modules.get_module(abi)
            if path is not None:
                print(path)
        return 0
    ring = opts.bufsize << 20
    if ring & (ring - 1) or ring <= 0:
        raise PydynError(f"-s {opts.bufsize}: the ring size must be a power of two MiB")
    stream = None
    if opts.output:
        try:
            stream = open(opts.output, "wb")  # noqa: SIM115 - open for the whole session
        except OSError as exc:
            raise PydynError(f"{opts.output}: cannot write the output there: "
                             f"{exc.strerror or exc}") from None
    sink: OutputSink | None = None
    if opts.json:
        from .jsonout import JsonSink
        sink = JsonSink(program.formats, program.report, version(),
                        **({"stdout": stream} if stream else {}))
    elif stream:
        from .output import OutputSink as Sink  # lazily: start-up time
        sink = Sink(program.formats, stdout=stream)
    session = Session(program, modules, SessionOptions(command=opts.command, ring_size=ring,
                                                        verbose=verbose, target_checked=True,
                                                        attach_pid=opts.attach_pid,
                                                        timeout=opts.timeout,
                                                        no_warnings=opts.no_warnings),
                      sink=sink)
    try:
        result = session.run()
    finally:
        if stream:
            try:
                stream.close()
            except BrokenPipeError:   # -o /dev/stdout and the like
                pass
    if result.consumer_gone:
        raise BrokenPipeError
    return result.exit_status


def _use_color(argv: Sequence[str]) -> bool:
    """--color=auto|always|never (the last one given); auto: stderr is a tty and
    $NO_COLOR is unset."""
    choice = "auto"
    for i, a in enumerate(argv):
        if a == "--":
            break
        if a.startswith("--color="):
            choice = a.split("=", 1)[1]
        elif a == "--color" and i + 1 < len(argv):
            choice = argv[i + 1]
    if choice == "always":
        return True
    if choice == "never":
        return False
    return sys.stderr.isatty() and not os.environ.get("NO_COLOR")


def _interrupt(signum: int, frame: object) -> None:
    # SIGTERM/SIGHUP end the session the same orderly way as Ctrl-C.
    raise KeyboardInterrupt


def _ignore(signum: int, frame: object) -> None:
    """SIGUSR2 is staprun's "switch output file" (-S), which pydyn has not: noted and
    ignored, as staprun ignores it without -S, so a kill or a guru raise() in a begin
    probe does not end the session.  A handler, not SIG_IGN, which a -c command would
    inherit."""


def _die_of_sigpipe() -> int:
    """The reader of our output went away: end as a tool killed by SIGPIPE does (the
    shell sees 141, `set -o pipefail` reports it; no message, no traceback), after
    the exit handlers (temporary build directories) ran."""
    import atexit
    try:
        devnull = os.open(os.devnull, os.O_WRONLY)
        for stream in (sys.stdout, sys.stderr):   # their buffers flush at exit
            os.dup2(devnull, stream.fileno())
    except (OSError, ValueError):
        pass
    atexit._run_exitfuncs()
    signal.signal(signal.SIGPIPE, signal.SIG_DFL)
    os.kill(os.getpid(), signal.SIGPIPE)
    return 128 + signal.SIGPIPE   # not reached


def main(argv: Sequence[str] | None = None) -> int:
    # Also when started with SIGINT ignored (a background job): Ctrl-C must work.
    signal.signal(signal.SIGINT, signal.default_int_handler)
    signal.signal(signal.SIGTERM, _interrupt)
    signal.signal(signal.SIGHUP, _interrupt)
    signal.signal(signal.SIGUSR2, _ignore)
    args = sys.argv[1:] if argv is None else list(argv)
    try:
        return run(args)
    except ScriptError as exc:
        say(exc.render(_use_color(args)))
        return 1
    except PydynError as exc:
        say(exc.render(_use_color(args)))
        return 1
    except KeyboardInterrupt:
        return 130
    except BrokenPipeError:
        return _die_of_sigpipe()
    finally:
        # All is done and written: a Ctrl-C now (one sent as the session ended by itself)
        # would only interrupt the interpreter's exit with a traceback.
        for sig in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP):
            signal.signal(sig, signal.SIG_IGN)


if __name__ == "__main__":
    sys.exit(main())
