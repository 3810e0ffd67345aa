"""Fixtures shared by the test modules.

One module cache per test module (`cache`), one store of precompiled runtime objects
per session (`runtime_store`): pydyn compiles its runtime (runtime/*.c) once per
compiler, ABI and `-D` values into `DIR/runtime/` of its cache (launcher/build.py's
`runtime_objects`), and each module's cache links that directory to the session's
store, so the runtime is compiled once per session instead of once per module while
every module still builds, hits and evicts its own entries.  Tests of the cache
itself (test_cache.py, test_startup.py) make caches of their own: `warm_cache`
(a copy of the session's runtime objects) unless the runtime store or the cache
directory's creation is what they test.
"""

from __future__ import annotations

import shutil
import sys
from collections.abc import Callable
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent))

import cbuild  # noqa: E402

from pydyn.launcher.cache import RUNTIME_STORE  # noqa: E402


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


@pytest.fixture(scope="session")
def runtime_store(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The session's precompiled runtime objects (0700, ours: the cache's trust checks
    hold); the first cold build of each compiler, ABI and `-D` values fills it."""
    return tmp_path_factory.mktemp("runtime-store")


@pytest.fixture(scope="session")
def new_cache(tmp_path_factory: pytest.TempPathFactory,
              runtime_store: Path) -> Callable[[str], Path]:
    """`new_cache(name)`: an empty module cache directory whose runtime objects are the
    session's, for a test that needs a cache no other test has touched."""

    def make(name: str = "cache") -> Path:
        cache = tmp_path_factory.mktemp(name)
        (cache / RUNTIME_STORE).symlink_to(runtime_store, target_is_directory=True)
        return cache

    return make


@pytest.fixture(scope="module")
def cache(new_cache: Callable[[str], Path]) -> Path:
    """The test module's module cache (see the module docstring)."""
    return new_cache("cache")


@pytest.fixture(scope="session")
def warm_runtime_store(new_cache: Callable[[str], Path], runtime_store: Path) -> Path:
    """The session's store holding the runtime objects of the default `-D` values (one
    `pydyn -p4` compiles them unless a test already has)."""
    res = cbuild.run_pydyn(new_cache("warm"), "-p4", "-e", "probe begin { exit() }")
    assert res.returncode == 0, res.stderr
    return runtime_store


@pytest.fixture
def warm_cache(tmp_path: Path, warm_runtime_store: Path) -> Path:
    """tmp_path/cache, a module cache of the test's own holding a copy (a directory, not a
    link: --clean-cache and damage stay in it) of the session's runtime objects: what a
    cache that ran before holds, for the tests of the cache's entries."""
    cache = tmp_path / "cache"
    cache.mkdir(mode=0o700)
    shutil.copytree(warm_runtime_store, cache / RUNTIME_STORE)
    return cache


# What a `unit` test may not ask for: these compile or run a target.
NOT_UNIT = {"cache", "new_cache", "runtime_store", "warm_runtime_store", "warm_cache",
            "have_m32", "sdt_cflags"}


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    for item in items:
        if item.get_closest_marker("unit") is None:
            continue
        used = NOT_UNIT.intersection(getattr(item, "fixturenames", ()))
        if used:
            raise pytest.UsageError(f"{item.nodeid} is marked unit but uses {sorted(used)}")
