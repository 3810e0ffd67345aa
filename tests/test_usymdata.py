"""usymdata(addr): stap's "name+0xoff/0xsize [path]" for data addresses of
probed objects, from the STT_OBJECT symbols the translator emits only when a script
uses it (tests/progs/usymdata_main.c, m64 and m32)."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from cbuild import PROGS, build_c, run_pydyn

from pydyn.launcher.elf.reader import get_elf_info

SCRIPT = """probe process("{exe}").mark("data") {{
  printf("%s\\n%s\\n%s\\n%s\\n%s\\n%s\\n", usymdata($arg1), usymdata($arg2), usymdata($arg3),
         usymdata($arg4), usymdata($arg5), usymdata($arg6))
  printf("%s\\n%s\\n", usymname($arg1), usymdata($arg7)) }}
probe process("{exe}").library("{lib}").function("lib_addr") {{ }}
"""


@pytest.mark.parametrize("m32", [False, True], ids=["m64", "m32"])
def test_usymdata_names_globals_of_the_program_and_a_library(
        tmp_path: Path, cache: Path, sdt_cflags: object, m32: bool) -> None:
    word = 4 if m32 else 8
    lib = build_c(PROGS / "usymdata_lib.c", tmp_path / "libusd.so", m32=m32,
                  extra=("-shared", "-fPIC"))
    exe = build_c(PROGS / "usymdata_main.c", tmp_path / "usd", m32=m32,
                  extra=(str(lib), f"-Wl,-rpath,{tmp_path}", "-ldl"))
    # -u keeps the empty probe on the library: it makes the library's symbols known
    res = run_pydyn(cache, "-u", "-e", SCRIPT.format(exe=exe, lib=lib), "-c", str(exe),
                    timeout=120)
    assert res.returncode == 0, res.stderr
    lines = res.stdout.splitlines()   # the program's line and the probe's, in any order
    prog = [ln for ln in lines if ln.startswith("literal ")]
    out = [ln for ln in lines if not ln.startswith("literal ")]
    m = re.fullmatch(r"literal 0x([0-9a-f]+) base 0x([0-9a-f]+)", prog[0])
    assert m, lines
    literal, base = int(m.group(1), 16), int(m.group(2), 16)
    segs = get_elf_info(str(exe)).segments
    size = max(s.end for s in segs) - min(s.vaddr for s in segs)
    assert out == [
        f"counter+0x0/{word:#x} [{exe}]",
        f"table+{3 * word:#x}/{8 * word:#x} [{exe}]",
        f"lib_table+{2 * word:#x}/{8 * word:#x} [{lib}]",
        out[3],
        f"{literal:#x} [{exe}+{literal - base:#x}/{size:#x}]",
        f"hidden_flag+0x0/0x4 [{exe}]",
        out[6],
        out[7],
    ], out
    assert re.fullmatch(r"0x[0-9a-f]+", out[3]), out   # the heap: no object's
    assert re.fullmatch(r"0x[0-9a-f]+", out[6]), out   # usymname: functions only
    # no data symbol there: the function's
    assert re.fullmatch(rf"lib_addr\+0x1/0x[0-9a-f]+ \[{re.escape(str(lib))}\]", out[7]), out
