"""The binaries' facts patch planning needs are computed once per binary and shared
(launcher/plan/objfacts.py), their sites' plans are kept per binary (plan/stored.py),
and the modules do not depend on the -c target.

- a plan made from stored facts equals one made without a store, on real binaries
  (the examples, python3.11, PostgreSQL's postgres where installed), for marks and
  for function entries and exits;
- a second new script on the same binary scans nothing (PYDYN_DEBUG_SCANS counts
  every pd_sweep run), and two runs on a new binary at once scan it once;
- `pydyn -p4 SCRIPT` then `pydyn SCRIPT -c CMD` compiles nothing the second time;
- stored site plans equal computed ones (marks, function entries and exits on the
  examples, python3.11 and postgres); another binary, another set of sites, another
  planner version or a damaged file plans again; a copy of a binary takes its plans;
  a new script on places planned before runs with them (m64 and m32) parsing no ELF.
"""

from __future__ import annotations

import dataclasses
import shutil
import subprocess
from collections.abc import Callable
from pathlib import Path

import pytest
from cbuild import build_c, have_m32, run_pydyn, start_pydyn
from test_cache import FakeGcc, script_for
from test_cache import counter as counter  # noqa: F401 (the module's fixture, shared)

from pydyn.launcher import factstore
from pydyn.launcher import plan as patchplan
from pydyn.launcher.elf.functions import get_functions
from pydyn.launcher.elf.stapsdt import get_probe_sites
from pydyn.launcher.plan import objfacts, stored
from pydyn.launcher.plan import returns as retplan

ROOT = Path(__file__).resolve().parent.parent
POSTGRES = Path("/usr/lib/postgresql/15/bin/postgres")
PYTHON = Path("/usr/bin/python3.11")


def _fresh_analysis() -> None:
    objfacts._analyse_cached.cache_clear()


def _plans(binary: Path, root: Path | None, functions: int = 0) -> list[str]:
    """Every mark's plan and the entry and return plans of the first `functions`
    functions with a size, made in this process with the facts store at `root`."""
    _fresh_analysis()
    objfacts.set_cache_root(root)
    try:
        sites = list(get_probe_sites(str(binary)).sites)
        funcs = [f for f in get_functions(str(binary)).functions if f.size > 16][:functions]
        from pydyn.launcher.elf.functions import FunctionSite
        fsites = [FunctionSite(str(binary), "", f.name, f.entry, 0, "", (), 0,
                               sites[0].machine if sites else "x86_64",
                               sites[0].elf_class if sites else 64,
                               is_return=True, func_addr=f.addr, func_size=f.size)
                  for f in funcs]
        patchplan.prepare([*sites, *fsites])
        out = [repr(dataclasses.astuple(patchplan.plan_site(s))) for s in sites]
        for fs in fsites:
            out.append(repr(dataclasses.astuple(patchplan.plan_site(
                dataclasses.replace(fs, is_return=False)))))
            out.append(str(retplan.plan_returns(fs, fs.func_addr, fs.func_size)))
        return out
    finally:
        objfacts.set_cache_root(None)
        _fresh_analysis()


def _binaries(counter: Path) -> list[Path]:
    return [counter, *(p for p in (PYTHON, POSTGRES) if p.exists())]


def test_stored_plans_equal_fresh_ones(tmp_path: Path, counter: Path) -> None:
    for binary in _binaries(counter):
        root = tmp_path / binary.name
        root.mkdir(mode=0o700)
        fresh = _plans(binary, None, functions=40)
        first = _plans(binary, root, functions=40)     # computes and stores
        assert list((root / objfacts.STORE_DIR).glob("*.facts")), binary
        stored = _plans(binary, root, functions=40)    # reads what was stored
        assert fresh == first == stored, binary
        assert any("displace" in p for p in fresh), binary


def test_damaged_facts_are_computed_again(tmp_path: Path, counter: Path) -> None:
    root = tmp_path / "c"
    root.mkdir(mode=0o700)
    fresh = _plans(counter, root)
    for f in (root / objfacts.STORE_DIR).glob("*.facts"):
        f.write_bytes(f.read_bytes()[:-3])
    assert _plans(counter, root) == fresh


def _scans(log: Path) -> list[str]:
    return log.read_text().splitlines() if log.exists() else []


def _mark_script(binary: Path, mark: str, n: int) -> str:
    return f'probe process("{binary}").mark("{mark}") {{ printf("%d {n}\\n", $arg1) }}\n'


def test_second_script_on_a_binary_scans_nothing(tmp_path: Path, counter: Path,
                                                 monkeypatch: pytest.MonkeyPatch,
        new_cache: Callable[[str], Path]) -> None:
    log = tmp_path / "scans.log"
    monkeypatch.setenv(objfacts.SCAN_DEBUG_ENV, str(log))
    cache = new_cache("plan-cache")
    res = run_pydyn(cache, "-p4", "-e", _mark_script(counter, "tick", 1))
    assert res.returncode == 0, res.stderr
    first = _scans(log)
    assert [line.split()[1] for line in first] == ["data", "ranges"], first
    res = run_pydyn(cache, "-p4", "-e", _mark_script(counter, "tick", 2))
    assert res.returncode == 0, res.stderr
    assert _scans(log) == first, "a new script on a known binary scanned it again"
    # the script runs with the facts it got from the store
    res = run_pydyn(cache, "-e", _mark_script(counter, "tick", 2), "-c", f"{counter} 3")
    assert res.returncode == 0 and res.stdout.count(" 2\n") == 3, res.stderr


def test_concurrent_runs_on_a_new_binary_scan_it_once(tmp_path: Path, counter: Path,
                                                      monkeypatch: pytest.MonkeyPatch,
        new_cache: Callable[[str], Path]) -> None:
    log = tmp_path / "scans.log"
    monkeypatch.setenv(objfacts.SCAN_DEBUG_ENV, str(log))
    cache = new_cache("plan-cache")
    target = PYTHON if PYTHON.exists() else counter
    sites = get_probe_sites(str(target)).sites
    mark = sites[0].name if sites else "tick"
    procs = [start_pydyn(cache, "-p3", "-e", _mark_script(target, mark, n),
                         stdout=subprocess.DEVNULL) for n in range(3)]
    for p in procs:
        _out, err = p.communicate(timeout=300)
        assert p.returncode == 0, err
    assert [line for line in _scans(log) if line.endswith(" data")] == [f"{target} data"]


def test_p4_then_c_uses_the_same_modules(tmp_path: Path, counter: Path,
        new_cache: Callable[[str], Path]) -> None:
    gcc = FakeGcc(tmp_path)
    cache = new_cache("plan-cache")
    res = run_pydyn(cache, "-p4", "-e", script_for(counter), env=gcc.env)
    assert res.returncode == 0, res.stderr
    built = res.stdout.split()
    assert built and gcc.calls()
    gcc.arm()      # any compiler call now fails the run
    res = run_pydyn(cache, "-v", "-e", script_for(counter), "-c", f"{counter} 10",
                    env=gcc.env)
    assert res.returncode == 0 and "hits=10 total=45" in res.stdout, res.stderr
    assert gcc.calls() == [], "the -c run compiled again"
    assert "Pass 4: using cached" in res.stderr
    # another -c program: still the same modules (the target is checked, not keyed)
    res = run_pydyn(cache, "-e", script_for(counter), "-c", f"/bin/sh -c '{counter} 4'",
                    env=gcc.env)
    assert res.returncode == 0 and "hits=4 total=6" in res.stdout, res.stderr
    assert gcc.calls() == []


def test_a_bad_target_is_refused_on_a_hit(tmp_path: Path, counter: Path,
        new_cache: Callable[[str], Path]) -> None:
    cache = new_cache("plan-cache")
    res = run_pydyn(cache, "-p4", "-e", script_for(counter))
    assert res.returncode == 0, res.stderr
    plain = tmp_path / "not-executable"
    plain.write_bytes(counter.read_bytes())
    plain.chmod(0o644)
    res = run_pydyn(cache, "-e", script_for(counter), "-c", str(plain))
    assert res.returncode == 1 and "is not executable" in res.stderr, res.stderr
    assert "Traceback" not in res.stderr


def test_a_pathless_probe_keys_the_target(tmp_path: Path, counter: Path,
        new_cache: Callable[[str], Path]) -> None:
    cache = new_cache("plan-cache")
    script = 'global n\nprobe process.mark("tick") { n++ }\nprobe end { printf("n=%d\\n", n) }\n'
    res = run_pydyn(cache, "-e", script, "-c", f"{counter} 5")
    assert res.returncode == 0 and "n=5" in res.stdout, res.stderr
    other = tmp_path / "counter2"
    other.write_bytes(counter.read_bytes() + b"\0")    # same code, another file
    other.chmod(0o755)
    res = run_pydyn(cache, "-v", "-e", script, "-c", f"{other} 3")
    assert res.returncode == 0 and "n=3" in res.stdout, res.stderr


# -- the site plans kept per binary (plan/stored.py) -------------------------------------

def _site_script(binary: Path, functions: list[str], mark: str | None) -> str:
    out = ["global n, r"]
    if mark:
        out.append(f'probe process("{binary}").mark("{mark}") {{ n++ }}')
    for f in functions:
        out.append(f'probe process("{binary}").function("{f}") {{ n++ }}')
        out.append(f'probe process("{binary}").function("{f}").return {{ r += $return }}')
    return "\n".join(out) + "\n"


def _site_plans(text: str, root: Path | None) -> patchplan.SitePlans:
    """`text`'s site plans, made in this process with the facts store at `root`."""
    from pydyn.launcher.resolve import Resolver
    from pydyn.launcher.script import parse_script
    _fresh_analysis()
    objfacts.set_cache_root(root)
    try:
        script, resolution = Resolver(None).resolve_script(parse_script(text, "<test>"))
        return patchplan.plan_sites(script, resolution, {})
    finally:
        objfacts.set_cache_root(None)
        _fresh_analysis()


def _plan_files(root: Path) -> list[Path]:
    return sorted((root / objfacts.STORE_DIR).glob("*" + factstore.PLANS_SUFFIX))


def _exported(binary: Path, n: int) -> list[str]:
    """`n` exported functions of `binary` with a body worth planning."""
    return [f.name for f in get_functions(str(binary)).functions
            if f.size > 32 and f.name.isidentifier()][:n]


def _no_planning(monkeypatch: pytest.MonkeyPatch) -> None:
    def refuse(*_a: object, **_k: object) -> None:
        raise AssertionError("planned again: the stored plans were not used")
    monkeypatch.setattr(patchplan, "_plan_object", refuse)


def test_stored_site_plans_equal_computed_ones(tmp_path: Path, counter: Path,
                                               monkeypatch: pytest.MonkeyPatch) -> None:
    cases = [(counter, "tick", ["main"])]
    if PYTHON.exists():
        cases.append((PYTHON, "function__entry", _exported(PYTHON, 6)))
    if POSTGRES.exists():
        cases.append((POSTGRES, "transaction__commit",
                      ["ExecutorStart", "LWLockAcquire", *_exported(POSTGRES, 12)]))
    mechanisms: set[str] = set()
    for binary, mark, funcs in cases:
        text = _site_script(binary, funcs, mark)
        root = tmp_path / binary.name
        root.mkdir(mode=0o700)
        fresh = _site_plans(text, None)
        first = _site_plans(text, root)            # plans and stores
        assert len(_plan_files(root)) == 1, binary
        with monkeypatch.context() as m:
            _no_planning(m)
            stored = _site_plans(text, root)       # reads what was stored
        assert fresh == first == stored, binary
        assert fresh.marks and fresh.functions, binary
        tactics = {p.tactic for p in fresh.marks.values()} | {
            f.entry.tactic for f in fresh.functions.values()}
        assert "displace" in tactics, binary
        mechanisms |= {f.returns.mechanism for f in fresh.functions.values() if f.returns}
    assert mechanisms == {"exits", "hijack"} or not POSTGRES.exists(), mechanisms


def test_another_binary_or_planner_plans_again(tmp_path: Path, counter: Path,
                                               monkeypatch: pytest.MonkeyPatch) -> None:
    root = tmp_path / "c"
    root.mkdir(mode=0o700)
    text = _site_script(counter, ["main"], "tick")
    fresh = _site_plans(text, root)
    planned: list[int] = []
    compute = patchplan._plan_object

    def counting(*a: object, **k: object) -> object:
        planned.append(1)
        return compute(*a, **k)   # type: ignore[arg-type]

    monkeypatch.setattr(patchplan, "_plan_object", counting)
    # a copy of the binary (same bytes, same build-id) elsewhere: the stored plans
    copy = tmp_path / "copy" / "counter"
    copy.parent.mkdir()
    shutil.copy2(counter, copy)
    assert _site_plans(_site_script(copy, ["main"], "tick"), root) == \
        _site_plans(_site_script(copy, ["main"], "tick"), None)
    assert len(planned) == 1 and len(_plan_files(root)) == 1   # only the storeless one
    # another binary (its own build-id): planned and stored
    other = tmp_path / "other" / "counter"
    other.parent.mkdir()
    build_c(ROOT / "examples" / "src" / "counter.c", other, extra=("-O1",))
    _site_plans(_site_script(other, ["main"], "tick"), root)
    assert len(planned) == 2 and len(_plan_files(root)) == 2
    # another set of sites on the same binary: planned
    _site_plans(_site_script(counter, ["main"], None), root)
    assert len(planned) == 3 and len(_plan_files(root)) == 3
    # another planner (its code or capstone changed): planned again, and equal
    monkeypatch.setattr(stored, "planner_version", lambda: "another planner")
    assert _site_plans(text, root) == fresh
    assert len(planned) == 4 and len(_plan_files(root)) == 4
    # a damaged file: planned again, and equal
    monkeypatch.undo()
    for f in _plan_files(root):
        f.write_bytes(f.read_bytes()[:-7])
    monkeypatch.setattr(patchplan, "_plan_object", counting)
    assert _site_plans(text, root) == fresh
    assert len(planned) == 5


def test_planner_version_follows_the_planning_code(tmp_path: Path,
                                                   monkeypatch: pytest.MonkeyPatch) -> None:
    stored.planner_version.cache_clear()
    before = stored.planner_version()
    plan_dir = Path(stored.__file__).resolve().parent
    copy = tmp_path / "plan"
    shutil.copytree(plan_dir, copy, ignore=shutil.ignore_patterns("__pycache__"))
    (copy / "x86.py").write_text((copy / "x86.py").read_text() + "\n# changed\n")
    monkeypatch.setattr(stored, "_HERE", copy)
    stored.planner_version.cache_clear()
    try:
        assert stored.planner_version() != before
    finally:
        monkeypatch.undo()
        stored.planner_version.cache_clear()
    assert stored.planner_version() == before


@pytest.fixture(scope="module")
def counters(counter: Path, tmp_path_factory: pytest.TempPathFactory) -> list[Path]:
    out = [counter]
    if have_m32():
        out.append(build_c(ROOT / "examples" / "src" / "counter.c",
                           tmp_path_factory.mktemp("bin32") / "counter32", m32=True))
    return out


def _run_script(binary: Path, n: int) -> str:
    return (f'global t, e, r\nprobe process("{binary}").mark("tick") {{ t += $arg1 }}\n'
            f'probe process("{binary}").function("main") {{ e++ }}\n'
            f'probe process("{binary}").function("main").return {{ r = $return }}\n'
            f'probe end {{ printf("{n}: t=%d e=%d r=%d\\n", t, e, r) }}\n')


def test_a_run_with_stored_plans(counters: list[Path], new_cache: Callable[[str], Path]) -> None:
    """A new script on places planned before runs with the stored plans (the plan file
    is read, not written again) and without parsing any ELF file (its headers, sites
    and functions come from the store too), m64 and m32."""
    for binary in counters:
        cache = new_cache("stored-plans")

        res = run_pydyn(cache, "-e", _run_script(binary, 1), "-c", f"{binary} 10")
        assert res.returncode == 0 and "1: t=45 e=1 r=0" in res.stdout, res.stderr
        plans = sorted((cache / objfacts.STORE_DIR).glob("*" + factstore.PLANS_SUFFIX))
        assert len(plans) == 1, binary
        inode = plans[0].stat().st_ino
        res = run_pydyn(cache, "-v", "-e", _run_script(binary, 2), "-c", f"{binary} 20",
                        env={"PYDYN_DEBUG_NO_ELF": "1"})
        assert res.returncode == 0 and "2: t=190 e=1 r=0" in res.stdout, res.stderr
        assert "Pass 4: compiled" in res.stderr       # a new script, not a cache hit
        assert "0 trap" in res.stderr, res.stderr
        assert sorted((cache / objfacts.STORE_DIR).glob("*" + factstore.PLANS_SUFFIX)) == plans
        assert plans[0].stat().st_ino == inode, "the plans were computed again"
