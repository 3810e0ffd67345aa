"""Separate debug files: a binary stripped of its DWARF finds it through
`.gnu_debuglink` (CRC checked; beside the binary, in `.debug/`, under a root
plus the binary's directory) or through its build-id (`ROOT/.build-id/xx/
yyyy.debug`, Debian's -dbgsym layout).  Each test owns its debug root through
SYSTEMTAP_DEBUGINFO_PATH, so nothing depends on the machine's /usr/lib/debug.

The programs are tests/progs/dwarf_params.c at -O0 and -O2, m64 and m32; the
probes print `$a`/`$b` of add(i - 1, 1000 * i), checked exactly.
"""

from __future__ import annotations

import os
import shutil
import subprocess
from collections.abc import Callable
from pathlib import Path

import pytest
from cbuild import BUILDS, PROGS, Build, build_c, run_pydyn

from pydyn.launcher.elf.debuginfo import file_crc, find_debug_file

SRC = PROGS / "dwarf_params.c"
SCRIPT = 'probe process("{exe}").function("add") {{ printf("add %d %d\\n", $a, $b) }}'
WANT = [f"add {i - 1} {1000 * i}" for i in range(3)]


def objcopy(*args: str | Path) -> None:
    subprocess.run(["objcopy", *map(str, args)], check=True, capture_output=True)


def build_id(path: Path) -> str:
    out = subprocess.run(["readelf", "-n", str(path)], capture_output=True, text=True,
                         check=True).stdout
    for line in out.splitlines():
        if "Build ID:" in line:
            return line.split()[-1]
    raise AssertionError(f"{path} has no build-id")


def split(tmp: Path, b: Build, name: str = "prog", link: bool = True) -> tuple[Path, Path]:
    """`name` built with -g, then its DWARF moved to NAME.debug (beside it) and the
    binary stripped of it, with a debug link to NAME.debug if `link`."""
    exe = build_c(SRC, tmp / name, m32=b.m32, opt=b.opt, extra=("-g",))
    dbg = tmp / f"{name}.debug"
    objcopy("--only-keep-debug", exe, dbg)
    if link:
        objcopy("--strip-debug", f"--add-gnu-debuglink={dbg}", exe)
    else:
        objcopy("--strip-debug", "--remove-section=.gnu_debuglink", exe)
    out = subprocess.run(["readelf", "-S", str(exe)], capture_output=True, text=True).stdout
    assert ".debug_info" not in out
    return exe, dbg


def probe_adds(cache: Path, exe: Path) -> subprocess.CompletedProcess[str]:
    """The probe run on a module cache of its own (`new_cache`: the session's runtime
    objects, no module built before)."""
    return run_pydyn(cache, "-e", SCRIPT.format(exe=exe), "-c", f"{exe} 3", timeout=120)


def assert_adds(res: subprocess.CompletedProcess[str]) -> None:
    assert res.returncode == 0, res.stderr
    assert [ln for ln in res.stdout.splitlines() if ln.startswith("add ")] == WANT, res.stdout


@pytest.mark.parametrize("b", BUILDS, ids=[b.id for b in BUILDS])
def test_debuglink_beside_the_binary(tmp_path: Path, b: Build,
                                     monkeypatch: pytest.MonkeyPatch,
                                     new_cache: Callable[[str], Path]) -> None:
    monkeypatch.setenv("SYSTEMTAP_DEBUGINFO_PATH", f"+:.debug:{tmp_path}/root")
    exe, dbg = split(tmp_path, b)
    assert find_debug_file(str(exe)).path == str(dbg)
    assert_adds(probe_adds(new_cache("cache2"), exe))


@pytest.mark.parametrize("b", BUILDS, ids=[b.id for b in BUILDS])
def test_build_id_layout(tmp_path: Path, b: Build, monkeypatch: pytest.MonkeyPatch,
                         new_cache: Callable[[str], Path]) -> None:
    root = tmp_path / "root"
    monkeypatch.setenv("SYSTEMTAP_DEBUGINFO_PATH", f"+:.debug:{root}")
    exe, dbg = split(tmp_path, b, link=False)
    bid = build_id(exe)
    where = root / ".build-id" / bid[:2] / f"{bid[2:]}.debug"
    where.parent.mkdir(parents=True)
    shutil.move(dbg, where)
    assert find_debug_file(str(exe)).path == str(where)
    assert_adds(probe_adds(new_cache("cache"), exe))


def test_debuglink_in_dot_debug_and_under_a_root(tmp_path: Path,
                                                 monkeypatch: pytest.MonkeyPatch,
                                                 new_cache: Callable[[str], Path]) -> None:
    root = tmp_path / "root"
    monkeypatch.setenv("SYSTEMTAP_DEBUGINFO_PATH", f"+:.debug:{root}")
    b = BUILDS[1]
    exe, dbg = split(tmp_path, b)
    (tmp_path / ".debug").mkdir()
    shutil.move(dbg, tmp_path / ".debug" / dbg.name)
    assert find_debug_file(str(exe)).path == str(tmp_path / ".debug" / dbg.name)
    assert_adds(probe_adds(new_cache("cache"), exe))
    # ROOT + the binary's directory, as /usr/lib/debug/usr/bin/prog.debug
    under = root / str(tmp_path).lstrip("/")
    under.mkdir(parents=True)
    shutil.move(tmp_path / ".debug" / dbg.name, under / dbg.name)
    assert find_debug_file(str(exe)).path == str(under / dbg.name)
    assert_adds(probe_adds(new_cache("cache2"), exe))   # not the first run's module


def test_crc_mismatch_is_rejected_and_named(tmp_path: Path,
                                           monkeypatch: pytest.MonkeyPatch,
                                           new_cache: Callable[[str], Path]) -> None:
    monkeypatch.setenv("SYSTEMTAP_DEBUGINFO_PATH", f"+:.debug:{tmp_path}/root")
    exe, dbg = split(tmp_path, BUILDS[1])
    good = file_crc(str(dbg))
    with open(dbg, "ab") as f:   # still an ELF file, no longer the one linked
        f.write(b"\0")
    res = probe_adds(new_cache("cache"), exe)
    assert res.returncode == 1
    err = res.stderr.strip()
    assert "no DWARF debug information" in err and f"{dbg}: CRC" in err, err
    assert f"wants {good:08x}" in err and "Traceback" not in err and len(err.splitlines()) <= 3
    # '-' skips the CRC check, as in elfutils: the file is taken
    monkeypatch.setenv("SYSTEMTAP_DEBUGINFO_PATH", f"-:.debug:{tmp_path}/root")
    assert find_debug_file(str(exe)).path == str(dbg)
    assert_adds(probe_adds(new_cache("cache2"), exe))


def test_build_id_of_another_binary_is_rejected(tmp_path: Path,
                                                monkeypatch: pytest.MonkeyPatch,
                                                new_cache: Callable[[str], Path]) -> None:
    root = tmp_path / "root"
    monkeypatch.setenv("SYSTEMTAP_DEBUGINFO_PATH", f"+:{root}")
    exe, _ = split(tmp_path, BUILDS[1], link=False)
    other, other_dbg = split(tmp_path, BUILDS[3], name="other", link=False)
    bid = build_id(exe)
    where = root / ".build-id" / bid[:2] / f"{bid[2:]}.debug"
    where.parent.mkdir(parents=True)
    shutil.copy(other_dbg, where)
    res = probe_adds(new_cache("cache"), exe)
    assert res.returncode == 1
    assert f"{where}: build-id {build_id(other)}, not {bid}" in res.stderr, res.stderr


def test_nothing_found_names_where_it_looked(tmp_path: Path,
                                            monkeypatch: pytest.MonkeyPatch,
                                            new_cache: Callable[[str], Path]) -> None:
    root = tmp_path / "root"
    monkeypatch.setenv("SYSTEMTAP_DEBUGINFO_PATH", f"+:.debug:{root}")
    exe, dbg = split(tmp_path, BUILDS[0])
    os.unlink(dbg)
    res = probe_adds(new_cache("cache"), exe)
    assert res.returncode == 1
    err = res.stderr
    assert "no DWARF debug information" in err and str(root / ".build-id") in err, err
    assert "SYSTEMTAP_DEBUGINFO_PATH" in err and "Traceback" not in err


LIBC = "/lib/x86_64-linux-gnu/libc.so.6"
FOPEN_C = r"""
#include <stdio.h>
int main(int argc, char **argv)
{
    for (int i = 1; i < argc; i++) {
        FILE *f = fopen(argv[i], "r");
        if (f)
            fclose(f);
    }
    return 0;
}
"""


def libc_debug_file() -> str | None:
    if not os.path.exists(LIBC):
        return None
    return find_debug_file(LIBC, "+:/usr/lib/debug").path


def test_libc_parameters_from_its_dbg_package(tmp_path: Path,
                                              monkeypatch: pytest.MonkeyPatch, cache: Path) -> None:
    """Debian's libc6-dbg: the build-id layout under /usr/lib/debug; a probe on fopen
    reads `$filename` and `$mode`, and the lookup parses one compilation unit of the
    2,000 there (docs/performance.md has the times)."""
    monkeypatch.delenv("SYSTEMTAP_DEBUGINFO_PATH", raising=False)
    dbg = libc_debug_file()
    if dbg is None:
        pytest.skip("libc6-dbg is not installed")
    assert "/.build-id/" in dbg
    from pydyn.launcher.elf.dwarf import get_dwarf
    from pydyn.launcher.elf.functions import get_functions

    fopen = next(f for f in get_functions(LIBC).match("fopen"))
    info = get_dwarf(LIBC)
    func = info.function_at(fopen.addr)
    assert func is not None and [p.name for p in func.params] == ["filename", "mode"]
    assert info.units_read == 1
    src = tmp_path / "fopen.c"
    src.write_text(FOPEN_C)
    exe = build_c(src, tmp_path / "fopen")
    files = [tmp_path / "one", tmp_path / "missing"]
    files[0].write_text("x")
    script = (f'probe process("{LIBC}").function("fopen") {{ '
              'printf("fopen %s %s\\n", user_string($filename), user_string($mode)) }')
    res = run_pydyn(cache, "-e", script, "-c", f"{exe} {files[0]} {files[1]}",
                    timeout=180)
    assert res.returncode == 0, res.stderr
    assert [ln for ln in res.stdout.splitlines() if ln.startswith("fopen ")] == [
        f"fopen {f} r" for f in files], res.stdout


STRLEN_C = r"""
#include <stdio.h>
#include <string.h>
int main(int argc, char **argv)
{
    size_t total = 0;
    for (int i = 1; i < argc; i++)
        total += strlen(argv[i]);
    printf("total=%zu\n", total);
    return 0;
}
"""


def test_ifunc_probes_the_selected_implementation(tmp_path: Path, cache: Path,
                                                  monkeypatch: pytest.MonkeyPatch) -> None:
    """libc's strlen is an IFUNC: the probe goes on the implementation this machine's
    loader selects (named by the debug file's .symtab, e.g. __strlen_avx2), and sees
    the program's calls."""
    monkeypatch.delenv("SYSTEMTAP_DEBUGINFO_PATH", raising=False)
    if libc_debug_file() is None:
        pytest.skip("libc6-dbg is not installed (the implementations' names are in it)")
    from pydyn.launcher.elf.functions import get_functions
    from pydyn.launcher.elf.ifunc import selected_implementation

    table = get_functions(LIBC)
    assert "strlen" in table.ifuncs
    addr, why = selected_implementation(LIBC, "strlen")
    assert addr is not None, why
    impl = table.aliases(addr)[0].name
    assert impl.startswith("__strlen_"), impl
    src = tmp_path / "strlen.c"
    src.write_text(STRLEN_C)
    exe = build_c(src, tmp_path / "strlen")
    words = ["pydyn-one", "pydyn-three"]
    script = (f'probe process("{LIBC}").function("strlen") {{ '
              's = user_string($arg1) if (substr(s, 0, 6) == "pydyn-") '
              'printf("hit %s %s\\n", ppfunc(), s) }')
    res = run_pydyn(cache, "-e", script, "-c", f"{exe} {' '.join(words)}",
                    timeout=180)
    assert res.returncode == 0, res.stderr
    assert [ln for ln in res.stdout.splitlines() if ln.startswith("hit ")] == [
        f"hit {impl} {w}" for w in words], res.stdout
    assert "total=20" in res.stdout
