"""Pass 3f, exit report: stap prints every global the script writes but never reads
after `end`; this is the C of that report (a handler run as the last `end` probe)."""

from __future__ import annotations

from ..format import parse_format
from .common import LONG, STAT, STRING
from .emit import Unit, _kstat_merge, _stat_read

STAT_EXIT_FIELDS = " @count=%#d @min=%#d @max=%#d @sum=%#d @avg=%#d"


def exit_report(tr: Unit) -> list[str]:
    """stap prints every global the user's script writes but never reads, in its formats
    (elaborate.cxx add_global_var_display): longs %d, strings quoted, stats
    fields %#d, arrays sorted by value, largest first (stats by @count)."""
    lines: list[str] = []
    user = tr.types.script.loc.file
    for var in tr.globals.values():
        if var.read or not var.written:
            continue
        if var.decl is not None and var.decl.loc.file != user:
            continue   # a tapset's global (-I, pydyn's own), as stap leaves them out
        g = f"(c->globals + {tr.layout.offset(var.name)})"
        if var.array is None:
            if var.type == STAT:
                fid = tr.report_format_id(parse_format(f"{var.name}{STAT_EXIT_FIELDS}\n"),
                                          ("stats", var.name, (), "stat"))
                empty = tr.report_format_id(parse_format(f"{var.name} @count=0x0\n"),
                                            ("stats", var.name, (), "empty"))
                lines += [f"    {{ const struct pd_stat *s_ = "
                          f"{_stat_read(var, g, tr.plan.pstats)};",
                          f"      if (!s_->count) {{ pd_rec_open(c, PD_REC_PRINTF, {empty}, 0); "
                          "pd_rec_close(c); }",
                          f"      else {{ pd_rec_open(c, PD_REC_PRINTF, {fid}, 5); "
                          "pd_rec_i64(c, s_->count); pd_rec_i64(c, s_->min); "
                          "pd_rec_i64(c, s_->max); pd_rec_i64(c, s_->sum); "
                          "pd_rec_i64(c, s_->sum / s_->count); pd_rec_close(c); } }"]
            elif var.type == STRING:
                fid = tr.report_format_id(parse_format(f'{var.name}="%#s"\n'),
                                          ("map", var.name, (), STRING))
                lines.append(f"    pd_rec_open(c, PD_REC_PRINTF, {fid}, 1); "
                             f"pd_rec_str(c, (const char *){g}); pd_rec_close(c);")
            else:
                fid = tr.report_format_id(parse_format(f"{var.name}=%d\n"),
                                          ("map", var.name, (), LONG))
                value = tr.layout.counter_read(var.name) if var.name in tr.plan.counters \
                    else f"*(int64_t *){g}"
                lines.append(f"    pd_rec_open(c, PD_REC_PRINTF, {fid}, 1); "
                             f"pd_rec_i64(c, {value}); pd_rec_close(c);")
            continue
        assert var.array is not None
        keyfmt = ",".join('"%#s"' if k == STRING else "%#d" for k in var.array.keys)
        valfmt, nvals = {STAT: (STAT_EXIT_FIELDS, 5), STRING: ('="%#s"', 1)}.get(
            var.array.value or LONG, ("=%d", 1))
        value = var.array.value or LONG
        fid = tr.report_format_id(
            parse_format(f"{var.name}[{keyfmt}]{valfmt}\n"),
            ("stats" if value == STAT else "map", var.name,
             tuple(STRING if k == STRING else LONG for k in var.array.keys),
             "stat" if value == STAT else value))
        max_entries = tr.limits.max_entries(var)
        lines.append("    {")
        if var.name in tr.plan.kstats:
            lines.append(f"        {_kstat_merge(var, g)}")
        lines.append(f"        static __thread uint8_t *it_[{max_entries}];")
        lines.append(f"        uint32_t n_ = pd_map_sorted({g}, &md_{var.name}, it_, -1, -1);")
        lines.append("        for (uint32_t i_ = 0; i_ < n_; i_++) {")
        lines.append(f"            pd_rec_open(c, PD_REC_PRINTF, {fid}, "
                     f"{len(var.array.keys) + nvals});")
        at = 0
        for k in var.array.keys:
            if k == STRING:
                lines.append(f"            pd_rec_str(c, (const char *)(it_[i_] + {at}));")
            else:
                lines.append(f"            {{ int64_t k_; memcpy(&k_, it_[i_] + {at}, 8); "
                             "pd_rec_i64(c, k_); }")
            at += tr.limits.type_size(k)
        if var.array.value == STAT:
            lines.append(f"            struct pd_stat *s_ = (struct pd_stat *)(it_[i_] + {at});")
            lines.append("            pd_rec_i64(c, s_->count); pd_rec_i64(c, s_->min); "
                         "pd_rec_i64(c, s_->max); pd_rec_i64(c, s_->sum); "
                         "pd_rec_i64(c, s_->count ? s_->sum / s_->count : 0);")
        elif var.array.value == STRING:
            lines.append(f"            pd_rec_str(c, (const char *)(it_[i_] + {at}));")
        else:
            lines.append(f"            {{ int64_t v_; memcpy(&v_, it_[i_] + {at}, 8); "
                         "pd_rec_i64(c, v_); }")
        lines.append("            pd_rec_close(c);")
        lines.append("        }")
        lines.append("    }")
    return lines


