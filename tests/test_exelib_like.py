"""A program and the shared library it calls, probed together as SystemTap's
systemtap.exelib probes its pair: -O3, the debug info of one of them moved to a
separate file (`objcopy --only-keep-debug` / `--strip-debug` / `--add-gnu-debuglink`),
the program PIE or not, m64 and m32.  One session reads a parameter at function
entries in both objects (the DWARF from wherever it is), a mark of the library,
`usymname(uaddr())` against `probefunc()`, and `print_usyms(ubacktrace())` from the
library back through the program's recursion to `main`."""

from __future__ import annotations

import re
import subprocess
from pathlib import Path

import pytest
from cbuild import build_c, run_pydyn

LIB = r"""
#include <sys/sdt.h>
static volatile int acc;

int __attribute__((noinline, noclone)) leaf(int n)
{
    asm volatile ("" : : "r" (n));
    STAP_PROBE1(exel, leafed, n);
    if (n > 1)
        acc = leaf(n - 1);
    return acc + n;
}

int lib_enter(int n)
{
    int r = leaf(n);   /* not a tail call: lib_enter keeps its frame */
    acc = 0;
    return r;
}
"""
EXE = r"""
int lib_enter(int n);
static volatile int sink;

/* noclone: at -O3 gcc would call walk.constprop.N clones, which are other functions */
int __attribute__((noinline, noclone)) walk(int depth)
{
    asm volatile ("" : : "r" (depth));
    if (depth > 1)
        sink = walk(depth - 1);
    else
        sink = lib_enter(3);
    return sink;
}

int main(void)
{
    sink = walk(2);
    return 0;
}
"""
SCRIPT = r"""
global shown
probe process(@1).function("walk") {
  printf("exe %s=%s %d\n", probefunc(), usymname(uaddr()), $depth)
}
probe process(@2).function("leaf") { printf("lib %s=%s %d\n", probefunc(), usymname(uaddr()), $n) }
probe process(@2).mark("leafed") { printf("mark %d\n", $arg1) }
probe process(@2).function("leaf") { if (!shown) { shown = 1; print_usyms(ubacktrace()) } }
"""
# (ABI, the program PIE, which object's debug info is in a separate file)
CASES = [(abi, pie, sep) for abi in ("m64", "m32")
         for pie, sep in ((True, "lib"), (False, "exe"))]
FRAME = re.compile(r"^ 0x[0-9a-f]+ : (\w+)\+0x[0-9a-f]+/0x[0-9a-f]+ \[(.+)\]$")


def _separate_debuginfo(path: Path) -> None:
    for args in (["--only-keep-debug", str(path), f"{path}.debug"], ["--strip-debug", str(path)],
                 [f"--add-gnu-debuglink={path}.debug", str(path)]):
        subprocess.run(["objcopy", *args], check=True, capture_output=True)


@pytest.mark.parametrize(("abi", "pie", "sep"), CASES,
                         ids=[f"{a}-{'pie' if p else 'nopie'}-{s}-debug" for a, p, s in CASES])
def test_program_and_library(tmp_path: Path, abi: str, pie: bool, sep: str,
                             cache: Path) -> None:
    m32 = abi == "m32"
    (tmp_path / "lib.c").write_text(LIB)
    (tmp_path / "exe.c").write_text(EXE)
    lib = build_c(tmp_path / "lib.c", tmp_path / "libexel.so", m32=m32, opt="-O3",
                  extra=("-g", "-fPIC", "-shared"))
    exe = build_c(tmp_path / "exe.c", tmp_path / "exe", m32=m32, opt="-O3",
                  extra=("-g", *(("-fPIE", "-pie") if pie else ("-fno-PIE", "-no-pie")),
                         f"-L{tmp_path}", "-lexel", f"-Wl,-rpath,{tmp_path}"))
    _separate_debuginfo(lib if sep == "lib" else exe)
    (tmp_path / "s.stp").write_text(SCRIPT)
    res = run_pydyn(cache, str(tmp_path / "s.stp"), str(exe), str(lib), "-c", str(exe),
                    timeout=180)
    assert res.returncode == 0, res.stderr
    lines = res.stdout.splitlines()
    frames = [ln for ln in lines if ln.startswith(" 0x")]
    assert [ln for ln in lines if not ln.startswith(" 0x")] == [
        "exe walk=walk 2", "exe walk=walk 1", "lib leaf=leaf 3", "mark 3",
        "lib leaf=leaf 2", "mark 2", "lib leaf=leaf 1", "mark 1"], res.stdout
    # the backtrace is printed at the first leaf, before its mark
    assert lines.index(frames[0]) == 3, res.stdout
    named = [(m.group(1), m.group(2)) for m in map(FRAME.match, frames[:5]) if m]
    assert named == [("leaf", str(lib)), ("lib_enter", str(lib)), ("walk", str(exe)),
                     ("walk", str(exe)), ("main", str(exe))], frames
    assert frames[0].split(" : ")[1].startswith("leaf+0x0/"), frames
