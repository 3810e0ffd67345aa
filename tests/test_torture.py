"""Torture corpus for fast probes: tests/progs/torture/*.

Probed C and C++ programs at -O0/-O2/-O3, m64 and m32, whose sites are followed by
RIP-relative loads, short jumps, calls, loop back-edges and switch tables
(branches.c), hit while a 50 us SIGALRM timer fires with a site in the signal
handler (signals.c), and with C++ exceptions thrown through probed frames
(exceptions.cc).  Every site's plan is checked against the tactic it must get; each
program's output is identical with and without pydyn, and every probe saw exactly the
hits the program counted itself (signals: a hit in the handler while the thread is
in a probe handler already is skipped and counted, so hits + skipped = signals).
"""

from __future__ import annotations

import functools
import os
import re
import shutil
import subprocess
from pathlib import Path

import pytest
from cbuild import CC, PROGS, build_c, have_m32, run_pydyn

from pydyn.launcher.elf.stapsdt import get_probe_sites
from pydyn.launcher.plan.x86 import analyse, plan_site

TORTURE = PROGS / "torture"
CXX = os.environ.get("CXX", "g++")
OPTS = ("-O0", "-O2", "-O3")
ABIS = ("m64", "m32")

# program -> (source, argument, {site: tactic}); tactics hold at every -O level and ABI
PROGRAMS = {
    "branches": ("branches.c", "1000", dict.fromkeys(
        ["ripload", "shortjmp", "call", "backedge", "tail"]
        + [f"case{i}" for i in range(6)], "displace")),
    "signals": ("signals.c", "100000", {"work": "displace", "alarm": "displace"}),
    # thrower's `throw` has a cleanup pad and catcher a catch (their landing pads are
    # branch targets, not in these windows); middle only has the exception unwind through
    "exceptions": ("exceptions.cc", "1000", dict.fromkeys(["thrower", "middle", "catcher"],
                                                         "displace")),
}


@functools.cache
def have_cxx(m32: bool) -> bool:
    if shutil.which(CXX) is None:
        return False
    flags = ["-m32", "-idirafter", "/usr/include/x86_64-linux-gnu"] if m32 else []
    r = subprocess.run([CXX, *flags, "-x", "c++", "-", "-o", os.devnull],
                       input="#include <stdexcept>\nint main() { try { throw 1; } "
                             "catch (int) {} }\n", capture_output=True, text=True)
    return r.returncode == 0


def build(tmp: Path, prog: str, abi: str, opt: str) -> Path:
    src = TORTURE / PROGRAMS[prog][0]
    out = tmp / f"{prog}-{abi}{opt}"
    if src.suffix == ".cc":
        if not have_cxx(abi == "m32"):
            pytest.skip(f"no {CXX} for {abi} (g++, and g++-12-multilib for -m32)")
        cmd = [CXX, *(["-m32", "-idirafter", "/usr/include/x86_64-linux-gnu"]
                      if abi == "m32" else []), opt, "-g0", str(src), "-o", str(out)]
        r = subprocess.run(cmd, capture_output=True, text=True)
        assert r.returncode == 0, r.stderr
        return out
    return build_c(src, out, m32=abi == "m32", opt=opt)


def counts(text: str, word: str) -> dict[str, int]:
    return {m[0]: int(m[1]) for m in re.findall(rf"^{word} (\w+) (\d+)$", text, re.M)}


CASES = [(p, a, o) for p in PROGRAMS for a in ABIS for o in OPTS]


@pytest.mark.parametrize("prog,abi,opt", CASES, ids=[f"{p}-{a}{o}" for p, a, o in CASES])
def test_torture(tmp_path: Path, cache: Path, prog: str, abi: str, opt: str,
                 sdt_cflags: object) -> None:
    if CC == "gcc" and abi == "m32" and not have_m32():
        pytest.skip("no -m32 toolchain (gcc-multilib)")
    binary = build(tmp_path, prog, abi, opt)
    arg, tactics = PROGRAMS[prog][1], PROGRAMS[prog][2]
    sites = get_probe_sites(str(binary)).sites
    got = {}
    for s in sites:
        plan = plan_site(s)
        assert got.setdefault(s.name, plan.tactic) == plan.tactic, s.name  # inlined copies
    assert got == tactics, {n: str(plan_site(s)) for s in sites for n in [s.name]}
    if prog == "exceptions":   # the landing pads were read from the LSDAs, as targets
        obj = analyse(str(binary))
        assert not obj.eh_ranges and obj.landing_pads and obj.landing_pads <= obj.targets

    bare = subprocess.run([str(binary), arg], capture_output=True, text=True, timeout=60)
    assert bare.returncode == 0, bare.stderr
    names = sorted(tactics)
    script = "global hits\n" + "".join(
        f'probe process("{binary}").mark("{n}") {{ hits["{n}"]++ }}\n' for n in names) + \
        'probe end { foreach (k in hits) printf("got %s %d\\n", k, hits[k]) }\n'
    for mode in ("auto", "trap") if opt == "-O2" else ("auto",):
        r = run_pydyn(cache, f"--probe-mode={mode}", "-e", script, "-c", f"{binary} {arg}")
        expect = counts(r.stdout, "expect")
        hits = counts(r.stdout, "got")
        skipped = re.search(r"skipped probes: (\d+)", r.stderr)
        if prog == "signals":
            assert expect["alarm"] > 0, r.stdout
            n_skipped = int(skipped[1]) if skipped else 0
            assert hits.get("alarm", 0) + n_skipped == expect.pop("alarm"), (r.stdout, r.stderr)
            hits.pop("alarm", None)
            assert r.returncode == 0, r.stderr
        else:
            assert (r.returncode, r.stderr) == (0, ""), (mode, r.stderr)
            # the program's own output, probe lines aside, is what it prints bare
            own = [ln for ln in r.stdout.splitlines() if not ln.startswith("got ")]
            assert own == bare.stdout.splitlines(), mode
        assert r.stdout.splitlines()[0] == bare.stdout.splitlines()[0]   # the checksum
        assert hits == {k: v for k, v in expect.items() if v}, (mode, r.stdout)
