"""`pydyn-run`: run precompiled modules, the split proposed in PR14490.

    pydyn-run MODULE_m64.so [--compat MODULE_m32.so] -c CMD [-o FILE] [NAME=VALUE ...]

The native module is given plainly, the 32-bit one with `--compat`.  Both must
carry the same source checksum (read from their `pd_module` symbol, without
loading the 32-bit one); the formats and timers the session needs come from the
manifest `pydyn -p4` wrote beside the modules.  No script, compiler or
resolve pass is involved.
"""

from __future__ import annotations

import argparse
import json
import re
import sys
import tempfile
from collections.abc import Sequence
from pathlib import Path

from elftools.common.exceptions import ELFError
from elftools.elf.sections import SymbolTableSection

from .build import ModuleSet, link_lib_dirs
from .cache import program_from_json
from .elf.elffile import ElfFile
from .errors import PydynError, TargetError, say
from .output import OutputSink
from .program import Program
from .session import Session, SessionOptions

MODULE_NAME = re.compile(r"pydyn_([0-9a-f]+)_(m64|m32|aarch64)\.so$")
CHECKSUM_LEN = 32


def module_checksum(path: Path) -> bytes:
    """The source checksum a module embeds (the first bytes of `pd_module`)."""
    try:
        with path.open("rb") as f:
            elf = ElfFile(f)
            symtab = elf.get_section_by_name(".symtab")
            syms = symtab.get_symbol_by_name("pd_module") \
                if isinstance(symtab, SymbolTableSection) else None
            if not syms:
                raise TargetError(str(path), "no pd_module symbol: not a pydyn module")
            addr = syms[0]["st_value"]
            for seg in elf.iter_segments():
                if seg["p_type"] == "PT_LOAD" and \
                        seg["p_vaddr"] <= addr < seg["p_vaddr"] + seg["p_filesz"]:
                    f.seek(seg["p_offset"] + addr - seg["p_vaddr"])
                    return f.read(CHECKSUM_LEN)
    except (OSError, ELFError) as exc:
        raise TargetError(str(path), f"cannot read the module: {exc}") from exc
    raise TargetError(str(path), "pd_module lies outside the file's segments")


def load_program(m64: Path) -> tuple[str, Program]:
    match = MODULE_NAME.search(m64.name)
    if match is None or match.group(2) != "m64":
        raise TargetError(str(m64), "expected a module named pydyn_<key>_m64.so")
    key = match.group(1)
    manifest = m64.with_name(f"pydyn_{key}.json")
    source = m64.with_name(f"pydyn_{key}.c")
    try:
        body = json.loads(manifest.read_text())["body"]
        program = program_from_json(body["program"], source.read_text())
    except (OSError, ValueError, KeyError, TypeError) as exc:
        raise TargetError(str(manifest), "no usable manifest beside the module (pydyn-run "
                          f"takes modules as pydyn -p4 leaves them): {exc}") from exc
    return key, program


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="pydyn-run", description=__doc__.splitlines()[0])
    p.add_argument("module", help="the native module, pydyn_<key>_m64.so")
    p.add_argument("assignments", nargs="*", metavar="NAME=VALUE",
                   help="set a scalar global before begin")
    p.add_argument("--compat", metavar="MODULE_m32.so", help="the 32-bit module")
    p.add_argument("-c", dest="command", metavar="CMD", help="start CMD and probe it")
    p.add_argument("-o", dest="output", metavar="FILE", help="write probe output to FILE")
    p.add_argument("-v", dest="verbose", action="count", default=0, help="more output")
    p.add_argument("-s", dest="bufsize", type=int, default=4, metavar="MiB",
                   help="output ring size in MiB (power of two)")
    return p


def run(argv: Sequence[str]) -> int:
    opts = _parser().parse_intermixed_args(argv)
    m64 = Path(opts.module).resolve()
    key, program = load_program(m64)
    modules = {"m64": m64}
    sums = {"m64": module_checksum(m64)}
    if opts.compat:
        m32 = Path(opts.compat).resolve()
        modules["m32"] = m32
        sums["m32"] = module_checksum(m32)
        if sums["m32"] != sums["m64"]:
            raise PydynError(f"{m64.name} and {m32.name} were built from different sources "
                             f"(checksums {sums['m64'].hex()[:16]} and "
                             f"{sums['m32'].hex()[:16]}): refusing the pair")
    if sums["m64"] != program.checksum:
        raise TargetError(str(m64), "the module does not match the manifest beside it")
    assignments = []
    for item in opts.assignments:
        name, sep, value = item.partition("=")
        if not sep or not name.isidentifier():
            raise PydynError(f"{item}: expected NAME=VALUE")
        assignments.append((name, value))
    with tempfile.TemporaryDirectory(prefix="pydyn-run-") as tmp:
        # The $LIB layout the preload entry expects, pointing at the given files.
        link_lib_dirs(Path(tmp), key, modules)
        moduleset = ModuleSet(Path(tmp), key, modules)
        out = open(opts.output, "wb") if opts.output else None  # noqa: SIM115
        try:
            sink = OutputSink(program.formats) if out is None else \
                OutputSink(program.formats, stdout=out)
            session = Session(program, moduleset, SessionOptions(
                command=opts.command, ring_size=opts.bufsize << 20, verbose=opts.verbose,
                set_globals=tuple(assignments)), sink=sink)
            return session.run().exit_status
        finally:
            if out is not None:
                out.close()


def main(argv: Sequence[str] | None = None) -> int:
    try:
        return run(sys.argv[1:] if argv is None else argv)
    except PydynError as exc:
        say(exc.render())
        return 1
    except KeyboardInterrupt:
        return 130


if __name__ == "__main__":
    sys.exit(main())
