"""The launcher's stores into the segment while probe modules read it.

A probe module scans the process table for a free entry (state 0) while the launcher
marks and frees entries without a lock, so every store of a state word must be one
store: a moment of 0 in the middle of a write would let a registering process take an
entry that is still in use.  A reader in C spins on the word in another thread (ctypes
releases the GIL for the call) while Python writes non-zero values through StructView.
"""

from __future__ import annotations

import ctypes
import mmap
import threading
import time

import pytest
from cbuild import have_cc

from pydyn.shmlayout import PD_PROC_EXITED, PD_PROC_KILLED, PROC, StructView

READER = r"""
#include <stdint.h>
/* Spins until *stop: how many reads of *word gave 0, and how many reads in all. */
long count_zeros(volatile uint32_t *word, volatile uint32_t *stop, long *reads)
{
    long zeros = 0, n = 0;
    while (!__atomic_load_n(stop, __ATOMIC_ACQUIRE)) {
        zeros += __atomic_load_n(word, __ATOMIC_RELAXED) == 0;
        n++;
    }
    *reads = n;
    return zeros;
}
"""


@pytest.fixture(scope="module")
def reader(tmp_path_factory: pytest.TempPathFactory) -> ctypes.CDLL:
    if not have_cc():
        pytest.skip("no C compiler (gcc)")
    import subprocess
    d = tmp_path_factory.mktemp("reader")
    (d / "reader.c").write_text(READER)
    subprocess.run(["gcc", "-O2", "-shared", "-fPIC", "-o", str(d / "reader.so"),
                    str(d / "reader.c")], check=True)
    lib = ctypes.CDLL(str(d / "reader.so"))
    lib.count_zeros.restype = ctypes.c_long
    lib.count_zeros.argtypes = (ctypes.c_void_p, ctypes.c_void_p,
                                ctypes.POINTER(ctypes.c_long))
    return lib


@pytest.mark.parametrize("field", ["state", "start_ns"])
def test_integer_stores_never_show_zero(reader: ctypes.CDLL, field: str) -> None:
    mem = mmap.mmap(-1, PROC.sizeof + 64)
    view = StructView(PROC, mem, 0)
    view.state = PD_PROC_KILLED
    view.start_ns = PD_PROC_KILLED
    base = ctypes.addressof(ctypes.c_char.from_buffer(mem))
    word = base + PROC.offset(field)
    stop = base + PROC.sizeof            # a word past the entry
    reads = ctypes.c_long(0)
    out: list[int] = []
    t = threading.Thread(target=lambda: out.append(
        reader.count_zeros(word, stop, ctypes.byref(reads))))
    t.start()
    try:
        # two seconds of stores: struct.pack_into (a zero fill, then the value) shows
        # the reader millions of zeros in that time
        end = time.monotonic() + 2
        while time.monotonic() < end:
            for value in (PD_PROC_KILLED, PD_PROC_EXITED) * 500:
                setattr(view, field, value)
    finally:
        ctypes.c_uint32.from_address(stop).value = 1
        t.join(timeout=30)
    assert out == [0], f"{out[0] if out else '?'} zero reads in {reads.value} while storing"
    assert reads.value > 0


def test_stores_check_the_range() -> None:
    view = StructView(PROC, bytearray(PROC.sizeof), 0)
    with pytest.raises(ValueError, match="state"):
        view.state = -1
    with pytest.raises(ValueError, match="state"):
        view.state = 1 << 32
    with pytest.raises(TypeError):
        view.state = True
    view.state = 0xFFFFFFFF
    assert view.state == 0xFFFFFFFF
    view.start_ns = (1 << 64) - 1
    assert view.start_ns == (1 << 64) - 1
