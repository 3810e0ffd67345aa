"""SystemTap tapset functions on a real process, -m64 and -m32 (tests/progs/stap_tapset3.c):
returnval(), returnstr(), return_str() and the user_* reads' _error/_warn forms and UTF-16
and UTF-32 strings, each as stap's tapset documents it."""

from __future__ import annotations

import sys
from collections.abc import Callable
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent))

import cbuild  # noqa: E402

PROG = Path(__file__).resolve().parent / "progs" / "stap_tapset3.c"


@pytest.fixture(scope="module", params=["m64", "m32"])
def target(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory,
           sdt_cflags: Callable[[bool], tuple[str, ...]]) -> Path:
    m32 = request.param == "m32"
    out = tmp_path_factory.mktemp("stap-tapset3") / f"tapset3_{request.param}"
    return cbuild.build_c(PROG, out, m32=m32, extra=sdt_cflags(m32))


def run(cache: Path, script: str, *args: str) -> tuple[int, str, str]:
    r = cbuild.run_pydyn(cache, "-e", script, *args)
    assert "Traceback" not in r.stderr, r.stderr
    return r.returncode, r.stdout, r.stderr


def is_m32(target: Path) -> bool:
    return target.name.endswith("m32")


def test_returnval_returnstr_return_str(cache: Path, target: Path) -> None:
    # at a return, returnval() is the return register as the process's long; returnstr
    # names a negated errno value, else prints it in decimal, hex or octal at that width
    script = f'''probe process("{target}").function("result").return {{
  printf("%d|%s|%s|%s|%s|%s\\n", returnval(), returnstr(1), returnstr(2), returnstr(3),
         return_str(2, $return), return_str(3, returnval()))
}}'''
    rc, out, err = run(cache, script, "-c", f"{target} -2 255 -5000")
    assert rc == 0, err
    neg = "0xffffec78|037777766170" if is_m32(target) else \
        "0xffffffffffffec78|01777777777777777766170"
    assert out.splitlines() == [
        "-2|-2 (ENOENT)|-2 (ENOENT)|-2 (ENOENT)|-2 (ENOENT)|-2 (ENOENT)",
        "255|255|0xff|0377|0xff|0377",
        f"-5000|-5000|{neg}|0xffffffffffffec78|01777777777777777766170",
    ]


def test_returnval_without_registers_is_an_error(cache: Path) -> None:
    # a begin probe runs in the launcher: no registers; returnstr() says N/A there
    rc, out, err = run(cache, 'probe begin { println(returnstr(1)); println(returnval()) }')
    assert rc == 1
    assert out.splitlines() == ["N/A"]
    assert "returnval() not defined in this context begin" in err
