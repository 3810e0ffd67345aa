"""Decoding the output ring's records and printing them, as stap would.

Probes write binary records (a format id and the raw argument values), formatted
here; a printf of integers only is formatted in the probe (a TEXT record), which
costs less there than a record the launcher must decode.
"""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Callable, Sequence
from typing import Any, BinaryIO

from ..shmlayout import (
    PD_REC_ERROR,
    PD_REC_EXIT,
    PD_REC_PAD,
    PD_REC_PRINTF,
    PD_REC_SYSTEM,
    PD_REC_TEXT,
    PD_REC_WARNING,
    REC_HEADER_SIZE,
    LayoutError,
    decode_args,
    unpack_header,
)
from .errors import escape_controls
from .format import FormatSpec, format_values

# Errors that a limit caused, and the advice the exit summary gives for them.
LIMIT_ADVICE = {
    "Array overflow": "raise -D MAXMAPENTRIES=N, or the array's own size (global a[N])",
    "MAXACTION exceeded": "raise -D MAXACTION=N",
    "MAXNESTING exceeded": "raise -D MAXNESTING=N",
}


def _kinds(spec: FormatSpec) -> str:
    return "".join("s" if t == "string" else "i" for t in spec.arg_types)


def _text(raw: int | bytes) -> int | str:
    # Strings travel as bytes; surrogateescape carries any non-UTF-8 byte through unchanged.
    return raw.decode("utf-8", "surrogateescape") if isinstance(raw, bytes) else raw


MAX_STORED_WARNINGS = 1024


class OutputSink:
    """Turns drained ring bytes into stdout/stderr text and counts what it saw."""

    def __init__(self, formats: Sequence[Any], stdout: BinaryIO | None = None,
                 stderr: BinaryIO | None = None, merge_text: bool = True) -> None:
        self.formats = formats  # FormatSpec, or a program.HistFormat for histograms
        self.stdout = stdout or sys.stdout.buffer
        self.stderr = stderr or sys.stderr.buffer
        self.errors = 0
        self.error_kinds: set[str] = set()  # which LIMIT_ADVICE errors were seen
        self.warnings = 0
        # stap's staprun prints a warning it has printed before only with -v, and
        # remembers at most 1024 of them
        self.dedup_warnings = True
        self.seen_warnings: set[str] = set()
        # -w: the script's warnings are counted, not printed (as stap's runtime drops them)
        self.suppress_warnings = False
        self.exit_requested = False
        self.bad_records = 0
        self.merge_text = merge_text  # the drain may join TEXT records (PD_FLAG_MERGE_TEXT)
        # The reader of stdout (or stderr) went away (`pydyn ... | head -1`): what
        # follows is discarded, the session ends (Session._wait) and pydyn exits as a
        # tool killed by SIGPIPE would (cli.main).
        self.consumer_gone = False
        self.commands: list[str] = []   # system() commands of the records being fed
        # The module's drawing of a print(@hist_*(x)) record (session._Module.draw_hist):
        # sprint() draws in the handler with the same C (runtime/pd_hist.c).
        self.draw_hist: Callable[[Any, list[int]], str] | None = None

    def _write(self, stream: BinaryIO, text: str) -> None:
        if self.consumer_gone:
            return
        try:
            stream.write(text.encode("utf-8", "surrogateescape"))
        except BrokenPipeError:
            self.consumer_gone = True

    def _flush(self, stream: BinaryIO) -> None:
        if self.consumer_gone:
            return
        try:
            stream.flush()
        except BrokenPipeError:
            self.consumer_gone = True

    def feed(self, buf: bytes) -> None:
        at = 0
        while at < len(buf):
            try:
                hdr = unpack_header(buf, at)
                end = at + hdr.len
                if hdr.len < REC_HEADER_SIZE or end > len(buf):
                    raise LayoutError(f"record length {hdr.len} out of bounds")
                self._handle(hdr.kind, hdr.fmt_id, buf, at + REC_HEADER_SIZE, end)
            except (LayoutError, IndexError, ValueError):
                # A record the launcher cannot decode is counted, never fatal.
                self.bad_records += 1
                return
            at = end
        self._flush(self.stdout)
        while self.commands:
            self._run_system(self.commands.pop(0))

    def _handle(self, kind: int, fmt_id: int, buf: bytes, start: int, end: int) -> None:
        if kind == PD_REC_PRINTF and not isinstance(self.formats[fmt_id], FormatSpec):
            if self.draw_hist is None:
                raise LayoutError("a histogram record, and no module to draw it")
            buckets = [int(b) for b in decode_args(buf, start, end, "i" * ((end - start) // 8))]
            self._write(self.stdout, self.draw_hist(self.formats[fmt_id], buckets))
        elif kind == PD_REC_PRINTF:
            spec = self.formats[fmt_id]
            args = [_text(a) for a in decode_args(buf, start, end, _kinds(spec))]
            self._write(self.stdout, format_values(spec, args))
        elif kind == PD_REC_TEXT:
            self._write(self.stdout, str(_text(decode_args(buf, start, end, "s")[0])))
        elif kind in (PD_REC_ERROR, PD_REC_WARNING):
            msg = str(_text(decode_args(buf, start, end, "s")[0]))
            label = "ERROR" if kind == PD_REC_ERROR else "WARNING"
            if kind == PD_REC_ERROR:
                self.errors += 1
                self.error_kinds.update(k for k in LIMIT_ADVICE if msg.startswith(k))
            else:
                self.warnings += 1
                if self.suppress_warnings:
                    return
                if self.dedup_warnings and msg in self.seen_warnings:
                    return
                if self.dedup_warnings and len(self.seen_warnings) < MAX_STORED_WARNINGS:
                    self.seen_warnings.add(msg)
            self._flush(self.stdout)
            self._write(self.stderr, f"{label}: {escape_controls(msg, True)}\n")
            self._flush(self.stderr)
        elif kind == PD_REC_EXIT:
            self.exit_requested = True
        elif kind == PD_REC_SYSTEM:
            self.system(str(_text(decode_args(buf, start, end, "s")[0])))
        elif kind != PD_REC_PAD:
            self.bad_records += 1

    # where a system() command's output goes: pydyn's own stdout
    system_stdout: int | None = None

    def system(self, cmd: str) -> None:
        """system(cmd): run with sh in the background, not waited for, as stap's staprun
        runs it, once what the drained handlers printed is out."""
        self.commands.append(cmd)

    def _run_system(self, cmd: str) -> None:
        try:
            subprocess.Popen(["/bin/sh", "-c", cmd], stdout=self.system_stdout,
                             close_fds=True)
        except OSError as exc:
            self.warnings += 1
            self._write(self.stderr, f"WARNING: system({escape_controls(cmd, True)}): "
                                     f"{exc.strerror or exc}\n")
            self._flush(self.stderr)
