"""Every bundled example runs on its program and prints what it promises."""

from __future__ import annotations

import re
import subprocess
from pathlib import Path

import pytest
from cbuild import run_pydyn

ROOT = Path(__file__).resolve().parent.parent
PYTHON311 = Path("/usr/bin/python3.11")


pytestmark = pytest.mark.usefixtures("sdt_cflags")


def make(*targets: str) -> None:
    res = subprocess.run(["make", "-s", "-C", str(ROOT), *targets], capture_output=True,
                         text=True)
    if res.returncode != 0:
        pytest.fail(f"make {' '.join(targets)}: {res.stderr}")


def run_example(cache: Path, script: str, command: str) -> subprocess.CompletedProcess[str]:
    res = run_pydyn(cache, f"examples/{script}", "-c", command, cwd=ROOT)
    assert res.returncode == 0, res.stderr
    assert "WARNING" not in res.stderr and "ERROR" not in res.stderr, res.stderr
    return res


def test_count(cache: Path) -> None:
    make("examples/bin/counter")
    res = run_example(cache, "count.stp", "./examples/bin/counter 1000")
    assert res.stdout.splitlines()[-1] == "hits=1000 total=499500"


def test_jobs_biarch_worker_pool(cache: Path, have_m32: bool) -> None:
    if not have_m32:
        pytest.skip("gcc -m32 unavailable: apt-get install gcc-12-multilib libc6-dev-i386")
    make("examples/bin/server", "examples/bin/worker32", "examples/bin/worker64")
    res = run_example(cache, "jobs.stp", "./examples/bin/server 4 500")
    rows = [line.split() for line in res.stdout.splitlines() if re.match(r"\d+ m(32|64) ", line)]
    by_abi: dict[str, list[int]] = {}
    for _, abi, count in rows:
        by_abi.setdefault(abi, []).append(int(count))
    assert sorted(by_abi["m32"]) == [500, 500]
    assert sorted(by_abi["m64"]) == [4, 500, 500]  # the server's 4 requests, 2 workers


def test_latency_histogram(cache: Path) -> None:
    make("examples/bin/requests")
    res = run_example(cache, "latency.stp", "./examples/bin/requests 40")
    lines = res.stdout.splitlines()
    assert lines[0].startswith("put: 10 requests, avg ") and lines[1].startswith("get: 30 ")
    assert lines[2] == "value |-------------------------------------------------- count"
    assert sum(int(line.split()[-1]) for line in lines[3:] if "|" in line) == 40


def test_marks_glob(cache: Path) -> None:
    make("examples/bin/requests")
    res = run_example(cache, "marks.stp", "./examples/bin/requests 7")
    assert res.stdout.split() == ["request__start", "7", "request__done", "7"]


def test_python_imports(cache: Path) -> None:
    if not PYTHON311.exists():
        pytest.skip("Debian's /usr/bin/python3.11 is not installed (apt-get install python3.11)")
    res = run_example(cache, "python_imports.stp", f"{PYTHON311} examples/src/imports.py")
    assert "import colorsys     found" in res.stdout.splitlines()
    assert "import fractions    found" in res.stdout.splitlines()
