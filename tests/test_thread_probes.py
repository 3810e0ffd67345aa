"""process.thread.begin and process.thread.end: in each thread the program creates,
before its start routine and as it ends (returned, pthread_exit, cancelled), m64 and
m32; the main thread is process.begin's.  A point naming another program stays
silent."""

from __future__ import annotations

from pathlib import Path

import pytest
from cbuild import PROGS, build_c, run_pydyn

N = 6


@pytest.mark.parametrize("abi", ["m64", "m32"])
def test_every_created_thread_begins_and_ends(cache: Path, tmp_path: Path, abi: str) -> None:
    exe = build_c(PROGS / "thread_ends.c", tmp_path / "thread_ends", m32=abi == "m32",
                  extra=("-pthread",))
    other = build_c(PROGS / "thread_ends.c", tmp_path / "other", m32=abi == "m32",
                    extra=("-pthread",))
    script = f"""
global began, ended, in_main, tids, work_tids, any_begin, others
probe process("{exe}").thread.begin {{
    began++; if (tid() == pid()) in_main++; tids[tid()] = 1
}}
probe process("{exe}").thread.end {{ ended++; if (!([tid()] in tids)) in_main++ }}
probe process("{exe}").mark("work") {{ work_tids[tid()] = $arg1 }}
probe process.thread.begin {{ any_begin++ }}
probe process("{other}").thread.begin, process("{other}").thread.end {{ others++ }}
probe end {{
    same = 0
    foreach (t in work_tids) if ([t] in tids) same++
    printf("began=%d ended=%d in_main=%d same=%d any=%d others=%d\\n",
           began, ended, in_main, same, any_begin, others)
}}
"""
    res = run_pydyn(cache, "-e", script, "-c", f"{exe} {N}")
    assert res.returncode == 0, res.stderr[-2000:]
    assert f"joined {N}" in res.stdout
    assert (f"began={N} ended={N} in_main=0 same={N} any={N} others=0"
            in res.stdout), res.stdout + res.stderr[-2000:]
