"""What pydyn needs to know about an ELF file before it instruments it.

`get_elf_info` reads the headers with pyelftools (once per binary where there is a
facts store) and returns a frozen `ElfInfo`; every failure a user can cause
(missing file, not ELF, truncated, corrupt) becomes a `TargetError` naming the path.
`open_elf` is the shared entry point of this package: it maps the file read-only so
the other modules can slice section bytes without copying or seeking.
"""

from __future__ import annotations

import errno
import mmap
import os
import stat
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from ..errors import TargetError
from .notes import RawNote, iter_raw_notes

if TYPE_CHECKING:
    from .elffile import ElfFile

PF_X = 1
PF_W = 2
PF_R = 4

_DF_1_PIE = 0x08000000
_STRING_TAGS = {"DT_NEEDED": "needed", "DT_RPATH": "rpath", "DT_RUNPATH": "runpath",
                "DT_SONAME": "soname"}
_NT_GNU_BUILD_ID = 3

_MACHINES = {"EM_X86_64": "x86_64", "EM_386": "i386", "EM_AARCH64": "aarch64"}
_ABIS = {"x86_64": "m64", "i386": "m32", "aarch64": "aarch64"}
SUPPORTED_MACHINES = ("x86_64", "i386", "aarch64")


def abi_of_machine(machine: str) -> str | None:
    """'m64' | 'm32' | 'aarch64': the probe module a process of `machine` loads; None
    for a machine pydyn builds none for."""
    return _ABIS.get(machine)

@dataclass(frozen=True)
class LoadSegment:
    """One PT_LOAD program header."""

    vaddr: int
    memsz: int
    offset: int
    filesz: int
    flags: int  # PF_X=1 PF_W=2 PF_R=4

    @property
    def executable(self) -> bool:
        return bool(self.flags & PF_X)

    @property
    def writable(self) -> bool:
        return bool(self.flags & PF_W)

    @property
    def end(self) -> int:
        return self.vaddr + self.memsz

    def contains(self, addr: int, size: int = 1) -> bool:
        """Whether [addr, addr+size) lies inside the segment in memory."""
        return self.vaddr <= addr and addr + size <= self.vaddr + self.memsz

    def file_offset(self, addr: int, size: int = 1) -> int | None:
        """File offset of [addr, addr+size), or None if not backed by file bytes (.bss)."""
        if self.vaddr <= addr and addr + size <= self.vaddr + self.filesz:
            return self.offset + (addr - self.vaddr)
        return None

    def __str__(self) -> str:
        perms = "".join(c if self.flags & f else "-" for c, f in
                        (("r", PF_R), ("w", PF_W), ("x", PF_X)))
        return (f"LOAD {self.vaddr:#x}-{self.end:#x} {perms} "
                f"(file {self.offset:#x}+{self.filesz:#x})")


@dataclass(frozen=True)
class ElfInfo:
    """Headers of one ELF file, as far as launching and probing need them."""

    path: str                       # realpath
    elf_class: int                  # 32 or 64
    machine: str                    # 'x86_64' | 'i386' | 'aarch64' | other e_machine name
    elf_type: str                   # 'EXEC' | 'DYN' | 'REL' | 'CORE' | ...
    interpreter: str | None
    is_dynamic: bool                # has PT_INTERP: the dynamic linker honours LD_PRELOAD
    is_shared_object: bool          # a library rather than a program
    is_setuid: bool                 # runs in secure mode for this user (secure_exec)
    build_id: str | None            # hex
    needed: tuple[str, ...]         # DT_NEEDED
    runpath: tuple[str, ...]        # DT_RUNPATH, or DT_RPATH when there is no DT_RUNPATH
    segments: tuple[LoadSegment, ...]
    tls: tuple[int, int, int] | None  # PT_TLS (vaddr, memsz, align)
    runpath_is_rpath: bool = False  # `runpath` came from DT_RPATH (searched before LD_LIBRARY_PATH)
    soname: str | None = None
    little_endian: bool = True
    entry: int = 0                  # e_entry

    @property
    def abi(self) -> str:
        """'m64' | 'm32' | 'aarch64': which probe module a process of this file loads."""
        return _ABIS.get(self.machine, self.machine)

    @property
    def is_pie(self) -> bool:
        return self.elf_type == "DYN" and not self.is_shared_object

    def __str__(self) -> str:
        kind = "shared object" if self.is_shared_object else (
            "PIE" if self.elf_type == "DYN" else self.elf_type)
        parts = [f"{self.path}: ELF{self.elf_class} {self.machine} {kind}"]
        parts.append(f"interpreter {self.interpreter}" if self.interpreter else "static")
        if self.build_id:
            parts.append(f"build-id {self.build_id}")
        return ", ".join(parts)


@dataclass
class ElfHandle:
    """An open, mapped ELF file; valid only inside `open_elf`'s `with` block."""

    path: str          # as given, for error messages
    realpath: str
    elffile: ElfFile
    data: bytes | mmap.mmap
    st: os.stat_result

    def error(self, reason: str) -> TargetError:
        return TargetError(self.path, reason)

    def read(self, offset: int, size: int) -> bytes | None:
        """File bytes [offset, offset+size), or None if that runs past the end."""
        if offset < 0 or size < 0 or offset + size > len(self.data):
            return None
        return bytes(self.data[offset:offset + size])

    def get_section_bytes(self, name: str) -> tuple[int, bytes] | None:
        """(sh_addr, contents) of the named section, None if absent, TargetError if cut short."""
        sec = self.elffile.get_section_by_name(name)
        if sec is None or sec["sh_type"] == "SHT_NOBITS":
            return None
        data = self.read(sec["sh_offset"], sec["sh_size"])
        if data is None:
            raise self.error(f"truncated ELF file (section {name} runs past the end)")
        return sec["sh_addr"], data


def missing_reason(path: str) -> str | None:
    """Why `path` cannot be found, in words (a symlink loop is not 'no such file'), or
    None if it exists."""
    try:
        os.stat(path)
    except OSError as exc:
        return _os_reason(exc)
    return None


def _os_reason(exc: OSError) -> str:
    if exc.errno == errno.ELOOP:
        return "too many levels of symbolic links"
    if isinstance(exc, FileNotFoundError):
        return "no such file"
    if isinstance(exc, IsADirectoryError):
        return "is a directory"
    if isinstance(exc, PermissionError):
        return "permission denied"
    return exc.strerror or str(exc)


@contextmanager
def open_elf(path: str) -> Iterator[ElfHandle]:
    """Open and map `path` as ELF; every user-caused failure is a TargetError."""
    try:
        st = os.stat(path)
    except OSError as exc:
        raise TargetError(path, _os_reason(exc)) from None
    if stat.S_ISDIR(st.st_mode):
        raise TargetError(path, "is a directory")
    if not stat.S_ISREG(st.st_mode):
        # Opening a FIFO or device could block or have side effects.
        raise TargetError(path, "not a regular file")
    try:
        f = open(path, "rb")
    except OSError as exc:
        raise TargetError(path, _os_reason(exc)) from None
    with f:
        head = f.read(64)
        if len(head) < 4 or head[:4] != b"\x7fELF":
            raise TargetError(path, "not an ELF file")
        if len(head) < 6 or head[4] not in (1, 2) or head[5] not in (1, 2):
            raise TargetError(path, "truncated ELF file" if len(head) < 6
                              else "unsupported ELF class or byte order")
        if len(head) < (64 if head[4] == 2 else 52):
            raise TargetError(path, "truncated ELF file")
        try:
            data: bytes | mmap.mmap = mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ)
        except (OSError, ValueError) as exc:
            raise TargetError(path, f"cannot map file: {exc}") from None
        from .elffile import PARSE_ERRORS, ElfFile
        try:
            try:
                elffile = ElfFile(f)
            except PARSE_ERRORS as exc:
                raise TargetError(path, f"malformed ELF file ({exc})") from None
            handle = ElfHandle(path, os.path.realpath(path), elffile, data, st)
            _check_tables(handle)
            try:
                yield handle
            except PARSE_ERRORS as exc:
                raise TargetError(path, f"malformed ELF file ({exc})") from None
            except OSError as exc:
                raise TargetError(path, _os_reason(exc)) from None
        finally:
            if isinstance(data, mmap.mmap):
                data.close()


def _check_tables(h: ElfHandle) -> None:
    """Reject headers whose tables run past EOF before pyelftools trips over them."""
    hdr = h.elffile.header
    size = len(h.data)
    phentsize = 56 if h.elffile.elfclass == 64 else 32
    shentsize = 64 if h.elffile.elfclass == 64 else 40
    if hdr["e_phnum"]:
        if hdr["e_phentsize"] != phentsize:
            raise h.error("malformed ELF file (bad program header size)")
        if hdr["e_phoff"] + hdr["e_phnum"] * phentsize > size:
            raise h.error("truncated ELF file")
    if hdr["e_shoff"] and hdr["e_shnum"]:
        if hdr["e_shentsize"] != shentsize:
            raise h.error("malformed ELF file (bad section header size)")
        if hdr["e_shoff"] + hdr["e_shnum"] * shentsize > size:
            raise h.error("truncated ELF file")
    if hdr["e_shoff"] > size:
        raise h.error("truncated ELF file")


def read_elf_info(h: ElfHandle) -> ElfInfo:
    """Build the ElfInfo of an open file (see `get_elf_info`)."""
    from elftools.elf.dynamic import DynamicSegment
    elf = h.elffile
    machine_id = elf.header["e_machine"]
    machine = _MACHINES.get(str(machine_id), str(machine_id).removeprefix("EM_").lower())
    elf_type = str(elf.header["e_type"]).removeprefix("ET_")
    interpreter: str | None = None
    segments: list[LoadSegment] = []
    tls: tuple[int, int, int] | None = None
    build_id: str | None = None
    dynamic: Any = None
    for seg in elf.iter_segments():
        ptype = seg["p_type"]
        if ptype == "PT_LOAD":
            segments.append(LoadSegment(seg["p_vaddr"], seg["p_memsz"], seg["p_offset"],
                                        seg["p_filesz"], seg["p_flags"]))
        elif ptype == "PT_INTERP":
            raw = h.read(seg["p_offset"], seg["p_filesz"])
            if raw is None:
                raise h.error("truncated ELF file (PT_INTERP runs past the end)")
            interpreter = raw.split(b"\0", 1)[0].decode("utf-8", "replace")
        elif ptype == "PT_TLS":
            tls = (seg["p_vaddr"], seg["p_memsz"], seg["p_align"])
        elif ptype == "PT_NOTE" and build_id is None:
            build_id = _find_build_id(h, seg["p_offset"], seg["p_filesz"], elf.little_endian)
        elif ptype == "PT_DYNAMIC" and isinstance(seg, DynamicSegment):
            dynamic = seg

    needed: list[str] = []
    rpath: list[str] = []
    runpath: list[str] = []
    soname: str | None = None
    flags_1 = 0
    if dynamic is not None:
        for tag in dynamic.iter_tags():
            d_tag = tag.entry.d_tag
            attr = _STRING_TAGS.get(d_tag)
            # pyelftools sets the decoded string as an attribute named after the tag.
            text = str(getattr(tag, attr)) if attr else ""
            if d_tag == "DT_NEEDED":
                needed.append(text)
            elif d_tag == "DT_RPATH":
                rpath.extend(p for p in text.split(":") if p)
            elif d_tag == "DT_RUNPATH":
                runpath.extend(p for p in text.split(":") if p)
            elif d_tag == "DT_SONAME":
                soname = text
            elif d_tag == "DT_FLAGS_1":
                flags_1 = tag.entry.d_val

    is_pie_flagged = bool(flags_1 & _DF_1_PIE)
    # A PIE is ET_DYN too: tell it from a library by PT_INTERP, and for libraries
    # that are also runnable (libc.so.6 has PT_INTERP) by SONAME without DF_1_PIE.
    is_shared = elf_type == "DYN" and not is_pie_flagged and (
        interpreter is None or soname is not None)
    return ElfInfo(
        path=h.realpath,
        elf_class=elf.elfclass,
        machine=machine,
        elf_type=elf_type,
        interpreter=interpreter,
        is_dynamic=interpreter is not None,
        is_shared_object=is_shared,
        is_setuid=secure_exec(h.st),
        build_id=build_id,
        needed=tuple(needed),
        runpath=tuple(runpath or rpath),
        segments=tuple(segments),
        tls=tls,
        runpath_is_rpath=not runpath and bool(rpath),
        soname=soname,
        little_endian=elf.little_endian,
        entry=int(elf.header["e_entry"]),
    )


def _find_build_id(h: ElfHandle, offset: int, size: int, little_endian: bool) -> str | None:
    data = h.read(offset, size)
    if data is None:
        return None
    for note in iter_raw_notes(data, little_endian):
        if isinstance(note, RawNote) and note.name == b"GNU" and note.type == _NT_GNU_BUILD_ID:
            return note.desc.hex()
    return None


ELF_INFO_FORMAT = 1    # of the headers kept per binary (factstore.py)


def get_elf_info(path: str) -> ElfInfo:
    """Headers of the ELF file at `path`; TargetError("PATH: reason") if it is not one.

    What they say depends on the file's bytes alone: read once per binary (with
    pyelftools, whose import a new script on a known binary then does not pay) and
    kept in the facts store, for a file of the size they were read from; the path and
    the set-id check are the file's own."""
    from ..factstore import binary_key, load_or_compute, store_dir
    key = st = None
    try:
        st = os.stat(path)
        if stat.S_ISREG(st.st_mode) and store_dir() is not None:
            key = binary_key(path, f"elf info {ELF_INFO_FORMAT} {' '.join(_INFO_FIELDS)}")
    except OSError:
        pass
    if key is None or st is None:
        with open_elf(path) as h:      # reports what is wrong
            return read_elf_info(h)
    size = st.st_size

    def compute() -> tuple[dict[str, Any], dict[str, Any]]:
        with open_elf(path) as h:
            info = read_elf_info(h)
        return {"size": size, "info": [
            [[sg.vaddr, sg.memsz, sg.offset, sg.filesz, sg.flags] for sg in v]
            if k == "segments" else v
            for k, v in ((f, getattr(info, f)) for f in _INFO_FIELDS)]}, {}

    header, _ = load_or_compute(
        key, compute, lambda facts: facts[0].get("size") == size and
        len(facts[0].get("info", ())) == len(_INFO_FIELDS))
    d = dict(zip(_INFO_FIELDS, header["info"], strict=True))
    return ElfInfo(**dict(
        d, path=os.path.realpath(path), is_setuid=secure_exec(st),
        needed=tuple(d["needed"]), runpath=tuple(d["runpath"]),
        segments=tuple(LoadSegment(*sg) for sg in d["segments"]),
        tls=tuple(d["tls"]) if d["tls"] is not None else None))


_INFO_FIELDS = tuple(ElfInfo.__dataclass_fields__)


def secure_exec(st: os.stat_result) -> bool:
    """Whether the kernel runs the file in secure mode (AT_SECURE) for this user, where
    ld.so ignores LD_PRELOAD: a setuid file not owned by the real user, a setgid one not
    of the real group.  Root running `su` or `sudo` (setuid root) is not secure mode."""
    return bool((st.st_mode & stat.S_ISUID and st.st_uid != os.getuid())
                or (st.st_mode & stat.S_ISGID and st.st_gid != os.getgid()))


def check_preloadable(info: ElfInfo) -> None:
    """TargetError unless `info` is a program pydyn can start with its probe module preloaded."""
    if info.machine not in SUPPORTED_MACHINES:
        raise TargetError(info.path, f"unsupported machine {info.machine}: pydyn supports "
                                     + " and ".join(SUPPORTED_MACHINES) + " targets")
    if info.elf_type not in ("EXEC", "DYN"):
        raise TargetError(info.path, f"is not an executable (ELF type {info.elf_type})")
    if info.is_shared_object:
        raise TargetError(info.path, "is a shared library, not a program")
    if not info.is_dynamic:
        raise TargetError(info.path, "is statically linked: pydyn needs a dynamically linked "
                                     "target (LD_PRELOAD)")
    if info.is_setuid:
        raise TargetError(info.path, "is setuid/setgid: the dynamic linker ignores LD_PRELOAD "
                                     "for it (unless its owner runs it)")
