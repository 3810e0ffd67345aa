"""stap's elision of empty probes: after optimisation a probe whose body does nothing is
dropped with `WARNING: Probe 'NAME' has been elided` (NAME: its point's first component,
pointed at its `probe` keyword), so nothing of it is armed; `-u` keeps and arms it, `-w`
and `-t` drop the warning, `-W` makes it the error, and a script left with no probe is
stap's `no probes found`.  On a real program, m64 and m32: the mark "guarded" sits behind
its semaphore, which the program prints, so the program itself says whether the probe
was armed (the runtime raises a semaphore only for a probe it arms).
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from cbuild import abi_program_fixture, run_pydyn

SRC = r"""
#define _SDT_HAS_SEMAPHORES 1
#include <stdio.h>
#include <stdlib.h>
#include <sys/sdt.h>

__extension__ unsigned short elide_test_guarded_semaphore
    __attribute__((unused)) __attribute__((section(".probes")));
__extension__ unsigned short elide_test_tick_semaphore
    __attribute__((unused)) __attribute__((section(".probes")));

int main(int argc, char **argv)
{
    int n = argc > 1 ? atoi(argv[1]) : 3, guarded = 0;
    printf("sema=%u\n", (unsigned)elide_test_guarded_semaphore);
    for (int i = 0; i < n; i++) {
        if (elide_test_guarded_semaphore) {
            guarded++;
            STAP_PROBE1(elide_test, guarded, i);
        }
        STAP_PROBE1(elide_test, tick, i);
    }
    printf("guarded=%d\n", guarded);
    return 0;
}
"""
N = 5


prog = abi_program_fixture(None, "elide", "prog", text=SRC)


def script(exe: Path, guarded_body: str = "") -> str:
    return (f'global n\n'
            f'probe process("{exe}").mark("guarded") {{{guarded_body}}}\n'
            f'probe process("{exe}").mark("tick") {{ n++ }}\n'
            'probe end { printf("n=%d\\n", n) }\n')


def warning(line: int, source: str, name: str = "process", path: str = "<input>") -> str:
    """stap's warning, with its source line and the caret under `probe`."""
    column = source.index("probe") + 1
    return (f"WARNING: Probe '{name}' has been elided: keyword at {path}:{line}:{column}\n"
            f" source: {source}\n" + " " * (8 + column) + "^\n")


def test_an_empty_probe_is_elided_with_stap_warning(cache: Path, prog: Path) -> None:
    text = script(prog)
    res = run_pydyn(cache, "-e", text, "-c", f"{prog} {N}")
    assert res.returncode == 0, res.stderr
    assert res.stderr == warning(2, text.splitlines()[1]), res.stderr
    # never armed: its semaphore stays down; the other probe of the binary runs
    assert res.stdout.splitlines() == ["sema=0", "guarded=0", f"n={N}"], res.stdout


def test_in_a_script_file_the_warning_names_file_line_and_column(cache: Path, prog: Path,
                                                                 tmp_path: Path) -> None:
    path = tmp_path / "e.stp"
    path.write_text(script(prog).replace("probe process", "  probe process", 1))
    res = run_pydyn(cache, str(path), "-c", f"{prog} {N}")
    assert res.returncode == 0, res.stderr
    assert res.stderr == warning(2, path.read_text().splitlines()[1], path=str(path)), \
        res.stderr


def test_u_keeps_the_empty_probe_armed(cache: Path, prog: Path) -> None:
    res = run_pydyn(cache, "-u", "-e", script(prog), "-c", f"{prog} {N}")
    assert res.returncode == 0, res.stderr
    assert "elided" not in res.stderr, res.stderr
    # armed: the semaphore is up, so the program reaches the mark every iteration
    assert res.stdout.splitlines() == ["sema=1", f"guarded={N}", f"n={N}"], res.stdout
    # -p2 lists the site of the kept probe only with -u
    listed = run_pydyn(cache, "-u", "-p2", "-e", script(prog))
    assert listed.returncode == 0 and "guarded" in listed.stdout, listed.stdout
    listed = run_pydyn(cache, "-p2", "-e", script(prog))
    assert listed.returncode == 0 and "guarded" not in listed.stdout, listed.stdout
    assert "tick" in listed.stdout, listed.stdout


def test_a_body_that_does_something_is_kept(cache: Path, prog: Path) -> None:
    # a statement, or a condition on the probe point, keeps the probe (stap makes the
    # condition a statement of the body)
    for text in (script(prog, " n += 0 "),
                 script(prog).replace('mark("guarded")', 'mark("guarded") if (n >= 0)')):
        res = run_pydyn(cache, "-e", text, "-c", f"{prog} {N}")
        assert res.returncode == 0, res.stderr
        assert "elided" not in res.stderr, res.stderr
        assert res.stdout.splitlines()[:2] == ["sema=1", f"guarded={N}"], res.stdout


def test_nested_empty_blocks_are_empty(cache: Path, prog: Path) -> None:
    text = script(prog, " { } ; { ; { } } ")
    res = run_pydyn(cache, "-e", text, "-c", f"{prog} {N}")
    assert res.returncode == 0, res.stderr
    assert res.stderr == warning(2, text.splitlines()[1]), res.stderr
    assert res.stdout.splitlines()[0] == "sema=0", res.stdout


@pytest.mark.parametrize("option", ["-w", "-t"])
def test_w_and_t_elide_without_a_warning(cache: Path, prog: Path, option: str) -> None:
    res = run_pydyn(cache, option, "-e", script(prog), "-c", f"{prog} {N}")
    assert res.returncode == 0, res.stderr
    assert res.stderr == "", res.stderr
    assert res.stdout.splitlines() == ["sema=0", "guarded=0", f"n={N}"], res.stdout


def test_W_makes_the_warning_the_error(cache: Path, prog: Path) -> None:
    res = run_pydyn(cache, "-W", "-e", script(prog), "-c", f"{prog} {N}")
    assert res.returncode == 1 and res.stdout == "", res.stdout
    assert res.stderr.startswith("<input>:2:1: error: Probe 'process' has been elided\n"), \
        res.stderr


def test_each_point_is_named_once(cache: Path, prog: Path) -> None:
    # one warning a point, named by its first component; a repeat is held back and
    # counted, as stap's duplicate elimination
    text = (f'probe begin, process("{prog}").mark("guarded") {{ }}\n'
            'probe begin { }\nprobe begin { println("hi") }\n')
    res = run_pydyn(cache, "-e", text, "-c", f"{prog} {N}")
    assert res.returncode == 0, res.stderr
    lines = text.splitlines()
    assert res.stderr == (warning(1, lines[0], "begin") + warning(1, lines[0]) +
                          "Number of similar warning messages suppressed: 1.\n"), res.stderr
    # the program's lines and the probe's come through two pipes: any order
    assert sorted(res.stdout.splitlines()) == ["guarded=0", "hi", "sema=0"], res.stdout


def test_when_every_probe_is_elided_there_are_no_probes(cache: Path, prog: Path) -> None:
    text = f'probe process("{prog}").mark("guarded") {{ }}\nprobe end {{ }}\n'
    res = run_pydyn(cache, "-e", text, "-c", f"{prog} {N}")
    # stap's end of pass 2: the warnings, then the error; the program never starts
    assert res.returncode == 1 and res.stdout == "", res.stdout
    lines = text.splitlines()
    assert res.stderr == (warning(1, lines[0]) + warning(2, lines[1], "end") +
                          "pydyn: error: no probes found\nhint: every probe's body is empty, "
                          "and empty probes are elided (-u keeps them)\n"), res.stderr
    # -t: the error without the warnings
    res = run_pydyn(cache, "-t", "-e", text, "-c", f"{prog} {N}")
    assert res.returncode == 1 and res.stdout == "", res.stdout
    assert res.stderr == ("pydyn: error: no probes found\nhint: every probe's body is "
                          "empty, and empty probes are elided (-u keeps them)\n"), res.stderr
    # at -p2 too, and a script with no probe at all is the same error
    for args in (("-p2", "-e", text), ("-e", "global g", "-c", f"{prog} {N}")):
        res = run_pydyn(cache, *args)
        assert res.returncode == 1 and res.stdout == "", res.stdout
        assert re.search(r"^pydyn: error: no probes found$", res.stderr, re.M), res.stderr
    # -u keeps them: the session runs, the probe armed
    res = run_pydyn(cache, "-u", "-e", text, "-c", f"{prog} {N}")
    assert res.returncode == 0, res.stderr
    assert res.stdout.splitlines() == ["sema=1", f"guarded={N}"], res.stdout
