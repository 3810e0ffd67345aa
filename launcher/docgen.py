"""Reference pages made from the code itself: docs/cli.md and the man pages from the
argument parsers, docs/functions.md from the translator's table of built-ins
(docgen_functions.py).

``python -m pydyn.launcher.docgen DIR`` writes ``cli.md``, ``pydyn.1``, ``pydyn-run.1``
and ``functions.md`` into DIR.  The pages are generated, never edited by hand, so an
option or a built-in added to the code cannot be missing from them: tests/test_docs.py
fails when the committed pages differ from what the code gives now.
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
        out += ["| option | meaning |", "|---|---|"]
        for opt in iter_options(parser):
            meaning = opt.help.replace("|", "\\|")
            out.append(f"| `{opt.synopsis()}` | {meaning} |")
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
        out += [".TP", head, _roff(opt.help)]
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
