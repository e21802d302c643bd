#!/usr/bin/env python3
"""numpy peer of dispatch-bench: the same cases on the CPU, modes sync and chain.

numpy runs synchronously, so `sync` is the wall time of one call and `chain` the wall time of
N calls divided by N; there is no `device` mode. GEMM and the LoRA products go to the BLAS
numpy links (OpenBLAS from Debian's python3-numpy); softmax and the norms are written in
numpy the way a user would, in float32. Of the training step's ops (suite step), the forward
ones numpy users write by hand: SwiGLU g / (1 + exp(-g)) * u, GELU's tanh form, add y +=
alpha x in place, add + RMS norm (h and y), RoPE with rotate_half on (T, H, d) views (cos and
sin tables made outside the timing), cross-entropy's loss and dlogits from logits (a softmax
and the mean over the targets counted), the LM head's (h w^T, then the same, then dh =
dlogits w), the embedding as a row gather; attention (which no numpy user writes for a
training step), every backward op and AdamW (numpy has no optimizer) are not timed. Output: schema hd-bench/1, backend
"numpy".

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


def softmax_loss(logits, ids, ignore):
    """Cross-entropy's mean loss over the targets not ignored, and its dlogits."""
    m = logits.max(axis=1, keepdims=True)
    e = np.exp(logits - m)
    s = e.sum(axis=1, keepdims=True)
    counted = ids != ignore
    rows = np.nonzero(counted)[0]
    lse = (m + np.log(s))[:, 0]
    loss = (lse[rows] - logits[rows, ids[rows]]).sum() / max(len(rows), 1)
    grad = e / s
    grad[rows, ids[rows]] -= 1
    grad *= np.float32(1 / max(len(rows), 1))
    grad[~counted] = 0
    return loss, grad


def rope_tables(case):
    """cos and sin of (T, 1, d): the angles of theta's frequencies at each row's position."""
    t, _, pairs = case["dims"][:3]
    params = case.get("params", {})
    inv = 1.0 / params.get("theta", 10000.0) ** (np.arange(0, 2 * pairs, 2) / (2 * pairs))
    ang = np.outer(np.arange(t) + params.get("position_offset", 0), inv)
    ang = np.concatenate((ang, ang), axis=1)[:, None, :]
    return np.cos(ang).astype(np.float32), np.sin(ang).astype(np.float32)


def step_run(case, x, ids, tables):
    """One call of a training step's forward op on input set x."""
    op, params, d = case["op"], case.get("params", {}), case["dims"]
    if op == "swiglu":
        return x[0] / (1 + np.exp(-x[0])) * x[1]
    if op == "gelu":
        k = np.float32(0.7978845608028654)
        return 0.5 * x[0] * (1 + np.tanh(k * (x[0] + np.float32(0.044715) * x[0] ** 3)))
    if op == "add":
        return np.add(x[1], np.float32(params.get("alpha", 1.0)) * x[0], out=x[1])
    if op == "add_rms_norm":
        h = x[0] + x[1]
        ms = np.mean(h * h, axis=1, keepdims=True)
        return h, h / np.sqrt(ms + np.float32(params.get("eps", 1e-5))) * x[2]
    if op == "rope":
        cos, sin = tables
        q = x[0].reshape(d[0], -1, 2 * d[2])
        half = d[2]
        return q * cos + np.concatenate((-q[..., half:], q[..., :half]), axis=-1) * sin
    if op == "cross_entropy":
        return softmax_loss(x[0], ids, params.get("ignore_index", -100))
    if op == "linear_cross_entropy":
        loss, grad = softmax_loss(x[0] @ x[1].T, ids, params.get("ignore_index", -100))
        return loss, grad @ x[1]
    return np.take(x[0], ids, axis=0)  # embedding


def make_case(case, rng, sets):
    d = case["dims"]
    op = case["op"]

    def u(shape, lo, hi):
        return rng.uniform(lo, hi, size=shape).astype(np.float32)

    inputs = common.make_inputs(case, sets, u, lambda a: np.swapaxes(a, -2, -1))
    if common.is_step(case):
        ids = common.step_ids(case, lambda n, hi: rng.integers(0, hi, n))
        tables = rope_tables(case) if op == "rope" else None
        holder = {}

        def run_step(s):
            holder["y"] = step_run(case, inputs[s], ids, tables)
        return run_step
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
        note = common.too_large(args, case, backward=False) or \
            ("this peer does not time attention" if case["op"] == "attention" else None) or \
            ("this peer does not time AdamW" if case["op"] == "adamw" else None) or \
            ("this peer does not time the backward ops"
             if case.get("params", {}).get("inverse") else None)
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
