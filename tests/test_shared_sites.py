"""Probes that share a site: every probe on one address runs, in script order, once a
hit, whatever the mechanism (trampoline with or without FAST handlers, trap, a function
entry that is also a mark, with its return probes), on real m64 and m32 processes.

tests/progs/shared_sites.c: N times the mark "tick" (i), the semaphore-guarded mark
"guarded" (i), and f(i), whose first instruction is the mark "fmark".
"""

from __future__ import annotations

from pathlib import Path

import pytest
from cbuild import PROGS, build_c, run_pydyn
from test_attach import (
    assert_text_as_in_file,
    hit_ranges,
    read_mem,
    run_attached,
    script_for,
    site_addresses,
    start_target,
)

N = 200
SUM = sum(3 * i + 1 for i in range(N))
MODES = ("auto", "trap")


@pytest.fixture(scope="module", params=["m64", "m32"])
def prog(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("prog") / f"shared_{request.param}"
    # i386: not PIE, so f needs no GOT register before its first instruction, the mark
    return build_c(PROGS / "shared_sites.c", out, m32=request.param == "m32",
                   extra=("-fno-pie", "-no-pie") if request.param == "m32" else ())


def run(cache: Path, prog: Path, script: str, *opts: str) -> list[str]:
    r = run_pydyn(cache, *opts, "-e", script, str(prog), "-c", f"{prog} {N}")
    assert (r.returncode, r.stderr) == (0, ""), r.stderr
    assert f"done {SUM}" in r.stdout.splitlines(), r.stdout
    return r.stdout.splitlines()


@pytest.mark.parametrize("mode", MODES)
def test_probes_on_one_mark(cache: Path, prog: Path, mode: str) -> None:
    """Two FAST probes, then two that read the mark's argument, the second seeing what
    the first wrote: each runs once a hit, in script order."""
    script = """
global a, b, last, ordered, total
probe process(@1).mark("tick") { a++ }
probe process(@1).mark("tick") { b++ }
probe process(@1).mark("tick") { last = $arg1 }
probe process(@1).mark("tick") { if (last == $arg1) ordered++; total += $arg1 }
probe end { printf("a=%d b=%d ordered=%d total=%d\\n", a, b, ordered, total) }
"""
    out = run(cache, prog, script, f"--probe-mode={mode}")
    assert f"a={N} b={N} ordered={N} total={N * (N - 1) // 2}" in out, out


@pytest.mark.parametrize("mode", MODES)
def test_probes_on_a_guarded_mark(cache: Path, prog: Path, mode: str) -> None:
    """The mark fires only while its semaphore is up: sharing the site keeps it up."""
    script = """
global g, h
probe process(@1).mark("guarded") { g += $arg1 }
probe process(@1).mark("guarded") { h++ }
probe end { printf("g=%d h=%d\\n", g, h) }
"""
    out = run(cache, prog, script, f"--probe-mode={mode}")
    assert f"g={N * (N - 1) // 2} h={N}" in out, out


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("mark_first", [False, True], ids=["function-first", "mark-first"])
def test_function_entry_that_is_a_mark(cache: Path, prog: Path, mode: str,
                                       mark_first: bool) -> None:
    """`.function("f")`, `.function("f").return` and `.mark("fmark")` at f's entry: all
    run every call, the entry's probes in script order, the return after them."""
    func = 'probe process(@1).function("f") { fe++; seq = seq * 10 + 1 }'
    mark = 'probe process(@1).mark("fmark") { fm++; seq = seq * 10 + 2 }'
    script = "\n".join([
        "global fe, fm, fr, seq, seqs",
        *((mark, func) if mark_first else (func, mark)),
        'probe process(@1).function("f").return { fr++; seqs[seq * 10 + 3]++; seq = 0 }',
        'probe end { printf("fe=%d fm=%d fr=%d\\n", fe, fm, fr) '
        'foreach (s in seqs) printf("seq %d %d\\n", s, seqs[s]) }', ""])
    out = run(cache, prog, script, f"--probe-mode={mode}")
    assert f"fe={N} fm={N} fr={N}" in out, out
    assert [ln for ln in out if ln.startswith("seq ")] == \
        [f"seq {213 if mark_first else 123} {N}"], out


@pytest.mark.parametrize("abi", ["m64", "m32"])
def test_shared_sites_under_attach_detach_cleanly(cache: Path, tmp_path: Path, abi: str,
                                                  sdt_cflags: object) -> None:
    """-x: test_attach's per-thread script and a second probe on each of its marks; every
    hit seen by both, each probe counted on the mark's semaphore, and at the detach
    every byte and semaphore back."""
    binary = build_c(PROGS / "attach_loop.c", tmp_path / f"loop_{abi}", m32=abi == "m32",
                     extra=["-pthread"])
    target = start_target(binary, 2)
    sites, semas = site_addresses(target.pid, binary)
    script = script_for(binary, "") + f"""
global n2, g2
probe process("{binary}").mark("tick") {{ n2[$arg1]++ }}
probe process("{binary}").mark("guarded") {{ g2++ }}
probe end {{ foreach (t in n2) printf("N2 %d %d\\n", t, n2[t]); printf("G2 %d\\n", g2) }}
"""
    try:
        res = run_attached(cache, target, script, "-T", "1.5")
        assert res.rc == 0, res.err
        assert "not armed" not in res.err, res.err
        assert res.patched and all(b in (b"\xcc", b"\xe9") for b in res.patched), res.err
        assert res.semas_attached == [2 * semas.count(a) for a in semas], res.err
        ranges = hit_ranges(res.out)
        assert sorted(ranges) == [0, 1], res.out
        for t, (lo, hi, n) in ranges.items():
            assert n == hi - lo + 1 > 100 and f"N2 {t} {n}" in res.out.splitlines(), res.out
        g = int(res.out.split("G ")[1].split()[0])
        assert g > 0 and f"G2 {g}" in res.out.splitlines(), res.out
        assert_text_as_in_file(target.pid, binary)
        assert {read_mem(target.pid, a, 2) for a in semas} == {b"\0\0"}
    finally:
        lines = target.finish()
    assert all(line.endswith(" ok") for line in lines if line.startswith("thread ")), lines
    assert lines[-1] == "semaphores 0 0", lines[-1]
