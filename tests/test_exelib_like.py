"""Backtraces through shared libraries a script does not probe: `--ldd` adds the
libraries (and the dynamic linker) of the probed programs and of the -c target to
the tables `print_ubacktrace()` reads, as stap's --ldd adds what ldd lists.  A
comparator called back by libc's bsearch is probed: with --ldd its caller is named
`bsearch` in libc and the walk goes on through libc into `main`; without it the
walk ends at libc's first pc, which has no name.  m64 and m32 (-O0: at -O2 glibc's header
inlines bsearch)."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from cbuild import BUILDS, Build, build_c, run_pydyn

SRC = r"""
#include <stdio.h>
#include <stdlib.h>

static const int table[] = {2, 4, 6, 8, 10, 12, 14, 16};

int __attribute__((noinline)) by_value(const void *a, const void *b)
{
    return *(const int *)a - *(const int *)b;
}

int main(void)
{
    int key = 12;
    const int *hit = bsearch(&key, table, 8, sizeof table[0], by_value);
    printf("at %d\n", hit ? (int)(hit - table) : -1);
    return 0;
}
"""
O0 = [b for b in BUILDS if b.opt == "-O0"]
FRAME = re.compile(r"^ 0x[0-9a-f]+ : (\w+)\+0x[0-9a-f]+/0x[0-9a-f]+ \[(.+)\]$")


def _backtrace(cache: Path, exe: Path, *opts: str) -> list[str]:
    script = (f'global n probe process("{exe}").function("by_value") '
              '{ if (!n++) print_ubacktrace() } probe end { delete n }')
    res = run_pydyn(cache, *opts, "-e", script, "-c", str(exe), timeout=150)
    assert res.returncode == 0, res.stderr
    assert res.stdout.startswith("at 5\n") or "at 5\n" in res.stdout, res.stdout
    return [ln for ln in res.stdout.splitlines() if ln.startswith(" 0x")]


@pytest.mark.parametrize("b", O0, ids=[b.id for b in O0])
def test_ldd_names_frames_in_unprobed_libc(tmp_path: Path, b: Build, cache: Path) -> None:
    (tmp_path / "cb.c").write_text(SRC)
    exe = build_c(tmp_path / "cb.c", tmp_path / "cb", m32=b.m32, opt=b.opt, extra=("-g",))
    frames = [FRAME.match(ln) for ln in _backtrace(cache, exe, "--ldd")]
    named = [(m.group(1), m.group(2)) for m in frames if m]
    assert len(named) == len(frames), frames
    assert [n for n, _ in named[:3]] == ["by_value", "bsearch", "main"], named
    assert Path(named[1][1]).name == "libc.so.6" and named[0][1] == named[2][1] == str(exe)

    # without --ldd libc has no tables: its pc ends the walk, reported without a name
    bare = _backtrace(cache, exe)
    assert len(bare) == 2 and FRAME.match(bare[0]) and not FRAME.match(bare[1]), bare
