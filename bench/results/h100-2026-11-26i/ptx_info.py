#!/usr/bin/env python3
"""ptxas -v over the program-binary cache: for each cached gemm_tile PTX, its -D options and
the registers, spills and local memory ptxas reports for sm_90. Usage: ptx_info.py DIR"""
import os, re, struct, subprocess, sys, tempfile
ptxas = os.environ.get("PTXAS", "ptxas")
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
    opts = " ".join(re.findall(r"-D\w+=\S+", key))
    with tempfile.NamedTemporaryFile(suffix=".ptx", delete=False) as t:
        t.write(ptx.rstrip(b"\0"))
    r = subprocess.run([ptxas, "-arch=sm_90", "-v", t.name, "-o", "/dev/null"], capture_output=True, text=True)
    info = " ".join(l.strip() for l in r.stderr.splitlines() if "gemm_tile" in l or "Used" in l or "spill" in l)
    print(opts, "|", info[:400])
    os.unlink(t.name)
