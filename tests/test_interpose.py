"""The libc functions the runtime interposes, re-entered where real programs re-enter
them: the loader called from a destructor dlclose runs and from a constructor dlopen
runs, the loader in a child forked while another thread was inside dlopen or just
after a dlopen (libpam's pam_end), and the PAM programs themselves (runuser, su,
setpriv) under -c.  Each must behave as it does untraced, in bounded time, with the
probes of the session firing (m64 and m32 where the program is ours)."""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

import pytest
from cbuild import PROGS, build_c, run_pydyn

TIMEOUT = 60
PY = "/usr/bin/python3.11"
# Any probe on the target's own program arms the dlopen family (sites of objects
# loaded later); python's "line" mark never fires in these programs.
PY_LINE = f'global n probe process("{PY}").mark("line") {{ n++ }}'

ROLES = {"a": 1, "b": 2, "c": 3, "d": 4, "e": 5}


def build_reenter(d: Path, m32: bool) -> Path:
    for name, role in ROLES.items():
        build_c(PROGS / "dl_reenter_lib.c", d / f"libdlt_{name}.so", m32=m32,
                extra=("-shared", "-fPIC", f"-DROLE={role}"))
    return build_c(PROGS / "dl_reenter.c", d / "dl_reenter", m32=m32,
                   extra=("-pthread", "-ldl"))


@pytest.mark.parametrize("abi", ["m64", "m32"])
def test_loader_reentered_and_forked(cache: Path, tmp_path: Path, abi: str) -> None:
    exe = build_reenter(tmp_path, abi == "m32")
    bare = subprocess.run([str(exe), str(tmp_path)], capture_output=True, text=True,
                          timeout=TIMEOUT)
    assert (bare.returncode, bare.stdout) == (0, "ok\n"), bare.stdout + bare.stderr
    script = (f'global n probe process("{tmp_path}/libdlt_*.so").mark("hit") {{ n[$arg1]++ }}\n'
              'probe end { foreach (k+ in n) printf("%d=%d\\n", k, n[k]) }')
    res = run_pydyn(cache, "-e", script, "-c", f"{exe} {tmp_path}", timeout=TIMEOUT)
    assert res.returncode == 0, res.stdout + res.stderr
    # a: once; b: the parent once, the first child twice, the second once; c: once;
    # d: in c's constructor (armed by the nested dlopen's own pass) and the second child
    assert res.stdout.splitlines() == ["ok", "1=1", "2=4", "3=1", "4=2"], res.stdout + res.stderr
    assert "WARNING" not in res.stderr, res.stderr


def pam_commands() -> list[list[str]]:
    return [["runuser", "-u", "root", "--", "/bin/echo", "hi"],
            ["su", "-c", "echo hi", "root"],
            ["setpriv", "--reuid=0", "/bin/echo", "hi"]]


@pytest.mark.parametrize("argv", pam_commands(), ids=lambda a: a[0])
def test_pam_programs(cache: Path, argv: list[str]) -> None:
    if os.geteuid() != 0:
        pytest.skip("runuser, su and setpriv to root need root")
    if not shutil.which(argv[0]) or not Path(PY).exists():
        pytest.skip(f"{argv[0]} or {PY} not installed")
    bare = subprocess.run(argv, capture_output=True, text=True, timeout=TIMEOUT)
    assert (bare.returncode, bare.stdout) == (0, "hi\n"), bare.stderr
    # through sh: pydyn refuses a setuid -c target (su), whose loader would ignore
    # LD_PRELOAD for anyone but root; run by root, su loads the module like the others
    cmd = "sh -c \"" + " ".join(f"'{a}'" for a in argv) + "\""
    res = run_pydyn(cache, "-e", PY_LINE + ' probe end { printf("n=%d\\n", n) }',
                    "-c", cmd, timeout=TIMEOUT)
    assert (res.returncode, res.stdout) == (0, "hi\nn=0\n"), res.stdout + res.stderr
    # python never runs here: the exit report says so, and nothing else goes wrong
    warnings = [ln for ln in res.stderr.splitlines() if ln.startswith("WARNING")]
    assert warnings == [f"WARNING: no process of the session loaded {PY}: "
                        f'process("{PY}").mark("line") never fired'], res.stderr


@pytest.mark.parametrize("abi", ["m64", "m32"])
@pytest.mark.parametrize("mode", ["v", "l"])
def test_exec_from_signal_handler_allocates_nothing(cache: Path, tmp_path: Path, abi: str,
                                                    mode: str) -> None:
    """execve/execle from a signal handler with a scrubbed environment: the runtime
    puts its variables back without malloc, and the new image is followed."""
    exe = build_c(PROGS / "exec_nomalloc.c", tmp_path / "exec_nomalloc", m32=abi == "m32")
    bare = subprocess.run([str(exe), mode], capture_output=True, text=True, timeout=TIMEOUT)
    assert (bare.returncode, bare.stdout) == (0, "child ok\n"), bare.stderr
    script = (f'global n probe process("{exe}").mark("child") {{ n++ }}\n'
              'probe end { printf("n=%d\\n", n) }')
    res = run_pydyn(cache, "-e", script, "-c", f"{exe} {mode}", timeout=TIMEOUT)
    assert (res.returncode, res.stdout) == (0, "child ok\nn=1\n"), res.stdout + res.stderr
