"""`pydyn-run`: precompiled m64 + m32 modules run without the script or a compiler."""

from __future__ import annotations

from pathlib import Path

import pytest
from cbuild import build_c, run_module, run_pydyn

ROOT = Path(__file__).resolve().parent.parent


@pytest.fixture(scope="module")
def built(tmp_path_factory: pytest.TempPathFactory, sdt_cflags: object, have_m32: bool,
          cache: Path) -> tuple[Path, list[str]]:
    if not have_m32:
        pytest.skip("gcc -m32 unavailable: apt-get install gcc-12-multilib libc6-dev-i386")
    tmp = tmp_path_factory.mktemp("run")
    counter32 = build_c(ROOT / "examples" / "src" / "counter.c", tmp / "counter32", m32=True)
    script = tmp / "run.stp"
    script.write_text('global hits, total, label = "x", scale = 1\n'
                      f'probe process("{counter32}").mark("tick") '
                      "{ hits++; total += $arg1 * scale }\n"
                      'probe end { printf("%s hits=%d total=%d\\n", label, hits, total) }\n')
    res = run_pydyn(cache, "-p4", str(script))
    assert res.returncode == 0, res.stderr
    return counter32, res.stdout.split()


def test_runs_the_pair_and_sets_globals(built: tuple[Path, list[str]], cache: Path,
                                        tmp_path: Path) -> None:
    counter32, (m64, m32) = built
    # A compiler that fails proves nothing is built.
    env = {"CC": "/bin/false"}
    res = run_module(cache, m64, "--compat", m32, "-c", f"{counter32} 100", "label=run",
                     "scale=2", env=env)
    assert res.returncode == 0, res.stderr
    assert res.stdout.splitlines()[-1] == "run hits=100 total=9900"
    out = tmp_path / "out.txt"
    res = run_module(cache, m64, "--compat", m32, "-o", str(out), "-c", f"{counter32} 10",
                     env=env)
    assert res.returncode == 0, res.stderr
    assert out.read_text() == "x hits=10 total=45\n"
    assert "hits=" not in res.stdout


def test_refuses_a_pair_of_different_sources(built: tuple[Path, list[str]], cache: Path
                                             ) -> None:
    _, (m64, _m32) = built
    res = run_pydyn(cache, "-p4", "-e", "probe begin { exit() }")
    assert res.returncode == 0, res.stderr
    other = res.stdout.split()[1]
    res = run_module(cache, m64, "--compat", other, "-c", "true")
    assert res.returncode == 1
    assert "built from different sources" in res.stderr and "refusing" in res.stderr
    assert "Traceback" not in res.stderr


def test_unknown_global_and_bad_module(built: tuple[Path, list[str]], cache: Path,
                                       tmp_path: Path) -> None:
    counter32, (m64, _m32) = built
    res = run_module(cache, m64, "-c", f"{counter32} 1", "nosuch=1")
    assert res.returncode == 1 and "no scalar global 'nosuch'" in res.stderr
    junk = tmp_path / "pydyn_00_m64.so"
    junk.write_text("not a module")
    res = run_module(cache, str(junk), "-c", "true")
    assert res.returncode == 1 and "Traceback" not in res.stderr
