#!/usr/bin/env python3
"""Both tools on the training step's ops: the ci suite's tiny step cases tuned and timed on this
machine's backends (PoCL in CI), their records and results checked.

    tools_step.py DISPATCH_AUTOTUNE DISPATCH_BENCH CHECK_RESULTS WORKDIR

dispatch-autotune --suites ci --ops <the step's ops> --quick, and again with the fused kernels
alone (their default parameters and every variant they list, 40 at least, each checked against
the float64 reference before it is timed), exits 0 and rejects no candidate; a case has a
record exactly where some backend of the machine computes its op (the others say "no backend
here computes it"). dispatch-bench
times the same cases (the ci suite's step cases as a shapes file): the file follows the schema;
no result is wrong or an error; a case some backend computes has auto and every backend that
computes it ok, within the reference's tolerance; the others have one n/a record saying so; the
scalars (params) are those autotune/case_params.h gives each op. The ci suite's AdamW case
(no op of the table) is timed beside them: ok on the CPU, on every device backend with an
AdamW slot and on auto, within the reference's tolerance, with its rank and hyperparameters in
params; n/a on the backends without one; and dispatch-autotune, given it alone, tunes nothing
and says why.
"""
import json
import os
import re
import shutil
import subprocess
import sys

tune, bench, check, work = sys.argv[1:5]
STEP_OPS = ["swiglu", "swiglu_backward", "gelu", "gelu_backward", "add", "add_rms_norm",
            "add_rms_norm_backward", "rope", "attention", "attention_backward", "cross_entropy",
            "linear_cross_entropy", "embedding"]
# what dispatch-bench's JSON carries for each op (bench/SCHEMA.md, params)
PARAMS = {"add": {"alpha": 1},
          "add_rms_norm": {"eps": 9.99999975e-06},
          "add_rms_norm_backward": {"eps": 9.99999975e-06},
          "rope": {"theta": 500000, "position_offset": 0, "inverse": False},
          "attention": {"causal": True}, "attention_backward": {"causal": True},
          "cross_entropy": {"ignore_index": -100}, "linear_cross_entropy": {"ignore_index": -100}}
# an AdamW case's params (autotune/case_params.h's hyperparameters, as floats print them)
ADAMW_PARAMS = {"lr": 0.00100000005, "beta1": 0.899999976, "beta2": 0.999000013,
                "eps": 9.99999994e-09, "weight_decay": 0.00999999978, "max_grad_norm": 1}
ADAMW_SLOTS = ("cpu", "fused")  # the backends with an AdamW slot
failures = []


def fail(msg):
    failures.append(msg)
    print(f"tools_step: {msg}", file=sys.stderr)


def run(cmd, what):
    p = subprocess.run(cmd, capture_output=True, text=True)
    if p.returncode != 0:
        sys.exit(f"tools_step: {what} exited with {p.returncode}:\n{p.stdout}\n{p.stderr}")
    return p.stdout + p.stderr


def ci_step_cases():
    """The ci suite's step cases: (case name, op, dims as the cache spells them)."""
    doc = json.loads(run([bench, "--list-cases", "--json", "-"], "--list-cases"))
    ci = next(s for s in doc["suites"] if s["name"] == "ci")
    cases = []
    for c in ci["cases"]:
        if c["op"] in STEP_OPS:
            dims = list(c["dims"])
            while dims and dims[-1] == 0:
                dims.pop()
            cases.append((c["case"], c["op"], dims))
    return cases


def tuned(cache, op, dims):
    """The record of (op, dims) in a tuning cache, as its words, or None."""
    want = [op] + [str(d) for d in dims]
    with open(cache) as f:
        for line in f:
            words = line.split()
            if words[:len(want)] == want and len(words) > len(want) and \
                    not words[len(want)].isdigit():
                return words[len(want):]
    return None


def check_tuning(cases, out, cache, alone):
    """Each case: a record, or the line saying that no backend here computes it. Returns the
    names of the cases some backend computes."""
    computed = set()
    for name, op, dims in cases:
        record = tuned(cache, op, dims)
        untaken = re.search(re.escape(name) + r": no record: no backend here computes it", out)
        if record is None and not untaken:
            fail(f"{alone}{name}: neither a record nor 'no backend here computes it'")
        if record is not None and untaken:
            fail(f"{alone}{name}: a record, and 'no backend here computes it'")
        if record is not None:
            computed.add(name)
    for line in out.splitlines():
        if "rejected" in line:
            fail(f"{alone}a candidate failed the reference: {line.strip()}")
    return computed


def check_results(path, cases, computed):
    run([sys.executable, check, "schema", path], "check_results.py schema")
    with open(path) as f:
        results = json.load(f)["results"]
    by_case = {}
    for r in results:
        by_case.setdefault(r["case"], []).append(r)
    for name, op, _ in cases:
        rs = by_case.get(name, [])
        for r in rs:
            if r["status"] in ("wrong", "error"):
                fail(f"{name} on {r['backend']}: {r['status']}: {r['note']}")
            params = r.get("params")
            if (params is None) != (op not in PARAMS) or \
                    any(params.get(k) != v for k, v in PARAMS.get(op, {}).items()):
                fail(f"{name}: params {params}, expected {PARAMS.get(op)}")
            if r["status"] == "ok" and not r["check"] <= 1.0:
                fail(f"{name} on {r['backend']}: ok with check {r['check']}")
        ok = [r["backend"] for r in rs if r["status"] == "ok"]
        if name in computed and ("auto" not in ok or len(ok) < 2):
            fail(f"{name}: computed here, but ok only on {ok}")
        if name not in computed and (len(rs) != 1 or rs[0]["status"] != "n/a" or
                                     "no backend here computes" not in rs[0]["note"]):
            fail(f"{name}: no record, and results {[(r['backend'], r['status']) for r in rs]}")


def ci_adamw_case():
    """The ci suite's AdamW case: (its name, its words in a shapes file, its rank)."""
    doc = json.loads(run([bench, "--list-cases", "--json", "-"], "--list-cases"))
    ci = next(s for s in doc["suites"] if s["name"] == "ci")
    c = next(c for c in ci["cases"] if c["op"] == "adamw")
    rank = c["params"]["rank"]
    return c["case"], "adamw " + " ".join(map(str, c["dims"] + [rank])), rank


def check_adamw(path, name, rank):
    """The AdamW case's results: ok where a backend has an AdamW slot and on auto, checked; n/a
    elsewhere; its params."""
    with open(path) as f:
        rs = [r for r in json.load(f)["results"] if r["case"] == name]
    if not rs:
        fail(f"{name}: no result")
    for r in rs:
        b, status = r["backend"], r["status"]
        if r.get("params") != dict(ADAMW_PARAMS, rank=rank):
            fail(f"{name}: params {r.get('params')}")
        if b in ADAMW_SLOTS + ("auto",) and status == "n/a" and "not available" in r["note"]:
            continue
        if b in ADAMW_SLOTS + ("auto",) and (status != "ok" or not r["check"] <= 1.0):
            fail(f"{name} on {b}: {status} (check {r['check']}): {r['note']}")
        if b not in ADAMW_SLOTS + ("auto",) and (
                status != "n/a" or not re.search("does not run AdamW|not available", r["note"])):
            fail(f"{name} on {b}: {status}: {r['note']}, expected n/a")
    if not any(r["backend"] == "cpu" and r["status"] == "ok" for r in rs):
        fail(f"{name}: not timed on the CPU")


def check_adamw_not_tuned(words):
    """dispatch-autotune given the AdamW case alone: no case to tune, and why."""
    shapes = os.path.join(work, "adamw.txt")
    with open(shapes, "w") as f:
        f.write(words + "\n")
    p = subprocess.run([tune, "--shapes", shapes, "--dry-run", "--cache",
                        os.path.join(work, "none.txt")], capture_output=True, text=True)
    if p.returncode != 2 or "is not tuned (AdamW runs where its tensors are" not in p.stderr:
        fail(f"dispatch-autotune --shapes of AdamW alone: exit {p.returncode}: {p.stderr}")


def main():
    shutil.rmtree(work, ignore_errors=True)
    os.makedirs(work)
    cases = ci_step_cases()
    if len(cases) != len(STEP_OPS):
        fail(f"the ci suite holds {len(cases)} step cases, expected one per op")
    ops = ",".join(STEP_OPS)
    cache = os.path.join(work, "tune.txt")
    out = run([tune, "--suites", "ci", "--ops", ops, "--quick", "--verbose", "--cache", cache,
               "--case-budget-s", "60"], "dispatch-autotune")
    computed = check_tuning(cases, out, cache, "")
    if not {"swiglu", "add", "rope", "embedding"} <= {op for name, op, _ in cases
                                                        if name in computed}:
        fail(f"the CPU's step ops left untuned: {sorted(computed)}")
    # the fused kernels alone on the ops they compute here: their defaults and variants checked
    dry = run([tune, "--dry-run", "--suites", "ci", "--ops", ops, "--cache",
               os.path.join(work, "none.txt")], "dispatch-autotune --dry-run")
    fused = [op for name, op, _ in cases
             if re.search(re.escape(name) + r":\n(    .*\n)*? +fused ", dry)]
    if fused:
        fused_cache = os.path.join(work, "fused.txt")
        shutil.copy(cache, fused_cache)
        out = run([tune, "--suites", "ci", "--ops", ",".join(fused), "--backends", "fused",
                   "--force", "--verbose", "--cache", fused_cache, "--case-budget-s", "60"],
                  "dispatch-autotune --backends fused")
        taken = [c for c in cases if c[1] in fused]
        timed = len(re.findall(r"^ *fused +[0-9.]+ (?:µs|ms|s) +[A-Z]+=", out, re.M))
        if timed < 40:
            fail(f"fused alone: {timed} variants timed, fewer than the 40 listed at least")
        for name in check_tuning(taken, out, fused_cache, "fused alone: "):
            record = tuned(fused_cache, *next((op, dims) for n, op, dims in cases if n == name))
            if record[0] != "fused":
                fail(f"fused alone: {name}: recorded {record[0]}")
        if len(fused) < 4:
            fail(f"fused alone: only {fused} listed fused candidates")
    adamw_name, adamw_words, adamw_rank = ci_adamw_case()
    shapes = os.path.join(work, "step.txt")
    with open(shapes, "w") as f:
        f.writelines(f"{op} {' '.join(map(str, dims))}\n" for _, op, dims in cases)
        f.write(adamw_words + "\n")
    results = os.path.join(work, "bench.json")
    run([bench, "--shapes", shapes, "--repeats", "2", "--budget-ms", "1", "--warmup", "1",
         "--max-runs", "3", "--quiet", "--json", results], "dispatch-bench")
    check_results(results, cases, computed)
    check_adamw(results, adamw_name, adamw_rank)
    check_adamw_not_tuned(adamw_words)
    print(f"tools_step: {len(cases)} step cases, {len(computed)} computed here: "
          f"{len(failures)} failure(s)")
    sys.exit(1 if failures else 0)


main()
