"""Reference pages made from the code itself: docs/cli.md and the man pages from the
argument parsers, docs/functions.md from the translator's table of built-ins
(docgen_functions.py).

``python -m pydyn.launcher.docgen DIR`` writes ``cli.md``, ``pydyn.1``, ``pydyn-run.1``
and ``functions.md`` into DIR.  The pages are generated, never edited by hand, so an
option or a built-in added to the code cannot be missing from them, nor lack an example
(OPTION_EXAMPLES here, docgen_functions' table): tests/test_docs.py fails when the
committed pages differ from what the code gives now, tests/test_docs_examples.py when
an example does not parse, translate or print what the page shows.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Iterator
from pathlib import Path

from . import docgen_functions
from .cli import EXAMPLES
from .cli import _parser as pydyn_parser
from .run_module import _parser as run_parser

# One paragraph per program for the man page's DESCRIPTION; the parsers' own
# descriptions are one line.
DESCRIPTIONS = {
    "pydyn": (
        "pydyn translates a SystemTap script into one C source, builds a 64-bit and a "
        "32-bit probe module from it, starts the command given with -c (or attaches to "
        "the process given with -x) with the module of its own architecture preloaded, "
        "and prints what the probes report.  Every process of the session, 64-bit and "
        "32-bit, and the launcher share one shared-memory segment, so globals, arrays "
        "and statistics are common to all of them."),
    "pydyn-run": (
        "pydyn-run runs modules that pydyn built earlier (pydyn -p4 prints their paths) "
        "without pydyn's translator: it needs no compiler and reads no script.  Globals "
        "may be given initial values as NAME=VALUE."),
}
SEE_ALSO = {"pydyn": "pydyn-run(1), stap(1)", "pydyn-run": "pydyn(1)"}

# program -> option (Option.name: "-c", "--cache-dir", or a positional's dest) -> a
# command line using it.  Every option of the parsers needs one (the pages are not
# made without); tests/test_docs_examples.py parses each with the program's parser.
OPTION_EXAMPLES: dict[str, dict[str, str]] = {
    "pydyn": {
        "--version": "pydyn --version",
        "script": "pydyn trace.stp -c ./app",
        "-l": """pydyn -l 'process("./app").mark("*")'""",
        "-L": """pydyn -L 'process("./app").function("handle")'""",
        "--json": "pydyn --json trace.stp -c ./app",
        "--color": "pydyn --color always trace.stp -c ./app",
        "args": "pydyn top.stp 10 handle -c ./app",
        "-e": """pydyn -e 'probe process("./app").mark("req") { println($arg1) }' -c ./app""",
        "-c": "pydyn trace.stp -c './app --port 8080'",
        "-x": "pydyn trace.stp -x 1234",
        "-T": "pydyn trace.stp -x 1234 -T 10",
        "-p": "pydyn -p2 trace.stp",
        "-v": "pydyn -vv trace.stp -c ./app",
        "-D": "pydyn -D MAXACTION=100000 -D MAXSTRINGLEN=512 trace.stp -c ./app",
        "-g": "pydyn -g patch.stp -x 1234",
        "--skip-badvars": "pydyn --skip-badvars locals.stp -c ./app",
        "--probe-mode": "pydyn --probe-mode trap trace.stp -c ./app",
        "--cache-dir": "pydyn --cache-dir /tmp/pydyn-cache trace.stp -c ./app",
        "--disable-cache": "pydyn --disable-cache trace.stp -c ./app",
        "--clean-cache": "pydyn --clean-cache",
        "--cache-size": "pydyn --cache-size 64 trace.stp -c ./app",
        "-s": "pydyn -s 64 trace.stp -c './server 8'",
        "-o": "pydyn -o out.txt trace.stp -c ./app",
        "-G": "pydyn -G threshold=1000 -G label=slow trace.stp -c ./app",
        "-w": "pydyn -w trace.stp -c ./app",
        "-W": "pydyn -W -p2 trace.stp",
        "--suppress-time-limits": "pydyn -g --suppress-time-limits loop.stp -c ./app",
        "--suppress-handler-errors": "pydyn --suppress-handler-errors trace.stp -c ./app",
        "--runtime": "pydyn --runtime=dyninst trace.stp -c ./app",
        "--dyninst": "pydyn --dyninst trace.stp -c ./app",
        "-u": "pydyn -u -p3 trace.stp",
        "-b": "pydyn -b trace.stp -c ./app",
        "-m": "pydyn -m reqtrace trace.stp -c ./app",
        "--compatible": "pydyn --compatible 4.0 trace.stp -c ./app",
        "--prologue-searching": "pydyn --prologue-searching=never trace.stp -c ./app",
        "-I": "pydyn -I ./tapsets trace.stp -c ./app",
        "-t": "pydyn -t trace.stp -c ./app",
        "-k": "pydyn -k trace.stp -c ./app",
        "-q": "pydyn -q trace.stp -c ./app",
        "-d": "pydyn -d /lib/x86_64-linux-gnu/libc.so.6 stacks.stp -c ./app",
        "--ldd": "pydyn --ldd stacks.stp -c ./app",
    },
    "pydyn-run": {
        "module": "pydyn-run ~/.cache/pydyn/3f/pydyn_3f2a_m64.so -c ./app",
        "assignments": "pydyn-run pydyn_3f2a_m64.so threshold=1000 -c ./app",
        "--compat": "pydyn-run pydyn_3f2a_m64.so --compat pydyn_3f2a_m32.so -c ./app32",
        "-c": "pydyn-run pydyn_3f2a_m64.so -c './app --port 8080'",
        "-o": "pydyn-run pydyn_3f2a_m64.so -o out.txt -c ./app",
        "-v": "pydyn-run -v pydyn_3f2a_m64.so -c ./app",
        "-s": "pydyn-run -s 64 pydyn_3f2a_m64.so -c ./app",
    },
}


class MissingExample(KeyError):
    """An option of a parser that OPTION_EXAMPLES has no command line for."""


class Option:
    """One argument of a parser, as a reference page shows it."""

    def __init__(self, action: argparse.Action) -> None:
        self.flags = tuple(action.option_strings)
        self.metavar = _metavar(action)
        self.help = (action.help or "").replace("%%", "%")
        if action.choices is not None and not isinstance(action.choices, range):
            self.choices: tuple[str, ...] = tuple(str(c) for c in action.choices)
        else:
            self.choices = ()
        self.positional = not self.flags
        self.name = action.dest if self.positional else ", ".join(self.flags)

    def example(self, prog: str) -> str:
        """A command line using the option, from OPTION_EXAMPLES."""
        try:
            return OPTION_EXAMPLES[prog][self.name]
        except KeyError:
            raise MissingExample(f"{prog} {self.name}: give an example in "
                                 "launcher/docgen.py's OPTION_EXAMPLES") from None

    def synopsis(self) -> str:
        """`-c CMD`, `--json`, `[args ...]`: the form a user types."""
        if self.positional:
            return self.metavar
        return f"{self.flags[0]} {self.metavar}".rstrip()

    def __str__(self) -> str:
        return self.synopsis()


def _metavar(action: argparse.Action) -> str:
    if action.nargs == 0:
        return ""
    if action.metavar is not None:
        name = action.metavar if isinstance(action.metavar, str) else " ".join(action.metavar)
    elif action.choices is not None and not isinstance(action.choices, range):
        name = "{" + ",".join(str(c) for c in action.choices) + "}"
    elif action.option_strings:
        name = action.dest.upper()
    else:
        name = action.dest
    if action.nargs in ("*", "+"):
        return f"[{name} ...]"
    if action.nargs == "?":
        return f"[{name}]"
    return name


def iter_options(parser: argparse.ArgumentParser) -> Iterator[Option]:
    """The parser's arguments in the order they were added, without --help."""
    for action in parser._actions:
        if isinstance(action, argparse._HelpAction):
            continue
        yield Option(action)


def render_markdown(parsers: list[argparse.ArgumentParser]) -> str:
    out = ["# Command-line reference", "",
           "Generated from the programs' argument parsers by "
           "`python -m pydyn.launcher.docgen docs`; do not edit.", ""]
    for parser in parsers:
        prog = parser.prog
        out += [f"## {prog}", "", DESCRIPTIONS[prog], "", "```", _usage(parser), "```", ""]
        out += ["| option | meaning | example |", "|---|---|---|"]
        for opt in iter_options(parser):
            meaning = opt.help.replace("|", "\\|")
            example = opt.example(prog).replace("|", "\\|")
            out.append(f"| `{opt.synopsis()}` | {meaning} | `{example}` |")
        out.append("")
        if prog == "pydyn":
            out += ["Examples:", "", "```", *EXAMPLES.splitlines()[1:], "```", ""]
    return "\n".join(out)


def _usage(parser: argparse.ArgumentParser) -> str:
    formatter = argparse.HelpFormatter(parser.prog, width=100)
    formatter.add_usage(parser.usage, parser._actions, parser._mutually_exclusive_groups,
                        prefix="")
    return formatter.format_help().strip()


def _roff(text: str) -> str:
    """Text safe in a roff line: backslashes and leading dots or quotes escaped."""
    text = text.replace("\\", "\\e").replace("-", "\\-")
    if text[:1] in (".", "'"):
        text = "\\&" + text
    return text


def render_man(parser: argparse.ArgumentParser, version: str) -> str:
    prog = parser.prog
    out = [f'.TH {prog.upper()} 1 "" "{prog} {version}" "User Commands"',
           ".SH NAME", f"{_roff(prog)} \\- {_roff(parser.description or '')}",
           ".SH SYNOPSIS", ".nf", *(_roff(line) for line in _usage(parser).splitlines()), ".fi",
           ".SH DESCRIPTION", _roff(DESCRIPTIONS[prog]), ".SH OPTIONS"]
    for opt in iter_options(parser):
        head = _roff(opt.metavar) if opt.positional else \
            f"\\fB{_roff(opt.name)}\\fR {_roff(opt.metavar)}".rstrip()
        out += [".TP", head, _roff(opt.help), ".br",
                f"e.g.\\ \\fB{_roff(opt.example(prog))}\\fR"]
    if prog == "pydyn":
        out += [".SH EXAMPLES", ".nf", *(_roff(line) for line in EXAMPLES.splitlines()[1:]),
                ".fi"]
    out += [".SH SEE ALSO", _roff(SEE_ALSO[prog]), ""]
    return "\n".join(out)


def pages() -> dict[str, str]:
    """File name -> text of every generated page."""
    from .cli import version
    ver = version().split()[0]
    parsers = [pydyn_parser(), run_parser()]
    result = {"cli.md": render_markdown(parsers)}
    for parser in parsers:
        result[f"{parser.prog}.1"] = render_man(parser, ver)
    result["functions.md"] = docgen_functions.render()
    return result


def main(argv: list[str]) -> int:
    if len(argv) != 1:
        print("usage: python -m pydyn.launcher.docgen DIR", file=sys.stderr)
        return 2
    for name, text in pages().items():
        (Path(argv[0]) / name).write_text(text)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
