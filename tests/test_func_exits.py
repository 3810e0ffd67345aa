"""Return probes at patched function exits (launcher/plan/returns.py).

Each `ret` and tail call of a function becomes a probe site whose stub runs the
`.return` probes with the registers at the exit; the return-address hijack stays for
the functions the plan cannot prove safe, `@entry`, `-x`, `--probe-mode=trap` and
`-D PD_RETURN_HIJACK=1`.  Counts and `$return` sums are checked exactly against the
program's own (tests/progs/func_exits.c: early returns, a jump table, a tail call, an
epilogue reached by branches, recursion 10,000 deep, longjmp out of a probed frame,
threads), and the plan's choice is asserted per function.
"""

from __future__ import annotations

import re
import signal
import subprocess
from pathlib import Path

import pytest
from cbuild import PROGS, build_c, have_cxx, have_sdt_h, run_pydyn
from test_func_stripped_dlopen_unwind import bare

FUNCS = ("early", "table", "tail", "epilogue", "rec", "jumper", "leaf2")

SCRIPT = """global c, s, t
probe process("{exe}").function("early").return, process("{exe}").function("table").return,
      process("{exe}").function("epilogue").return, process("{exe}").function("rec").return,
      process("{exe}").function("jumper").return, process("{exe}").function("leaf2").return
{{ c[ppfunc()]++; s[ppfunc()] += $return }}
probe process("{exe}").function("tail").return {{ t++ }}
probe end {{ foreach (f in c+) printf("%s %d %d\\n", f, c[f], s[f]); printf("tail %d\\n", t) }}
"""

# functions whose returns the plan patches at their exits (gcc 12); the rest keep
# the hijack, for the reason given
EXITS = {
    ("m64", "-O0"): {"epilogue", "rec", "jumper", "leaf2"},
    ("m64", "-O2"): set(FUNCS),
    ("m64", "-O3"): set(FUNCS) - {"early"},
    ("m32", "-O2"): set(FUNCS) - {"table"},
}
HIJACK_WHY = {
    ("m64", "-O0", "early"): "rel8 branch",
    ("m32", "-O2", "table"): "branch target",
    # its ret at +0xd8 follows one 1-byte padding that the ret before it takes
    ("m64", "-O3", "early"): "only 1 bytes before control leaves the window",
}


def mechanisms(stderr: str) -> dict[str, str]:
    """`pydyn -v`'s `returns of NAME@ADDR: HOW` lines."""
    return {m.group(1): m.group(2)
            for m in re.finditer(r"^returns of (\w+)@0x[0-9a-f]+: (.*)$", stderr, re.M)}


def results(lines: list[str], bits: int) -> dict[str, tuple[int, ...]]:
    """NAME COUNT [SUM] lines as numbers, sums modulo the program's long."""
    out = {}
    for line in lines:
        name, *nums = line.split()
        vals = [int(v) for v in nums[:2]]
        out[name] = (vals[0], *(v % (1 << bits) for v in vals[1:]))
    return out


def expected(program_out: str, n: int, bits: int) -> dict[str, tuple[int, ...]]:
    """What the script prints, from the unprobed program's own counts and sums."""
    got = results(program_out.splitlines(), bits)
    rows = {f: got[f] for f in ("early", "table", "epilogue", "rec", "jumper")}
    odd = [x for x in range(n) if x & 1]     # jumper: its longjmp'd calls never return
    rows["leaf2"] = (len(odd), sum(5 * (x + 1) + 1 for x in odd) % (1 << bits))
    rows["tail"] = (got["tail"][0],)
    return rows


def run_exact(cache: Path, exe: Path, n: int, plain: str, abi: str,
              *args: str) -> subprocess.CompletedProcess[str]:
    """pydyn -v ARGS on exe: the program's output unchanged, the probes' results exact."""
    res = run_pydyn(cache, "-v", *args, "-e", SCRIPT.format(exe=exe), "-c", f"{exe} {n}")
    assert res.returncode == 0, res.stderr
    out = res.stdout.splitlines()
    assert out[:7] == plain.splitlines(), out
    bits = 32 if abi == "m32" else 64
    assert results(out[7:], bits) == expected(plain, n, bits), out
    return res


def build(tmp_path: Path, abi: str, opt: str) -> Path:
    return build_c(PROGS / "func_exits.c", tmp_path / f"exits{abi}{opt}", m32=abi == "m32",
                   opt=opt, extra=("-pthread",))


@pytest.mark.parametrize("abi, opt", list(EXITS), ids=[f"{a}{o}" for a, o in EXITS])
def test_exit_probes_exact(tmp_path: Path, cache: Path, abi: str, opt: str) -> None:
    """Counts and $return sums of every function equal the program's own; each function
    got the mechanism the plan can prove (asserted per function, with the reason)."""
    exe = build(tmp_path, abi, opt)
    n = 1000
    plain = bare([str(exe), str(n)])
    res = run_exact(cache, exe, n, plain, abi)
    how = mechanisms(res.stderr)
    assert set(how) == set(FUNCS), res.stderr
    for f in FUNCS:
        if f in EXITS[(abi, opt)]:
            assert how[f].startswith("exits patched"), (f, how[f])
        else:
            assert how[f].startswith("hijack: "), (f, how[f])
            assert HIJACK_WHY.get((abi, opt, f), "") in how[f], (f, how[f])
    # tail reads no $return: its tail call is an exit (the probe fires before the jmp)
    if "tail" in EXITS[(abi, opt)] and opt != "-O0":
        assert "tail call at" in how["tail"], how["tail"]
    assert "skipped probes" not in res.stderr, res.stderr     # no frame is hooked


@pytest.mark.parametrize("abi", ["m64", "m32"])
def test_hijack_fallbacks_exact(tmp_path: Path, cache: Path, abi: str) -> None:
    """The same program with the hijack forced (-D PD_RETURN_HIJACK=1), with traps
    (the runtime keeps the hijack) and with $return read at a tail call: all exact;
    the longjmp'd frames are the hijack's skipped probes."""
    exe = build(tmp_path, abi, "-O2")
    n = 1000
    plain = bare([str(exe), str(n)])
    for args in (["-D", "PD_RETURN_HIJACK=1"], ["--probe-mode=trap"]):
        res = run_exact(cache, exe, n, plain, abi, *args)
        how = mechanisms(res.stderr)
        if args[0] == "-D":
            assert all(h == "hijack: -D PD_RETURN_HIJACK=1" for h in how.values()), how
        m = re.search(r"skipped probes: (\d+)", res.stderr)
        assert m and 0 < int(m.group(1)) <= n // 4, res.stderr     # jumper's longjmps
    tail_value = SCRIPT.format(exe=exe).replace(
        "{ t++ }", "{ t++; c[\"tailv\"]++; s[\"tailv\"] += $return }")
    res = run_pydyn(cache, "-v", "-e", tail_value, "-c", f"{exe} {n}")
    assert res.returncode == 0, res.stderr
    assert "tail call" in mechanisms(res.stderr)["tail"], res.stderr
    assert mechanisms(res.stderr)["tail"].startswith("hijack: a probe reads $return")
    bits = 32 if abi == "m32" else 64
    want = results(plain.splitlines(), bits)["tail"]
    assert results(res.stdout.splitlines()[7:], bits)["tailv"] == want, res.stdout


def test_p2_names_each_exit(tmp_path: Path, cache: Path) -> None:
    exe = build(tmp_path, "m64", "-O2")
    res = run_pydyn(cache, "-u", "-p2", "-e",
                    f'probe process("{exe}").function("tail").return {{ }}')
    assert res.returncode == 0, res.stderr
    lines = res.stdout.splitlines()
    assert any(re.match(r"    returns: exits patched \(2: ret at 0x[0-9a-f]+, tail call at", ln)
               for ln in lines), lines
    assert sum(bool(re.match(r"      exit (ret|tail call) at 0x[0-9a-f]+: displace", ln))
               for ln in lines) == 2, lines


EXC_SCRIPT = """global r, skipped_none
probe process("{exe}").function("thrower").return, process("{exe}").function("relay").return,
      process("{exe}").function("middle").return, process("{exe}").function("outer").return,
      process("{exe}").function("bt_mid").return
{{ r[ppfunc()]++ }}
probe end {{ foreach (f in r-) printf("%s %d\\n", f, r[f]) }}
"""


@pytest.mark.parametrize("abi", ["m64", "m32"])
def test_exceptions_and_backtrace_through_exit_probed_frames(tmp_path: Path, cache: Path,
                                                             abi: str) -> None:
    """A throw through three `.return`-probed frames (a cleanup, a rethrow) is caught;
    the unwound frames fire no return probe and nothing is skipped (no return address
    was replaced); backtrace() from inside `.return`-probed bt_mid frames names them."""
    if not have_cxx(abi == "m32"):
        pytest.skip("no C++ toolchain for this ABI (g++ / g++-multilib)")
    exe = build_c(PROGS / "func_exc.cc", tmp_path / "exc", m32=abi == "m32", opt="-O2",
                  extra=("-rdynamic", "-lstdc++", "-ldl"))
    n = 30
    want = "total=590 cleanups=30 rethrows=10 bt=7"
    assert bare([str(exe), str(n)]) == want + "\n"
    res = run_pydyn(cache, "-v", "-e", EXC_SCRIPT.format(exe=exe), "-c", f"{exe} {n}")
    assert res.returncode == 0, res.stderr
    out = res.stdout.splitlines()
    assert out[0] == want, out
    ok = n - n // 3
    assert sorted(out[1:]) == sorted([f"outer {n}", f"thrower {ok}", f"relay {ok}",
                                      f"middle {ok}", "bt_mid 4"]), out
    how = mechanisms(res.stderr)
    patched = {f for f, h in how.items() if h.startswith("exits patched")}
    assert {"thrower", "bt_mid"} <= patched, how
    assert "skipped probes" not in res.stderr, res.stderr


ET_SCRIPT = """global e, n, s, f
probe process("{exe}").function("exit_target") {{ e++ }}
probe process("{exe}").function("exit_target").return {{ n++ }}
probe process("{exe}").function("exit_target").return {{ s += $return; f++ }}
probe end {{ printf("e=%d n=%d s=%d f=%d\\n", e, n, s, f) }}
"""


def test_branch_to_the_exit_runs_the_handler(tmp_path: Path, cache: Path) -> None:
    """exit_target's `ret` is a rel8 branch target right after an `add` with no padding:
    the window is `add; ret`, the add runs before the handler, and the branch that
    skips the add is retargeted to the handler (through an island); both paths fire,
    with the $return of each (x86-64 assembly)."""
    exe = build_c([PROGS / "func_exit_target_main.c", PROGS / "func_exit_target.S"],
                  tmp_path / "et", opt="-O2")
    n = 1000
    want = sum(x if x & 1 else x + 100 for x in range(n))
    assert bare([str(exe), str(n)]) == f"exit_target {n} {want} other {n * n}\n"
    res = run_pydyn(cache, "-p2", "-e", ET_SCRIPT.format(exe=exe))
    assert res.returncode == 0, res.stderr
    assert re.search(r"exit ret at 0x[0-9a-f]+: displace 5 bytes: displaced 5 bytes \(add ret\); "
                     r"1 branch\(es\) into it retargeted to the stub; the handler runs after "
                     r"4 byte\(s\) of it", res.stdout), res.stdout
    res = run_pydyn(cache, "-e", ET_SCRIPT.format(exe=exe), "-c", f"{exe} {n}")
    assert res.returncode == 0, res.stderr
    assert res.stdout.splitlines()[1:] == [f"e={n} n={n} s={want} f={n}"], res.stdout


DEEP_SCRIPT = """global h
probe process("{exe}").function("shallow").return {{ h++; printf("%s %d\\n", "ret", $return) }}
probe end {{ printf("hits=%d\\n", h) }}
"""


@pytest.mark.parametrize("abi, how", [("m64", "exits"), ("m64", "hijack"), ("m32", "exits"),
                                      ("m32", "hijack")])
def test_return_handler_with_target_stack_nearly_exhausted(tmp_path: Path, cache: Path,
                                                           abi: str, how: str) -> None:
    """Less than 1 KiB left above the thread's guard page; the handler's context alone
    is ~9 KiB: it runs on the private stack, from an exit's stub or from
    pd_ret_tramp.  Without the
    switch (-D PD_PRIVATE_STACK=0) the target dies."""
    if not have_sdt_h():
        pytest.skip("no <sys/sdt.h> (systemtap-sdt-dev)")
    exe = build_c([PROGS / "fp_garbage_sp.S", PROGS / "pstack_main.c"], tmp_path / "deep",
                  m32=abi == "m32", opt="-O2", extra=("-pthread", "-lrt"))
    n = 5
    want = sum(3 * i + 1 for i in range(n))
    assert bare([str(exe), "deepret", str(n)]) == f"deep done\ndeepret {n} {want}\n"
    forced = ["-D", "PD_RETURN_HIJACK=1"] if how == "hijack" else []
    res = run_pydyn(cache, "-v", *forced, "-e", DEEP_SCRIPT.format(exe=exe),
                    "-c", f"{exe} deepret {n}")
    assert res.returncode == 0, res.stderr
    assert mechanisms(res.stderr)["shallow"].startswith(
        "hijack" if how == "hijack" else "exits patched"), res.stderr
    lines = res.stdout.splitlines()
    assert [ln for ln in lines if ln.startswith("ret ")] == \
        [f"ret {3 * i + 1}" for i in range(n)], res.stdout
    assert f"deepret {n} {want}" in lines and lines[-1] == f"hits={n}", res.stdout
    if how == "hijack":
        res = run_pydyn(cache, *forced, "-D", "PD_PRIVATE_STACK=0", "-e",
                        DEEP_SCRIPT.format(exe=exe), "-c", f"{exe} deepret {n}")
        assert "exited with signal 11 (SIGSEGV)" in res.stderr, res.stderr


RET_ONLY = """global c, s
probe process("{exe}").function("work").return, process("{exe}").function("ident").return
{{ c[ppfunc()]++; s[ppfunc()] += $return }}
probe end {{ foreach (f in c+) printf("%s %d %d\\n", f, c[f], s[f]) }}
"""


def _code(exe: Path, name: str) -> bytes:
    """The first 16 bytes of function `name` in the file."""
    from elftools.elf.elffile import ELFFile
    with open(exe, "rb") as f:
        elf = ELFFile(f)
        sym = elf.get_section_by_name(".symtab").get_symbol_by_name(name)[0]
        text = elf.get_section_by_name(".text")
        at = sym["st_value"] - text["sh_addr"]
        return text.data()[at:at + 16]


@pytest.mark.parametrize("abi", ["m64", "m32"])
def test_return_only_probe_on_a_leaf_smaller_than_two_patches(tmp_path: Path, cache: Path,
                                                             abi: str) -> None:
    """`.return` probes alone on leaves whose `ret` lies in their entry's window (ident on
    both ABIs, work on x86-64): the entry jumps straight to its relocated code, whose
    `ret` became the jump to the exit's stub (no handler at the entry, no return address
    replaced); counts and $return sums exact from two threads.  With the hijack forced
    or with traps, as exact, and -v says which mechanism runs."""
    exe = build_c(PROGS / "func_ret_only.c", tmp_path / f"ro{abi}", m32=abi == "m32",
                  opt="-O2", extra=("-pthread",))
    n = 20000
    bits = 32 if abi == "m32" else 64
    plain = bare([str(exe), str(n)]).splitlines()
    assert plain[2:4] == ["work entry not patched", "ident entry not patched"], plain
    want = results(plain[:2], bits)
    in_entry = {"ident", "work"} if abi == "m64" else {"ident"}
    script = RET_ONLY.format(exe=exe)
    for args in ([], ["-D", "PD_RETURN_HIJACK=1"], ["--probe-mode=trap"]):
        res = run_pydyn(cache, "-v", *args, "-e", script, "-c", f"{exe} {n}")
        assert res.returncode == 0, res.stderr
        out = res.stdout.splitlines()
        assert out[:2] == plain[:2] and out[4] == plain[4], (args, out)
        assert results(out[5:], bits) == want, (args, out)
        assert "skipped" not in res.stderr and "ERROR" not in res.stderr, res.stderr
        how = mechanisms(res.stderr)
        entry = dict(ln.split(" entry ") for ln in out[2:4])
        for f in ("work", "ident"):
            code = _code(exe, f)
            ret = code.index(0xc3)
            if not args:
                assert how[f].startswith("exits patched (1: ret at"), (f, how)
                assert ("in the entry's window" in how[f]) == (f in in_entry), (f, how)
                if f in in_entry:    # the window's code, its ret now a jmp
                    assert entry[f].split()[:ret + 1] == \
                        [f"{b:02x}" for b in code[:ret]] + ["e9"], (f, entry, code.hex())
                else:                # its exit is patched, its entry is not
                    assert entry[f] == "not patched", (f, entry)
            elif args[0] == "-D":
                assert how[f] == "hijack: -D PD_RETURN_HIJACK=1", how
                assert entry[f] != "not patched" and \
                    not entry[f].startswith(code[:ret].hex(" ")), (f, entry)
            else:
                assert how[f].startswith("hijack: --probe-mode=trap (the plan: exits patched"), how
                assert entry[f] == "not patched", (f, entry)    # an int3


def test_return_only_probe_under_attach_keeps_the_hijack(tmp_path: Path, cache: Path) -> None:
    """-x: a thread may be inside the leaf already, so the runtime arms the hijack, not
    the bare entry and its exit; -v says so; the program's values stay right and every
    return address is given back at the detach."""
    exe = build_c(PROGS / "func_ret_only.c", tmp_path / "spin", opt="-O2",
                  extra=("-pthread",))
    proc = subprocess.Popen([str(exe), "spin"], stdout=subprocess.PIPE, text=True)
    try:
        assert proc.stdout is not None and proc.stdout.readline() == "ready\n"
        script = RET_ONLY.format(exe=exe) + "probe timer.ms(300) { exit() }\n"
        res = run_pydyn(cache, "-v", "-x", str(proc.pid), "-e", script)
        assert res.returncode == 0, res.stderr
        how = mechanisms(res.stderr)
        for f in ("work", "ident"):
            assert how[f].startswith(f"hijack: -x {proc.pid} attaches to a running process "
                                     "(the plan: exits patched (1: ret at"), how
        counts = {ln.split()[0]: int(ln.split()[1]) for ln in res.stdout.splitlines()}
        assert counts.keys() == {"work", "ident"} and min(counts.values()) > 0, res.stdout
        assert f"pydyn: detached from pid {proc.pid}: restored 2 site(s)" in res.stderr, \
            res.stderr
    finally:
        proc.send_signal(signal.SIGUSR1)
        out, _ = proc.communicate(timeout=60)
    assert out == "spin ok\n" and proc.returncode == 0, out
