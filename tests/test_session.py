"""Session-level behaviour on real processes: passes, -v, refusal of a module
built from another source, Ctrl-C, a missing toolchain, segment hygiene."""

from __future__ import annotations

import os
import signal
import subprocess
import time
from pathlib import Path

import pytest
from cbuild import build_c, run_pydyn, start_pydyn

ROOT = Path(__file__).resolve().parent.parent
COUNTER = ROOT / "examples" / "src" / "counter.c"

LOOP_C = r"""
#include <stdio.h>
#include <unistd.h>
#include <sys/sdt.h>
int main(int argc, char **argv) {
    (void)argc; (void)argv;
    for (long i = 0;; i++) { DTRACE_PROBE1(pydyn_test, spin, i); usleep(1000); }
}
"""


@pytest.fixture(scope="module")
def counter(tmp_path_factory: pytest.TempPathFactory, sdt_cflags: object) -> Path:
    return build_c(COUNTER, tmp_path_factory.mktemp("bin") / "counter")


@pytest.fixture(scope="module")
def counter32(tmp_path_factory: pytest.TempPathFactory, sdt_cflags: object,
              have_m32: bool) -> Path:
    if not have_m32:
        pytest.skip("gcc -m32 unavailable: apt-get install gcc-12-multilib libc6-dev-i386")
    return build_c(COUNTER, tmp_path_factory.mktemp("bin32") / "counter32", m32=True)


def count_script(binary: Path) -> str:
    return (f'global hits, total\nprobe process("{binary}").mark("tick") '
            "{ hits++; total += $arg1 }\n"
            'probe end { printf("hits=%d total=%d\\n", hits, total) }\n')


def segments_of(launcher_pid: int) -> set[str]:
    """Segment names carry the launcher's pid."""
    return {p.name for p in Path("/dev/shm").glob(f"pydyn.{launcher_pid}.*")}


def test_passes_print_what_they_made(counter: Path, cache: Path) -> None:
    script = count_script(counter)
    p2 = run_pydyn(cache, "-p2", "-e", script)
    assert p2.returncode == 0, p2.stderr
    assert 'mark("tick")' in p2.stdout or "tick" in p2.stdout
    p3 = run_pydyn(cache, "-p3", "-e", script)
    assert p3.returncode == 0
    assert '#include "pd_runtime.h"' in p3.stdout and "pd_module" in p3.stdout
    p4 = run_pydyn(cache, "-p4", "-e", script)
    paths = p4.stdout.split()
    assert paths[0].endswith("_m64.so") and Path(paths[0]).is_file()
    if len(paths) > 1:
        assert paths[1].endswith("_m32.so") and Path(paths[1]).is_file()
    # The names carry the source checksum, the same for both ABIs.
    assert len({Path(p).name.split("_")[1] for p in paths}) == 1


def test_verbose_reports_passes_processes_and_cache(counter32: Path, cache: Path) -> None:
    script = count_script(counter32)
    first = run_pydyn(cache, "-v", "-e", script, "-c", f"{counter32} 100")
    assert first.returncode == 0, first.stderr
    assert "hits=100 total=4950" in first.stdout
    for n in (1, 2, 3, 4):
        assert f"Pass {n}:" in first.stderr
    assert "m32" in first.stderr and f"{counter32}" in first.stderr
    assert "site(s) armed" in first.stderr
    again = run_pydyn(cache, "-v", "-e", script, "-c", f"{counter32} 100")
    assert "Pass 4: using cached" in again.stderr
    assert "hits=100 total=4950" in again.stdout


def test_module_from_another_source_refuses_to_attach(counter: Path, cache: Path) -> None:
    other = run_pydyn(cache, "-p4", "-e", 'probe begin { println("other") }')
    other_m64 = other.stdout.split()[0]
    # The inner LD_PRELOAD names a module of another script; pydyn's own entry is
    # put back first by the runtime, so both load and only the foreign one refuses.
    cmd = f"env LD_PRELOAD={other_m64} {counter} 50"
    res = run_pydyn(cache, "-e", count_script(counter), "-c", cmd)
    assert res.returncode == 0, res.stderr
    assert "hits=50 total=1225" in res.stdout
    refusals = [line for line in res.stderr.splitlines() if "built from another source" in line]
    assert refusals, res.stderr
    assert "probes not armed" in refusals[0]
    assert "refused the session" in res.stderr  # counted in the segment, reported at exit


def test_ctrl_c_ends_the_session_in_order(tmp_path: Path, cache: Path,
                                          sdt_cflags: object) -> None:
    src = tmp_path / "loop.c"
    src.write_text(LOOP_C)
    loop = build_c(src, tmp_path / "loop")
    script = (f'global n\nprobe process("{loop}").mark("spin") {{ n++ }}\n'
              'probe end { printf("end ran, n>0=%d\\n", n > 0) }\n')
    proc = start_pydyn(cache, "-e", script, "-c", str(loop), start_new_session=False)
    deadline = time.monotonic() + 60  # compiling may be slow on a loaded machine
    while not segments_of(proc.pid) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert segments_of(proc.pid), "the session's segment should exist while it runs"
    time.sleep(0.5)  # let some probes fire
    proc.send_signal(signal.SIGINT)
    out, err = proc.communicate(timeout=30)
    assert "end ran, n>0=1" in out, err
    assert "Traceback" not in err
    assert not segments_of(proc.pid)


def test_missing_m32_toolchain_is_one_clear_error(tmp_path: Path, counter32: Path,
                                                  cache: Path) -> None:
    fake = tmp_path / "gcc"
    fake.write_text('#!/bin/sh\nfor a in "$@"; do [ "$a" = -m32 ] && exit 1; done\n'
                    'exec gcc "$@"\n')
    fake.chmod(0o755)
    script = count_script(counter32) + "probe begin { println(1) }\n"  # a fresh source
    res = run_pydyn(tmp_path / "fresh-cache", "-e", script, "-c", str(counter32),
                    env={"CC": str(fake)})
    assert res.returncode == 1
    assert "no m32 toolchain" in res.stderr and "libc6-dev-i386" in res.stderr
    assert len(res.stderr.strip().splitlines()) == 1
    assert "Traceback" not in res.stderr


def test_no_segment_left_behind(counter: Path, cache: Path) -> None:
    # Only this session's segment (its command prints the name): other sessions of
    # the machine come and go meanwhile.
    res = run_pydyn(cache, "-e", count_script(counter), "-c",
                    f"sh -c 'echo \"segment=$PYDYN_SHM\"; {counter} 10'")
    assert res.returncode == 0, res.stderr
    name = res.stdout.split("segment=/")[1].split()[0].split(":")[0]
    assert name.startswith("pydyn."), res.stdout
    assert not Path("/dev/shm", name).exists()


def test_output_is_lossless_when_the_ring_fills(counter: Path, cache: Path) -> None:
    # 150k lines of ~20 bytes through a 1 MiB ring: producers must wait, never drop.
    n = 150_000
    script = (f'probe process("{counter}").mark("tick") {{ printf("line %d\\n", $arg1) }}\n')
    res = run_pydyn(cache, "-s", "1", "-e", script, "-c", f"{counter} {n}")
    assert res.returncode == 0, res.stderr
    lines = [line for line in res.stdout.splitlines() if line.startswith("line ")]
    assert lines == [f"line {i}" for i in range(n)]
    assert "WARNING" not in res.stderr


def test_output_after_exit_in_the_same_handler_is_kept(counter: Path, cache: Path) -> None:
    # exit() does not unwind its handler (as in stap): what the handler prints after
    # it still reaches the output, though the launcher ends the session meanwhile.
    script = (f'global x\nprobe process("{counter}").mark("tick") {{ printf("before\\n"); '
              'exit(); for (i = 0; i < 30000000; i++) x++; printf("after %d\\n", x) }')
    res = run_pydyn(cache, "-D", "MAXACTION=100000000", "-e", script, "-c", f"{counter} 3")
    assert res.returncode == 0, res.stderr
    assert [ln for ln in res.stdout.splitlines() if not ln.startswith("counter:")] \
        == ["before", "after 30000000"], res.stdout


def test_segments_of_dead_sessions_are_removed(cache: Path) -> None:
    # A launcher killed with SIGKILL leaves its segment; the next run removes it.
    dead = subprocess.Popen(["true"])
    dead.wait()
    stale = Path(f"/dev/shm/pydyn.{dead.pid}.0123456789abcdef")
    stale.write_bytes(b"\0" * 4096)
    res = run_pydyn(cache, "-v", "-e", "probe begin { exit() }")
    assert res.returncode == 0, res.stderr
    # Gone (another session of the machine may have been first: no message then).
    assert not stale.exists()


def test_stale_segment_removal_touches_only_dead_launchers(tmp_path: Path) -> None:
    """remove_stale_segments on a directory of this test's own: which names go."""
    from pydyn.launcher.session import remove_stale_segments
    dead = subprocess.Popen(["true"])
    dead.wait()
    names = [f"pydyn.{dead.pid}.0123456789abcdef", f"pydyn.{os.getpid()}.0123456789abcdef",
             f"pydyn.{os.getppid()}.0123456789abcdef", "pydyn.x.y", "other.1.2"]
    for n in names:
        (tmp_path / n).write_bytes(b"")
    assert remove_stale_segments(tmp_path) == [names[0]]
    assert sorted(p.name for p in tmp_path.iterdir()) == sorted(names[1:])
