"""`@cast(p, "struct stat", "<sys/stat.h>")`: as stap, the headers are compiled with
debug information for the probed process's ABI and the type read from there, so a
program without DWARF of its own can be read through a system type (m64, m32)."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
from cbuild import build_c, run_pydyn

PROG = r"""
#include <stdio.h>
#include <sys/sdt.h>
#include <sys/stat.h>
int main(int argc, char **argv)
{
    struct stat st;
    if (argc < 2 || stat(argv[1], &st) != 0)
        return 1;
    DTRACE_PROBE2(t, st, &st, (long)st.st_size);
    printf("%ld\n", (long)st.st_size);
    return 0;
}
"""


@pytest.mark.parametrize("abi", ["m64", "m32"])
def test_a_struct_from_system_headers(cache: Path, tmp_path: Path, abi: str) -> None:
    src = tmp_path / "st.c"
    src.write_text(PROG)
    exe = build_c(src, tmp_path / "st", m32=abi == "m32")   # no -g: no DWARF of its own
    data = tmp_path / "data"
    data.write_bytes(b"x" * 1234)
    os.chmod(data, 0o640)
    script = f"""probe process("{exe}").mark("st") {{
    printf("size=%d mode=%o same=%d\\n", @cast($arg1, "struct stat", "<sys/stat.h>")->st_size,
           @cast($arg1, "struct stat", "<sys/types.h><sys/stat.h>")->st_mode & 0777,
           @cast($arg1, "struct stat", "<sys/stat.h>")->st_size == $arg2)
}}"""
    res = run_pydyn(cache, "-e", script, "-c", f"{exe} {data}")
    assert res.returncode == 0, res.stderr
    assert "size=1234 mode=640 same=1" in res.stdout, res.stdout + res.stderr


def test_a_header_that_does_not_compile(cache: Path, tmp_path: Path) -> None:
    src = tmp_path / "st.c"
    src.write_text(PROG)
    exe = build_c(src, tmp_path / "st")
    res = run_pydyn(cache, "-p2", "-e", f'probe process("{exe}").mark("st") '
                    '{ println(@cast($arg1, "struct stat", "<no/such.h>")->st_size) }')
    assert res.returncode == 1
    assert "the headers do not compile" in res.stderr and "Traceback" not in res.stderr, \
        res.stderr
