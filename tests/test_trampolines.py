"""Fast probes: patch plans, trampolines vs traps, on real processes.

Every site of the argument-test programs gets a plan; `$argN` values are the same
under traps (`--probe-mode=trap`) and trampolines (the default) and match what the
programs print; counts are exact with 8 threads hammering a mark; a hand-written
site with a branch target inside the would-be-overwritten bytes falls back to the
trap with the reason; the traced program runs on correctly after the session.
"""

from __future__ import annotations

import platform
import shutil
from pathlib import Path

import pytest
from cbuild import (
    BUILDS,
    PROGS,
    Build,
    assert_thread_sums,
    build_c,
    have_m32,
    run_pydyn,
    thread_sums_script,
)

from pydyn.launcher.elf.stapsdt import SiteScan, get_probe_sites
from pydyn.launcher.plan import prepare
from pydyn.launcher.plan.x86 import TACTICS, PatchPlan, coverage, plan_site

# setarch -R: the same addresses in every run, so pointer arguments compare equal
NO_ASLR = ("setarch", platform.machine(), "-R") if shutil.which("setarch") else ()


def skip_m32(b: Build) -> None:
    if b.m32 and not have_m32():
        pytest.skip("no -m32 toolchain (gcc -m32 / gcc-multilib missing)")


def got_script(scan: SiteScan, tag: str) -> str:
    out = []
    for site in scan.sites:
        fmt = " ".join("%d" if a.supported else "-" for a in site.args)
        vals = "".join(f", $arg{i + 1}" for i, a in enumerate(site.args) if a.supported)
        out.append(f'probe process("{scan.info.path}").mark("{site.name}") '
                   f'{{ printf("got {tag} %s {fmt}\\n", $$name{vals}) }}')
    return "\n".join(out) + "\n"


def lines(text: str, prefix: str) -> list[list[str]]:
    return sorted(ln.split()[1:] for ln in text.splitlines() if ln.startswith(prefix))


@pytest.fixture(scope="module")
def progs(tmp_path_factory: pytest.TempPathFactory, sdt_cflags: object) -> dict[str, Path]:
    tmp = tmp_path_factory.mktemp("fastprobe")
    out: dict[str, Path] = {}
    for b in BUILDS:
        if b.m32 and not have_m32():
            continue
        out[f"args-{b.id}"] = build_c([PROGS / "e2e_args.c", PROGS / "e2e_args_mem.c"],
                                      tmp / f"args-{b.id}", m32=b.m32, opt=b.opt,
                                      extra=(f'-DE2E_TAG="{b.id}"',))
        out[f"sdt-{b.id}"] = build_c([PROGS / "sdt_args.c", PROGS / "sdt_sema.c"],
                                     tmp / f"sdt-{b.id}", m32=b.m32, opt=b.opt)
        out[f"branch-{b.id}"] = build_c([PROGS / "fp_branch.S", PROGS / "fp_branch_main.c"],
                                        tmp / f"branch-{b.id}", m32=b.m32, opt=b.opt)
    return out


@pytest.mark.parametrize("b", BUILDS, ids=[b.id for b in BUILDS])
def test_every_site_gets_a_plan(progs: dict[str, Path], b: Build) -> None:
    skip_m32(b)
    plans: list[PatchPlan] = []
    for kind in ("args", "sdt"):
        for site in get_probe_sites(str(progs[f"{kind}-{b.id}"])).sites:
            plan = plan_site(site)
            assert plan.tactic in TACTICS and plan.reason, (site.name, plan)
            if plan.tactic != "trap":
                assert plan.length >= 5 or (plan.island and plan.length >= 2), plan
                assert plan.resume == site.pc + plan.length
            if plan.tactic == "displace":
                assert len(plan.orig) == plan.length and plan.orig[0] == 0x90
            plans.append(plan)
    # nearly every compiler-made site avoids the trap
    assert sum(p.tactic != "trap" for p in plans) >= 0.75 * len(plans), \
        [str(p) for p in plans]
    assert coverage(plans).startswith(f"sites: {len(plans)} total, ")


@pytest.mark.parametrize("b", BUILDS, ids=[b.id for b in BUILDS])
def test_args_identical_under_traps_and_trampolines(progs: dict[str, Path], cache: Path,
                                                    b: Build, tmp_path: Path) -> None:
    skip_m32(b)
    results = {}
    for kind in ("args", "sdt"):
        binary = progs[f"{kind}-{b.id}"]
        scan = get_probe_sites(str(binary))
        script = tmp_path / f"{kind}.stp"
        script.write_text(got_script(scan, b.id))
        for mode in ("trap", "auto"):
            r = run_pydyn(cache, f"--probe-mode={mode}", str(script), "-c", str(binary),
                          prefix=NO_ASLR)
            assert (r.returncode, r.stderr) == (0, ""), (kind, mode, r.stderr)
            results[kind, mode] = r.stdout
        got = {m: lines(results[kind, m], f"got {b.id} ") for m in ("trap", "auto")}
        assert got["trap"] == got["auto"], kind
        assert sorted(g[1] for g in got["auto"]) == sorted(s.name for s in scan.sites)
    # e2e_args prints the expected values itself
    for mode in ("trap", "auto"):
        out = results["args", mode]
        expected = {ln[1]: ln[2:] for ln in lines(out, f"expect {b.id} ")}
        for _tag, name, *values in lines(out, f"got {b.id} "):
            want = ["-" if v == "-" else w for v, w in zip(values, expected[name], strict=True)]
            assert values == want, (mode, name)


def test_verbose_prints_the_coverage(progs: dict[str, Path], cache: Path) -> None:
    binary = progs["args-m64-O2"]
    r = run_pydyn(cache, "-u", "-v", "-p3", "-e",
                  f'probe process("{binary}").mark("regs") {{ }}')
    assert r.returncode == 0, r.stderr
    assert "sites: 1 total, 0 trap, 1 displace" in r.stderr
    r = run_pydyn(cache, "-u", "-p2", "-e", f'probe process("{binary}").mark("regs") {{ }}')
    assert "plan: displace" in r.stdout


THREADS_C = r"""
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/sdt.h>
static long per;
static void *work(void *arg)
{
    long id = (long)arg, sum = 0;
    for (long i = 0; i < per; i++) {
        STAP_PROBE2(pydyn_fp, hammer, id, i);
        sum += i;
    }
    return (void *)sum;
}
int main(int argc, char **argv)
{
    per = argc > 1 ? atol(argv[1]) : 1000;
    pthread_t t[8];
    for (long i = 0; i < 8; i++)
        pthread_create(&t[i], 0, work, (void *)i);
    long total = 0;
    for (int i = 0; i < 8; i++) {
        void *r;
        pthread_join(t[i], &r);
        total += (long)r;
    }
    printf("threads done %ld\n", total);
    return 0;
}
"""


@pytest.mark.parametrize("m32", [False, True], ids=["m64", "m32"])
def test_exact_counts_with_8_threads(tmp_path: Path, cache: Path, m32: bool,
                                     sdt_cflags: object) -> None:
    if m32 and not have_m32():
        pytest.skip("no -m32 toolchain (gcc -m32 / gcc-multilib missing)")
    src = tmp_path / "threads.c"
    src.write_text(THREADS_C)
    binary = build_c(src, tmp_path / "threads", m32=m32, extra=("-pthread",))
    site = get_probe_sites(str(binary)).sites[0]
    assert plan_site(site).tactic != "trap", plan_site(site)
    per = 20000
    r = run_pydyn(cache, "-e", thread_sums_script(binary), "-c", f"{binary} {per}")
    assert (r.returncode, r.stderr) == (0, ""), r.stderr
    assert_thread_sums(r.stdout, per)
    assert f"threads done {8 * (per * (per - 1) // 2)}" in r.stdout.splitlines()


@pytest.mark.parametrize("b", BUILDS, ids=[b.id for b in BUILDS])
def test_branch_target_inside_falls_back_to_trap(progs: dict[str, Path], cache: Path,
                                                 b: Build) -> None:
    skip_m32(b)
    binary = progs[f"branch-{b.id}"]
    plans = {s.name: plan_site(s) for s in get_probe_sites(str(binary)).sites}
    # the loop's entry `jmp 2f` (rel8) lands at pc+1: retargeted through dead padding
    assert plans["looped"].tactic == "displace", plans["looped"]
    assert "retargeted" in plans["looped"].reason
    redirects = plans["looped"].redirects
    assert [r.size for r in redirects] == [1] and redirects[0].island
    assert plans["plain"].tactic == "displace", plans["plain"]
    assert plans["indirect"].tactic == "trap"
    assert "branch target" in plans["indirect"].reason
    script = (f'global n, p, i\nprobe process("{binary}").mark("looped") {{ n++ }}\n'
              f'probe process("{binary}").mark("plain") {{ p++ }}\n'
              f'probe process("{binary}").mark("indirect") {{ i++ }}\n'
              'probe end { printf("looped=%d plain=%d indirect=%d\\n", n, p, i) }\n')
    for mode in ("auto", "trap"):
        r = run_pydyn(cache, f"--probe-mode={mode}", "-e", script, "-c", f"{binary} 50")
        assert (r.returncode, r.stderr) == (0, ""), r.stderr
        assert "fp_branch looped 49 plain 1 result 49" in r.stdout
        assert "looped=49 plain=1 indirect=1" in r.stdout


AFTER_C = r"""
#include <stdio.h>
#include <sys/sdt.h>
#include <unistd.h>
int main(void)
{
    long sum = 0;
    for (int round = 0; round < 3; round++) {
        for (long i = 0; i < 1000; i++) {
            STAP_PROBE1(pydyn_fp, tick, i);
            sum += i;
        }
        printf("round %d sum %ld\n", round, sum);
        fflush(stdout);
        if (round == 0)
            usleep(300000);   /* the session ends (exit()) meanwhile */
    }
    printf("done %ld\n", sum);
    return 0;
}
"""


def test_process_runs_on_after_the_session(tmp_path: Path, cache: Path,
                                           sdt_cflags: object) -> None:
    src = tmp_path / "after.c"
    src.write_text(AFTER_C)
    binary = build_c(src, tmp_path / "after")
    script = (f'global n\nprobe process("{binary}").mark("tick") '
              '{ n++; if (n == 1000) exit() }\nprobe end { printf("n=%d\\n", n) }\n')
    r = run_pydyn(cache, "-e", script, "-c", str(binary))
    assert r.returncode == 0, r.stderr
    assert "n=1000" in r.stdout
    # the -c command outlives the session (its output arrives on the same pipe, which
    # stays open until it exits): the patched sites keep working with probes inert
    assert "round 2 sum 1498500" in r.stdout and "done 1498500" in r.stdout, r.stdout


# Debian binaries nobody here wrote (Makefile DEB_PACKAGES installs them): at least 99%
# of their USDT sites must avoid the trap; planned offline, nothing runs.
REAL_BINARIES = ["/usr/bin/python3.11", "/usr/lib/postgresql/15/bin/postgres",
                 "/usr/lib/jvm/java-17-openjdk-amd64/lib/server/libjvm.so"]


@pytest.mark.parametrize("path", REAL_BINARIES, ids=lambda p: Path(p).name)
def test_real_binaries_avoid_the_trap(path: str) -> None:
    if not Path(path).exists():
        pytest.skip(f"{path} is not installed (make deps installs it)")
    sites = get_probe_sites(path).sites
    prepare(sites)   # the binary's facts for every site at once, as plan_sites does
    plans = [plan_site(s) for s in sites]
    traps = [f"{s.name}: {p.reason}" for s, p in zip(sites, plans, strict=True)
             if p.tactic == "trap"]
    assert sites and len(traps) <= 0.01 * len(sites), traps
    for s, p in zip(sites, plans, strict=True):
        if p.tactic == "displace":
            assert p.orig == _read(path, s.pc, p.length) and p.resume == s.pc + p.length
            assert p.length >= 5 or (p.island and p.length >= 2)


def _read(path: str, addr: int, n: int) -> bytes:
    from elftools.elf.elffile import ELFFile
    with open(path, "rb") as f:
        for seg in ELFFile(f).iter_segments():
            va = seg["p_vaddr"]
            if seg["p_type"] == "PT_LOAD" and va <= addr < va + seg["p_filesz"]:
                f.seek(seg["p_offset"] + addr - seg["p_vaddr"])
                return f.read(n)
    return b""


@pytest.mark.parametrize("m32", [False, True], ids=["m64", "m32"])
@pytest.mark.parametrize("mode", ["auto", "trap"])
def test_garbage_stack_pointer(tmp_path: Path, cache: Path, m32: bool, mode: str,
                               sdt_cflags: object) -> None:
    """The site runs with sp = 0x10 (unmapped) and its arguments in registers: the
    probe fires with them on both threads and the program runs on (stapdyn crashes)."""
    binary = build_c([PROGS / "fp_garbage_sp.S", PROGS / "fp_garbage_sp_main.c"],
                     tmp_path / "gs", m32=m32, extra=("-pthread",))
    site = get_probe_sites(str(binary)).sites[0]
    assert plan_site(site).tactic == "displace", plan_site(site)
    n = 50
    script = (f'probe process("{binary}").mark("garbage") '
              '{ printf("hit %d %d\\n", $arg1, $arg2) }')
    r = run_pydyn(cache, f"--probe-mode={mode}", "-e", script, "-c", f"{binary} {n}")
    assert (r.returncode, r.stderr) == (0, ""), r.stderr
    hits = sorted(ln for ln in r.stdout.splitlines() if ln.startswith("hit "))
    assert hits == sorted(f"hit {b + i} {100 * i}" for b in (0, 1000) for i in range(n))
    s = n * (n - 1) // 2
    assert f"gs sum {101 * s} {1000 * n + 101 * s}" in r.stdout


PRINTF_C = r"""
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/sdt.h>
static long per;
static void *run(void *arg)
{
    for (long i = 0; i < per; i++)
        STAP_PROBE2(pydyn_fp, line, (long)arg, i);
    return NULL;
}
int main(int argc, char **argv)
{
    per = atol(argv[1]);
    pthread_t t;
    pthread_create(&t, 0, run, (void *)1);
    run((void *)0);
    pthread_join(t, 0);
    return 0;
}
"""


def test_million_printf_events_into_a_file(tmp_path: Path, cache: Path,
                                           sdt_cflags: object) -> None:
    """1,000,000 printf events from two threads of one process into -o FILE: every one
    is there, each thread's in its own order (a correctness test; bench/ times it)."""
    src = tmp_path / "lines.c"
    src.write_text(PRINTF_C)
    binary = build_c(src, tmp_path / "lines", extra=("-pthread",))
    out = tmp_path / "out.txt"
    per = 500_000
    r = run_pydyn(cache, "-o", str(out), "-e",
                  f'probe process("{binary}").mark("line") {{ printf("%d %d\\n", $arg1, $arg2) }}',
                  "-c", f"{binary} {per}")
    assert (r.returncode, r.stderr, r.stdout) == (0, "", ""), r.stderr
    seqs: dict[str, list[int]] = {"0": [], "1": []}
    with out.open() as f:
        for ln in f:
            tid, seq = ln.split()
            seqs[tid].append(int(seq))
    for tid, got in seqs.items():
        assert got == list(range(per)), (tid, len(got))
