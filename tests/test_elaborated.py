"""-p2 prints the elaborated script as stap -p2 does (launcher/elaborated.py): typed
globals and functions, and each probe at the concrete points it resolved to in a real
program (a function by its DWARF name and line, a USDT mark as the statement at its
note's address), with the code address and the chain back to the probe as written.
m64 and m32, -O0 -g."""

from __future__ import annotations

import re
import subprocess
from collections.abc import Callable
from pathlib import Path

import pytest
from cbuild import build_c, mark_pc, run_pydyn

PROG = r"""#include <stdio.h>
#include <sys/sdt.h>
__attribute__((noinline)) long work(long n)
{
    DTRACE_PROBE1(app, tick, n);
    return n * 2;
}
int main(void)
{
    long t = 0;
    for (int i = 0; i < 3; i++)
        t += work(i);
    printf("%ld\n", t);
    return 0;
}
"""


def _symbol(exe: Path, name: str) -> int:
    out = subprocess.run(["nm", str(exe)], capture_output=True, text=True, check=True).stdout
    return next(int(m.group(1), 16) for m in re.finditer(r"^([0-9a-f]+) T (\w+)$", out, re.M)
                if m.group(2) == name)


@pytest.mark.parametrize("abi", ["m64", "m32"])
def test_p2_prints_the_resolved_typed_script(cache: Path, tmp_path: Path, abi: str,
                                             sdt_cflags: Callable[[bool], tuple[str, ...]]
                                             ) -> None:
    src = tmp_path / "app.c"
    src.write_text(PROG)
    exe = build_c(src, tmp_path / "app", m32=abi == "m32", opt="-O0",
                  extra=("-g", *sdt_cflags(abi == "m32")))
    script = tmp_path / "s.stp"
    script.write_text(f"""global hits, vals, label = "x"
function twice:long (v) {{ w = v * 2; return w }}
probe process("{exe}").function("work") {{ hits = twice(hits) + 1; vals[label] <<< $n }}
probe process("{exe}").mark("tick") {{ x = $arg1; vals["m"] <<< x }}
probe end {{ printf("%d %s\\n", hits, label) }}
""")
    res = run_pydyn(cache, "-p2", str(script))
    assert res.returncode == 0, res.stderr
    lines = res.stdout.splitlines()
    note = mark_pc(exe, "tick")
    work = _symbol(exe, "work")
    # both programs are position-independent (Debian's default): offsets are addresses
    assert lines[:7] == ["# globals", "hits:long", "vals:stats [string]", "label:string",
                         "# functions", "twice:long (v:long)", "  # locals"], lines
    assert lines[7:9] == ["  w:long", "# probes"], lines
    func = re.escape(f'process("{exe}").function("work@') + r"[^\"]*app\.c:3" + \
        re.escape(f'") /* pc=.dynamic+{work:#x} */ /*  <- process("{exe}").function("work") */ ')
    assert re.fullmatch(func, lines[9]), lines[9]
    assert lines[10].startswith("    plan: "), lines
    stmt = f'process("{exe}").statement({note:#x})'
    mark = (f'{stmt} /* pc=.dynamic+{note:#x} */ /*  <- {stmt} <- process("{exe}")'
            f'.provider("app").mark("tick") <- process("{exe}").mark("tick") */ ')
    at = lines.index(mark)
    assert lines[at + 1].startswith("    plan: ") and lines[at + 2:at + 4] == \
        ["  # locals", "  x:long"], lines
    assert lines[-1] == "end /*  <- end */ ", lines
    # -v: the initial values and every body
    verbose = run_pydyn(cache, "-v", "-p2", str(script))
    assert verbose.returncode == 0, verbose.stderr
    out = verbose.stdout.splitlines()
    assert 'label:string = "x"' in out
    assert out[out.index("  w:long") + 1:out.index("  w:long") + 5] == [
        "{", "  (w) = ((v) * (2));", "  return w;", "}"], out
    assert out[-4:] == ["end /*  <- end */ ", "{", '  printf("%d %s\\n", hits, label);', "}"], out


def test_p2_of_probes_without_sites(cache: Path) -> None:
    res = run_pydyn(cache, "-p2", "-e", "global n probe begin, timer.ms(100) { n++ } "
                    "probe oneshot { println(n) }")
    assert res.returncode == 0, res.stderr
    assert res.stdout.splitlines() == [
        "# globals", "n:long", "# probes",
        "begin /*  <- begin,timer.ms(100) */ ", "timer.ms(100) /*  <- begin,timer.ms(100) */ ",
        "begin /*  <- oneshot */ "]
