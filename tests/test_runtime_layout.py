"""The runtime's files per ABI (launcher/build.py: runtime/*.c plus the .c and .S files of
the ABI's arch folders), how they are precompiled and cached, that the package ships
them, and the pyelftools-free ELF facts of launcher/elf/header.py."""

from __future__ import annotations

import fnmatch
import re
import shutil
import subprocess
from pathlib import Path

import pytest
import tomllib
from cbuild import PROGS, build_c

from pydyn.launcher import build
from pydyn.launcher.elf.header import EM_AARCH64, EM_X86_64, get_build_id, get_machine

ROOT = Path(__file__).resolve().parent.parent
RUNTIME = ROOT / "runtime"
EM_386 = 3


def test_each_abi_compiles_its_own_arch_folders() -> None:
    compiled: set[Path] = set()
    for abi in build.ABIS:
        files = build.runtime_sources(abi)
        stems = [p.stem for p in files]
        assert len(stems) == len(set(stems)), f"{abi}: two objects of one name: {stems}"
        arch = {p.parent.name for p in files if p.parent.parent.name == "arch"}
        assert arch == set(build.ARCH_DIRS[abi]), (abi, arch)
        assert RUNTIME / "pd_runtime.c" in files and RUNTIME / "pd_tramp.c" in files
        compiled |= set(files)
    in_arch = {p for p in (RUNTIME / "arch").rglob("*") if p.suffix in (".c", ".S")}
    assert in_arch <= compiled, f"never compiled: {sorted(in_arch - compiled)}"
    assert any(p.suffix == ".S" for p in in_arch)


def test_package_data_ships_every_runtime_file() -> None:
    conf = tomllib.loads((ROOT / "pyproject.toml").read_text())
    globs = conf["tool"]["setuptools"]["package-data"]["pydyn.runtime"]
    for p in RUNTIME.rglob("*"):
        if p.suffix in (".c", ".h", ".S") and "__pycache__" not in p.parts:
            rel = p.relative_to(RUNTIME).as_posix()
            assert any(fnmatch.fnmatch(rel, g) and rel.count("/") == g.count("/")
                       for g in globs), f"{rel} is not in the package data ({globs})"


@pytest.mark.parametrize("abi", build.ABIS)
def test_precompiled_runtime_holds_the_assembly(runtime_store: Path, abi: str) -> None:
    tc = build.get_toolchain(abi)
    if tc is None:
        pytest.skip(f"no {abi} toolchain: {build.INSTALL_HINT[abi]}")
    # the session's store (conftest.py): the very objects every module of the session
    # links, compiled here unless a run before did
    objs = build.runtime_objects(tc, [], runtime_store)
    assert [o.stem for o in objs] == [p.stem for p in build.runtime_sources(abi)]
    sums = (objs[0].parent / "sha256.json").read_text()
    asm = [o for o, p in zip(objs, build.runtime_sources(abi), strict=True) if p.suffix == ".S"]
    assert asm and all(f'"{o.name}"' in sums for o in asm)   # checked like the C objects
    nm = shutil.which("aarch64-linux-gnu-nm" if abi == "aarch64" else "nm")
    if nm is None:
        pytest.skip("no nm (binutils)")
    defined = subprocess.run([nm, "--defined-only", *map(str, asm)], capture_output=True,
                             text=True, check=True).stdout
    assert re.search(r" T pd_ret_tramp$", defined, re.M), defined
    # the objects built from .S ask for no executable stack
    readelf = shutil.which("aarch64-linux-gnu-readelf" if abi == "aarch64" else "readelf")
    if readelf:
        for o in asm:
            sections = subprocess.run([readelf, "-SW", str(o)], capture_output=True,
                                      text=True, check=True).stdout
            assert ".note.GNU-stack" in sections, o


@pytest.mark.parametrize("m32", [False, True], ids=["m64", "m32"])
def test_elf_header_facts(tmp_path: Path, m32: bool) -> None:
    exe = build_c(PROGS / "attach_loop.c", tmp_path / "prog", m32=m32,
                  extra=("-Wl,--build-id=sha1",))
    notes = subprocess.run(["readelf", "-nW", str(exe)], capture_output=True, text=True,
                           check=True).stdout
    m = re.search(r"Build ID: ([0-9a-f]+)", notes)
    assert m and get_build_id(str(exe)) == m.group(1)
    assert get_machine(str(exe)) == (EM_386 if m32 else EM_X86_64)
    bare = build_c(PROGS / "attach_loop.c", tmp_path / "bare", m32=m32,
                   extra=("-Wl,--build-id=none",))
    assert get_build_id(str(bare)) is None


def test_elf_header_of_what_is_not_elf(tmp_path: Path) -> None:
    text = tmp_path / "t.sh"
    text.write_text("#!/bin/sh\n")
    elf = Path("/bin/true").read_bytes()
    short, cut = tmp_path / "short", tmp_path / "cut"
    short.write_bytes(elf[:10])
    cut.write_bytes(elf[:40])       # the machine is there, the program headers are not
    for path in (text, short, cut, tmp_path / "missing", tmp_path):
        assert get_build_id(str(path)) is None
    for path in (text, short, tmp_path / "missing", tmp_path):
        assert get_machine(str(path)) is None
    assert get_machine(str(cut)) == get_machine("/bin/true") == EM_X86_64


def test_elf_machine_of_an_aarch64_program(tmp_path: Path) -> None:
    cc = shutil.which("aarch64-linux-gnu-gcc")
    if cc is None:
        pytest.skip("no aarch64 cross compiler")
    src, out = tmp_path / "a.c", tmp_path / "a64"
    src.write_text("int main(void) { return 0; }\n")
    subprocess.run([cc, "-O2", "-o", str(out), str(src)], check=True)
    assert get_machine(str(out)) == EM_AARCH64
