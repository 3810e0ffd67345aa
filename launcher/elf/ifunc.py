"""Which implementation an IFUNC symbol stands for (`strlen` in libc is a
resolver that returns `__strlen_avx2`, `__strlen_sse2`, ... by the CPU).

A probe on an IFUNC name goes on the implementation the dynamic loader selects.
The loader decides by this machine's CPU (and GLIBC_TUNABLES), so the launcher
asks its own loader: `dlsym` on the library, which the launcher must already
have loaded (libc, libm: `RTLD_NOLOAD`; pydyn never loads a library to find out,
its constructors would run) and which must be of the launcher's own class and
machine.  The answer is an address in the launcher's mapping; minus the
library's load base it is the link-time address of the implementation.  A
target started with other GLIBC_TUNABLES than the launcher's may select another
implementation: set them for pydyn too.
"""

from __future__ import annotations

import ctypes
import os
import platform
import sys

from .reader import get_elf_info

_RTLD_LAZY, _RTLD_NOLOAD = 0x1, 0x4
_MACHINES = {"x86_64": "x86_64", "i686": "i386", "i386": "i386", "aarch64": "aarch64"}


class _DlInfo(ctypes.Structure):
    _fields_ = [("dli_fname", ctypes.c_char_p), ("dli_fbase", ctypes.c_void_p),
                ("dli_sname", ctypes.c_char_p), ("dli_saddr", ctypes.c_void_p)]


def selected_implementation(path: str, name: str) -> tuple[int | None, str]:
    """(link-time address of the implementation IFUNC `name` of the library at `path`
    resolves to on this machine, "") or (None, why it cannot be known here)."""
    info = get_elf_info(path)
    own_class = 64 if sys.maxsize > 2**32 else 32
    own_machine = _MACHINES.get(platform.machine(), platform.machine())
    if info.elf_class != own_class or info.machine != own_machine:
        return None, (f"it is an IFUNC, and pydyn asks its own ({own_machine}, "
                      f"{own_class}-bit) dynamic loader which implementation it selects: "
                      f"{path} is {info.machine} {info.elf_class}-bit; probe the "
                      "implementation by name")
    if not info.is_shared_object:
        return None, "it is an IFUNC of an executable; probe the implementation by name"
    libdl = ctypes.CDLL(None)
    libdl.dlopen.restype = ctypes.c_void_p
    libdl.dlopen.argtypes = [ctypes.c_char_p, ctypes.c_int]
    libdl.dlsym.restype = ctypes.c_void_p
    libdl.dlsym.argtypes = [ctypes.c_void_p, ctypes.c_char_p]
    libdl.dladdr.argtypes = [ctypes.c_void_p, ctypes.POINTER(_DlInfo)]
    handle = libdl.dlopen(os.fsencode(path), _RTLD_LAZY | _RTLD_NOLOAD)
    if not handle:
        return None, ("it is an IFUNC, and pydyn finds the implementation the loader "
                      "selects only in libraries it has loaded itself (libc, libm); probe "
                      "the implementation by name")
    addr = libdl.dlsym(handle, name.encode())
    where = _DlInfo()
    if not addr or not libdl.dladdr(addr, ctypes.byref(where)) or not where.dli_fbase:
        return None, f"the loader does not resolve '{name}' in {path}"
    base_vaddr = min((s.vaddr for s in info.segments), default=0)
    return addr - where.dli_fbase + base_vaddr, ""
