"""Facts computed once per binary and kept in the module cache (launcher/factstore.py):
the function table and the USDT sites read back equal the ones computed, on real
binaries (PostgreSQL's, python3.11's and libjvm's marks where installed); a stripped
binary's table follows its debug file (installed later, the stored table is computed
again and a probe on a static function works); a copy of a binary (same build-id)
under another path takes the stored table under its own path.
"""

from __future__ import annotations

import shutil
import subprocess
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from cbuild import build_c, have_cc, have_m32, run_pydyn

from pydyn.launcher import factstore
from pydyn.launcher.elf import functions as fn
from pydyn.launcher.elf.header import get_build_id
from pydyn.launcher.elf.stapsdt import get_probe_sites

pytestmark = pytest.mark.skipif(not have_cc(), reason="no C compiler")

POSTGRES = Path("/usr/lib/postgresql/15/bin/postgres")
PYTHON = Path("/usr/bin/python3.11")
LIBJVM = Path("/usr/lib/jvm/java-17-openjdk-amd64/lib/server/libjvm.so")
ROOT = Path(__file__).resolve().parent.parent

SRC = r"""
#include <stdio.h>
#include <stdlib.h>
static __attribute__((noinline)) long helper(long x) { return x * 3 + 1; }
int main(int argc, char **argv) {
    long n = argc > 1 ? atol(argv[1]) : 3, s = 0;
    for (long i = 0; i < n; i++) s += helper(i);
    printf("sum %ld\n", s);
    return 0;
}
"""


@pytest.fixture
def store_root(tmp_path: Path) -> Iterator[Path]:
    root = tmp_path / "cache"
    root.mkdir(mode=0o700)
    fn._cache.clear()
    factstore.set_cache_root(root)
    try:
        yield root
    finally:
        factstore.set_cache_root(None)
        fn._cache.clear()


def _table(path: Path) -> tuple[object, ...]:
    fn._cache.clear()
    t = fn.get_functions(str(path))
    return (t.path, t.machine, t.elf_class, t.functions, t.unnamed, t.ifuncs,
            t.exported, t.signed)


def _stored(root: Path) -> list[Path]:
    return sorted((root / factstore.STORE_DIR).glob("*.facts"))


@pytest.fixture(scope="module")
def program(tmp_path_factory: pytest.TempPathFactory) -> Path:
    d = tmp_path_factory.mktemp("prog")
    src = d / "prog.c"
    src.write_text(SRC)
    return build_c(src, d / "prog", extra=("-g",))


@pytest.fixture(scope="module")
def program32(tmp_path_factory: pytest.TempPathFactory) -> Path | None:
    if not have_m32():
        return None
    d = tmp_path_factory.mktemp("prog32")
    src = d / "prog.c"
    src.write_text(SRC)
    return build_c(src, d / "prog32", m32=True, extra=("-g",))


def test_stored_table_equals_computed(store_root: Path, program: Path,
                                      program32: Path | None) -> None:
    for binary in [program, *(p for p in (program32, PYTHON, POSTGRES)
                              if p is not None and p.exists())]:
        factstore.set_cache_root(None)
        fresh = _table(binary)
        factstore.set_cache_root(store_root)
        before = set(_stored(store_root))
        first = _table(binary)                  # computes and stores
        assert set(_stored(store_root)) - before, binary
        stored = _table(binary)                 # reads what was stored
        assert fresh == first == stored, binary


def test_stored_usdt_sites_equal_computed(store_root: Path) -> None:
    counters = [ROOT / "examples" / "bin" / n for n in ("counter", "counter32")]
    binaries = [p for p in (*counters, PYTHON, POSTGRES, LIBJVM) if p.exists()]
    if not any(p in binaries for p in counters):
        pytest.skip("examples not built (make examples)")
    for binary in binaries:
        factstore.set_cache_root(None)
        fresh = get_probe_sites(str(binary))
        factstore.set_cache_root(store_root)
        before = set(_stored(store_root))
        first = get_probe_sites(str(binary))        # computes and stores
        assert set(_stored(store_root)) - before, binary
        stored = get_probe_sites(str(binary))       # reads what was stored
        assert fresh == first == stored and fresh.sites, binary


def test_damaged_table_is_computed_again(store_root: Path, program: Path) -> None:
    fresh = _table(program)
    for f in _stored(store_root):
        f.write_bytes(f.read_bytes()[:-5])
    assert _table(program) == fresh


def test_copy_takes_the_stored_table_under_its_path(store_root: Path, program: Path,
                                                    tmp_path: Path) -> None:
    first = _table(program)
    files = _stored(store_root)
    copy = tmp_path / "elsewhere" / "prog"
    copy.parent.mkdir()
    shutil.copy2(program, copy)
    again = _table(copy)
    assert _stored(store_root) == files            # nothing computed for the copy
    assert again[0] == str(copy.resolve()) and again[1:] == first[1:]


def _strip(program: Path, out_dir: Path) -> tuple[Path, Path]:
    """`program` stripped of its symbols and DWARF, and its debug file beside."""
    out_dir.mkdir()
    stripped, debug = out_dir / "prog", out_dir / "prog.debug"
    subprocess.run(["objcopy", "--only-keep-debug", str(program), str(debug)], check=True)
    subprocess.run(["strip", "--strip-all", "-o", str(stripped), str(program)], check=True)
    return stripped, debug


def test_stripped_binary_table_follows_its_debug_file(
        store_root: Path, program: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
        new_cache: Callable[[str], Path]) -> None:
    if shutil.which("objcopy") is None or shutil.which("strip") is None:
        pytest.skip("no binutils (objcopy, strip)")
    stripped, debug = _strip(program, tmp_path / "s")
    debug_root = tmp_path / "debug"
    monkeypatch.setenv("SYSTEMTAP_DEBUGINFO_PATH", str(debug_root))
    names = {f.name for f in _table(stripped)[3]}          # type: ignore[attr-defined]
    assert "helper" not in names and "main" not in names
    build_id = get_build_id(str(stripped))
    assert build_id
    # the debug file installed after the table was stored: computed again, now with the
    # static functions its .symtab names
    where = debug_root / ".build-id" / build_id[:2] / f"{build_id[2:]}.debug"
    where.parent.mkdir(parents=True)
    shutil.copy(debug, where)
    assert "helper" in {f.name for f in _table(stripped)[3]}  # type: ignore[attr-defined]

    # and a probe on that static function fires in a real run through a cache that
    # stored the table before the debug file came
    cache = new_cache("stripped")
    where.unlink()
    env = {"SYSTEMTAP_DEBUGINFO_PATH": str(debug_root)}
    script = f'global n; probe process("{stripped}").function("helper") {{ n++ }}'
    r = run_pydyn(cache, "-e", script + " probe end { printf(\"n=%d\\n\", n) }",
                  "-c", f"{stripped} 5", env=env)
    assert r.returncode == 1 and "matches no function" in r.stderr, r.stderr
    shutil.copy(debug, where)
    r = run_pydyn(cache, "-e", script + " probe end { printf(\"n=%d\\n\", n) }",
                  "-c", f"{stripped} 5", env=env)
    assert r.returncode == 0, r.stderr
    assert r.stdout.splitlines() == ["sum 35", "n=5"], r.stdout
