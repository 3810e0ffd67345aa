"""`--json`: the output ring's records as newline-delimited JSON on stdout.

Every line is one object `{"type": T, "data": D}`:

- `header` first: `{"version": "0.1.0", "schema": 1}`;
- `printf`: the formatted text of one printf/print record (a string);
- `error`, `warning`: the message of a probe error or warning (a string);
- `map`: one entry of the exit report, `{"name", "key": [...], "value"}` (a
  scalar global has `"key": []`);
- `stats`: one statistic of the exit report, `{"name", "key": [...], "count",
  "min", "max", "sum", "avg"}` (`count` 0 and no other fields when empty);
- `hist`: a printed histogram, `{"kind": "log", "buckets": [{"value", "count"}]}`
  (non-empty buckets, `value` the bucket's lower bound) or `{"kind": "linear",
  "lo", "hi", "step", "underflow", "overflow", "buckets": [...]}`.

The exit report's formats are tagged at translation (`Program.report`), so a
script's own printf is never mistaken for a report line.
"""

from __future__ import annotations

import json
from typing import Any

from ..shmlayout import (
    PD_REC_ERROR,
    PD_REC_EXIT,
    PD_REC_PAD,
    PD_REC_PRINTF,
    PD_REC_SYSTEM,
    PD_REC_TEXT,
    PD_REC_WARNING,
    decode_args,
)
from .format import FormatSpec, format_values
from .output import OutputSink, _kinds, _text
from .stats import hist_log_value

SCHEMA = 1
STAT_FIELDS = ("count", "min", "max", "sum", "avg")


def header_record(version: str) -> dict[str, Any]:
    return {"type": "header", "data": {"version": version, "schema": SCHEMA}}


def hist_data(hist: Any, buckets: list[int]) -> dict[str, Any]:
    if hist.kind == "log":
        return {"kind": "log",
                "buckets": [{"value": hist_log_value(i), "count": n}
                            for i, n in enumerate(buckets) if n]}
    inner = buckets[1:-1]
    return {"kind": "linear", "lo": hist.lo, "hi": hist.hi, "step": hist.step,
            "underflow": buckets[0] if buckets else 0,
            "overflow": buckets[-1] if len(buckets) > 1 else 0,
            "buckets": [{"value": hist.lo + i * hist.step, "count": n}
                        for i, n in enumerate(inner) if n]}


class JsonSink(OutputSink):
    """An OutputSink that writes one JSON object per record instead of text."""

    system_stdout = 2   # a system() command's output would break the JSON lines

    def __init__(self, formats: Any, report: dict[int, Any], version: str, **kw: Any) -> None:
        super().__init__(formats, **kw)
        self.merge_text = False  # one JSON record per printf
        self.report = report
        self.emit(header_record(version))
        self._flush(self.stdout)

    def emit(self, record: dict[str, Any]) -> None:
        self._write(self.stdout, json.dumps(record, ensure_ascii=False) + "\n")

    def _handle(self, kind: int, fmt_id: int, buf: bytes, start: int, end: int) -> None:
        if kind == PD_REC_PRINTF and fmt_id in self.report:
            rtype, name, keys, value = self.report[fmt_id]
            spec = self.formats[fmt_id]
            args = [_text(a) for a in decode_args(buf, start, end, _kinds(spec))]
            key, rest = args[:len(keys)], args[len(keys):]
            if value == "empty":
                data: dict[str, Any] = {"name": name, "key": key, "count": 0}
            elif value == "stat":
                data = {"name": name, "key": key, **dict(zip(STAT_FIELDS, rest, strict=True))}
            else:
                data = {"name": name, "key": key, "value": rest[0]}
            self.emit({"type": rtype, "data": data})
        elif kind == PD_REC_PRINTF and not isinstance(self.formats[fmt_id], FormatSpec):
            buckets = [int(b) for b in decode_args(buf, start, end, "i" * ((end - start) // 8))]
            self.emit({"type": "hist", "data": hist_data(self.formats[fmt_id], buckets)})
        elif kind == PD_REC_PRINTF:
            spec = self.formats[fmt_id]
            args = [_text(a) for a in decode_args(buf, start, end, _kinds(spec))]
            self.emit({"type": "printf", "data": format_values(spec, args)})
        elif kind == PD_REC_TEXT:
            self.emit({"type": "printf",
                       "data": str(_text(decode_args(buf, start, end, "s")[0]))})
        elif kind in (PD_REC_ERROR, PD_REC_WARNING):
            msg = str(_text(decode_args(buf, start, end, "s")[0]))
            if kind == PD_REC_ERROR:
                self.errors += 1
            else:
                self.warnings += 1
            self.emit({"type": "error" if kind == PD_REC_ERROR else "warning", "data": msg})
        elif kind == PD_REC_EXIT:
            self.exit_requested = True
        elif kind == PD_REC_SYSTEM:
            self.system(str(_text(decode_args(buf, start, end, "s")[0])))
        elif kind != PD_REC_PAD:
            self.bad_records += 1
