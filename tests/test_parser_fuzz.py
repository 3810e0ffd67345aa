"""Fuzzing the front end: any input parses or raises a well-located ScriptError.

Inputs: random bytes, random token soup, and mutations (token and character
deletion, duplication, swapping, insertion) of the corpus in tests/scripts.
Any other exception, a location that does not point into the input, or a
parse that takes more than a few seconds (a hang) fails.
"""

from __future__ import annotations

import re
import signal
import time
from collections import Counter
from collections.abc import Iterator
from pathlib import Path
from types import FrameType

import pytest
from hypothesis import HealthCheck, given, note, settings
from hypothesis import strategies as st

from pydyn.launcher.errors import ScriptError
from pydyn.launcher.script import ast, parse_script

pytestmark = pytest.mark.unit   # no compiler, no target process: `make check`

SCRIPTS = [p.read_text() for p in sorted((Path(__file__).parent / "scripts").glob("*.stp"))]
TIME_LIMIT = 5.0  # seconds per input; a correct parse takes milliseconds
RESULTS: Counter[str] = Counter()

# Pieces of stap syntax, so that random sequences reach deep into the grammar.
VOCABULARY = [
    "probe", "global", "private", "function", "if", "else", "for", "foreach", "in", "limit",
    "return", "delete", "while", "break", "continue", "next", "string", "long", "try",
    "catch", "begin", "end", "process", "mark", "timer", "ms", "x", "arr", "$arg1", "$$parms",
    "$p", "@count", "@sum", "@hist_log", "@hist_linear", "@defined", "@entry", "@cast",
    "@var", "@define", "@m", "@x", "$1", "@1", "$#", "@#", "0", "1", "0x1f", "017", "99999",
    '"s"', '"%d\\n"', '"', "(", ")", "{", "}", "[", "]", ",", ";", ":", "?", "!", ".", "*",
    "+", "-", "/", "%", "=", "==", "!=", "<", ">", "<=", ">=", "<<", ">>", "<<<", "&", "|",
    "^", "~", "&&", "||", "++", "--", "->", "+=", ".=", "=~", "%(", "%?", "%:", "%)", "%{",
    "%}", "#", "//", "/*", "*/", "\n", " ", "\t", "printf", "print", "exit", "`", "\\",
    "arch", "runtime", '"x86_64"', '"dyninst"', "kernel_v", '"2.6"', "CONFIG_X",
]
TOKEN_RE = re.compile(r'"(?:[^"\\\n]|\\.)*"|[A-Za-z_$@][A-Za-z0-9_$]*|\d\w*|%[(?:){}]|'
                      r"<<<|>>>|[-+*/%&|^.<>=!]=|&&|\|\||\+\+|--|->|<<|>>|\s+|.", re.S)


@pytest.fixture(scope="module", autouse=True)
def report() -> Iterator[None]:
    yield
    print(f"\nfuzz: {RESULTS['bytes']} random byte strings, {RESULTS['soup']} token soups, "
          f"{RESULTS['mutated']} mutated scripts: {RESULTS['parsed']} parsed, "
          f"{RESULTS['error']} ScriptErrors")


class Hang(Exception):
    pass


def _alarm(signum: int, frame: FrameType | None) -> None:
    raise Hang(f"parsing took more than {TIME_LIMIT}s")


def expected_lines(text: str) -> list[str]:
    return [line[:-1] if line.endswith("\r") else line for line in text.split("\n")]


def check(source: str, text: str, args: tuple[str, ...] = ()) -> None:
    """Parse `text`; it must succeed or raise a ScriptError located inside it."""
    note(f"input: {text!r} args={args!r}")
    RESULTS[source] += 1
    old = signal.signal(signal.SIGALRM, _alarm)
    signal.setitimer(signal.ITIMER_REAL, TIME_LIMIT)
    start = time.perf_counter()
    try:
        script = parse_script(text, "fuzz.stp", args=args)
    except ScriptError as err:
        RESULTS["error"] += 1
        loc = err.location
        assert loc is not None, err.message
        assert loc.file == "fuzz.stp"
        lines = expected_lines(text)
        assert 1 <= loc.line <= len(lines), (loc, err.message)
        assert loc.source_line == lines[loc.line - 1], (loc, err.message)
        assert 1 <= loc.column <= len(loc.source_line) + 1, (loc, err.message)
        assert err.message
        assert err.render().startswith(f"{loc}: error: ")
    else:
        RESULTS["parsed"] += 1
        assert isinstance(script, ast.Script)
        ast.dump(script)  # every node renders
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, old)
    note(f"took {time.perf_counter() - start:.3f}s")


FUZZ = settings(max_examples=300, deadline=None, derandomize=True,
                suppress_health_check=[HealthCheck.too_slow])
ARGS = st.sampled_from([(), ("1",), ("250", "hello"), ('"q', "a b")])


@FUZZ
@given(st.binary(max_size=400), ARGS)
def test_random_bytes(data: bytes, args: tuple[str, ...]) -> None:
    check("bytes", data.decode("utf-8", errors="replace"), args)


@FUZZ
@given(st.lists(st.sampled_from(VOCABULARY), max_size=120), ARGS)
def test_token_soup(words: list[str], args: tuple[str, ...]) -> None:
    check("soup", " ".join(words), args)


# One mutation: (kind, position, other position, inserted word).
MUTATION = st.tuples(
    st.sampled_from(["del-tok", "dup-tok", "swap-tok", "ins-tok", "del-chr", "dup-chr",
                     "swap-chr"]),
    st.integers(min_value=0, max_value=10_000),
    st.integers(min_value=0, max_value=10_000),
    st.sampled_from(VOCABULARY),
)


def mutate(text: str, mutations: list[tuple[str, int, int, str]]) -> str:
    for kind, i, j, word in mutations:
        if kind.endswith("tok"):
            parts: list[str] = TOKEN_RE.findall(text)
        else:
            parts = list(text)
        if not parts:
            parts = [word]
        i %= len(parts)
        j %= len(parts)
        if kind.startswith("del"):
            del parts[i]
        elif kind.startswith("dup"):
            parts.insert(i, parts[i])
        elif kind.startswith("swap"):
            parts[i], parts[j] = parts[j], parts[i]
        else:
            parts.insert(i, " " + word + " ")
        text = "".join(parts)
    return text


@FUZZ
@given(st.sampled_from(range(len(SCRIPTS))), st.lists(MUTATION, min_size=1, max_size=6),
       ARGS)
def test_mutated_corpus(index: int, mutations: list[tuple[str, int, int, str]],
                        args: tuple[str, ...]) -> None:
    check("mutated", mutate(SCRIPTS[index], mutations), args)


def test_mutation_preserves_text_without_mutations() -> None:
    # TOKEN_RE must cover every character, or token mutations would lose text.
    for text in SCRIPTS:
        assert "".join(TOKEN_RE.findall(text)) == text


def test_fuzzing_ran() -> None:
    # Runs after the fuzz tests above (pytest keeps file order).
    if not all(RESULTS[k] for k in ("bytes", "soup", "mutated")):
        pytest.skip("only meaningful when the whole module runs")
    assert min(RESULTS["bytes"], RESULTS["soup"], RESULTS["mutated"]) >= 250, RESULTS
    # Both outcomes occur, so the checks on each were exercised.
    assert RESULTS["parsed"] > 0 and RESULTS["error"] > 0
