"""Per-arch runtime code stays in runtime/arch/<arch>/, chosen in one place (pd_arch.h),
and every build-time default is defined once, in pd_config.h."""

from __future__ import annotations

import re
from pathlib import Path

from pydyn.shmlayout import render_c_header

RUNTIME = Path(__file__).resolve().parent.parent / "runtime"
MACHINE_MACROS = re.compile(r"\b__(x86_64|i386|aarch64|ILP32|amd64|arm)__\b")


def _arch_neutral_files() -> list[Path]:
    return sorted(p for p in RUNTIME.glob("*") if p.suffix in (".c", ".h", ".S"))


def test_only_pd_arch_h_tests_the_machine() -> None:
    tests = {p.name: [n for n, line in enumerate(p.read_text().splitlines(), 1)
                      if MACHINE_MACROS.search(line)]
             for p in _arch_neutral_files()}
    assert {name: lines for name, lines in tests.items() if lines} == {
        "pd_arch.h": [7, 9, 11]}


def test_every_arch_has_a_cpu_h_naming_its_regs_h() -> None:
    text = (RUNTIME / "pd_arch.h").read_text()
    chosen = re.findall(r'#include "arch/([a-z0-9_]+)/cpu.h"', text)
    assert sorted(chosen) == ["aarch64", "i386", "x86_64"]
    for arch in chosen:
        cpu = (RUNTIME / "arch" / arch / "cpu.h").read_text()
        assert f'#define PD_ARCH_REGS_H "arch/{arch}/regs.h"' in cpu


def _defaults(text: str) -> list[str]:
    """Names given a value under `#ifndef NAME`: build-time defaults -D may override."""
    return re.findall(r"^#ifndef (\w+)\n#define \1[ \t]+\S", text, re.MULTILINE)


def test_build_time_defaults_are_in_pd_config_h_only() -> None:
    layout = set(re.findall(r"^#define (\w+)", render_c_header(), re.MULTILINE))
    config = set(_defaults((RUNTIME / "pd_config.h").read_text()))
    assert {"MAXACTION", "STUCK_CONTEXT_MS", "PD_LOCK_WAIT_NS", "PD_LOCK_SPINS"} <= config
    elsewhere = {}
    for p in [*_arch_neutral_files(), *sorted((RUNTIME / "arch").rglob("*.[chS]"))]:
        if p.name == "pd_config.h":
            continue
        names = [n for n in _defaults(p.read_text())
                 if re.match(r"(PD_|MAX|STP_|STUCK_)", n) and n not in layout
                 and n != "PD_FAST_MARK_CC"]   # an arch hook's default, not a setting
        if names:
            elsewhere[str(p.relative_to(RUNTIME))] = names
    assert elsewhere == {}
