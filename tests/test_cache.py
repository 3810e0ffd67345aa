"""The module cache on real runs: a hit runs no compiler and parses no ELF,
keys follow their inputs, damaged entries are rebuilt, concurrent runs agree,
foreign or group-writable entries are refused, LRU eviction, clean and disable.

A cache hit is proven with a `gcc` wrapper (first on PATH and named by CC) that
logs every call and fails once a marker file exists, and with PYDYN_DEBUG_NO_ELF=1,
which makes any pyelftools parse in the launcher an error.
"""

from __future__ import annotations

import hashlib
import json
import os
import pwd
import shutil
import subprocess
from collections.abc import Callable
from pathlib import Path

import pytest
from cbuild import build_c, run_pydyn, start_pydyn

ROOT = Path(__file__).resolve().parent.parent
COUNTER = ROOT / "examples" / "src" / "counter.c"


@pytest.fixture(scope="module")
def counter(tmp_path_factory: pytest.TempPathFactory, sdt_cflags: object) -> Path:
    return build_c(COUNTER, tmp_path_factory.mktemp("bin") / "counter")


class FakeGcc:
    """A gcc on PATH that logs its calls and fails when `armed`.  The wrapper is one file
    for the whole session (beside the tests' directories), told its log and marker by
    the environment: the runtime objects precompiled with it (keyed by the compiler's
    path and stat) are then compiled once into the session's runtime store (`new_cache`)
    and found there by every later test."""

    def __init__(self, tmp: Path) -> None:
        real = shutil.which(os.environ.get("CC", "gcc"))
        assert real is not None
        bindir = tmp.parent / "fakebin"   # tmp_path's parent: the session's base directory
        self.log = tmp / "gcc.log"
        self.marker = tmp / "gcc.fail"
        self.path = bindir / "gcc"
        text = ("#!/bin/sh\n"
                'echo "$@" >> "$PYDYN_TEST_GCC_LOG"\n'
                'if [ -e "$PYDYN_TEST_GCC_FAIL" ]; then\n'
                '  echo "fake gcc called: $*" >&2; exit 1\n'
                'fi\n'
                f'exec {real} "$@"\n')
        if not self.path.exists() or self.path.read_text() != text:
            bindir.mkdir(exist_ok=True)
            tmp_file = bindir / f"gcc.{os.getpid()}"
            tmp_file.write_text(text)
            tmp_file.chmod(0o755)
            os.replace(tmp_file, self.path)
        self.env = {"CC": str(self.path), "PATH": f"{bindir}:{os.environ['PATH']}",
                    "PYDYN_TEST_GCC_LOG": str(self.log), "PYDYN_TEST_GCC_FAIL": str(self.marker)}

    def arm(self) -> None:
        self.marker.touch()
        self.log.unlink(missing_ok=True)

    def calls(self) -> list[str]:
        return self.log.read_text().splitlines() if self.log.exists() else []


def script_for(binary: Path, extra: str = "") -> str:
    return (f'global hits, total\nprobe process("{binary}").mark("tick") '
            "{ hits++; total += $arg1 }\n"
            f'probe end {{ printf("hits=%d total=%d\\n", hits, total) }}\n{extra}')


def entries(cache: Path) -> list[Path]:
    return sorted(p for p in cache.iterdir() if p.is_dir() and len(p.name) == 32)


def module_paths(res: subprocess.CompletedProcess[str]) -> list[Path]:
    assert res.returncode == 0, res.stderr
    return [Path(line) for line in res.stdout.split()]


def key_of(res: subprocess.CompletedProcess[str]) -> str:
    return module_paths(res)[0].name.split("_")[1]


def test_hit_runs_no_compiler_and_parses_no_elf(tmp_path: Path, counter: Path,
                                                new_cache: Callable[[str], Path]) -> None:
    gcc = FakeGcc(tmp_path)
    cache = new_cache("hit")
    script = script_for(counter)
    cold = run_pydyn(cache, "-v", "-e", script, "-c", f"{counter} 100", env=gcc.env)
    assert cold.returncode == 0, cold.stderr
    assert "hits=100 total=4950" in cold.stdout
    assert "Pass 4: compiled m64" in cold.stderr
    assert gcc.calls(), "the cold run compiles with the fake gcc"
    gcc.arm()
    warm_env = {**gcc.env, "PYDYN_DEBUG_NO_ELF": "1"}
    warm = run_pydyn(cache, "-v", "-e", script, "-c", f"{counter} 100", env=warm_env)
    assert warm.returncode == 0, warm.stderr
    assert "hits=100 total=4950" in warm.stdout
    assert "Pass 2: using cached probe sites (1 probe site(s))" in warm.stderr
    assert "Pass 4: using cached m64" in warm.stderr
    assert gcc.calls() == []
    # -p4 on a hit prints the cached paths, m64 first, still without gcc or ELF parsing.
    p4 = run_pydyn(cache, "-p4", "-e", script, "-c", f"{counter} 1", env=warm_env)
    paths = module_paths(p4)
    assert paths[0].name.endswith("_m64.so") and paths[0].parent == entries(cache)[0]
    assert gcc.calls() == []
    # The guard is real: a miss on a binary the cache has not seen must parse ELF and is
    # refused under PYDYN_DEBUG_NO_ELF (one it has seen gives its facts: factstore.py).
    miss = run_pydyn(new_cache("miss"), "-e", script_for(counter, "probe begin { println(1) }"),
                     "-c", str(counter), env={"PYDYN_DEBUG_NO_ELF": "1"})
    assert miss.returncode == 1
    assert "PYDYN_DEBUG_NO_ELF is set, but pydyn parsed the ELF file" in miss.stderr


def test_entry_layout_manifest_and_hash_log(warm_cache: Path, counter: Path) -> None:
    cache = warm_cache
    # A string argument keeps this format in the launcher (integer-only ones are
    # formatted in the probe), so the manifest must carry it.
    script = script_for(counter, 'probe begin { printf("%s\\n", execname()) }')
    paths = module_paths(run_pydyn(cache, "-p4", "-e", script))
    key = paths[0].name.split("_")[1]
    entry = paths[0].parent
    assert entry == cache / key and len(key) == 32
    assert [p.name for p in paths] == [f"pydyn_{key}_{abi}.so" for abi in ("m64", "m32")][
        :len(paths)]
    assert (entry / f"pydyn_{key}.c").is_file()
    doc = json.loads((entry / f"pydyn_{key}.json").read_text())
    body = doc["body"]
    assert body["key"] == key
    for name, digest in body["artefacts"].items():
        assert hashlib.sha256((entry / name).read_bytes()).hexdigest() == digest
    assert {f"pydyn_{key}_m64.so", f"pydyn_{key}.c"} <= set(body["artefacts"])
    labels = [i["name"] for i in body["inputs"]]
    assert f"binary {counter}" in labels and "-D values" in labels
    assert any(label.startswith("compiler m64") for label in labels)
    prog = body["program"]
    assert prog["needs_wait"] is True and prog["formats"] and len(prog["checksum"]) == 64
    assert [s["name"] for s in body["sites"]] == ["tick"]
    log = (entry / f"pydyn_{key}.hash").read_text()
    assert f"key: {key}" in " ".join(log.split())
    build_id = [i["value"] for i in body["inputs"] if i["name"] == f"binary {counter}"][0]
    assert build_id.startswith("build-id ") and build_id.split()[1] in log
    # The key is the sha256 of the 'NAME: HASH' lines, as the log says.
    lines = "\n".join(f"{i['name']}: {i['sha256']}" for i in body["inputs"])
    assert hashlib.sha256(lines.encode()).hexdigest()[:32] == key
    assert (entry / "lib" / "x86_64-linux-gnu" / f"pydyn_{key}.so").resolve() == paths[0]


def test_key_follows_its_inputs(tmp_path: Path, warm_cache: Path, counter: Path,
                                sdt_cflags: object) -> None:
    cache = warm_cache
    script = script_for(counter)
    base = key_of(run_pydyn(cache, "-p4", "-e", script))
    assert key_of(run_pydyn(cache, "-p4", "-e", script)) == base
    assert key_of(run_pydyn(cache, "-p4", "-D", "MAXACTION=77", "-e", script)) != base
    assert key_of(run_pydyn(cache, "-p4", "-e", script, "extra-arg")) != base
    # The same path rebuilt with another build-id is another entry.
    copy = tmp_path / "counter"
    build_c(COUNTER, copy)
    other = script_for(copy)
    first = key_of(run_pydyn(cache, "-p4", "-e", other))
    build_c(COUNTER, copy, extra=["-DPYDYN_TEST_VARIANT=1", "-Wl,--build-id=sha1"],
            opt="-O1")
    assert key_of(run_pydyn(cache, "-p4", "-e", other)) != first


def test_damaged_entry_is_reported_once_and_rebuilt(warm_cache: Path, counter: Path) -> None:
    cache = warm_cache
    script = script_for(counter)
    run = ["-v", "-e", script, "-c", f"{counter} 10"]
    paths = module_paths(run_pydyn(cache, "-p4", *run[1:]))
    key = paths[0].name.split("_")[1]
    manifest = paths[0].parent / f"pydyn_{key}.json"
    for damage in ("truncate-module", "alter-module", "truncate-manifest", "alter-manifest"):
        target = paths[0] if damage.endswith("module") else manifest
        data = target.read_bytes()
        if damage.startswith("truncate"):
            target.write_bytes(data[:len(data) // 2])
        elif damage == "alter-module":
            target.write_bytes(data[:-1] + bytes([data[-1] ^ 0xFF]))
        else:
            target.write_text(data.decode().replace('"needs_wait": true',
                                                    '"needs_wait": false'))
        res = run_pydyn(cache, *run)
        assert res.returncode == 0, (damage, res.stderr)
        assert "hits=10 total=45" in res.stdout
        warnings = [line for line in res.stderr.splitlines() if "damaged" in line]
        assert len(warnings) == 1, (damage, res.stderr)
        assert warnings[0].startswith(f"pydyn: warning: cache entry {paths[0].parent}")
        assert "rebuilding" in warnings[0]
        assert "Pass 4: compiled m64" in res.stderr
    again = run_pydyn(cache, *run)
    assert "Pass 4: using cached" in again.stderr and "damaged" not in again.stderr


def test_concurrent_runs_of_one_script(tmp_path: Path, counter: Path) -> None:
    gcc = FakeGcc(tmp_path)
    cache = tmp_path / "cache"
    script = script_for(counter)
    procs = [start_pydyn(cache, "-e", script, "-c", f"{counter} 200", env=gcc.env,
                         start_new_session=False) for _ in range(3)]
    for proc in procs:
        out, err = proc.communicate(timeout=180)
        assert proc.returncode == 0, err
        assert "hits=200 total=19900" in out
        assert "warning" not in err
    assert len(entries(cache)) == 1
    assert not list(entries(cache)[0].glob("*.tmp*"))
    gcc.arm()
    warm = run_pydyn(cache, "-v", "-e", script, "-c", f"{counter} 5",
                     env={**gcc.env, "PYDYN_DEBUG_NO_ELF": "1"})
    assert warm.returncode == 0, warm.stderr
    assert "Pass 4: using cached" in warm.stderr and gcc.calls() == []


def test_cache_dir_is_created_private(tmp_path: Path, counter: Path) -> None:
    cache = tmp_path / "deep" / "cache"
    # umask 002 (user private groups) must not make our own entries group-writable.
    module_paths(run_pydyn(cache, "-p4", "-e", script_for(counter), umask=0o002))
    assert cache.stat().st_mode & 0o777 == 0o700
    entry = entries(cache)[0]
    assert entry.stat().st_mode & 0o777 == 0o700
    assert not [p for p in entry.rglob("*") if not p.is_symlink() and p.stat().st_mode & 0o022]
    again = run_pydyn(cache, "-v", "-p4", "-e", script_for(counter), umask=0o002)
    assert "Pass 4: using cached" in again.stderr and "refusing" not in again.stderr


@pytest.mark.parametrize("how", ["group-writable", "other-owner"])
def test_unsafe_entry_is_refused(warm_cache: Path, counter: Path, how: str) -> None:
    cache = warm_cache
    script = script_for(counter)
    entry = module_paths(run_pydyn(cache, "-p4", "-e", script, "-c", f"{counter} 10"))[0].parent
    if how == "group-writable":
        entry.chmod(0o770)
        expect = "writable by group or others"
    else:
        if os.geteuid() != 0:
            pytest.skip("chown to nobody needs root")
        nobody = pwd.getpwnam("nobody")
        os.chown(entry, nobody.pw_uid, nobody.pw_gid)
        expect = "owned by nobody"
    res = run_pydyn(cache, "-v", "-e", script, "-c", f"{counter} 10")
    assert res.returncode == 0, res.stderr
    assert "hits=10 total=45" in res.stdout
    refusals = [line for line in res.stderr.splitlines() if "refusing" in line]
    assert len(refusals) == 1, res.stderr
    assert str(entry) in refusals[0] and expect in refusals[0]
    assert "Pass 4: compiled m64" in res.stderr   # built privately, the entry left alone
    assert len(entries(cache)) == 1


def test_unsafe_cache_directory_is_refused(tmp_path: Path, counter: Path) -> None:
    cache = tmp_path / "shared"
    cache.mkdir()
    cache.chmod(0o777)
    res = run_pydyn(cache, "-e", script_for(counter), "-c", f"{counter} 3")
    assert res.returncode == 0, res.stderr
    assert "refusing cache directory" in res.stderr and "not using the module cache" in res.stderr
    assert list(cache.iterdir()) == []


def test_lru_eviction_keeps_the_size_limit(warm_cache: Path, counter: Path) -> None:
    cache = warm_cache
    keys = []
    for i in range(3):
        script = script_for(counter, f"probe begin {{ println({i}) }}")
        keys.append(key_of(run_pydyn(cache, "-p4", "-e", script)))
    sizes = {e.name: sum(f.stat().st_size for f in e.rglob("*") if f.is_file()
                         and not f.is_symlink()) for e in entries(cache)}
    assert len(sizes) == 3
    # Use entry 0 again so entry 1 is the least recently used.
    os.utime(cache / keys[1] / f"pydyn_{keys[1]}.json", (1, 1))
    assert key_of(run_pydyn(cache, "-p4", "-e",
                            script_for(counter, "probe begin { println(0) }"))) == keys[0]
    limit_mib = (max(sizes.values()) * 3.5) / (1 << 20)
    new = key_of(run_pydyn(cache, "-p4", "--cache-size", f"{limit_mib:.4f}", "-e",
                           script_for(counter, "probe begin { println(9) }")))
    left = {e.name for e in entries(cache)}
    assert new in left and keys[1] not in left and {keys[0], keys[2]} <= left


def test_clean_and_disable(tmp_path: Path, warm_cache: Path, counter: Path) -> None:
    cache = warm_cache
    script = script_for(counter)
    module_paths(run_pydyn(cache, "-p4", "-e", script))
    assert entries(cache)
    res = run_pydyn(cache, "--clean-cache")
    assert res.returncode == 0, res.stderr
    assert "removed 1 entry" in res.stderr
    assert entries(cache) == [] and not (cache / "index").exists()
    off = tmp_path / "unused"
    run = run_pydyn(off, "-v", "--disable-cache", "-e", script, "-c", f"{counter} 4")
    assert run.returncode == 0, run.stderr
    assert "hits=4 total=6" in run.stdout and "Pass 4: compiled m64" in run.stderr
    assert not off.exists()
