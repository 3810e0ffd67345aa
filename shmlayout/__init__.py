"""pydyn.shmlayout: the single definition of the shared-memory segment.

layout.py holds the definition, gen_c.py renders pd_shm.h from it, view.py
reads and writes a segment from Python, record.py encodes ring records.
"""

from __future__ import annotations

from .c_header import render_c_header
from .layout import (
    CONST_GROUPS,
    CONSTANTS,
    HEADER,
    PD_ABI_AARCH64,
    PD_ABI_I386,
    PD_ABI_X86_64,
    PD_CHECKSUM_LEN,
    PD_FLAG_DRAIN_IDLE,
    PD_FLAG_DRAIN_WAITS,
    PD_FLAG_MERGE_TEXT,
    PD_LAYOUT_VERSION,
    PD_LOCK_TID_MASK,
    PD_LOCK_WAITERS,
    PD_MAGIC,
    PD_PROC_ALIVE,
    PD_PROC_EXECED,
    PD_PROC_EXITED,
    PD_PROC_FREE,
    PD_PROC_KILLED,
    PD_PROC_REFUSED,
    PD_REC_ERROR,
    PD_REC_EXIT,
    PD_REC_PAD,
    PD_REC_PRINTF,
    PD_REC_PROC,
    PD_REC_SYSTEM,
    PD_REC_TEXT,
    PD_REC_WARNING,
    PD_SESSION_RUNNING,
    PD_SESSION_STARTING,
    PD_SESSION_STOPPED,
    PD_SESSION_STOPPING,
    PD_TSLOTS,
    PROC,
    REC,
    STRUCTS,
    TSLOT,
    TYPES,
    Const,
    ConstGroup,
    Field,
    Member,
    Struct,
)
from .record import (
    REC_HEADER_SIZE,
    RecordHeader,
    decode_args,
    encode_args,
    pack_record,
    string_arg_size,
    unpack_header,
)
from .view import (
    RING_MAX_SIZE,
    RING_MIN_SIZE,
    LayoutError,
    SegmentPlan,
    SegmentView,
    StructView,
    init_header,
    plan_segment,
)

__all__ = [
    "CONST_GROUPS", "CONSTANTS", "HEADER", "PROC", "REC", "STRUCTS", "TSLOT", "TYPES",
    "Const", "ConstGroup", "Field", "Member", "Struct",
    "PD_ABI_AARCH64", "PD_ABI_I386", "PD_ABI_X86_64", "PD_FLAG_DRAIN_IDLE", "PD_FLAG_DRAIN_WAITS",
    "PD_FLAG_MERGE_TEXT",
    "PD_CHECKSUM_LEN", "PD_LAYOUT_VERSION",
    "PD_LOCK_TID_MASK", "PD_LOCK_WAITERS", "PD_MAGIC",
    "PD_PROC_ALIVE", "PD_PROC_EXECED", "PD_PROC_EXITED", "PD_PROC_FREE", "PD_PROC_KILLED",
    "PD_PROC_REFUSED",
    "PD_REC_ERROR", "PD_REC_EXIT", "PD_REC_PAD", "PD_REC_PRINTF", "PD_REC_PROC",
    "PD_REC_SYSTEM", "PD_REC_TEXT", "PD_REC_WARNING",
    "PD_SESSION_RUNNING", "PD_SESSION_STARTING", "PD_SESSION_STOPPED", "PD_SESSION_STOPPING",
    "PD_TSLOTS",
    "REC_HEADER_SIZE", "RecordHeader", "decode_args", "encode_args", "pack_record",
    "string_arg_size", "unpack_header",
    "RING_MAX_SIZE", "RING_MIN_SIZE", "LayoutError", "SegmentPlan", "SegmentView", "StructView",
    "init_header", "plan_segment",
    "render_c_header",
]
