"""runtime/pd_lock.h: one futex word shared by m64 and m32 processes."""

from __future__ import annotations

import os
import shutil
import signal
import struct
import subprocess
import time
from pathlib import Path

import pytest

from pydyn.shmlayout import PD_LOCK_TID_MASK, PD_LOCK_WAITERS, render_c_header

RUNTIME = Path(__file__).resolve().parent.parent / "runtime"
CFLAGS = ["-std=gnu11", "-Wall", "-Wextra", "-Werror", "-O2"]
ABIS: dict[str, list[str]] = {
    "m64": ["gcc", "-m64"],
    "m32": ["gcc", "-m32", "-idirafter", "/usr/include/x86_64-linux-gnu"],
}
AARCH64_GCC = "aarch64-linux-gnu-gcc"

# Shared file: u32 lock word @0, u32 start barrier @4, u64 counter @8.
LOCK_TEST_C = r"""
#define _GNU_SOURCE
#include <fcntl.h>
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include "pd_lock.h"

static unsigned char *map(const char *path)
{
	int fd = open(path, O_RDWR);
	if (fd < 0) { perror(path); exit(2); }
	void *p = mmap(NULL, 4096, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
	if (p == MAP_FAILED) { perror("mmap"); exit(2); }
	close(fd);
	return p;
}

static long now_ms(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (long)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

int main(int argc, char **argv)
{
	if (argc < 3) return 2;
	unsigned char *base = map(argv[2]);
	volatile uint32_t *lock = (volatile uint32_t *)base;
	uint32_t *ready = (uint32_t *)(base + 4);
	volatile uint64_t *counter = (volatile uint64_t *)(base + 8);
	uint32_t self = (uint32_t)syscall(SYS_gettid);

	if (strcmp(argv[1], "count") == 0) {
		long n = atol(argv[3]);
		uint32_t nprocs = (uint32_t)atol(argv[4]);
		int recovered = 0;
		long deadline = now_ms() + 10000;
		__atomic_add_fetch(ready, 1, __ATOMIC_SEQ_CST);
		while (__atomic_load_n(ready, __ATOMIC_SEQ_CST) < nprocs)
			if (now_ms() > deadline) return 3;
		for (long i = 0; i < n; i++) {
			int r = pd_lock(lock);
			if (r < 0) return 4;
			recovered += r == PD_LOCK_RECOVERED;
			uint64_t c = *counter; /* deliberately not atomic: the lock must protect it */
			if ((i & 1023) == 0) sched_yield();
			*counter = c + 1;
			pd_unlock(lock);
		}
		printf("recovered=%d\n", recovered);
		return 0;
	}
	if (strcmp(argv[1], "hold") == 0) {
		int r = pd_lock(lock);
		printf("locked rc=%d word=%u self=%u\n", r, *lock, self);
		fflush(stdout);
		for (;;) pause();
	}
	if (strcmp(argv[1], "acquire") == 0) {
		errno = 4242;
		int r = pd_lock(lock);
		int errno_ok = errno == 4242;
		uint32_t word = *lock;
		pd_unlock(lock);
		int holder_ok = (word & PD_LOCK_TID_MASK) == self;
		printf("rc=%d errno_ok=%d holder_ok=%d after=%u\n", r, errno_ok, holder_ok, *lock);
		return 0;
	}
	if (strcmp(argv[1], "try") == 0) {
		printf("rc=%d\n", pd_trylock(lock));
		return 0;
	}
	if (strcmp(argv[1], "reenter") == 0) {
		int r1 = pd_lock(lock);
		long t0 = now_ms();
		int r2 = pd_lock(lock);
		int r3 = pd_trylock(lock);
		long dt = now_ms() - t0;
		pd_unlock(lock);
		int r4 = pd_trylock(lock);
		pd_unlock(lock);
		printf("%d %d %d %d %ld %u\n", r1, r2, r3, r4, dt, *lock);
		return 0;
	}
	if (strcmp(argv[1], "fork") == 0) {
		pd_lock(lock); /* caches this thread's TID */
		pd_unlock(lock);
		pid_t pid = fork();
		if (pid == 0) {
			int r = pd_lock(lock);
			int ok = r == PD_LOCK_OK && (*lock & PD_LOCK_TID_MASK) == (uint32_t)getpid();
			pd_unlock(lock);
			_exit(ok ? 0 : 1);
		}
		int st;
		waitpid(pid, &st, 0);
		printf("child_ok=%d\n", WIFEXITED(st) && WEXITSTATUS(st) == 0);
		return 0;
	}
	return 2;
}
"""


def _cc(abi: str) -> list[str]:
    cmd = ABIS[abi]
    if shutil.which(cmd[0]) is None:
        pytest.skip(f"{cmd[0]} not installed")
    return cmd


@pytest.fixture(scope="module")
def progs(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    d = tmp_path_factory.mktemp("lock")
    src = d / "lock_test.c"
    src.write_text(LOCK_TEST_C)
    out: dict[str, Path] = {}
    for abi in ABIS:
        exe = d / f"lock_test_{abi}"
        r = subprocess.run([*_cc(abi), *CFLAGS, "-I", str(RUNTIME), str(src), "-o", str(exe)],
                           capture_output=True, text=True)
        if r.returncode != 0:
            probe = subprocess.run([*_cc(abi), "-x", "c", "-", "-o", str(d / "probe")],
                                   input="int main(void) { return 0; }\n",
                                   capture_output=True, text=True)
            if probe.returncode != 0:
                pytest.skip(f"{abi} toolchain cannot build a program: {probe.stderr[:200]}")
            raise AssertionError(f"lock_test.c failed to build for {abi}:\n{r.stderr}")
        out[abi] = exe
    return out


@pytest.fixture
def shared(tmp_path: Path) -> Path:
    f = tmp_path / "shared"
    f.write_bytes(bytes(4096))
    return f


def _word(shared: Path) -> int:
    value: int = struct.unpack_from("<I", shared.read_bytes(), 0)[0]
    return value


def _kv(line: str) -> dict[str, int]:
    return {k: int(v) for k, v in (item.split("=") for item in line.split())}


def test_four_processes_two_abis_count_exactly(progs: dict[str, Path], shared: Path) -> None:
    n = 50000
    abis = ["m64", "m32", "m64", "m32"]
    procs = [subprocess.Popen([str(progs[a]), "count", str(shared), str(n), str(len(abis))],
                              stdout=subprocess.PIPE, text=True) for a in abis]
    outs = [p.communicate(timeout=60)[0] for p in procs]
    assert [p.returncode for p in procs] == [0] * len(abis)
    assert all(_kv(o) == {"recovered": 0} for o in outs)
    data = shared.read_bytes()
    assert struct.unpack_from("<IIQ", data, 0) == (0, len(abis), n * len(abis))


def _start_holder(exe: Path, shared: Path) -> tuple[subprocess.Popen[str], int]:
    holder = subprocess.Popen([str(exe), "hold", str(shared)], stdout=subprocess.PIPE, text=True)
    assert holder.stdout is not None
    fields = holder.stdout.readline().split()
    assert fields[0] == "locked", fields
    info = _kv(" ".join(fields[1:]))
    assert info["rc"] == 0 and info["word"] == info["self"] == holder.pid
    return holder, info["self"]


@pytest.mark.parametrize("reap", [True, False], ids=["reaped", "zombie"])
@pytest.mark.parametrize("holder_abi,waiter_abi", [("m64", "m32"), ("m32", "m64")])
def test_dead_holder_is_recovered(progs: dict[str, Path], shared: Path, holder_abi: str,
                                  waiter_abi: str, reap: bool) -> None:
    holder, tid = _start_holder(progs[holder_abi], shared)
    waiter = subprocess.Popen([str(progs[waiter_abi]), "acquire", str(shared)],
                              stdout=subprocess.PIPE, text=True)
    try:
        # The waiter marks the word contended before it sleeps.
        deadline = time.monotonic() + 5
        while _word(shared) != tid | PD_LOCK_WAITERS:
            assert time.monotonic() < deadline, f"word {_word(shared):#x}"
            time.sleep(0.005)
        assert waiter.poll() is None  # still blocked: the holder is alive
        os.kill(holder.pid, signal.SIGKILL)
        if reap:
            holder.wait()  # gone from the pid table: kill(tid, 0) says ESRCH
        # else it stays a zombie, which kill(tid, 0) still reports as existing
        killed = time.monotonic()
        out, _ = waiter.communicate(timeout=5)
        elapsed = time.monotonic() - killed
    finally:
        holder.kill()
        holder.wait()
        waiter.kill()
        waiter.wait()
    assert waiter.returncode == 0
    assert _kv(out) == {"rc": 1, "errno_ok": 1, "holder_ok": 1, "after": 0}
    assert elapsed < 1.0


@pytest.mark.parametrize("abi", sorted(ABIS))
def test_trylock_sees_other_holder(progs: dict[str, Path], shared: Path, abi: str) -> None:
    holder, _ = _start_holder(progs["m64" if abi == "m32" else "m32"], shared)
    try:
        r = subprocess.run([str(progs[abi]), "try", str(shared)], capture_output=True, text=True,
                           timeout=5)
    finally:
        holder.kill()
        holder.wait()
    assert r.stdout.split() == ["rc=-2"]


@pytest.mark.parametrize("abi", sorted(ABIS))
def test_reentry_is_refused_not_deadlocked(progs: dict[str, Path], shared: Path,
                                           abi: str) -> None:
    r = subprocess.run([str(progs[abi]), "reenter", str(shared)], capture_output=True, text=True,
                       timeout=5, check=True)
    r1, r2, r3, r4, dt, after = (int(x) for x in r.stdout.split())
    assert (r1, r2, r3, r4, after) == (0, -1, -1, 0, 0)
    assert dt < 100  # refused at once, no timeout waited out


@pytest.mark.parametrize("abi", sorted(ABIS))
def test_fork_child_locks_with_its_own_tid(progs: dict[str, Path], shared: Path,
                                           abi: str) -> None:
    r = subprocess.run([str(progs[abi]), "fork", str(shared)], capture_output=True, text=True,
                       timeout=5, check=True)
    assert r.stdout.split() == ["child_ok=1"]


def _both_orders_source() -> list[str]:
    return ['#include "pd_lock.h"\n#include "pd_shm.h"\n',
            '#include "pd_shm.h"\n#include "pd_lock.h"\n']


USE_LOCK = """
int pd_use(struct pd_header *h);
int pd_use(struct pd_header *h)
{
	int r = pd_lock(&h->ring_lock);
	if (r >= 0)
		pd_unlock(&h->ring_lock);
	return r;
}
"""


@pytest.mark.parametrize("abi", sorted(ABIS))
def test_lock_and_layout_headers_combine(abi: str, tmp_path: Path) -> None:
    (tmp_path / "pd_shm.h").write_text(render_c_header())
    for i, head in enumerate(_both_orders_source()):
        src = tmp_path / f"both{i}.c"
        src.write_text(head + USE_LOCK)
        r = subprocess.run([*_cc(abi), *CFLAGS, "-c", "-I", str(RUNTIME), "-I", str(tmp_path),
                            str(src), "-o", str(tmp_path / f"both{i}.o")],
                           capture_output=True, text=True)
        assert r.returncode == 0, r.stderr
    assert PD_LOCK_TID_MASK & PD_LOCK_WAITERS == 0


def test_aarch64_compiles(tmp_path: Path) -> None:
    cc = shutil.which(AARCH64_GCC)
    if cc is None:
        pytest.skip(f"{AARCH64_GCC} not installed; pd_lock.h built for x86 only")
    (tmp_path / "pd_shm.h").write_text(render_c_header())
    src = tmp_path / "both.c"
    src.write_text(_both_orders_source()[0] + USE_LOCK)
    subprocess.run([cc, *CFLAGS, "-c", "-I", str(RUNTIME), "-I", str(tmp_path), str(src),
                    "-o", str(tmp_path / "both.o")], check=True)
