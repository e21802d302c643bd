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

The training step's ops (suite step), each as a PyTorch or transformers user writes it, in
fp32 on tensors laid out as dispatch-bench's (T x features), with the case's "params":
  swiglu            F.silu(g) * u; its backward autograd's over g and u
  gelu              F.gelu(x, approximate="tanh"); its backward autograd's
  add               y.add_(x, alpha=alpha), in place as the library's y += alpha x
  add_rms_norm      h = x + r, then F.rms_norm(h, (cols,), w, eps) (both kept); its backward
                    autograd's of (y, h) over x and r (w frozen, as LoRA keeps the norms), given
                    the gradients of y and of h along the residual path
  rope              transformers' apply_rotary_pos_emb on q as it views it ((1, H, T, d), the
                    (T, H d) rows viewed and transposed), rotate_half and x * cos +
                    rotate_half(x) * sin; the cos and sin tables (theta, positions from the
                    offset) built once outside the timing, as transformers' rotary embedding
                    module builds them once per forward for every layer. A case with inverse
                    (RoPE's backward) times autograd's backward of the same, given dy
  attention         F.scaled_dot_product_attention(q, k, v, is_causal=causal) on (1, H, T, d)
                    views, k and v expanded to H heads as transformers' repeat_kv does, the
                    output transposed back to (T, H d) rows (both within the timing, as in
                    transformers' forward); its backward autograd's over q, k and v (through
                    repeat_kv), given dout
  cross_entropy     F.cross_entropy(logits, targets, ignore_index) and autograd's dlogits:
                    both timed, as the library's one call gives the loss and dlogits
  linear_cross_entropy  F.linear(h, w) then F.cross_entropy, and autograd's dh (w frozen):
                    both timed, the T x V logits materialised as PyTorch does
  embedding         F.embedding(ids, table)
Targets and ids are int64 (PyTorch's index type), drawn in range, params.ignored of the
targets the ignore index (bench/SCHEMA.md).

AdamW (op "adamw": a model's LoRA factors, the case's "tensors" in the cases file) as a
PyTorch or transformers user steps it: fp32 parameters with their .grad set, one
torch.optim.AdamW(..., foreach=True) with the case's params (lr, betas, eps, weight_decay),
and each timed call torch.nn.utils.clip_grad_norm_(parameters, max_grad_norm, foreach=True)
then optimizer.step(), as transformers' Trainer does; the moments are the optimizer's own
(made at its first step, in the untimed warm-up). Each input set has its parameters,
gradients and optimizer, as dispatch-bench's sets each have their lists.

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


def rotate_half(x):
    """transformers' rotate_half: the halves of the last axis as (-x2, x1)."""
    x1 = x[..., : x.shape[-1] // 2]
    x2 = x[..., x.shape[-1] // 2:]
    return torch.cat((-x2, x1), dim=-1)


def rope_tables(case, dev):
    """cos and sin of shape (1, T, d), as transformers' LlamaRotaryEmbedding makes them: its
    inv_freq in float, the positions' outer product in float, the angles twice over."""
    t, cols, pairs = case["dims"][:3]
    d, params = 2 * pairs, case.get("params", {})
    inv_freq = 1.0 / (params.get("theta", 10000.0) **
                      (torch.arange(0, d, 2, dtype=torch.int64).to(dev, torch.float) / d))
    pos = torch.arange(t, device=dev, dtype=torch.float) + params.get("position_offset", 0)
    freqs = torch.outer(pos, inv_freq)
    emb = torch.cat((freqs, freqs), dim=-1)
    return emb.cos()[None], emb.sin()[None]


def heads_view(x, heads):
    """(T, heads * d) rows as transformers views a projection's output: (1, heads, T, d)."""
    t = x.shape[0]
    return x.view(1, t, heads, -1).transpose(1, 2)


def repeat_kv(x, n_rep):
    """transformers' repeat_kv: (1, kv_heads, T, d) expanded to (1, kv_heads * n_rep, T, d)."""
    b, kv, t, d = x.shape
    if n_rep == 1:
        return x
    return x[:, :, None, :, :].expand(b, kv, n_rep, t, d).reshape(b, kv * n_rep, t, d)


def step_forward(case, x, cos_sin):
    """The forward of a training step's op on one input set (x: the tuple make_inputs gives,
    the gradients left off): its outputs, as a tuple."""
    op = case["op"].removesuffix("_backward")
    d, params = case["dims"], case.get("params", {})
    if op == "swiglu":
        return (F.silu(x[0]) * x[1],)
    if op == "gelu":
        return (F.gelu(x[0], approximate="tanh"),)
    if op == "add_rms_norm":
        h = x[0] + x[1]
        return rms_norm(h, x[2], params.get("eps", 1e-5)), h
    if op == "rope":
        cos, sin = cos_sin
        q = heads_view(x[0], d[1] // (2 * d[2]))
        return (q * cos.unsqueeze(1) + rotate_half(q) * sin.unsqueeze(1),)
    q, k, v = heads_view(x[0], d[1]), heads_view(x[1], d[2]), heads_view(x[2], d[2])
    k, v = repeat_kv(k, d[1] // d[2]), repeat_kv(v, d[1] // d[2])
    out = F.scaled_dot_product_attention(q, k, v, is_causal=params.get("causal", True))
    # back to (T, H d) rows for the output projection, as transformers' attention does
    return (out.transpose(1, 2).contiguous().reshape(d[0], -1),)


# how many of a backward case's forward inputs take gradients (the rest, the norm's weight,
# are frozen), and how many of its inputs are the outputs' gradients
STEP_BACKWARD = {"swiglu": (2, 1), "gelu": (1, 1), "add_rms_norm": (2, 2), "rope": (1, 1),
                 "attention": (3, 1)}


def step_backward_graph(case, x, cos_sin):
    """As backward_graph for the step's backward ops (and RoPE's inverse): the forward's
    outputs, the inputs whose gradients autograd computes, the outputs' gradients (shaped as
    the outputs)."""
    op = case["op"].removesuffix("_backward")
    wrt_count, grad_count = STEP_BACKWARD[op]
    wrt = tuple(t.requires_grad_() for t in x[:wrt_count])
    fwd = x[:len(x) - grad_count]
    ys = step_forward(case, fwd, cos_sin)
    grads = tuple(g.view_as(y) for g, y in zip(x[len(x) - grad_count:], ys))
    return ys, wrt, grads


def step_loss_run(case, inputs, ids, holder):
    """Cross-entropy from logits or of the LM head: the forward and autograd's gradient of its
    input (dlogits, dh) in one timed call, as the library's call gives both."""
    ignore = case.get("params", {}).get("ignore_index", -100)
    linear = case["op"] == "linear_cross_entropy"

    def run(s):
        x = inputs[s][0].detach().requires_grad_()
        logits = F.linear(x, inputs[s][1]) if linear else x
        loss = F.cross_entropy(logits, ids, ignore_index=ignore)
        holder["y"] = (loss, torch.autograd.grad(loss, x)[0])
    return run


def make_step_case(case, inputs, ids, dev, holder):
    """The timed call of a training step's op (the module docstring says what each runs)."""
    op, params = case["op"], case.get("params", {})
    cos_sin = rope_tables(case, dev) if op == "rope" else None
    if op in ("cross_entropy", "linear_cross_entropy"):
        return step_loss_run(case, inputs, ids, holder)
    if op.endswith("_backward") or params.get("inverse", False):
        graphs = [step_backward_graph(case, x, cos_sin) for x in inputs]

        def run_backward(s):
            ys, wrt, grads = graphs[s]
            holder["grads"] = torch.autograd.grad(ys, wrt, grads, retain_graph=True)
        return run_backward

    def run(s):
        x = inputs[s]
        if op == "add":
            holder["y"] = x[1].add_(x[0], alpha=params.get("alpha", 1.0))
        elif op == "embedding":
            holder["y"] = F.embedding(ids, x[0])
        else:
            holder["y"] = step_forward(case, x, cos_sin)
    return run


def make_adamw_case(case, sets, uniform):
    """The timed call of an AdamW case (the module docstring says what it runs)."""
    params = case["params"]
    steps = []
    for lists in common.adamw_inputs(case, sets, uniform):
        leaves = [p.requires_grad_() for p in lists["params"]]
        for p, g in zip(leaves, lists["grads"]):
            p.grad = g
        opt = torch.optim.AdamW(leaves, lr=params["lr"], betas=(params["beta1"], params["beta2"]),
                                eps=params["eps"], weight_decay=params["weight_decay"],
                                foreach=True)
        steps.append((leaves, opt))
    max_norm = params["max_grad_norm"]

    def run(s):
        leaves, opt = steps[s]
        torch.nn.utils.clip_grad_norm_(leaves, max_norm, foreach=True)
        opt.step()
    return run


def make_case(case, gen, dev, sets):
    d = case["dims"]
    op = case["op"]

    def u(shape, lo, hi):
        t = torch.rand(shape, generator=gen, dtype=torch.float32)
        return (t * (hi - lo) + lo).to(dev)

    if op == "adamw":
        return make_adamw_case(case, sets, u)
    inputs = common.make_inputs(case, sets, u, lambda a: a.transpose(-2, -1))
    ids = common.step_ids(case, lambda n, hi: torch.randint(hi, (n,), generator=gen))
    if common.is_step(case):
        return make_step_case(case, inputs, None if ids is None else ids.to(dev), dev, {})
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
        except (torch.cuda.OutOfMemoryError if cuda else MemoryError, RuntimeError,
                AttributeError) as e:  # AttributeError: a PyTorch without the function
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
