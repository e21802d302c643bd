#!/usr/bin/env python3
"""numpy peer of dispatch-bench: the same cases on the CPU, modes sync and chain.

numpy runs synchronously, so `sync` is the wall time of one call and `chain` the wall time of
N calls divided by N; there is no `device` mode. GEMM and the LoRA products go to the BLAS
numpy links (OpenBLAS from Debian's python3-numpy); softmax and the norms are written in
numpy the way a user would, in float32. Output: schema hd-bench/1, backend "numpy".

    dispatch-bench --list-cases --json cases.json
    python3 bench/peers/numpy_peer.py --cases cases.json --suite seed,gemm --json numpy.json
"""
import argparse
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import common  # noqa: E402

try:
    import numpy as np
except ImportError:
    sys.exit("numpy_peer: numpy is not installed (Debian: apt-get install python3-numpy)")


def make_case(case, rng, sets):
    d = case["dims"]
    op = case["op"]

    def u(shape, lo, hi):
        return rng.uniform(lo, hi, size=shape).astype(np.float32)

    inputs = common.make_inputs(case, sets, u, lambda a: np.swapaxes(a, -2, -1))
    rows, cols = (d[0], d[2]) if op == "lora" else (d[0], d[1])
    out = np.empty((d[3], rows, cols) if op == "gemm_batched" else (rows, cols), dtype=np.float32)
    eps, scale = np.float32(1e-5), np.float32(0.5)

    def run(s):
        x = inputs[s]
        if op in ("gemm", "gemm_batched"):
            np.matmul(x[0], x[1], out=out)
        elif op == "lora":
            np.matmul(x[0], x[1], out=out)
            np.add(out, scale * ((x[0] @ x[2]) @ x[3]), out=out)
        elif op == "softmax":
            e = np.exp(x[0] - x[0].max(axis=1, keepdims=True))
            np.divide(e, e.sum(axis=1, keepdims=True), out=out)
        elif op == "layer_norm":
            mean = x[0].mean(axis=1, keepdims=True)
            var = x[0].var(axis=1, keepdims=True)
            np.multiply((x[0] - mean) / np.sqrt(var + eps), x[1], out=out)
            np.add(out, x[2], out=out)
        else:
            ms = np.mean(x[0] * x[0], axis=1, keepdims=True)
            np.multiply(x[0] / np.sqrt(ms + eps), x[1], out=out)
    return run


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    common.add_common_args(p)
    args = p.parse_args()
    modes = [m for m in (args.modes or "sync,chain").split(",")]
    if "device" in modes:
        sys.exit("numpy_peer: numpy has no device mode; use sync,chain")
    cases = common.load_cases(args)
    rng = np.random.default_rng(args.seed)
    results = []
    for index, (suite, case) in enumerate(cases):
        note = common.too_large(args, case, backward=False)
        if note:
            results.append(common.result(suite, case, "numpy", "skipped", note))
            continue
        sets = common.input_sets(case)
        try:
            run = make_case(case, rng, sets)
            note = common.over_budget(args, run, lambda: None, modes, len(cases) - index)
            if note:
                results.append(common.result(suite, case, "numpy", "skipped", note))
                common.progress(f"{suite}: {case['case']}: skipped")
                continue
            stats = {m: common.add_rates(case, common.measure(run, lambda: None, sets, m, args))
                     for m in modes}
            results.append(common.result(suite, case, "numpy", "ok", modes=stats))
        except MemoryError:
            results.append(common.result(suite, case, "numpy", "skipped", "out of memory"))
        common.progress(f"{suite}: {case['case']}")
    common.progress("")
    device = {"name": common.cpu_model(), "driver": f"numpy {np.__version__}",
              "platform": "numpy", "kind": "cpu"}
    common.write(args, "numpy_peer", np.__version__, device, modes, results)
    common.print_table(results)


if __name__ == "__main__":
    main()
