"""What the peer scripts share: the case list, timing loops, and the hd-bench/1 JSON writer.

The cases come from `dispatch-bench --list-cases --json FILE` (schema hd-bench-cases/1), so
the peers always run exactly the shapes dispatch-bench runs. The timing follows
autotune/measure.c: warm-up (at least one call per input set), then samples until the time
budget is spent and at least `repeats` were taken; median, min and max per op.
"""
import argparse
import datetime
import json
import math
import os
import platform
import re
import socket
import statistics
import subprocess
import sys
import time

ROTATE_BELOW_BYTES = 64 * 1024 * 1024
ROTATE_SETS = 3


def add_common_args(p: argparse.ArgumentParser):
    p.add_argument("--cases", help="cases JSON from `dispatch-bench --list-cases --json FILE`")
    p.add_argument("--bench", default="dispatch-bench",
                   help="dispatch-bench binary to ask for the cases when --cases is not given")
    p.add_argument("--suite", "--suites", default="seed",
                   help="seed, train, gemm, shapes, backward, step, ci, all (every suite but ci), "
                        "file (the cases of `dispatch-bench --shapes FILE --list-cases --json`), "
                        "or a comma list")
    p.add_argument("--modes", default=None, help="comma list of modes")
    p.add_argument("--repeats", type=int, default=5, help="at least this many samples per mode")
    p.add_argument("--max-runs", type=int, default=1000)
    p.add_argument("--budget-ms", type=float, default=300.0)
    p.add_argument("--warmup", type=int, default=3)
    p.add_argument("--chain", type=int, default=0, help="ops per chain sample (0: ~2 ms)")
    p.add_argument("--case-budget-s", type=float, default=30.0,
                   help="skip a case whose timing, estimated from one call, would take longer "
                        "(0: no limit)")
    p.add_argument("--max-time", type=float, default=0.0,
                   help="the whole run within about this many seconds: the case budget shrinks "
                        "to share what is left among the cases left (0: no limit)")
    p.add_argument("--max-elements", type=float, default=0,
                   help="skip cases holding more floats than this (recorded as skipped)")
    p.add_argument("--json", required=True, help="where to write the results")
    p.add_argument("--seed", type=int, default=None)


def load_cases(args):
    if args.cases:
        with open(args.cases) as f:
            doc = json.load(f)
    else:
        out = subprocess.run([args.bench, "--list-cases", "--json", "-"], check=True,
                             capture_output=True, text=True).stdout
        doc = json.loads(out)
    if doc.get("schema") != "hd-bench-cases/1":
        raise SystemExit("cases file: not an hd-bench-cases/1 document")
    wanted = []
    for name in args.suite.split(","):
        wanted += [s["name"] for s in doc["suites"] if s["name"] != "ci"] if name == "all" \
            else [name]
    suites = {s["name"]: s for s in doc["suites"]}
    picked = []
    for name in wanted:
        if name not in suites:
            raise SystemExit(f"unknown suite {name!r}")
        picked += [(name, c) for c in suites[name]["cases"]]
    return picked


def adamw_parameters(case):
    """The floats of each of an AdamW case's lists: every element of its tensors."""
    return sum(rows * cols for rows, cols in case["tensors"])


def input_sets(case):
    """3 sets when all inputs of 3 sets stay under 64 MiB, else 1 (as bench/case.c; an AdamW
    case's set is its four lists, each set stepping its own parameters and moments)."""
    if case["op"] == "adamw":
        in_bytes = 16 * adamw_parameters(case)
        return ROTATE_SETS if in_bytes * ROTATE_SETS < ROTATE_BELOW_BYTES else 1
    d = case["dims"]
    out = {"gemm": d[0] * d[1], "gemm_batched": d[0] * d[1] * d[3], "lora": d[0] * d[2],
           "lora_backward": d[0] * d[1] + d[1] * d[3] + d[3] * d[2],
           "layer_norm_backward": d[0] * d[1] + 2 * d[1],
           "rms_norm_backward": d[0] * d[1] + d[1],
           "swiglu_backward": 2 * d[0] * d[1], "add_rms_norm": 2 * d[0] * d[1],
           "add_rms_norm_backward": d[0] * d[1] + d[1],
           "attention": d[0] * d[1] * d[3] + d[0] * d[1],
           "attention_backward": d[0] * d[3] * (d[1] + 2 * d[2]),
           "cross_entropy": 1 + d[0] * d[1], "linear_cross_entropy": 1 + d[0] * d[1],
           }.get(case["op"], d[0] * d[1])
    in_bytes = case["bytes"] - 4 * out
    return ROTATE_SETS if in_bytes * ROTATE_SETS < ROTATE_BELOW_BYTES else 1


def too_large(args, case, backward=True):
    """The note of a case the peer skips (--max-elements; the backward ops where the peer
    times none: backward=False), else None."""
    if case["op"].endswith("_backward") and not backward:
        return "this peer does not time the backward ops"
    elements = 4 * adamw_parameters(case) if case["op"] == "adamw" else case["bytes"] / 4
    if args.max_elements and elements > args.max_elements:
        return f"{elements:.0f} elements > --max-elements"
    return None


def over_budget(args, run_one, sync, modes, remaining=1):
    """The note of a case whose timing would not fit in its budget (--case-budget-s, or its
    share of what --max-time leaves for the `remaining` cases), judged by one call (its
    second: the first may initialise the library), else None."""
    budget = args.case_budget_s or math.inf
    if args.max_time:
        left = args.max_time - (time.perf_counter() - _start)
        budget = min(budget, left / max(remaining, 1))
        if budget <= 0:
            return f"no time left (--max-time {args.max_time:.0f} s)"
    if budget == math.inf:
        return None
    for _ in range(2):
        t0 = time.perf_counter()
        run_one(0)
        sync()
        one = time.perf_counter() - t0
    calls = max(args.warmup, 1) + len(modes) * (args.repeats + max(args.warmup, 1))
    est = calls * one
    if est > budget:
        return (f"est. {est:.3g} s > budget {budget:.3g} s (one call took "
                f"{one:.3g} s; --case-budget-s, --max-time)")
    return None


# The training step's forward ops: each input's shape from the dims and its value range, as
# core/op.c's table gives them (attention's q, k, v as tokens x (heads * head_dim)). The ids of
# cross-entropy and the embedding are not here: step_ids() draws them.
def _step_inputs(op, d):
    rows, cols = d[0], d[1]
    return {
        "swiglu": [((rows, cols), -4, 4), ((rows, cols), -2, 2)],
        "gelu": [((rows, cols), -4, 4)],
        "add": [((rows, cols), -1, 1), ((rows, cols), -1, 1)],  # x, then y (added into)
        "add_rms_norm": [((rows, cols), -2, 3), ((rows, cols), -1, 1), ((cols,), 0.5, 1.5)],
        "rope": [((rows, cols), -2, 2)],
        "attention": [((rows, d[1] * d[3]), -2, 2), ((rows, d[2] * d[3]), -2, 2),
                      ((rows, d[2] * d[3]), -1, 1)],
        "cross_entropy": [((rows, cols), -8, 8)],
        "linear_cross_entropy": [((rows, d[1]), -1, 1), ((d[2], d[1]), -0.1, 0.1)],
        "embedding": [((d[2], d[1]), -1, 1)],
    }.get(op)


def is_step(case):
    """Whether the case is of one of the training step's ops."""
    return _step_inputs(case["op"].removesuffix("_backward"), case["dims"]) is not None


def step_ids(case, integers):
    """The ids of a case that takes them (None for the others), as dispatch-bench draws them:
    each in [0, vocab); of cross-entropy's targets, params.ignored are params.ignore_index
    (target k * rows / n of each k < n). integers(n, hi) draws n ints in [0, hi)."""
    d, op = case["dims"], case["op"]
    vocab = {"cross_entropy": d[1], "linear_cross_entropy": d[2], "embedding": d[2]}.get(op)
    if vocab is None:
        return None
    ids = integers(d[0], vocab)
    params = case.get("params", {})
    n = params.get("ignored", 0)
    for k in range(n):
        ids[k * d[0] // n] = params["ignore_index"]
    return ids


def make_inputs(case, sets, uniform, transpose):
    """`sets` tuples of the case's inputs, in dispatch-bench's order and value ranges.

    uniform(shape, lo, hi) draws a float32 array of the peer's kind; transpose(a) is a view
    with the last two axes swapped, so that a transposed GEMM operand is stored as
    dispatch-bench stores it. The training step's backward ops take their forward's inputs,
    then the gradient of its output (add + RMS norm: of y, then of h along the residual path),
    as autograd's backward of that forward needs them; their ids come from step_ids().
    """
    d = case["dims"]
    op = case["op"]
    forward = op.removesuffix("_backward")
    step = _step_inputs(forward, d)
    if step is not None:
        out = (d[0], d[1] * d[3]) if forward == "attention" else (d[0], d[1])
        grads = 2 if forward == "add_rms_norm" else 1
        inverse = case.get("params", {}).get("inverse", False)  # RoPE's backward
        if op == forward and not inverse:
            grads = 0
        return [tuple(uniform(shape, lo, hi) for shape, lo, hi in step) +
                tuple(uniform(out, -1, 1) for _ in range(grads)) for _ in range(sets)]
    inputs = []
    for _ in range(sets):
        if op == "gemm":
            m, n, k = d[0], d[1], d[2]
            a = transpose(uniform((k, m), -1, 1)) if case["trans_a"] else uniform((m, k), -1, 1)
            b = transpose(uniform((n, k), -1, 1)) if case["trans_b"] else uniform((k, n), -1, 1)
            inputs.append((a, b))
        elif op == "gemm_batched":
            m, n, k, batch = d
            a = transpose(uniform((batch, k, m), -1, 1)) if case["trans_a"] \
                else uniform((batch, m, k), -1, 1)
            b = transpose(uniform((batch, n, k), -1, 1)) if case["trans_b"] \
                else uniform((batch, k, n), -1, 1)
            inputs.append((a, b))
        elif op == "lora":
            # A weight in a transposed layout (7: PyTorch's W out x in, A r x in, B out x r) is
            # stored so and used through a transposed view, as dispatch-bench reads it in place.
            t, i, o, r = d
            layout = case.get("lora_layout", 0)
            ws = [uniform((t, i), -1, 1)]
            for flag, (rows, cols) in ((1, (i, o)), (2, (i, r)), (4, (r, o))):
                ws.append(transpose(uniform((cols, rows), -1, 1)) if layout & flag
                          else uniform((rows, cols), -1, 1))
            inputs.append(tuple(ws))
        elif op == "softmax":
            inputs.append((uniform((d[0], d[1]), -4, 4),))
        elif op == "layer_norm":
            inputs.append((uniform((d[0], d[1]), -2, 3), uniform((d[1],), 0.5, 1.5),
                           uniform((d[1],), -0.5, 0.5)))
        elif op == "rms_norm":
            inputs.append((uniform((d[0], d[1]), -2, 3), uniform((d[1],), 0.5, 1.5)))
        elif op == "lora_backward":
            # the forward's inputs, then dy; a weight in a transposed layout is stored so (not
            # a view: the peer takes its gradient as stored, as dispatch-bench writes dA, dB)
            t, i, o, r = d
            layout = case.get("lora_layout", 0)
            ws = [uniform((t, i), -1, 1)]
            for flag, (rows, cols) in ((1, (i, o)), (2, (i, r)), (4, (r, o))):
                ws.append(uniform((cols, rows) if layout & flag else (rows, cols), -1, 1))
            inputs.append(tuple(ws) + (uniform((t, o), -1, 1),))
        else:
            # the row ops' backward: the forward's inputs (softmax: x, whose softmax is the y
            # that dispatch-bench passes), then dy
            forward = make_inputs(dict(case, op=op[:-len("_backward")]), 1, uniform,
                                  transpose)[0]
            inputs.append(forward + (uniform((d[0], d[1]), -1, 1),))
    return inputs


# AdamW's lists' value ranges, as bench/adamw_case.c draws them: the parameters, their
# gradients (whose total norm is far above the clip's 1.0, which then scales them), and the
# moments, which a peer whose optimizer keeps its own state need not take.
ADAMW_RANGES = {"params": (-1, 1), "grads": (-0.1, 0.1), "m": (-0.01, 0.01), "v": (0, 1e-3)}


def adamw_inputs(case, sets, uniform, lists=("params", "grads")):
    """`sets` dicts of an AdamW case's lists (by default the parameters and gradients), each a
    list of arrays of the case's "tensors" shapes (from `dispatch-bench --list-cases --json`:
    its model's LoRA factors, A then B of each projection, layer by layer), in the value
    ranges of dispatch-bench."""
    return [{name: [uniform(tuple(shape), *ADAMW_RANGES[name]) for shape in case["tensors"]]
             for name in lists} for _ in range(sets)]


def measure(run_one, sync, sets, mode, args, device_sample=None):
    """Times run_one(set) in one mode. sync() waits for queued work; device_sample(set) returns
    the device time of one op (device mode only)."""
    for i in range(max(args.warmup, sets, 1)):
        t0 = time.perf_counter()
        run_one(i % sets)
        sync()
        warm = time.perf_counter() - t0
    chain = args.chain or min(256, max(4, int(2e-3 / warm) if warm > 0 else 256))
    if mode == "chain" and not args.chain and warm > 0.05:
        chain = 2
    samples, spent, s = [], 0.0, 0
    while len(samples) < args.max_runs and (len(samples) < args.repeats or
                                            spent < args.budget_ms * 1e-3):
        t0 = time.perf_counter()
        if mode == "device":
            samples.append(device_sample(s))
            s = (s + 1) % sets
        elif mode == "sync":
            run_one(s)
            sync()
            samples.append(time.perf_counter() - t0)
            s = (s + 1) % sets
        else:
            for _ in range(chain):
                run_one(s)
                s = (s + 1) % sets
            sync()
            samples.append((time.perf_counter() - t0) / chain)
        spent += time.perf_counter() - t0
    return {
        "median_s": statistics.median(samples),
        "min_s": min(samples),
        "max_s": max(samples),
        "runs": len(samples),
        "chain_length": chain if mode == "chain" else 1,
        "host_timed": mode != "device",
    }


def add_rates(case, stats):
    t = stats["median_s"]
    matmul = case["op"] in ("gemm", "gemm_batched", "lora", "lora_backward", "attention",
                            "attention_backward", "linear_cross_entropy")
    stats["gflops"] = case["flops"] / t * 1e-9 if matmul and t > 0 else None
    stats["gbs"] = case["bytes"] / t * 1e-9 if t > 0 else None
    stats["roofline_pct"] = None
    return stats


def result(suite, case, backend, status, note="", modes=None, check=None, ran_on=None):
    r = {k: case[k] for k in ("case", "op", "dims", "trans_a", "trans_b", "params", "flops",
                              "bytes") if k in case}
    # the schema's strings hold no control characters: an exception's lines become one
    note = re.sub("[\x00-\x1f\x7f-\x9f]", " ", note)
    r.update({"suite": suite, "backend": backend, "ran_on": ran_on or backend, "status": status,
              "note": note, "check": check, "modes": modes or {}})
    return r


_start = time.perf_counter()


def progress(text):
    """A progress line on a terminal; elsewhere (logs, tee) one line per call, with the
    elapsed time."""
    if sys.stderr.isatty():
        print(f"\r\033[K{text}", end="", file=sys.stderr, flush=True)
    elif text:
        print(f"{text} (elapsed {time.perf_counter() - _start:.1f} s)", file=sys.stderr,
              flush=True)


def cpu_model():
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or "unknown"


def write(args, tool, version, device, modes, results):
    doc = {
        "schema": "hd-bench/1",
        "tool": tool,
        "version": version,
        "date": datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ"),
        "machine": {"hostname": socket.gethostname(),
                    "os": f"{platform.system()} {platform.release()} {platform.machine()}",
                    "cpu": cpu_model(), "cores": os.cpu_count()},
        "device": device,
        "roofline": None,
        "settings": {"modes": modes, "warmup": args.warmup, "min_runs": args.repeats,
                     "max_runs": args.max_runs, "seed": args.seed, "budget_ms": args.budget_ms},
        "results": results,
    }
    with open(args.json, "w") as f:
        json.dump(doc, f, indent=1)
        f.write("\n")


def print_table(results):
    print(f"{'case':24} {'backend':12} {'mode':6} {'median':>11} {'min':>11} {'max':>11}"
          f" {'GFLOP/s':>9} {'GB/s':>8}  note")
    for r in results:
        if r["status"] != "ok":
            print(f"{r['case']:24} {r['backend']:12} {'-':6} {'-':>11} {'-':>11} {'-':>11}"
                  f" {'-':>9} {'-':>8}  {r['status']}: {r['note']}")
            continue
        for mode, s in r["modes"].items():
            def t(x):
                return (f"{x * 1e6:8.1f} µs" if x < 1e-3 else
                        f"{x * 1e3:8.2f} ms" if x < 1 else f"{x:8.3f} s ")
            gf = f"{s['gflops']:9.1f}" if s["gflops"] is not None else f"{'-':>9}"
            print(f"{r['case']:24} {r['backend']:12} {mode:6} {t(s['median_s']):>11}"
                  f" {t(s['min_s']):>11} {t(s['max_s']):>11} {gf} {s['gbs']:8.2f}")
    print("\n  modes: device = device events around one op; sync = host wall time of one op and"
          " its wait;\n  chain = N ops queued, one wait, time per op. median, min, max: per call"
          " over the timed runs;\n  GFLOP/s, GB/s: the op's FLOPs and fewest bytes over the"
          " median. skipped: not run, the note says why.")
