"""Startup cost, proven in work done rather than in time:

- a warm cache hit imports none of the parser, resolver, translator, patch planner,
  pyelftools, capstone, lief or cffi's C parser (sys.modules dumped at exit);
- the hit key needs no parse yet follows what the script's paths name now
  (a retargeted symlink, a relative path from another directory);
- a cold build links the runtime from precompiled objects (the compiler is not
  asked to compile runtime/*.c again), and a damaged object set is reported
  and rebuilt;
- the out-of-line cffi module matches its cdef.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
from cbuild import build_c, pydyn_env, run_pydyn
from test_cache import COUNTER, FakeGcc, key_of, script_for
from test_cache import counter as counter  # noqa: F401 (the module's fixture, shared)

from pydyn.launcher import modffi

# Imported only by a miss: a hit that imports one of them is doing work it need not.
MISS_ONLY = ("pydyn.launcher.script", "pydyn.launcher.script.parser", "pydyn.launcher.resolve",
             "pydyn.launcher.translate", "pydyn.launcher.plan", "pydyn.launcher.elf.reader",
             "pydyn.launcher.elf.stapsdt", "elftools", "capstone", "lief", "pycparser",
             "cffi.cparser",
             # stdlib imports a warm run avoids (~15 ms, ~2 ms, ~2 ms of every start)
             "dataclasses", "inspect", "tempfile", "secrets", "random")

# Only what the run imports: the interpreter's start (site, .pth hooks such as an
# editable install's finder, which imports importlib.resources and tempfile) is not
# pydyn's doing.
HOOK = """
import atexit, json, runpy, sys
out, argv = sys.argv[1], sys.argv[2:]
before = set(sys.modules)
atexit.register(lambda: open(out, "w").write(json.dumps(sorted(set(sys.modules) - before))))
sys.argv = ["pydyn", *argv]
runpy.run_module("pydyn.launcher.cli", run_name="__main__", alter_sys=True)
"""


def imported_by(args: list[str], cache: Path,
                tmp: Path) -> tuple[set[str], subprocess.CompletedProcess[str]]:
    """The modules a pydyn run imported, and the run."""
    dump = tmp / "modules.json"
    res = subprocess.run([sys.executable, "-c", HOOK, str(dump), *args], capture_output=True,
                         text=True, env=pydyn_env(cache), timeout=180)
    assert res.returncode == 0, res.stderr
    return set(json.loads(dump.read_text())), res


def test_warm_hit_imports_no_miss_machinery(tmp_path: Path, warm_cache: Path,
                                            counter: Path) -> None:
    cache = warm_cache
    args = ["-v", "-e", script_for(counter), "-c", f"{counter} 50"]
    cold, res = imported_by(args, cache, tmp_path)
    assert "hits=50 total=1225" in res.stdout
    assert {"pydyn.launcher.translate", "pydyn.launcher.script.parser"} <= cold  # the guard works
    warm, res = imported_by(args, cache, tmp_path)
    assert "hits=50 total=1225" in res.stdout
    assert "Pass 1: using the cached entry of this script" in res.stderr
    assert sorted(m for m in warm if m.split(".")[0] in ("elftools", "capstone", "lief")
                  or m in MISS_ONLY) == []
    assert "pydyn.launcher._pd_launcher_ffi" in warm   # the cdef was not parsed at run time


def test_parse_free_key_follows_paths(tmp_path: Path, warm_cache: Path, counter: Path) -> None:
    cache = warm_cache
    other = build_c(COUNTER, tmp_path / "other", extra=["-DPYDYN_TEST_VARIANT=1",
                                                        "-Wl,--build-id=sha1"], opt="-O1")
    link = tmp_path / "prog"
    link.symlink_to(counter)
    script = script_for(link)
    first = key_of(run_pydyn(cache, "-p4", "-e", script))
    assert key_of(run_pydyn(cache, "-p4", "-e", script)) == first
    link.unlink()
    link.symlink_to(other)
    assert key_of(run_pydyn(cache, "-p4", "-e", script)) != first
    # The same relative path run from a directory where it names another binary.
    (tmp_path / "a").mkdir()
    (tmp_path / "a" / "prog").symlink_to(counter)
    rel = script.replace(f'"{link}"', '"./prog"')

    def key_in(cwd: Path) -> str:
        return key_of(run_pydyn(cache, "-p4", "-e", rel, cwd=cwd))

    here = key_in(tmp_path / "a")
    assert key_in(tmp_path / "a") == here and key_in(tmp_path) != here


def test_cold_build_links_the_precompiled_runtime(tmp_path: Path, counter: Path) -> None:
    gcc = FakeGcc(tmp_path)
    cache = tmp_path / "cache"

    def runtime_compiles() -> list[str]:
        return [c for c in gcc.calls() if " -c " in f" {c} " and "pd_runtime.c" in c]

    res = run_pydyn(cache, "-e", script_for(counter), "-c", f"{counter} 10", env=gcc.env)
    assert res.returncode == 0 and "hits=10 total=45" in res.stdout, res.stderr
    assert len(runtime_compiles()) == 2    # m64 and m32, once each
    sets = sorted((cache / "runtime").iterdir())
    assert [s.name.split("-")[0] for s in sets] == ["m32", "m64"]
    gcc.log.unlink()
    res = run_pydyn(cache, "-e", script_for(counter, "probe begin { println(1) }"), "-c",
                    f"{counter} 10", env=gcc.env)
    assert res.returncode == 0 and "hits=10 total=45" in res.stdout, res.stderr
    assert runtime_compiles() == [] and gcc.calls(), "a new script compiles only its C"
    # A damaged object is noticed (one warning), recompiled, and the module still works.
    obj = sets[1] / "pd_runtime.o"
    obj.write_bytes(obj.read_bytes()[:100])
    res = run_pydyn(cache, "-e", script_for(counter, "probe begin { println(2) }"), "-c",
                    f"{counter} 10", env=gcc.env)
    assert res.returncode == 0 and "hits=10 total=45" in res.stdout, res.stderr
    assert res.stderr.count("is damaged; compiling it again") == 1
    assert len(runtime_compiles()) == 1


@pytest.mark.unit
def test_out_of_line_ffi_is_current() -> None:
    # Stale after a CDEF edit: run `python -m pydyn.launcher.modffi`.
    assert modffi.GENERATED.read_text() == modffi.render()
    from pydyn.launcher import _pd_launcher_ffi
    assert modffi.launcher_ffi() is _pd_launcher_ffi.ffi
