#!/usr/bin/env python3
"""PyTorch peer of dispatch-bench: the same cases through PyTorch eager, on CUDA or the CPU.

On CUDA: GEMM is torch.matmul (cuBLAS) with TF32 off, so it is an fp32 GEMM like ours; softmax,
layer norm and RMS norm are torch.nn.functional; LoRA is x@W + scale*(x@A)@B as a user writes
it. The backward ops are autograd's backward of the same forward (x, A and B requiring
gradients, W frozen; the norms' weights requiring theirs): the forward runs once per input set
before timing, and each timed call is one torch.autograd.grad over its retained graph, so the
forward is excluded; autograd's backward reuses what its forward saved (LoRA's x@A, the norms'
mean and 1/std), where dispatch-bench's call recomputes them. Modes: `device` (CUDA events recorded around one op, then the end event
waited on), `sync` (host wall time of the op plus torch.cuda.synchronize()), `chain` (N ops
queued, one synchronize, per op). On the CPU (--device cpu) only sync and chain exist.
Output: schema hd-bench/1, backend "torch-cuda" or "torch-cpu".

    dispatch-bench --list-cases --json cases.json
    python3 bench/peers/torch_peer.py --cases cases.json --suite all --json torch.json
"""
import argparse
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import common  # noqa: E402

try:
    import torch
    import torch.nn.functional as F
except ImportError:
    sys.exit("torch_peer: PyTorch is not installed")


def rms_norm(x, w, eps):
    if hasattr(F, "rms_norm"):
        return F.rms_norm(x, (x.shape[-1],), w, eps)
    return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + eps) * w


def backward_graph(op, x, cols, eps, scale, layout):
    """The forward of a backward case on one input set: (its output, the tensors whose
    gradients the op computes, dy). LoRA's weights in a transposed layout (flags 1, 2, 4 for
    W, A, B) enter the forward transposed, so their gradients come as they are stored."""
    if op == "lora_backward":
        xin, w, a, b, dy = x
        wrt = tuple(t.requires_grad_() for t in (xin, a, b))

        def op_of(t, flag):
            return t.t() if layout & flag else t
        xa = torch.matmul(xin, op_of(a, 2))
        y = torch.matmul(xin, op_of(w, 1)) + scale * torch.matmul(xa, op_of(b, 4))
        return y, wrt, dy
    wrt = tuple(t.requires_grad_() for t in x[:-1])
    if op == "softmax_backward":
        y = F.softmax(wrt[0], dim=-1)
    elif op == "layer_norm_backward":
        y = F.layer_norm(wrt[0], (cols,), wrt[1], wrt[2], eps)
    else:
        y = rms_norm(wrt[0], wrt[1], eps)
    return y, wrt, x[-1]


def make_case(case, gen, dev, sets):
    d = case["dims"]
    op = case["op"]

    def u(shape, lo, hi):
        t = torch.rand(shape, generator=gen, dtype=torch.float32)
        return (t * (hi - lo) + lo).to(dev)

    inputs = common.make_inputs(case, sets, u, lambda a: a.transpose(-2, -1))
    eps, scale = 1e-5, 0.5
    holder = {}
    if op.endswith("_backward"):
        layout = case.get("lora_layout", 0)
        graphs = [backward_graph(op, x, d[1], eps, scale, layout) for x in inputs]

        def run_backward(s):
            y, wrt, dy = graphs[s]
            holder["grads"] = torch.autograd.grad(y, wrt, dy, retain_graph=True)
        return run_backward

    def run(s):
        x = inputs[s]
        if op in ("gemm", "gemm_batched"):
            y = torch.matmul(x[0], x[1])
        elif op == "lora":
            y = torch.matmul(x[0], x[1]) + scale * torch.matmul(torch.matmul(x[0], x[2]), x[3])
        elif op == "softmax":
            y = F.softmax(x[0], dim=-1)
        elif op == "layer_norm":
            y = F.layer_norm(x[0], (d[1],), x[1], x[2], eps)
        else:
            y = rms_norm(x[0], x[1], eps)
        holder["y"] = y  # keeps the result alive, so nothing is optimised away
    return run


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    common.add_common_args(p)
    p.add_argument("--device", default="cuda", choices=["cuda", "cpu"])
    args = p.parse_args()
    cuda = args.device == "cuda"
    if cuda and not torch.cuda.is_available():
        sys.exit("torch_peer: CUDA is not available (use --device cpu)")
    modes = (args.modes or ("device,sync,chain" if cuda else "sync,chain")).split(",")
    if "device" in modes and not cuda:
        sys.exit("torch_peer: the device mode needs CUDA")
    torch.backends.cuda.matmul.allow_tf32 = False
    torch.backends.cudnn.allow_tf32 = False
    dev = torch.device(args.device)
    sync = torch.cuda.synchronize if cuda else (lambda: None)
    gen = torch.Generator().manual_seed(args.seed if args.seed is not None else 12345)
    backend = "torch-cuda" if cuda else "torch-cpu"
    results = []
    cases = common.load_cases(args)
    for index, (suite, case) in enumerate(cases):
        note = common.too_large(args, case)
        if note:
            results.append(common.result(suite, case, backend, "skipped", note))
            continue
        common.progress(f"{suite}: {case['case']}")
        sets = common.input_sets(case)
        try:
            run = make_case(case, gen, dev, sets)
            note = common.over_budget(args, run, sync, modes, len(cases) - index)
            if note:
                results.append(common.result(suite, case, backend, "skipped", note))
                continue

            def device_sample(s):
                start = torch.cuda.Event(enable_timing=True)
                end = torch.cuda.Event(enable_timing=True)
                start.record()
                run(s)
                end.record()
                end.synchronize()
                return start.elapsed_time(end) * 1e-3

            stats = {m: common.add_rates(case, common.measure(run, sync, sets, m, args,
                                                              device_sample))
                     for m in modes}
            results.append(common.result(suite, case, backend, "ok", modes=stats))
        except (torch.cuda.OutOfMemoryError if cuda else MemoryError, RuntimeError) as e:
            results.append(common.result(suite, case, backend, "error", str(e)[:180]))
        if cuda:
            torch.cuda.empty_cache()
    common.progress("")
    if cuda:
        props = torch.cuda.get_device_properties(0)
        device = {"name": props.name, "driver": f"CUDA {torch.version.cuda}",
                  "platform": f"PyTorch {torch.__version__}", "kind": "gpu"}
    else:
        device = {"name": common.cpu_model(), "driver": f"PyTorch {torch.__version__}",
                  "platform": "PyTorch CPU", "kind": "cpu"}
    common.write(args, "torch_peer", torch.__version__, device, modes, results)
    common.print_table(results)


if __name__ == "__main__":
    main()
