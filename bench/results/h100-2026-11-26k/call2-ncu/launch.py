#!/usr/bin/env python3
"""Launches a gemm_tile cubin (ptxas of the PTX NVIDIA's OpenCL built) through the CUDA driver,
for Nsight Compute. Usage: launch.py CUBIN OPTS_FILE M N K [REPEAT]"""
import ctypes, re, sys, torch
cub, optf, m, n, k = sys.argv[1], sys.argv[2], *map(int, sys.argv[3:6])
rep = int(sys.argv[6]) if len(sys.argv) > 6 else 3
o = dict(re.findall(r"-D(\w+)=(\S+)", open(optf).read()))
bm, bn, rm, rn = int(o["BM"]), int(o["BN"]), int(o.get("RM", 8)), int(o.get("RN", 8))
ta, tb = int(o["TRANS_A"]), int(o["TRANS_B"])
threads = (bm // rm) * (bn // rn)
A = torch.randn(k if ta else m, m if ta else k, device="cuda")
B = torch.randn(n if tb else k, k if tb else n, device="cuda")
C = torch.zeros(m, n, device="cuda")
torch.cuda.synchronize()
cu = ctypes.CDLL("libcuda.so.1")
mod, fn = ctypes.c_void_p(), ctypes.c_void_p()
assert cu.cuModuleLoad(ctypes.byref(mod), cub.encode()) == 0
assert cu.cuModuleGetFunction(ctypes.byref(fn), mod, b"gemm_tile") == 0
I, F, P, U = ctypes.c_int, ctypes.c_float, ctypes.c_void_p, ctypes.c_ulonglong
vals = [I(m), I(n), I(k), F(1.0), P(A.data_ptr()), I(A.shape[1]), P(B.data_ptr()), I(B.shape[1]),
        F(0.0), P(C.data_ptr()), I(n), P(C.data_ptr()), I(k), I(1), U(0), U(0), U(0),
        P(A.data_ptr()), I(A.shape[1]), P(B.data_ptr()), I(B.shape[1]), I(0)]
args = (ctypes.c_void_p * len(vals))(*[ctypes.cast(ctypes.byref(v), ctypes.c_void_p) for v in vals])
tiles = ((m + bm - 1) // bm) * ((n + bn - 1) // bn)
for _ in range(rep):
    r = cu.cuLaunchKernel(fn, tiles, 1, 1, threads, 1, 1, 0, None, args, None)
    assert r == 0, r
torch.cuda.synchronize()
ref = (A.t() if ta else A).double() @ (B.t() if tb else B).double()
print("max rel err", float(((C.double() - ref).abs().max() / ref.abs().max())))
s, e = torch.cuda.Event(True), torch.cuda.Event(True)
s.record()
for _ in range(10):
    cu.cuLaunchKernel(fn, tiles, 1, 1, threads, 1, 1, 0, None, args, None)
e.record(); torch.cuda.synchronize()
print("%s: %.1f us per launch" % (cub, s.elapsed_time(e) * 100))
