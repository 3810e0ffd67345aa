from __future__ import annotations

import sys
from collections.abc import Callable
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent))

import cbuild  # noqa: E402


@pytest.fixture(scope="session")
def have_m32() -> bool:
    """Whether -m32 programs can be built (compiles a hello once per session)."""
    return cbuild.have_m32()


@pytest.fixture(scope="session")
def sdt_cflags() -> Callable[[bool], tuple[str, ...]]:
    """`sdt_cflags(m32)`: flags to compile against <sys/sdt.h>; skips if it is missing."""
    if not cbuild.have_sdt_h():
        pytest.skip("<sys/sdt.h> not installed (systemtap-sdt-dev)")

    def flags(m32: bool = False) -> tuple[str, ...]:
        return cbuild.m32_cflags() if m32 else ()

    return flags
