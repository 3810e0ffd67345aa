"""The examples of docs/functions.md are pydyn: every built-in has one that calls it,
all of them translate (`-p3`, one script of one probe per example), and those that show
their output print it on the page's own program, 64- and 32-bit (one session runs them
all on both builds; pids, times and addresses match the example's pattern).  The
examples of docs/cli.md: every option of pydyn and pydyn-run has one, and it parses
with the program's own parser into that option."""

from __future__ import annotations

import argparse
import contextlib
import io
import re
import shlex
from collections.abc import Callable
from pathlib import Path

import pytest
from cbuild import build_c, have_m32, run_pydyn

from pydyn.launcher import docgen
from pydyn.launcher.docgen_functions import EXAMPLE_PROGRAM, PROGRAM, Example, iter_examples
from pydyn.launcher.guru import SET_USER
from pydyn.launcher.translate.types import BUILTINS, PRINT_FUNCS

EXAMPLES = iter_examples()
SCRIPT = "examples.stp"


def _script(examples: list[tuple[str, Example]], program: str = PROGRAM,
            marked: bool = False) -> tuple[str, dict[int, str]]:
    """One probe per example on a line of its own, the globals they use declared first;
    with `marked`, each handler first prints `@@@ INDEX BYTES@@@` (its example's index in
    `examples` and uarch_bytes()).  Returns the script and line -> example name."""
    names = sorted({g for _, ex in examples for g in ex.uses})
    lines = [f"global {', '.join(names)}"] if names else []
    where: dict[int, str] = {}
    for i, (name, ex) in enumerate(examples):
        probe = ex.probe().replace(f'process("{PROGRAM}")', f'process("{program}")')
        if marked:
            head, brace, body = probe.partition("{")
            probe = f'{head}{brace} printf("@@@ {i} %d@@@\\n", uarch_bytes());{body}'
        lines.append(probe)
        where[len(lines)] = name
    if marked:
        lines.append('probe end { printf("@@@ -1 0@@@\\n") }')
    return "\n".join(lines) + "\n", where


def _failed_examples(stderr: str, where: dict[int, str]) -> list[str]:
    """The examples the diagnostics of a translation point at, by their script line."""
    lines = {int(n) for n in re.findall(rf"{SCRIPT}:(\d+):", stderr)}
    return sorted({where.get(n, f"line {n}") for n in lines})


@pytest.fixture(scope="module")
def app_dir(tmp_path_factory: pytest.TempPathFactory,
            sdt_cflags: Callable[[bool], tuple[str, ...]]) -> Path:
    """EXAMPLE_PROGRAM built as DIR/m64/app and, with an -m32 toolchain, DIR/m32/app
    (both named `app`: execname() prints the same), and DIR/app a link to the m64 one."""
    root = tmp_path_factory.mktemp("docex")
    src = root / "app.c"
    src.write_text(EXAMPLE_PROGRAM)
    for abi in ("m64", "m32") if have_m32() else ("m64",):
        (root / abi).mkdir()
        build_c(src, root / abi / "app", m32=abi == "m32", extra=("-g", *sdt_cflags(
            abi == "m32")))
    (root / "app").symlink_to(root / "m64" / "app")
    return root


@pytest.mark.unit
def test_every_builtin_has_an_example_calling_it() -> None:
    names = [name for name, _ in EXAMPLES]
    assert sorted(names) == sorted([*BUILTINS, *PRINT_FUNCS, *SET_USER])
    for name, ex in EXAMPLES:
        assert re.search(rf"(?<![\w.]){name}\(", ex.code), (name, ex.code)
        if ex.prints:
            assert ex.pattern().fullmatch(ex.prints + "\n"), \
                f"{name}: the output shown does not match its own pattern"
        else:
            assert not ex.varies, name


@pytest.mark.unit
def test_a_builtin_without_an_example_fails_the_page(monkeypatch: pytest.MonkeyPatch) -> None:
    from pydyn.launcher import docgen_functions
    monkeypatch.delitem(docgen_functions.WRITES, "set_user_int")
    with pytest.raises(docgen_functions.MissingDescription, match="set_user_int"):
        docgen_functions.render()


@pytest.mark.parametrize("guru", [False, True], ids=["plain", "guru"])
def test_every_example_translates(app_dir: Path, cache: Path, tmp_path: Path,
                                  guru: bool) -> None:
    """All examples in one `-p3` run (guru mode's with -g, the others without)."""
    examples = [(name, ex) for name, ex in EXAMPLES if ex.guru == guru]
    text, where = _script(examples)
    script = tmp_path / SCRIPT
    script.write_text(text)
    res = run_pydyn(cache, "-p3", *(["-g"] if guru else []), str(script), cwd=app_dir)
    assert res.returncode == 0, \
        f"examples that do not translate: {_failed_examples(res.stderr, where)}\n{res.stderr}"
    assert "#include" in res.stdout


def test_shown_output_is_printed(app_dir: Path, cache: Path, tmp_path: Path) -> None:
    """The examples whose output the page shows, run in one session (in guru mode, for
    the writes) on the m64 and the m32 build in turn; each prints what the page says (or
    its pattern) on both."""
    # guru mode's writes last: each reads back what it wrote, the others read `limit`
    # as the program set it
    shown = sorted(((name, ex) for name, ex in EXAMPLES if ex.prints), key=lambda e: e[1].guru)
    text, _ = _script(shown, program="*/app", marked=True)
    script = tmp_path / SCRIPT
    script.write_text(text)
    abis = ["m64", "m32"] if (app_dir / "m32").exists() else ["m64"]
    command = " && ".join(f"{abi}/app" for abi in abis)
    res = run_pydyn(cache, "-g", str(script), "-c", f"sh -c '{command}'", cwd=app_dir)
    assert res.returncode == 0, res.stderr
    assert "ERROR" not in res.stderr, res.stderr
    printed: dict[tuple[int, int], str] = {}
    parts = re.split(r"@@@ (-?\d+) (\d)@@@\n", res.stdout)
    assert parts[0] == "", res.stdout
    for index, size, out in zip(parts[1::3], parts[2::3], parts[3::3], strict=True):
        key = (int(index), int(size))
        printed[key] = printed.get(key, "") + out
    wrong = []
    for i, (name, ex) in enumerate(shown):
        for size in (8 if abi == "m64" else 4 for abi in abis):
            out = printed.get((i, size))
            if out is None or not ex.pattern().fullmatch(out):
                wrong.append(f"{name} ({size * 8}-bit): {out!r}, docs: {ex.prints!r}")
    assert not wrong, "\n".join(wrong)


@pytest.mark.unit
def test_every_probe_point_has_an_example() -> None:
    """Each row of docs/probe-points.md's tables of points has a filled example cell."""
    text = (Path(__file__).resolve().parent.parent / "docs" / "probe-points.md").read_text()
    tables = re.findall(r"^\| point \|.*\| example \|\n\|[-|]+\|\n((?:\|.*\n)+)", text, re.M)
    assert len(tables) >= 2
    rows = [row for table in tables for row in table.splitlines()]
    empty = [row for row in rows if re.search(r"\|\s*\|\s*$", row)]
    assert not empty, empty
    assert len(rows) > 20

PARSERS = [docgen.pydyn_parser(), docgen.run_parser()]


def _uses(argv: list[str], opts: argparse.Namespace, opt: docgen.Option,
          action: argparse.Action) -> bool:
    """Whether a parsed command line gives `opt`: a flag among its words (`-vv`, `-p2`,
    `--color=always` too), a positional a value other than its default."""
    if opt.positional:
        return getattr(opts, action.dest) not in (None, [], action.default)
    return any(word == flag or word.startswith(f"{flag}=") or
               (not flag.startswith("--") and word.startswith(flag) and
                not word.startswith("--"))
               for word in argv for flag in opt.flags)


@pytest.mark.unit
@pytest.mark.parametrize("parser", PARSERS, ids=[p.prog for p in PARSERS])
def test_every_option_has_an_example_that_parses(parser: argparse.ArgumentParser) -> None:
    """Each option's example is a command line of the program that the program's parser
    (parse_intermixed_args, as the program calls it) takes and reads the option from."""
    actions = [a for a in parser._actions if not isinstance(a, argparse._HelpAction)]
    options = list(docgen.iter_options(parser))
    assert [o.name for o in options] == list(docgen.OPTION_EXAMPLES[parser.prog])
    for opt, action in zip(options, actions, strict=True):
        words = shlex.split(opt.example(parser.prog))
        assert words[0] == parser.prog, opt.example(parser.prog)
        if action.option_strings == ["--version"]:
            out = io.StringIO()
            with contextlib.redirect_stdout(out), pytest.raises(SystemExit) as ended:
                parser.parse_intermixed_args(words[1:])
            assert ended.value.code in (0, None) and out.getvalue().startswith("pydyn ")
            continue
        err = io.StringIO()
        try:
            with contextlib.redirect_stderr(err):
                opts = parser.parse_intermixed_args(words[1:])
        except SystemExit:
            pytest.fail(f"{opt.name}: {opt.example(parser.prog)!r} does not parse: "
                        f"{err.getvalue()}")
        assert _uses(words[1:], opts, opt, action), (opt.name, opt.example(parser.prog))


@pytest.mark.unit
def test_an_option_without_an_example_fails_the_page(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delitem(docgen.OPTION_EXAMPLES["pydyn-run"], "-o")
    with pytest.raises(docgen.MissingExample, match="pydyn-run -o"):
        docgen.pages()
