#!/usr/bin/env python3
"""Turns one OpenCL kernel file into a C file defining a NUL-terminated byte array.

usage: embed_kernels.py INPUT.cl OUTPUT.c

The array is named hd__fused_cl_<stem>, where <stem> is the file name without .cl, so
kernels/softmax.cl becomes `const char hd__fused_cl_softmax[]`. Bytes are written as numbers
because C11 string literals are limited to 4095 characters.
"""
import os
import re
import sys


def main(argv):
    if len(argv) != 3:
        sys.stderr.write("usage: embed_kernels.py INPUT.cl OUTPUT.c\n")
        return 2
    src, dst = argv[1], argv[2]
    stem = os.path.basename(src)
    if stem.endswith(".cl"):
        stem = stem[:-3]
    if not re.fullmatch(r"[A-Za-z_][A-Za-z0-9_]*", stem):
        sys.stderr.write("embed_kernels.py: %s: name is not a C identifier\n" % src)
        return 1
    with open(src, "rb") as f:
        data = f.read()
    bad = [i for i, b in enumerate(data) if b == 0 or b > 127]
    if bad:
        # Some OpenCL compilers reject non-ASCII bytes even in comments.
        sys.stderr.write("embed_kernels.py: %s: byte %d is NUL or not ASCII\n" % (src, bad[0]))
        return 1
    data += b"\0"
    lines = []
    for i in range(0, len(data), 16):
        lines.append("    " + ", ".join("%d" % b for b in data[i:i + 16]) + ",")
    text = (
        "/* Generated from %s by embed_kernels.py; edit the .cl file instead. */\n"
        "extern const char hd__fused_cl_%s[];\n"
        "const char hd__fused_cl_%s[] = {\n%s\n};\n"
        % (os.path.basename(src), stem, stem, "\n".join(lines))
    )
    tmp = dst + ".tmp"
    with open(tmp, "w", encoding="ascii") as f:
        f.write(text)
    os.replace(tmp, dst)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
