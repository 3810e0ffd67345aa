"""Patch planning as its own step (launcher/plan/): what it refuses, and why.

A relocation names a possible branch target; an object whose relocations cannot be
read gives the planner no way to prove a displaced window safe, so every site of it
that would displace instructions is refused (a trap plan) with the reason, and the
probes still fire through the trap.
"""

from __future__ import annotations

import shutil
import struct
from pathlib import Path

import pytest
from cbuild import build_c, run_pydyn

from pydyn.launcher.elf.stapsdt import get_probe_sites
from pydyn.launcher.plan import plan_site

COUNTER = Path(__file__).resolve().parent.parent / "examples" / "src" / "counter.c"
SHT_RELA, SHT_REL = 4, 9


def break_relocation_links(src: Path, dst: Path) -> int:
    """Copy `src` to `dst` with every REL/RELA section's sh_link naming a section that
    does not exist; returns how many it changed."""
    shutil.copy(src, dst)
    data = bytearray(dst.read_bytes())
    wide = data[4] == 2
    shoff, = struct.unpack_from("<Q" if wide else "<I", data, 0x28 if wide else 0x20)
    shentsize, shnum = struct.unpack_from("<HH", data, 0x3A if wide else 0x2E)
    link_at = 40 if wide else 24
    changed = 0
    for i in range(shnum):
        hdr = shoff + i * shentsize
        sh_type, = struct.unpack_from("<I", data, hdr + 4)
        if sh_type in (SHT_RELA, SHT_REL):
            struct.pack_into("<I", data, hdr + link_at, 0x7FFF)
            changed += 1
    dst.write_bytes(data)
    return changed


@pytest.mark.parametrize("m32", [False, True], ids=["m64", "m32"])
def test_unreadable_relocations_refuse_displacement(tmp_path: Path, cache: Path, m32: bool,
                                                    sdt_cflags: object) -> None:
    good = build_c(COUNTER, tmp_path / "counter", m32=m32)
    tick = next(s for s in get_probe_sites(str(good)).sites if s.name == "tick")
    assert plan_site(tick).tactic == "displace", plan_site(tick)   # sdt.h's 1-byte nop

    bad = tmp_path / "counter-badrel"
    assert break_relocation_links(good, bad) > 0
    tick = next(s for s in get_probe_sites(str(bad)).sites if s.name == "tick")
    plan = plan_site(tick)
    assert plan.tactic == "trap"
    assert "cannot read the relocations of .rel" in plan.reason

    # the probe still fires (int3), every hit counted; -p2 says why
    r = run_pydyn(cache, "-e", f'global n probe process("{bad}").mark("tick") {{ n++ }} '
                  'probe end { printf("n=%d\\n", n) }', "-c", f"{bad} 300")
    assert r.returncode == 0, r.stderr
    assert "n=300" in r.stdout.splitlines()
    r = run_pydyn(cache, "-u", "-p2", "-e", f'probe process("{bad}").mark("tick") {{ }}')
    assert "trap: cannot read the relocations of .rel" in r.stdout, r.stdout
