"""A session is transparent and ends in bounded time with an honest report:
target() right from the first instruction, a consumer that goes away, deep
expressions, commands a shell would run, clear refusals of what pydyn cannot do."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from cbuild import build_c, have_m32, run_pydyn

EARLY_C = r"""
#include <sys/sdt.h>
#include <stdio.h>
int main(void) {
    DTRACE_PROBE(early, first);            /* main's first instructions */
    for (int i = 0; i < 3; i++)
        DTRACE_PROBE(early, first);
    return 0;
}
"""

BUSY_C = r"""
#include <sys/sdt.h>
#include <stdio.h>
#include <stdlib.h>
int main(int argc, char **argv) {
    long n = atol(argv[1]);
    for (long i = 0; i < n; i++)
        DTRACE_PROBE1(busy, tick, i);
    fprintf(stderr, "busy done %ld\n", n);
    return 0;
}
"""


def _build(tmp: Path, name: str, src: str, abi: str) -> Path:
    m32 = abi == "m32"
    if m32 and not have_m32():
        pytest.skip("no -m32 toolchain (gcc-multilib)")
    c = tmp / f"{name}.c"
    c.write_text(src)
    return build_c(c, tmp / f"{name}_{abi}", m32=m32)


@pytest.fixture(scope="module", params=["m64", "m32"])
def early(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory,
          sdt_cflags: object) -> Path:
    return _build(tmp_path_factory.mktemp("early"), "early", EARLY_C, request.param)


@pytest.fixture(scope="module", params=["m64", "m32"])
def busy(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory,
         sdt_cflags: object) -> Path:
    return _build(tmp_path_factory.mktemp("busy"), "busy", BUSY_C, request.param)


# -- target() --------------------------------------------------------------------------

@pytest.mark.parametrize("shape,who", [("{p}", "pid()"), ("sh -c 'exec {p}'", "pid()"),
                                       ("sh -c '{p}'", "ppid()")])
def test_target_is_right_from_the_first_hit(early: Path, cache: Path, shape: str,
                                            who: str) -> None:
    """target() is the -c command's process from its first instruction on: the
    program itself, or the shell when the shell forks it (stap's semantics)."""
    script = (f'global bad, good probe process("{early}").mark("first") '
              f'{{ if ({who} != target() || target() == 0) bad++; else good++ }} '
              'probe end { printf("bad=%d good=%d\\n", bad, good) }')
    cmd = shape.format(p=early)
    for _ in range(20):
        res = run_pydyn(cache, "-e", script, "-c", cmd, timeout=60)
        assert res.returncode == 0, res.stderr
        assert "bad=0 good=4\n" in res.stdout, res.stdout + res.stderr


# -- a consumer that goes away -----------------------------------------------------------

def _cpu_ticks(pid: int) -> int:
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return int(fields[11]) + int(fields[12])   # utime + stime


def test_reader_that_goes_away_ends_the_session_and_frees_the_target(busy: Path,
                                                                     cache: Path) -> None:
    """`pydyn ... | head -1`: one line read, the pipe closed; pydyn ends promptly as a
    tool killed by SIGPIPE, no traceback; the target runs on, not blocked on the ring."""
    script = (f'probe process("{busy}").mark("tick") {{ printf("tick %d\\n", $arg1) }}')
    env = dict(os.environ, PYDYN_CACHE_DIR=str(cache))
    warm = run_pydyn(cache, "-p4", "-e", script, "-c", f"{busy} 1")   # build outside the clock
    assert warm.returncode == 0, warm.stderr
    proc = subprocess.Popen([sys.executable, "-m", "pydyn.launcher.cli", "-v", "-e", script,
                             "-c", f"{busy} 2000000000"], env=env,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    target = 0
    try:
        assert proc.stdout is not None and proc.stderr is not None
        assert proc.stdout.readline() == b"tick 0\n"
        proc.stdout.close()                       # the reader goes away
        closed = time.monotonic()
        proc.wait(timeout=30)
        ended = time.monotonic() - closed
        err = proc.stderr.read1(1 << 20).decode()   # what pydyn wrote (the target holds it)
        target = int(err.split("started ")[1].split(" as pid ")[1].split()[0])
        assert proc.returncode == -signal.SIGPIPE, err
        assert "Traceback" not in err and "BrokenPipe" not in err, err
        assert ended < 10, ended
        # Still running, and running: not asleep on a full ring.
        first = _cpu_ticks(target)
        time.sleep(1.0)
        assert _cpu_ticks(target) - first >= 3, Path(f"/proc/{target}/stat").read_text()
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
        if target:
            try:
                os.kill(target, signal.SIGKILL)
            except ProcessLookupError:
                pass


# -- deep expressions ----------------------------------------------------------------------

@pytest.mark.parametrize("expr", [" + ".join(["1"] * 900), "!" * 900 + "1",
                                  " = ".join(["a"] * 900),
                                  "0; if (a) x = 1 " + "else if (a) x = 2 " * 900],
                         ids=["sum", "not", "assign", "else-if"])
def test_deep_chains_are_one_clean_error(cache: Path, expr: str) -> None:
    res = run_pydyn(cache, "-p3", "-e", f"global a probe begin {{ x = {expr} }}")
    assert res.returncode == 1, res.stderr[-2000:]
    assert "Traceback" not in res.stderr and "RecursionError" not in res.stderr, \
        res.stderr[-2000:]
    assert res.stderr.startswith("<input>:1:"), res.stderr[:300]
    assert "error: script nested too deeply" in res.stderr.splitlines()[0]


@pytest.mark.parametrize("expr", [" + ".join(["1"] * 450), "-~" * 220 + "1",
                                  '"a"' + ' . "a"' * 450],
                         ids=["sum", "unary", "concat"])
def test_chains_within_the_limit_translate(cache: Path, expr: str) -> None:
    res = run_pydyn(cache, "-p3", "--disable-cache", "-e",
                    f"probe begin {{ x = {expr}; println(x) }}")
    assert res.returncode == 0, res.stderr[-3000:]
    assert "probe_" in res.stdout


# -- commands a shell would run, and clear refusals ------------------------------------------

def _count_busy(prog: Path) -> str:
    return (f'global n probe process("{prog}").mark("tick") {{ n++ }} '
            'probe end { printf("n=%d\\n", n) }')


@pytest.mark.parametrize("shebang", [True, False], ids=["shebang", "plain"])
def test_script_as_the_command(busy: Path, cache: Path, tmp_path: Path, shebang: bool) -> None:
    """-c ./script.sh runs as a shell would run it: by its #! interpreter, or by sh."""
    script = tmp_path / "run.sh"
    script.write_text(("#!/bin/sh\n" if shebang else "") + f"{busy} 7\n{busy} 5\n")
    script.chmod(0o755)
    res = run_pydyn(cache, "-e", _count_busy(busy), "-c", str(script))
    assert res.returncode == 0, res.stderr
    assert "n=12\n" in res.stdout, res.stdout + res.stderr


def test_target_with_damaged_section_headers_runs(busy: Path, cache: Path,
                                                  tmp_path: Path) -> None:
    """The kernel reads no section header: nor does the -c check, if nothing probes it."""
    import struct
    raw = bytearray(busy.read_bytes())
    if raw[4] == 2:
        struct.pack_into("<Q", raw, 0x28, len(raw) + 100_000)   # e_shoff past the end
    else:
        struct.pack_into("<I", raw, 0x20, len(raw) + 100_000)
    damaged = tmp_path / "damaged"
    damaged.write_bytes(bytes(raw))
    damaged.chmod(0o755)
    assert subprocess.run([str(damaged), "3"], capture_output=True).returncode == 0
    res = run_pydyn(cache, "-e", _count_busy(busy), "-c", f"sh -c '{damaged} 3; {busy} 4'")
    assert res.returncode == 0, res.stderr
    assert "n=4\n" in res.stdout, res.stdout + res.stderr
    res = run_pydyn(cache, "-e", _count_busy(busy) + " probe begin { }", "-c", f"{damaged} 3")
    assert res.returncode == 0, res.stderr
    assert "n=0\n" in res.stdout, res.stdout + res.stderr


def test_several_x_are_refused(cache: Path) -> None:
    res = run_pydyn(cache, "-u", "-e", "probe begin { }", "-x", "1", "-x", str(os.getpid()))
    assert res.returncode == 1
    assert res.stderr == (f"pydyn: error: -x given 2 times (1, {os.getpid()}): a session "
                          "attaches to one process (run one pydyn per process)\n")


def test_list_with_x_is_refused(cache: Path, busy: Path) -> None:
    res = run_pydyn(cache, "-l", f'process("{busy}").mark("*")', "-x", str(os.getpid()))
    assert res.returncode == 1
    assert res.stderr.startswith("pydyn: error: -l/-L list the probe points of files"), \
        res.stderr
    assert len(res.stderr.splitlines()) == 1


def test_symlink_loop_is_named(cache: Path, tmp_path: Path) -> None:
    (tmp_path / "a").symlink_to(tmp_path / "b")
    (tmp_path / "b").symlink_to(tmp_path / "a")
    loop = tmp_path / "a"
    res = run_pydyn(cache, "-u", "-e", "probe begin { }", "-c", str(loop))
    assert res.returncode == 1
    assert res.stderr == f"pydyn: error: {loop}: too many levels of symbolic links\n"
    res = run_pydyn(cache, "-p2", "-e", f'probe process("{loop}").mark("x") {{ }}')
    assert res.returncode == 1
    assert "too many levels of symbolic links" in res.stderr.splitlines()[0], res.stderr


BAD_NOTES_S = r"""
        .text
        .globl main
main:   xor %eax, %eax
        ret
        .section .stapsdt.base,"aG",@progbits,.stapsdt.base,comdat
        .weak _.stapsdt.base
        .hidden _.stapsdt.base
_.stapsdt.base: .space 1
        .rept 20000
        .pushsection .note.stapsdt,"?","note"
        .balign 4
        .4byte 992f-991f, 994f-993f, 3
991:    .asciz "stapsdt"
992:    .balign 4
993:    .8byte 16, _.stapsdt.base, 0
        .asciz "bad"
        .asciz "note"
        .asciz ""
994:    .balign 4
        .popsection
        .endr
        .section .note.GNU-stack,"",@progbits
"""


def test_bad_notes_are_one_warning_per_binary(cache: Path, tmp_path: Path, busy: Path,
                                              sdt_cflags: object) -> None:
    src = tmp_path / "bad.S"
    src.write_text(BAD_NOTES_S)
    bad = build_c(src, tmp_path / "badnotes")
    res = run_pydyn(cache, "-u", "-p2", "-e", f'probe process("{bad}").mark("*")? {{ }} '
                    f'probe process("{busy}").mark("tick") {{ }}')
    warnings = [ln for ln in res.stderr.splitlines() if "warning" in ln]
    assert warnings == [f"pydyn: warning: {bad}: 20000 probe notes skipped, the first: probe "
                        "bad:note at 0x10: not inside an executable segment (dangling note, "
                        "e.g. after --gc-sections)"], res.stderr[:2000]


def test_control_bytes_are_escaped_in_errors(cache: Path) -> None:
    res = run_pydyn(cache, "-e", 'probe begin { x = "\x1b[2J\x07" ; y = q( }')
    assert res.returncode == 1
    assert "\x1b" not in res.stderr and "\x07" not in res.stderr, repr(res.stderr)
    lines = res.stderr.splitlines()
    assert lines[1] == '    probe begin { x = "\\x1b[2J\\x07" ; y = q( }', lines
    assert lines[2].index("^") == lines[1].index("}"), lines
    res = run_pydyn(cache, "-e", 'probe begin { error("bad \x1b]0;title\x07 thing") }')
    assert "\x1b" not in res.stderr and "\x07" not in res.stderr, repr(res.stderr)
    assert "ERROR: bad \\x1b]0;title\\x07 thing" in res.stderr, res.stderr
