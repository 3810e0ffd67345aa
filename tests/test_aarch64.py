"""aarch64 targets under qemu-user: an x86-64 launcher, aarch64 probe modules.

Programs are cross-compiled (`aarch64-linux-gnu-gcc`, `<sys/sdt.h>` from the x86-64
multiarch dir: it is arch-generic) and run under `qemu-aarch64 -L
/usr/aarch64-linux-gnu`, either as the `-c` program (the launcher adds qemu) or from
a shell line.  As in test_e2e_core.py the programs print the values they pass
(`expect TAG NAME ...`), the scripts print what pydyn fetched (`got TAG NAME ...`).
Every session runs twice: with trampolines (the default: each site's nop becomes
`B stub`) and with `--probe-mode=trap` (`BRK #0`).  The programs are linked
-no-pie so a handler can read the instruction at its own site (`user_uint32(PC)`)
and show which of the two is installed.
Everything here is verified under emulation only: qemu-user delivers SIGTRAP for BRK
and emulates the i-cache, signal frames and syscalls, which real hardware does not
do the same way (README, "aarch64").
"""

from __future__ import annotations

import dataclasses
import os
import re
import shutil
import subprocess
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import pytest
from cbuild import (
    MULTIARCH_INCLUDE,
    PROGS,
    assert_thread_sums,
    build_c,
    have_cc,
    run_pydyn,
    thread_sums_script,
)

from pydyn.launcher.build import LIB_DIRS
from pydyn.launcher.elf.argspec import ArgKind
from pydyn.launcher.elf.stapsdt import ProbeSite, SiteScan, get_probe_sites
from pydyn.launcher.plan import plan_site
from pydyn.launcher.plan.aarch64 import plan_site as plan_a64

A64_CC = os.environ.get("PYDYN_CC_AARCH64", "aarch64-linux-gnu-gcc")
QEMU = shutil.which("qemu-aarch64")
SYSROOT = "/usr/aarch64-linux-gnu"

pytestmark = [
    pytest.mark.skipif(shutil.which(A64_CC) is None,
                       reason=f"{A64_CC} not installed (gcc-aarch64-linux-gnu)"),
    pytest.mark.skipif(QEMU is None, reason="qemu-aarch64 not installed (qemu-user)"),
    pytest.mark.skipif(not Path(SYSROOT, "lib", "ld-linux-aarch64.so.1").exists(),
                       reason="no aarch64 sysroot (libc6-dev-arm64-cross)"),
    pytest.mark.skipif(not Path(MULTIARCH_INCLUDE, "sys", "sdt.h").exists(),
                       reason="<sys/sdt.h> not installed (systemtap-sdt-dev)"),
]


MODES = ("auto", "trap")                 # --probe-mode: trampolines, or BRK only
A64_B_MASK, A64_B, A64_BRK0 = 0xFC000000, 0x14000000, 0xD4200000


def qemu_cmd(prog: Path, *args: str, cpu: str = "") -> str:
    opts = f"-cpu {cpu} " if cpu else ""
    return f"{QEMU} {opts}-L {SYSROOT} {prog} {' '.join(args)}".strip()


def check_installed(insns: Sequence[int], mode: str) -> None:
    """The instruction each handler read at its own site: `B stub`, or `BRK #0`."""
    assert insns
    if mode == "trap":
        assert all(i == A64_BRK0 for i in insns), [hex(i) for i in insns]
    else:
        assert all(i & A64_B_MASK == A64_B for i in insns), [hex(i) for i in insns]


def insn_probe(tag: str, site: ProbeSite) -> str:
    """A statement printing `insn TAG NAME HEX`: the word at the (non-PIE) site."""
    return f'printf("insn {tag} {site.name} %x\\n", user_uint32({site.pc:#x}))'


def insns_in(text: str, tag: str) -> list[int]:
    return [int(line[-1], 16) for line in lines_with(text, f"insn {tag} ")]


def coverage_line(stderr: str) -> str:
    return next(line for line in stderr.splitlines() if line.startswith("sites:"))


@pytest.fixture(scope="module")
def a64dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A build directory with `inc/sys/sdt.h` (+ sdt-config.h) linked from the host."""
    root = tmp_path_factory.mktemp("a64")
    (root / "inc" / "sys").mkdir(parents=True)
    for name in ("sdt.h", "sdt-config.h"):
        (root / "inc" / "sys" / name).symlink_to(Path(MULTIARCH_INCLUDE, "sys", name))
    return root


def build_a64(a64dir: Path, srcs: Sequence[Path], out: str, opt: str = "-O2",
              extra: Sequence[str] = (), cc: str = A64_CC) -> Path:
    target = a64dir / out
    cmd = [cc, opt, "-g0", "-Wall", "-Werror", "-idirafter", str(a64dir / "inc"),
           *map(str, srcs), *extra, "-o", str(target)]
    res = subprocess.run(cmd, capture_output=True, text=True)
    if res.returncode != 0:
        pytest.fail(f"cross compile failed: {' '.join(cmd)}\n{res.stderr}", pytrace=False)
    return target


A64_CXX = os.environ.get("PYDYN_CXX_AARCH64", "aarch64-linux-gnu-g++")


def have_cxx_a64() -> bool:
    """Whether an aarch64 C++ compiler is installed (g++-aarch64-linux-gnu)."""
    return shutil.which(A64_CXX) is not None


def build_a64_cxx(a64dir: Path, src: Path, out: str, opt: str = "-O2",
                  extra: Sequence[str] = ()) -> Path:
    """build_a64 for C++ with A64_CXX; skips the test when it is not installed."""
    if not have_cxx_a64():
        pytest.skip(f"{A64_CXX} not installed (g++-aarch64-linux-gnu)")
    return build_a64(a64dir, [src], out, opt=opt, extra=extra, cc=A64_CXX)


def lines_with(text: str, prefix: str) -> list[list[str]]:
    return sorted(line.split()[1:] for line in text.splitlines() if line.startswith(prefix))


# --- the guest loader's $LIB ------------------------------------------------------------

def test_guest_loader_expands_lib_to_the_aarch64_link_dir(a64dir: Path) -> None:
    """`LD_PRELOAD=DIR/$LIB/x.so` under qemu finds exactly the dir build.py links."""
    lib = a64dir / "libprobe.c"
    lib.write_text('#include <stdio.h>\n__attribute__((constructor)) static void c(void)'
                   '{ fputs("PD-A64-CTOR\\n", stderr); }\n')
    hello = build_a64(a64dir, [PROGS / "a64_worker.c"], "hello")
    for libdir in ("lib", "lib64", *LIB_DIRS["aarch64"]):
        d = a64dir / f"libtest-{libdir.replace('/', '_')}"
        (d / libdir).mkdir(parents=True)
        build_a64(a64dir, [lib], str((d / libdir / "x.so").relative_to(a64dir)),
                  extra=("-shared", "-fPIC"))
        res = subprocess.run([str(QEMU), "-L", SYSROOT, "-E", f"LD_PRELOAD={d}/$LIB/x.so",
                              str(hello), "1"], capture_output=True, text=True, timeout=30)
        assert res.stdout == "worker 3 1 0\n"
        assert ("PD-A64-CTOR" in res.stderr) == (libdir in LIB_DIRS["aarch64"]), (libdir, res)


# --- arguments, -O0 and -O2 ---------------------------------------------------------------

FLAVOURS = ("a64-O0", "a64-O2")


@dataclass(frozen=True)
class ArgsSession:
    scans: dict[str, SiteScan]
    result: subprocess.CompletedProcess[str]
    mode: str


def args_script(tag: str, scan: SiteScan) -> str:
    probes = []
    for site in scan.sites:
        assert all(spec.supported for spec in site.args), [str(s) for s in site.args]
        fmt = " ".join("%d" for _ in site.args)
        values = "".join(f", $arg{i + 1}" for i in range(len(site.args)))
        probes.append(f'probe process("{scan.info.path}").mark("{site.name}") '
                      f'{{ printf("got {tag} %s {fmt}\\n", $$name{values}); '
                      f'{insn_probe(tag, site)} }}')
    return "\n".join(probes) + "\n"


@pytest.fixture(scope="module")
def args_builds(a64dir: Path) -> dict[str, SiteScan]:
    scans = {}
    for tag in FLAVOURS:
        out = build_a64(a64dir, [PROGS / "e2e_args.c", PROGS / "e2e_args_mem.c"], tag,
                        opt=tag.split("-")[1].replace("O", "-O"),
                        extra=(f'-DE2E_TAG="{tag}"', "-no-pie"))
        scans[tag] = get_probe_sites(str(out))
    return scans


@pytest.fixture(scope="module", params=MODES)
def args_session(request: pytest.FixtureRequest, a64dir: Path, args_builds: dict[str, SiteScan],
                 cache: Path) -> ArgsSession:
    """Both builds in one session, started from a shell line through qemu-aarch64: the
    m64 module the emulator itself inherits must stay out of the way."""
    scans = args_builds
    script = a64dir / "args.stp"
    script.write_text("".join(args_script(tag, scans[tag]) for tag in FLAVOURS))
    command = "; ".join(qemu_cmd(Path(scans[tag].info.path)) for tag in FLAVOURS)
    return ArgsSession(scans, run_pydyn(cache, "-v", f"--probe-mode={request.param}", str(script),
                                        "-c", command), request.param)


def test_every_aarch64_site_is_planned_as_a_branch(args_builds: dict[str, SiteScan]) -> None:
    for scan in args_builds.values():
        for site in scan.sites:
            plan = plan_site(site)
            assert (plan.tactic, plan.length, plan.resume) == ("nop", 4, site.pc + 4), plan
            assert "B to the stub" in plan.reason


def test_misaligned_or_non_nop_sites_keep_the_trap(args_builds: dict[str, SiteScan]) -> None:
    site = args_builds["a64-O2"].sites[0]
    for bad in (dataclasses.replace(site, pc=site.pc + 2), dataclasses.replace(site, nop_len=8)):
        plan = plan_a64(bad)
        assert (plan.tactic, plan.length) == ("trap", 0), plan


def test_args_session_is_clean(args_session: ArgsSession) -> None:
    res = args_session.result
    assert res.returncode == 0, res
    n = sum(len(scan.sites) for scan in args_session.scans.values())
    assert coverage_line(res.stderr) == f"sites: {n} total, 0 trap, {n} nop"
    for tag in FLAVOURS:
        check_installed(insns_in(res.stdout, tag), args_session.mode)
    errors = [line for line in res.stderr.splitlines()
              if not line.startswith(("Pass ", "sites:", "pydyn: "))]
    assert errors == []
    attached = [line for line in res.stderr.splitlines() if " attached pid " in line]
    a64 = [line for line in attached if " aarch64 " in line]
    assert len(a64) == 2, attached                 # one per guest, each once ...
    assert not any("qemu" in line for line in attached), attached   # ... qemu never


@pytest.mark.parametrize("tag", FLAVOURS)
def test_mark_arguments_match_the_program(args_session: ArgsSession, tag: str) -> None:
    out = args_session.result.stdout
    expected = {line[1]: line[2:] for line in lines_with(out, f"expect {tag} ")}
    got = [line[1:] for line in lines_with(out, f"got {tag} ")]
    names = sorted(s.name for s in args_session.scans[tag].sites)
    assert sorted(expected) == names
    assert sorted(g[0] for g in got) == names       # every mark fired exactly once
    for name, *values in got:
        assert (name, values) == (name, expected[name])


@pytest.mark.parametrize("tag", FLAVOURS)
def test_aarch64_operand_forms_are_exercised(args_session: ArgsSession, tag: str) -> None:
    specs = [a for s in args_session.scans[tag].sites for a in s.args]
    texts = [a.text for a in specs]
    assert {ArgKind.CONST, ArgKind.REG, ArgKind.MEM} <= {a.kind for a in specs}
    assert any(re.fullmatch(r"-?\d@-?\d+", t) for t in texts), texts      # bare constants
    assert any(re.fullmatch(r"-?\d@\[sp, \d+\]", t) for t in texts), texts  # [sp, N]
    assert any(re.fullmatch(r"-?\d@\[x\d+\]", t) for t in texts), texts     # [xN]
    if tag == "a64-O2":
        assert any(re.fullmatch(r"-?\d@[xw]\d+", t) for t in texts), texts


# --- semaphore, counting, user_string: the aarch64 program as the -c command -----------------

COUNT_SCRIPT = """global hits, total, tick_insn
probe process("{prog}").mark("tick") {{
    hits++; total += $arg1; tick_insn = user_uint32({tick:#x})
}}
probe process("{prog}").mark("done") {{
    printf("done n=%d sum=%d label=%s\\n", $arg1, $arg2, user_string($arg3))
    printf("insn count done %x\\n", user_uint32({done:#x}))
}}
probe end {{ printf("hits=%d total=%d\\ninsn count tick %x\\n", hits, total, tick_insn) }}
"""


def count_script(prog: Path) -> str:
    pcs = {site.name: site.pc for site in get_probe_sites(str(prog)).sites}
    return COUNT_SCRIPT.format(prog=prog, **pcs)


@pytest.fixture(scope="module", params=("-O0", "-O2"))
def counter(request: pytest.FixtureRequest, a64dir: Path) -> Path:
    return build_a64(a64dir, [PROGS / "a64_count.c"], f"a64_count{request.param}",
                     opt=request.param, extra=("-no-pie",))


def test_semaphore_is_down_without_pydyn(counter: Path) -> None:
    res = subprocess.run([str(QEMU), "-L", SYSROOT, str(counter), "50"],
                         capture_output=True, text=True, timeout=30)
    assert res.stdout.splitlines() == ["a64_count: semaphore 0",
                                       "a64_count: 50 ticks, 0 guarded, sum 1225"]


@pytest.mark.parametrize("mode", MODES)
def test_counting_with_semaphore_under_qemu(counter: Path, a64dir: Path, cache: Path,
                                            mode: str) -> None:
    n = 3000
    script = a64dir / "count.stp"
    script.write_text(count_script(counter))
    res = run_pydyn(cache, "-v", f"--probe-mode={mode}", str(script), "-c", f"{counter} {n}")
    assert res.returncode == 0, res
    s = n * (n - 1) // 2
    # The program's stdout is a pipe: flushed at its exit, after the probe output.
    assert sorted(line for line in res.stdout.splitlines() if not line.startswith("insn")) \
        == sorted(["a64_count: semaphore 1", f"a64_count: {n} ticks, {n} guarded, sum {s}",
                   f"done n={n} sum={s} label=a64-count label", f"hits={n} total={s}"])
    assert coverage_line(res.stderr) == "sites: 2 total, 0 trap, 2 nop"
    check_installed(insns_in(res.stdout, "count"), mode)
    assert f"started {QEMU} as pid" in res.stderr       # the launcher added the emulator
    assert re.search(r"attached pid \d+ .* aarch64 .*_aarch64\.so", res.stderr), res.stderr


def test_execname_under_qemu_is_the_guest_program(counter: Path, a64dir: Path,
                                                  cache: Path) -> None:
    # The kernel's comm under qemu-user is the emulator's; stap users expect the program.
    script = f'probe process("{counter}").mark("tick") {{ printf("n=%s\\n", execname()); exit() }}'
    res = run_pydyn(cache, "-e", script, "-c", f"{counter} 5")
    assert res.returncode == 0, res
    assert f"n={counter.name[:15]}" in res.stdout.splitlines(), res.stdout


def test_aarch64_target_without_qemu_is_refused(counter: Path, a64dir: Path,
                                                cache: Path) -> None:
    script = a64dir / "count.stp"
    script.write_text(count_script(counter))
    env_qemu = "/nonexistent/qemu-aarch64"
    os.environ["PYDYN_QEMU_AARCH64"] = env_qemu
    try:
        res = run_pydyn(cache, str(script), "-c", f"{counter} 5")
    finally:
        del os.environ["PYDYN_QEMU_AARCH64"]
    assert res.returncode == 1
    assert "Traceback" not in res.stderr and env_qemu in res.stderr, res.stderr


@pytest.mark.parametrize("mode", MODES)
def test_exact_counts_with_8_threads(a64dir: Path, cache: Path, mode: str) -> None:
    """qemu-user runs guest threads as host threads: 8 of them pass one site at once,
    each hit an atomic add and a locked array update (test_trampolines.py's program)."""
    from test_trampolines import THREADS_C
    src = a64dir / "threads.c"
    src.write_text(THREADS_C)
    binary = build_a64(a64dir, [src], "threads", extra=("-pthread", "-no-pie"))
    pc = get_probe_sites(str(binary)).sites[0].pc
    per = 3000
    script = a64dir / "threads.stp"
    script.write_text("global insn\n" + thread_sums_script(
        binary, f"; insn = user_uint32({pc:#x})", ' printf("insn threads %x\\n", insn);'))
    res = run_pydyn(cache, "-v", f"--probe-mode={mode}", str(script), "-c", f"{binary} {per}")
    assert res.returncode == 0, res
    assert coverage_line(res.stderr) == "sites: 1 total, 0 trap, 1 nop"
    assert_thread_sums(res.stdout, per)
    assert f"threads done {8 * (per * (per - 1) // 2)}" in res.stdout.splitlines()
    check_installed(insns_in(res.stdout, "threads"), mode)


# --- every register survives the probe: trampolines and traps, with and without SVE ----------

REGS_SCRIPT = """global hits, lens
probe process("{prog}").mark("regs"), process("{prog}").mark("regs_sve") {{
    hits++
    s = sprintf("%-60s|%x|%s", "libc's string routines use the vector registers", hits, $$name)
    lens <<< strlen(s)
    pc = $$name == "regs" ? {regs:#x} : {regs_sve:#x}
    if (hits <= 2) printf("insn regs %s %x\\n", $$name, user_uint32(pc))
}}
probe end {{ printf("hits=%d strings=%d\\n", hits, @count(lens)) }}
"""


@pytest.fixture(scope="module")
def regs_prog(a64dir: Path) -> Path:
    return build_a64(a64dir, [PROGS / "a64_regs.c", PROGS / "a64_regs.S"], "a64_regs",
                     extra=("-no-pie",))


@pytest.mark.parametrize(("mode", "cpu", "vl"), [
    ("auto", "", None),                                  # qemu's default cpu (max): SVE
    ("auto", "cortex-a72", 0),                           # no SVE: q0-q31 are saved
    ("auto", "max,sve-default-vector-length=256", 256),  # z registers of 2048 bits
    ("trap", "", None),
])
def test_registers_survive_the_probe(regs_prog: Path, a64dir: Path, cache: Path, mode: str,
                                     cpu: str, vl: int | None) -> None:
    """x0-x28, nzcv, q0-q31 (and z0-z31, p0-p15, ffr with SVE) are what they were before
    the mark, after a handler that runs libc code: a64_regs prints each one that is not."""
    n = 10
    pcs = {site.name: site.pc for site in get_probe_sites(str(regs_prog)).sites}
    script = a64dir / "regs.stp"
    script.write_text(REGS_SCRIPT.format(prog=regs_prog, **pcs))
    res = run_pydyn(cache, f"--probe-mode={mode}", str(script), "-c",
                    qemu_cmd(regs_prog, str(n), cpu=cpu))
    assert res.returncode == 0, res
    m = re.search(rf"^a64_regs: {n} calls, sve (\d+), 0 bad$", res.stdout, re.M)
    assert m, res.stdout
    got_vl = int(m.group(1))
    assert vl is None or got_vl == vl
    marks = 2 if got_vl else 1
    assert f"hits={n * marks} strings={n * marks}" in res.stdout.splitlines()
    check_installed(insns_in(res.stdout, "regs"), mode)


# --- a mixed session: an x86-64 and an aarch64 process update one array ------------------------

MIXED_SCRIPT = """global by_arch, total, n
probe process("{w64}").mark("work"), process("{wa64}").mark("work") {{
    by_arch[$arg1]++; total += $arg2; n++
}}
probe end {{
    foreach (a in by_arch+) printf("arch %d hits %d\\n", a, by_arch[a])
    printf("n=%d total=%d\\n", n, total)
}}
"""


def test_mixed_session_shares_one_array(a64dir: Path, cache: Path) -> None:
    if not have_cc():
        pytest.skip("no native C compiler")
    w64 = build_c(PROGS / "a64_worker.c", a64dir / "worker_x86_64", opt="-O2")
    wa64 = build_a64(a64dir, [PROGS / "a64_worker.c"], "worker_aarch64", opt="-O2")
    n = 4000
    script = a64dir / "mixed.stp"
    script.write_text(MIXED_SCRIPT.format(w64=w64, wa64=wa64))
    # Both run at once: by_arch is a keyed counter (per-thread tables in the segment,
    # tests/test_counters_keyed.py) that both ISAs add to and the end probe merges.
    res = run_pydyn(cache, "-v", str(script), "-c", f"{w64} {n} & {qemu_cmd(wa64, str(n))}; wait")
    assert res.returncode == 0, res
    s = n * (n - 1) // 2
    out = res.stdout.splitlines()
    assert sorted(out[:2]) == [f"worker 1 {n} {s}", f"worker 3 {n} {s}"]
    assert out[2:] == [f"arch 1 hits {n}", f"arch 3 hits {n}", f"n={2 * n} total={2 * s}"]
    attached = [line for line in res.stderr.splitlines() if " attached pid " in line]
    assert any(" m64 " in line and str(w64) in line for line in attached), attached
    assert any(" aarch64 " in line and str(wa64) in line for line in attached), attached
