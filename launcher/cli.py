"""pydyn's command line: the pipeline parse → resolve → translate → build → run.

Errors of every pass are PydynErrors; they are rendered here, once, and the
exit status is 1.  Nothing below main() prints a traceback for bad input.
"""

from __future__ import annotations

import argparse
import os
import platform
import signal
import sys
import time
from collections.abc import Sequence
from pathlib import Path

from pydyn.launcher.errors import PydynError, ScriptError

CACHE_ENV = "PYDYN_CACHE_DIR"


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="pydyn",
        description="SystemTap-style dynamic instrumentation for 64-bit and 32-bit processes.",
    )
    p.add_argument("script", nargs="?", help="script file ('-' for stdin)")
    p.add_argument("args", nargs="*", help="script arguments ($1, @1, ...)")
    p.add_argument("-e", dest="program", metavar="SCRIPT", help="run SCRIPT given inline")
    p.add_argument("-c", dest="command", metavar="CMD", help="start CMD and probe it")
    p.add_argument("-p", dest="pass_", metavar="N", type=int, choices=range(1, 6),
                   help="stop after pass N (1 parse, 2 resolve, 3 C, 4 build)")
    p.add_argument("-v", dest="verbose", action="count", default=0, help="more output")
    p.add_argument("-D", dest="defines", action="append", default=[], metavar="NAME=VALUE",
                   help="set a limit such as MAXACTION=10000")
    p.add_argument("--cache-dir", help=f"module cache (default ${CACHE_ENV} or ~/.cache/pydyn)")
    p.add_argument("-s", dest="bufsize", type=int, default=4, metavar="MiB",
                   help="output ring size in MiB (power of two)")
    return p


def cache_dir(option: str | None) -> Path:
    if option:
        return Path(option)
    if os.environ.get(CACHE_ENV):
        return Path(os.environ[CACHE_ENV])
    base = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(base) / "pydyn"


def _read_script(opts: argparse.Namespace) -> tuple[str, str]:
    if opts.program is not None:
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


def _check_defines(defines: Sequence[str]) -> list[str]:
    allowed = {"MAXSTRINGLEN", "MAXMAPENTRIES", "MAXACTION", "MAXNESTING", "MAXERRORS",
               "MAXSKIPPED"}
    out = []
    for d in defines:
        name, _, value = d.partition("=")
        if name not in allowed or not value.isdigit():
            raise PydynError(f"-D {d}: expected one of {', '.join(sorted(allowed))}=NUMBER")
        if name in ("MAXSTRINGLEN", "MAXMAPENTRIES"):
            raise PydynError(f"-D {name} is fixed at translation in this version")
        out.append(d)
    return out


def run(argv: Sequence[str]) -> int:
    from pydyn.launcher.build import build_modules
    from pydyn.launcher.resolve import Resolver
    from pydyn.launcher.script import parse_script
    from pydyn.launcher.session import Session, SessionOptions, check_command_target, split_command
    from pydyn.launcher.translate import translate

    opts = _parser().parse_args(argv)
    defines = _check_defines(opts.defines)
    text, filename = _read_script(opts)
    verbose = opts.verbose

    def step(n: int, what: str, start: float) -> None:
        if verbose:
            ms = (time.monotonic() - start) * 1000
            print(f"Pass {n}: {what} in {ms:.0f}ms", file=sys.stderr)

    t0 = time.monotonic()
    script = parse_script(text, filename, args=opts.args, arch=platform.machine())
    step(1, "parsed user script", t0)
    if opts.pass_ == 1:
        print(f"# parsed {len(script.probes)} probe(s), {len(script.functions)} function(s), "
              f"{len(script.globals)} global(s)")
        return 0
    target_path = None
    argv_cmd = None
    if opts.command:
        argv_cmd = split_command(opts.command)
        check_command_target(argv_cmd)
        from shutil import which
        exe = argv_cmd[0] if "/" in argv_cmd[0] else which(argv_cmd[0])
        if exe and argv_cmd[0] != "/bin/sh":
            target_path = os.path.realpath(exe)
    t0 = time.monotonic()
    resolution = Resolver(target_path).resolve(script)
    step(2, f"resolved {sum(1 for _ in resolution.iter_sites())} probe site(s)", t0)
    if opts.pass_ == 2:
        for sites in resolution.points.values():
            for rp in sites:
                for site in rp.sites:
                    print(site)
        return 0
    t0 = time.monotonic()
    program = translate(script, resolution,
                        defines=dict(d.split("=", 1) for d in defines))
    step(3, "translated to C", t0)
    if opts.pass_ == 3:
        sys.stdout.write(program.c_source)
        return 0
    required = set(program.required_abis) | {"m64"}
    if target_path is not None:
        from pydyn.launcher.elf.reader import get_elf_info
        required.add(get_elf_info(target_path).abi)
    t0 = time.monotonic()
    out_dir = cache_dir(opts.cache_dir) / program.checksum_hex
    modules = build_modules(program.c_source, program.checksum_hex, out_dir, required, defines)
    built = ", ".join(sorted(modules.modules, reverse=True))
    step(4, f"using cached {built} modules" if modules.from_cache else f"compiled {built} modules",
         t0)
    if opts.pass_ == 4:
        for abi in ("m64", "m32"):
            path = modules.get_module(abi)
            if path is not None:
                print(path)
        return 0
    ring = opts.bufsize << 20
    if ring & (ring - 1) or ring <= 0:
        raise PydynError(f"-s {opts.bufsize}: the ring size must be a power of two MiB")
    session = Session(program, modules, SessionOptions(command=opts.command, ring_size=ring,
                                                        verbose=verbose))
    result = session.run()
    return result.exit_status


def _interrupt(signum: int, frame: object) -> None:
    # SIGTERM/SIGHUP end the session the same orderly way as Ctrl-C.
    raise KeyboardInterrupt


def main(argv: Sequence[str] | None = None) -> int:
    signal.signal(signal.SIGTERM, _interrupt)
    signal.signal(signal.SIGHUP, _interrupt)
    try:
        return run(sys.argv[1:] if argv is None else argv)
    except ScriptError as exc:
        print(exc.render(), file=sys.stderr)
        return 1
    except PydynError as exc:
        print(exc.render(), file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        return 130


if __name__ == "__main__":
    sys.exit(main())
