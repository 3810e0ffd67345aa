"""C++ names as a stap user writes them: `ns::Foo::bar` for `_ZN2ns3Foo3barEi`.

The Itanium demangler is libstdc++'s `__cxa_demangle` (the one c++filt and gdb
agree with), called through ctypes: pyelftools has none, and a C++ program
brings libstdc++ with it.  Where it cannot be loaded names stay mangled (and
`available()` says so).  Probe points and `ppfunc()` use the name without its
parameter list and qualifiers (`ns::Foo::bar`), as stap's function matching
does; `usymname()` shows the full signature (`ns::Foo::bar(int)`), as
addr2line -C does.
"""

from __future__ import annotations

import ctypes
import ctypes.util
from functools import cache
from typing import Any


@cache
def _cxa() -> Any:
    for name in ("libstdc++.so.6", ctypes.util.find_library("stdc++")):
        if not name:
            continue
        try:
            lib = ctypes.CDLL(name)
            fn = lib.__cxa_demangle
            libc = ctypes.CDLL(None)
        except (OSError, AttributeError):
            continue
        fn.restype = ctypes.c_void_p
        fn.argtypes = [ctypes.c_char_p, ctypes.c_void_p, ctypes.c_void_p,
                       ctypes.POINTER(ctypes.c_int)]
        libc.free.argtypes = [ctypes.c_void_p]
        return fn, libc.free
    return None


def available() -> bool:
    return _cxa() is not None


def is_mangled(name: str) -> bool:
    return name.startswith("_Z")


@cache
def demangle(name: str) -> str:
    """The full demangled name (with parameters); `name` itself if it is not a
    mangled C++ name or cannot be demangled."""
    if not is_mangled(name):
        return name
    cxa = _cxa()
    if cxa is None:
        return name
    fn, free = cxa
    status = ctypes.c_int(0)
    ptr = fn(name.encode(), None, None, ctypes.byref(status))
    if not ptr or status.value != 0:
        return name
    try:
        return ctypes.string_at(ptr).decode(errors="replace")
    finally:
        free(ptr)


def strip_signature(full: str) -> str:
    """`ns::Foo::bar(int) const` -> `ns::Foo::bar`; `void f<int>(int)` -> `f<int>`."""
    text = full
    for _ in range(4):   # trailing cv/ref qualifiers of a member function
        for q in (" const", " volatile", " &&", " &"):
            if text.endswith(q):
                text = text[: -len(q)]
    if not text.endswith(")"):
        return full
    depth = 0
    for i in range(len(text) - 1, -1, -1):
        ch = text[i]
        if ch == ")":
            depth += 1
        elif ch == "(":
            depth -= 1
            if depth == 0:
                text = text[:i]
                break
    else:
        return full
    # a template function's return type comes first: cut at the last top-level space
    depth = 0
    for i in range(len(text) - 1, -1, -1):
        ch = text[i]
        if ch in ">)":
            depth += 1
        elif ch in "<(":
            depth -= 1
        elif ch == " " and depth == 0 and not text[:i].endswith("operator"):
            return text[i + 1:]
    return text


def function_name(symbol: str) -> str:
    """What a probe point matches for a symbol: the demangled name without its
    signature for C++, the symbol itself for C."""
    return strip_signature(demangle(symbol)) if is_mangled(symbol) else symbol
