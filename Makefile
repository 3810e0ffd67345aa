# `make demo` and `make test` work on a fresh Debian 12 machine: both install
# what is missing first (Debian toolchains as root, then the Python package).
PYTHON ?= python3
# pydyn and its dependencies live in a virtual environment of the checkout: a warm run
# then starts without the site-wide .pth hooks (an editable finder alone costs ~15 ms
# of every run), and `pydyn`, `pydyn-run` are .venv/bin scripts with no shim in front.
VENV ?= .venv
VPY = $(VENV)/bin/python
export PATH := $(CURDIR)/$(VENV)/bin:$(PATH)
CC ?= gcc
SDT_M32 = -m32 -idirafter /usr/include/x86_64-linux-gnu
# gcc-12-multilib, not gcc-multilib: apt removes the metapackage when the
# aarch64 cross compiler is installed.  `make demo` installs only DEMO_PACKAGES
# (a compiler for both ABIs, <sys/sdt.h>, Python); `make test` all of DEB_PACKAGES.
DEMO_PACKAGES = gcc gcc-12-multilib libc6-dev-i386 systemtap-sdt-dev make python3.11 python3.11-venv
DEB_PACKAGES = $(DEMO_PACKAGES) g++-12-multilib
# aarch64 targets under qemu-user, C++ exceptions through aarch64 return probes.
DEB_PACKAGES += gcc-aarch64-linux-gnu g++-aarch64-linux-gnu libc6-dev-arm64-cross qemu-user
# Real programs nobody here wrote, traced by the tests: PostgreSQL, a JVM, gdb (which
# also counts the runtime functions a probe hit runs).
DEB_PACKAGES += postgresql-15 openjdk-17-jre-headless gdb
# libc's DWARF in a separate debug file (the build-id layout): function probes on libc
# read their parameters from it (tests/test_debuginfo.py).
DEB_PACKAGES += libc6-dbg
# The peers `make bench` measures pydyn against (bench/peers.py; frida is the bench extra).
DEB_PACKAGES += bpftrace uftrace
EXAMPLES = examples/bin/counter examples/bin/counter32 examples/bin/server examples/bin/worker32 examples/bin/worker64 examples/bin/requests \
	examples/bin/calls

.PHONY: deps deb-deps demo-deps apt-install py-deps bench-deps py-install examples demo check test lint clean bench bench-report i386-programs stap-testsuite

deps: deb-deps py-deps

deb-deps:
	@$(MAKE) -s apt-install PACKAGES="$(DEB_PACKAGES)"

demo-deps:
	@$(MAKE) -s apt-install PACKAGES="$(DEMO_PACKAGES)"
	@$(MAKE) -s py-install EXTRAS=

apt-install:
	@missing=""; for p in $(PACKAGES); do dpkg -s $$p >/dev/null 2>&1 || missing="$$missing $$p"; done; \
	if [ -n "$$missing" ]; then \
	  echo "installing Debian packages:$$missing"; \
	  if [ "$$(id -u)" = 0 ]; then SUDO=; else SUDO=sudo; fi; \
	  $$SUDO apt-get update -qq && DEBIAN_FRONTEND=noninteractive $$SUDO apt-get install -y -qq $$missing; \
	fi

# Reinstall unless pydyn is importable from *this* checkout with all its deps and the
# install's tree of links lists every module (a "strict" editable install links each
# file: no import hook at start-up, but a new module needs this step again).
LINKS_COMPLETE = import os, sys, elftools, posix_ipc, cffi, capstone, pydyn.launcher.cli as c; \
  tree = os.path.dirname(os.path.dirname(c.__file__)); \
  sys.exit(not c.__file__.startswith('$(CURDIR)/') or not all(os.path.exists(os.path.join(tree, d, f)) \
    for top in ('launcher', 'shmlayout') for d, _, fs in os.walk(top) if '__pycache__' not in d and 'pydyn_pkg' not in d for f in fs if f.endswith('.py')))
TEST_EXTRAS = import pytest, ruff, mypy, hypothesis
BENCH_EXTRAS = $(TEST_EXTRAS), frida
py-deps:
	@$(MAKE) -s py-install EXTRAS='[test]' CHECK='$(TEST_EXTRAS)'

# The peers' Python packages (frida) beside the test extras; through py-install, so a
# reinstall is followed by the byte-compilation like any other.
bench-deps: py-deps
	@$(MAKE) -s py-install EXTRAS='[test,bench]' CHECK='$(BENCH_EXTRAS)'

py-install:
	@test -x $(VPY) || $(PYTHON) -m venv $(VENV)
	@$(VPY) -c "$(if $(CHECK),$(CHECK); )$(LINKS_COMPLETE)" 2>/dev/null || \
	  $(VPY) -m pip install -q -e '.$(EXTRAS)' --config-settings editable_mode=strict
	@# PYTHONDONTWRITEBYTECODE=1 stops Python writing .pyc files, not reading them: without
	@# these every run compiles the launcher again (~50 ms CPU of a warm run, more of a cold
	@# one). pip compiled the dependencies.
	@$(VPY) -m compileall -q launcher shmlayout runtime build/__editable__.pydyn-*

examples/bin/counter: examples/src/counter.c
	@mkdir -p examples/bin
	$(CC) -O2 -g -o $@ $<
examples/bin/counter32: examples/src/counter.c
	@mkdir -p examples/bin
	$(CC) $(SDT_M32) -O2 -g -o $@ $<
examples/bin/requests: examples/src/requests.c
	@mkdir -p examples/bin
	$(CC) -O2 -g -o $@ $<
examples/bin/server: examples/src/server.c
	@mkdir -p examples/bin
	$(CC) -O2 -g -o $@ $<
examples/bin/calls: examples/src/calls.c
	@mkdir -p examples/bin
	$(CC) -O2 -g -o $@ $<
examples/bin/worker32: examples/src/worker.c
	@mkdir -p examples/bin
	$(CC) $(SDT_M32) -O2 -g -o $@ $<
examples/bin/worker64: examples/src/worker.c
	@mkdir -p examples/bin
	$(CC) -O2 -g -o $@ $<

examples: demo-deps $(EXAMPLES)

demo: examples
	$(VENV)/bin/pydyn examples/count.stp -c './examples/bin/counter 1000'
	$(VENV)/bin/pydyn examples/jobs.stp -c './examples/bin/server 4 500'
	$(VENV)/bin/pydyn examples/latency.stp -c './examples/bin/requests 40'
	$(VENV)/bin/pydyn examples/calls.stp -c './examples/bin/calls pydyn 3'

# mypy resolves modules by file path; this tree of links gives it the
# installed names (pydyn.launcher -> launcher/, ...).
.mypy-tree/pydyn:
	mkdir -p .mypy-tree/pydyn
	ln -sfn ../../launcher .mypy-tree/pydyn/launcher
	ln -sfn ../../shmlayout .mypy-tree/pydyn/shmlayout
	ln -sfn ../../runtime .mypy-tree/pydyn/runtime

lint: py-deps .mypy-tree/pydyn
	$(VPY) -m ruff check launcher shmlayout runtime tests bench
	$(VPY) -m mypy

# The unit tests (marker `unit`: no compiler, no target process), in well under a minute.
check: py-deps
	$(VPY) -m pytest -q -m unit tests

# Debian's i386 python3.11 and coreutils unpacked into .i386/root (nothing installed),
# for tests/test_real_programs_i386.py; they load the i386 libc of libc6-i386, which
# gcc-12-multilib brings.
i386-programs: deb-deps
	@sh tests/fetch_i386.sh .i386

# Everything: what CI runs.
test: deps examples lint i386-programs
	$(VPY) -m pytest -q tests

# ns per probe hit: bare / int3 trap / trampoline, m64 and m32; startup ms:
# bare / warm / cold / bpftrace
bench: deb-deps bench-deps
	$(VPY) bench/run.py
	$(VPY) bench/startup.py
	$(VPY) bench/coldstart.py

# Every benchmark once, written into docs/performance.md as one table (bench/report.py;
# BENCH_ARGS=--quick for a smoke run of a few minutes).
bench-report: deb-deps bench-deps examples
	$(VPY) bench/report.py $(BENCH_ARGS)

# SystemTap's own testsuite against pydyn (not part of `make test`): STAP is a SystemTap
# source tree or a bare git repository of one (see docs/differences-from-stap.md);
# STAP_ARGS=--list-fails lists each failure with its first error line.
stap-testsuite: py-deps
	@test -n "$(STAP)" || { echo "usage: make stap-testsuite STAP=/path/to/systemtap [STAP_ARGS=--list-fails]"; exit 2; }
	$(VPY) bench/stap_testsuite.py $(STAP) $(STAP_ARGS)

clean:
	rm -rf examples/bin .pytest_cache .mypy_cache
