"""stap's histogram drawing as the runtime does it: runtime/pd_hist.c built alone into a
shared object and called through cffi, for tests that compare a session's output with the
drawing of buckets they compute themselves (and for the drawing's own tests against
stap's .exp texts, test_hist_draw.py).

    draw_log(buckets)                     # print(@hist_log(x)) of 128 bucket counts
    draw_linear(buckets, lo, hi, step)    # print(@hist_linear(x, lo, hi, step))

`width` and `elision` are stap's -D HIST_WIDTH and HIST_ELISION (50 and 2).
"""

from __future__ import annotations

import atexit
import functools
import shutil
import subprocess
import tempfile
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import pytest
from cbuild import CC, have_cc

from pydyn.launcher.build import RUNTIME_DIR
from pydyn.launcher.stats import HIST_LOG_BUCKETS, hist_linear_buckets

CDEF = """size_t pd_hist_draw(char *buf, size_t cap, const int64_t *h, uint32_t n, int log,
                            int64_t start, int64_t interval, int width, int elision);"""


@functools.cache
def _lib() -> tuple[Any, Any]:
    import cffi
    if not have_cc():
        pytest.skip(f"no C compiler ({CC})")
    tmp = tempfile.mkdtemp(prefix="pd_hist.")
    atexit.register(shutil.rmtree, tmp, True)
    so = Path(tmp, "pd_hist.so")
    cmd = [CC, "-shared", "-fPIC", "-O2", "-Wall", "-Wextra", "-Werror",
           str(RUNTIME_DIR / "pd_hist.c"), "-o", str(so)]
    res = subprocess.run(cmd, capture_output=True, text=True)
    if res.returncode != 0:
        pytest.fail(f"compile failed: {' '.join(cmd)}\n{res.stderr}", pytrace=False)
    ffi = cffi.FFI()
    ffi.cdef(CDEF)
    return ffi, ffi.dlopen(str(so))


def draw(buckets: Sequence[int], log: bool, start: int = 0, interval: int = 1, *,
         width: int = 50, elision: int = 2, cap: int = 1 << 16) -> str:
    """pd_hist_draw into a buffer of `cap` bytes: what fits of the drawing."""
    ffi, lib = _lib()
    buf = ffi.new("char[]", cap)
    n = lib.pd_hist_draw(buf, cap, ffi.new("int64_t[]", list(buckets)), len(buckets), log,
                         start, interval, width, elision)
    text = ffi.string(buf).decode("ascii")
    assert len(text) == min(n, cap - 1)
    return text


def draw_log(buckets: Sequence[int], *, width: int = 50, elision: int = 2) -> str:
    assert len(buckets) == HIST_LOG_BUCKETS
    return draw(buckets, True, width=width, elision=elision)


def draw_linear(buckets: Sequence[int], lo: int, hi: int, step: int, *, width: int = 50,
                elision: int = 2) -> str:
    assert len(buckets) == hist_linear_buckets(lo, hi, step)
    return draw(buckets, False, lo, step, width=width, elision=elision)
