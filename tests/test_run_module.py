"""`pydyn-run`: precompiled m64 + m32 modules run without the script or a compiler."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
from cbuild import build_c

ROOT = Path(__file__).resolve().parent.parent


@pytest.fixture(scope="module")
def built(tmp_path_factory: pytest.TempPathFactory, sdt_cflags: object,
          have_m32: bool) -> tuple[Path, list[str], dict[str, str]]:
    if not have_m32:
        pytest.skip("gcc -m32 unavailable: apt-get install gcc-12-multilib libc6-dev-i386")
    tmp = tmp_path_factory.mktemp("run")
    counter32 = build_c(ROOT / "examples" / "src" / "counter.c", tmp / "counter32", m32=True)
    env = {**os.environ, "PYDYN_CACHE_DIR": str(tmp / "cache")}
    script = tmp / "run.stp"
    script.write_text('global hits, total, label = "x", scale = 1\n'
                      f'probe process("{counter32}").mark("tick") '
                      "{ hits++; total += $arg1 * scale }\n"
                      'probe end { printf("%s hits=%d total=%d\\n", label, hits, total) }\n')
    res = subprocess.run([sys.executable, "-m", "pydyn.launcher.cli", "-p4", str(script)],
                         env=env, capture_output=True, text=True, check=True)
    return counter32, res.stdout.split(), env


def pydyn_run(env: dict[str, str], *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "pydyn.launcher.run_module", *args],
                          env=env, capture_output=True, text=True, timeout=120)


def test_runs_the_pair_and_sets_globals(built: tuple[Path, list[str], dict[str, str]],
                                        tmp_path: Path) -> None:
    counter32, (m64, m32), env = built
    # A compiler that fails proves nothing is built.
    env = {**env, "CC": "/bin/false"}
    res = pydyn_run(env, m64, "--compat", m32, "-c", f"{counter32} 100", "label=run", "scale=2")
    assert res.returncode == 0, res.stderr
    assert res.stdout.splitlines()[-1] == "run hits=100 total=9900"
    out = tmp_path / "out.txt"
    res = pydyn_run(env, m64, "--compat", m32, "-o", str(out), "-c", f"{counter32} 10")
    assert res.returncode == 0, res.stderr
    assert out.read_text() == "x hits=10 total=45\n"
    assert "hits=" not in res.stdout


def test_refuses_a_pair_of_different_sources(built: tuple[Path, list[str], dict[str, str]]
                                             ) -> None:
    _, (m64, _m32), env = built
    other = subprocess.run([sys.executable, "-m", "pydyn.launcher.cli", "-p4", "-e",
                            "probe begin { exit() }"], env=env, capture_output=True,
                           text=True, check=True).stdout.split()[1]
    res = pydyn_run(env, m64, "--compat", other, "-c", "true")
    assert res.returncode == 1
    assert "built from different sources" in res.stderr and "refusing" in res.stderr
    assert "Traceback" not in res.stderr


def test_unknown_global_and_bad_module(built: tuple[Path, list[str], dict[str, str]],
                                       tmp_path: Path) -> None:
    counter32, (m64, _m32), env = built
    res = pydyn_run(env, m64, "-c", f"{counter32} 1", "nosuch=1")
    assert res.returncode == 1 and "no scalar global 'nosuch'" in res.stderr
    junk = tmp_path / "pydyn_00_m64.so"
    junk.write_text("not a module")
    res = pydyn_run(env, str(junk), "-c", "true")
    assert res.returncode == 1 and "Traceback" not in res.stderr
