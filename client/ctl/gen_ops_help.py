#!/usr/bin/env python3
"""Turn the op tables of docs/ops.md into C data for `tensorctl run OP --help`.

The daemon has no method that lists its ops and their attrs, so tensorctl
carries this copy of the documentation, made at build time (the doc is the
single source). Usage: gen_ops_help.py docs/ops.md out.c
"""
import re
import sys


def cstr(s):
    return '"' + s.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n") + '"'


def main(src, dst):
    rows, section, header = [], "", None
    with open(src, encoding="utf-8") as f:
        for line in f:
            line = line.rstrip("\n")
            if line.startswith("## "):
                section = re.sub(r"\s*\(.*\)\s*$", "", line[3:]).strip()
                header = None
                continue
            if not line.startswith("|"):
                header = None
                continue
            cells = [c.strip() for c in line.strip().strip("|").split("|")]
            if header is None:
                header = cells if cells and cells[0] == "op" else []
                continue
            if not header or set(line) <= set("|-: "):
                continue
            ops = re.findall(r"`([a-z0-9_]+)`", cells[0])
            fields = []
            for name, value in zip(header[1:], cells[1:]):
                fields.append("  %-16s %s" % (name + ":", value.replace("`", "")))
            for op in ops:
                rows.append((op, section, "\n".join(fields) + "\n"))
    if len(rows) < 20:
        sys.exit("gen_ops_help: only %d ops found in %s" % (len(rows), src))
    with open(dst, "w", encoding="utf-8") as out:
        out.write("/* Generated from docs/ops.md by client/ctl/gen_ops_help.py: do not edit. */\n")
        out.write('#include "ctl_help.h"\n\n')
        out.write("const struct ctl_op_help ctl_op_helps[] = {\n")
        for op, sec, text in rows:
            out.write("\t{ %s, %s, %s },\n" % (cstr(op), cstr(sec), cstr(text)))
        out.write("};\n")
        out.write("const size_t ctl_op_help_count = %d;\n" % len(rows))


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2])
