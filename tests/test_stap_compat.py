"""SystemTap language features pydyn takes from stap (bench/stap_testsuite.py measures the
rest): each runs in a probe on a real process, tests/progs/stap_compat.c built for -m64
and, where a toolchain exists, -m32."""

from __future__ import annotations

import sys
from collections.abc import Callable
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent))

import cbuild  # noqa: E402

PROG = Path(__file__).resolve().parent / "progs" / "stap_compat.c"


@pytest.fixture(scope="module")
def cache(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("stap-compat-cache")


@pytest.fixture(scope="module", params=["m64", "m32"])
def target(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory,
           sdt_cflags: Callable[[bool], tuple[str, ...]]) -> Path:
    m32 = request.param == "m32"
    out = tmp_path_factory.mktemp("stap-compat") / f"compat_{request.param}"
    return cbuild.build_c(PROG, out, m32=m32, extra=sdt_cflags(m32))


def run(cache: Path, script: str, *args: str) -> tuple[int, str, str]:
    r = cbuild.run_pydyn(cache, "-e", script, *args)
    assert "Traceback" not in r.stderr, r.stderr
    return r.returncode, r.stdout, r.stderr


def test_alias_prologue_and_epilogue(cache: Path, target: Path) -> None:
    # `=` runs the alias's block before the user's, `+=` after it; one body: shared locals
    script = f'''global seen, after
probe tick = process("{target}").mark("tick") {{ twice = $arg1 * 2 }}
probe tick {{ seen += twice }}
probe word += process("{target}").mark("word") {{ after += mine }}
probe word {{ mine = $arg2 }}
probe end {{ printf("seen=%d after=%d\\n", seen, after) }}'''
    rc, out, err = run(cache, script, "-c", f"{target} 10 ab cde")
    assert rc == 0, err
    assert out.splitlines()[-1] == "seen=90 after=5"


def test_alias_suffix_and_several_definitions(cache: Path, target: Path) -> None:
    # `probe p.mark("tick")` on the alias `p` carries the suffix to its target; two `+=`
    # definitions of one name each give a probe, both running the user's block
    script = f'''global a, b, c, d
probe p = process("{target}") {{ }}
probe p.mark("done") {{ a += $arg1 }}
probe both += p.mark("tick") {{ b++ }}
probe both += p.mark("word") {{ c++ }}
probe both {{ d++ }}
probe end {{ printf("%d %d %d %d\\n", a, b, c, d) }}'''
    rc, out, err = run(cache, script, "-c", f"{target} 4 x y z")
    assert rc == 0, err
    assert out.splitlines()[-1] == "4 4 3 7"


def test_oneshot_runs_once_then_exits(cache: Path, target: Path) -> None:
    # oneshot is begin then exit(): the handler runs once, the session ends, end runs
    script = f'''global n
probe oneshot {{ printf("once %d\\n", n); n = 7 }}
probe process("{target}").mark("tick") {{ n++ }}
probe end {{ printf("end n=%d\\n", n) }}'''
    rc, out, err = run(cache, script, "-c", f"{target} 3")
    assert rc == 0, err
    assert out.splitlines()[0] == "once 0"
    assert out.splitlines()[-1].startswith("end n=")


def test_alias_cycle_is_an_error(cache: Path) -> None:
    rc, out, err = run(cache, "probe a = b { } probe b = a { } probe a { }")
    assert rc == 1
    assert "expands more than" in err and "error:" in err
