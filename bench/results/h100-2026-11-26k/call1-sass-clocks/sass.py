#!/usr/bin/env python3
"""SASS of every cached gemm_tile program: its -D options, the PTX, the cubin's disassembly and
an opcode histogram. Usage: sass.py PROGRAM_CACHE_DIR OUT_DIR (PTXAS, CUOBJDUMP, NVDISASM)"""
import collections, os, re, struct, subprocess, sys
ptxas = os.environ.get("PTXAS", "ptxas")
cuobjdump = os.environ.get("CUOBJDUMP", "cuobjdump")
out = sys.argv[2]
os.makedirs(out, exist_ok=True)
n = 0
for name in sorted(os.listdir(sys.argv[1])):
    raw = open(os.path.join(sys.argv[1], name), "rb").read()
    if raw[:8] != b"HDCLBIN\n":
        continue
    klen, = struct.unpack_from("<I", raw, 12)
    plen, = struct.unpack_from("<Q", raw, 16)
    key = raw[32:32 + klen].decode("utf-8", "replace")
    ptx = raw[32 + klen:32 + klen + plen]
    if b"gemm_tile" not in ptx:
        continue
    n += 1
    base = os.path.join(out, "k%02d" % n)
    opts = " ".join(re.findall(r"-D\w+=\S+", key))
    open(base + ".opts", "w").write(opts + "\n")
    open(base + ".ptx", "wb").write(ptx.rstrip(b"\0"))
    r = subprocess.run([ptxas, "-arch=sm_90", "-v", base + ".ptx", "-o", base + ".cubin"], capture_output=True, text=True)
    open(base + ".ptxas", "w").write(r.stderr)
    s = subprocess.run([cuobjdump, "-sass", base + ".cubin"], capture_output=True, text=True)
    open(base + ".sass", "w").write(s.stdout + s.stderr)
    hist = collections.Counter()
    for line in s.stdout.splitlines():
        m = re.match(r"\s*/\*[0-9a-f]{4,}\*/\s+(@!?U?P\w+\s+)?([A-Z][A-Z0-9_.]*)", line)
        if m:
            hist[m.group(2).split(".")[0]] += 1
    print(base, opts, "|", " ".join("%s:%d" % kv for kv in hist.most_common(25)))
