"""stap's user-space context tapset on aarch64 under qemu-user, -O0 and -O2: the
backtrace through a library with no probe (--ldd, the sysroot's libc named by its
launcher path), arm64's register names and x0..x7 arguments, ucallers, umodname and
is_return (tests/progs/ustack_exe.c and ustack_lib.c, as test_ustack_tapset.py checks
them on x86)."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
import test_aarch64
from cbuild import PROGS, run_pydyn
from test_aarch64 import build_a64
from test_aarch64 import pytestmark as pytestmark  # the same skips: cross gcc, qemu, sysroot
from test_ustack_tapset import _addrs, _frames, _sizes

a64dir = test_aarch64.a64dir

SCRIPT = r"""
probe process(@1).function("probed") {
  printf("uaddr=%x name=%s mod=%s libmod=%s\n", uaddr(), usymname(uaddr()),
         umodname(uaddr()), umodname(ustack(2)))
  printf("args %d %d %d %d %x %d %d %d %d %x %x %d\n", int_arg(1), uint_arg(1),
         long_arg(3), ulong_arg(3), pointer_arg(4), s32_arg(6), u32_arg(6), int_arg(7),
         long_arg(7), longlong_arg(8), u64_arg(8), u32_arg(2))
  printf("regs %d %d %d %d pc=%d lr=%d sp=%d\n", register("w0"), u_register("w0"),
         register("x2"), register("w2"), register("pc") == uaddr(),
         register("lr") == ustack(1), register("sp") == u_register("sp"))
  printf("callers=%s\n", ucallers(4))
  print_ubacktrace()
}
probe process(@1).function("in_regs").return { printf("in_regs.return %d\n", is_return()) }
"""


@pytest.mark.parametrize("opt", ["-O0", "-O2"])
def test_aarch64_tapset_with_ldd(a64dir: Path, cache: Path, opt: str) -> None:
    tag = opt[1:]
    lib = build_a64(a64dir, [PROGS / "ustack_lib.c"], f"libustk{tag}.so", opt=opt,
                    extra=("-shared", "-fPIC"))
    exe = build_a64(a64dir, [PROGS / "ustack_exe.c"], f"ustk{tag}", opt=opt,
                    extra=(f"-L{a64dir}", f"-lustk{tag}", f"-Wl,-rpath,{a64dir}"))
    res = run_pydyn(cache, "--ldd", "-e", SCRIPT, str(exe), "-c", str(exe), timeout=600)
    assert res.returncode == 0, res.stderr
    out = res.stdout
    lines = out.splitlines()
    a = _addrs(out)
    frames = _frames(exe, lib, a, a["probed"])
    assert f"uaddr={a['probed']:x} name=probed mod={exe} libmod={lib}" in lines, out
    assert (f"args -1 {(1 << 32) - 1} -5 -5 {a['data_word']:x} -7 {(1 << 32) - 7} 8 8 "
            "100000002 100000002 3") in lines, out
    assert f"regs -1 {(1 << 32) - 1} -5 -5 pc=1 lr=1 sp=1" in lines, out
    assert f"callers={' '.join(f'{f[0]:#x}' for f in frames)}" in lines, out
    size = {exe: _sizes(exe), lib: _sizes(lib)}
    printed = [ln for ln in lines if ln.startswith(" 0x")]
    assert printed[:5] == [f" {f[0]:#x} : {f[1]}+{f[2]:#x}/{size[f[3]][f[1]]:#x} [{f[3]}]"
                           for f in frames], out
    # libc's frames: the sysroot's file, by the launcher's path, named or by module
    libc = r"\[?/usr/aarch64-linux-gnu/lib/libc\.so\.6"
    assert all(re.search(libc, ln) or " : _start+" in ln for ln in printed[5:]), out
    assert any(re.search(libc, ln) for ln in printed[5:]), out
    assert "in_regs.return 1" in lines, out
