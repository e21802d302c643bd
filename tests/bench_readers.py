#!/usr/bin/env python3
"""The two readers of result files agree: dispatch-bench (--compare, --ours; jansson) and
bench/check_results.py take the same files and refuse the same files with the same message,
and the tool refuses each hostile file with exit status 2 within a second.

    bench_readers.py DISPATCH_BENCH CHECK_RESULTS SOURCE_ROOT WORKDIR

The hostile files are made in WORKDIR: a FIFO, a directory, a device, files over the size
limit, repeated member names in both orders, wrong types, numbers out of range or beyond what
JSON parsers hold, control characters, nesting deep enough for each parser's own limit, and the
mutations of tests/data/bench/ours.json that test_bench_results.c names field by field. The
result files kept under bench/results are fed to both as well.
"""
import copy
import glob
import json
import os
import shutil
import subprocess
import sys
import time

bench, check, root, work = sys.argv[1:5]
data = os.path.join(root, "tests", "data", "bench")
peer = os.path.join(data, "peer.json")
with open(os.path.join(data, "ours.json"), encoding="utf-8") as f:
    BASE = json.load(f)
failures = []


def mutated(pointer, value=None, remove=False):
    """ours.json with the member at pointer ("results/0/dims") set to value, or removed."""
    doc = copy.deepcopy(BASE)
    *parents, last = pointer.split("/")
    node = doc
    for key in parents:
        node = node[int(key)] if isinstance(node, list) else node[key]
    if isinstance(node, list):
        node[int(last)] = value
    elif remove:
        del node[last]
    else:
        node[last] = value
    return json.dumps(doc, indent=1, ensure_ascii=False).encode("utf-8")


def raw(pointer, text):
    """ours.json with the member at pointer written as text (str or bytes), which may be no
    JSON at all."""
    text = text if isinstance(text, bytes) else text.encode("utf-8")
    return mutated(pointer, "@RAW@").replace(b'"@RAW@"', text)


def text_of_base():
    return json.dumps(BASE, indent=1).encode("utf-8")


# (file name, contents as bytes, the message after "FILE: ", or a part of it for what is not a
# schema problem; None: a result file, taken by both)
MUTATIONS = [
    ("median-string", mutated("results/1/modes/sync/median_s", "fast"),
     "results[1].modes.sync.median_s: expected a number, got a string"),
    ("median-zero", mutated("results/1/modes/sync/median_s", 0),
     "results[1].modes.sync.median_s: out of range (1e-12 to 1e6)"),
    ("median-underflow", raw("results/1/modes/sync/median_s", "1e-999999999999"),
     "results[1].modes.sync.median_s: out of range (1e-12 to 1e6)"),
    ("median-negative", mutated("results/1/modes/sync/min_s", -1e-6),
     "results[1].modes.sync.min_s: out of range (1e-12 to 1e6)"),
    ("median-huge", mutated("results/1/modes/sync/max_s", 1e300),
     "results[1].modes.sync.max_s: out of range (1e-12 to 1e6)"),
    ("times-unordered", mutated("results/1/modes/sync/max_s", 4.5e-6),
     "results[1].modes.sync: not min_s <= median_s <= max_s"),
    ("median-missing", mutated("results/1/modes/sync/median_s", remove=True),
     "results[1].modes.sync.median_s: missing"),
    ("runs-zero", mutated("results/1/modes/sync/runs", 0),
     "results[1].modes.sync.runs: out of range (1 to 4294967295)"),
    ("runs-real", mutated("results/1/modes/sync/runs", 5.0),
     "results[1].modes.sync.runs: expected an integer, got a real number"),
    ("host-timed-int", mutated("results/1/modes/sync/host_timed", 1),
     "results[1].modes.sync.host_timed: expected a boolean, got an integer"),
    ("mode-unknown-field", mutated("results/1/modes/sync/speed", 1),
     "results[1].modes.sync.speed: unknown field"),
    ("mode-unknown", mutated("results/1/modes/warp", {}), "results[1].modes.warp: unknown mode"),
    ("dims-negative", mutated("results/0/dims/0", -1),
     "results[0].dims[0]: out of range (0 to 16777216)"),
    ("dims-fraction", mutated("results/0/dims/1", 64.5),
     "results[0].dims[1]: expected an integer, got a real number"),
    ("dims-1e300", raw("results/0/dims/0", "1e300"),
     "results[0].dims[0]: expected an integer, got a real number"),
    ("dims-past-2-24", mutated("results/0/dims/3", 16777217),
     "results[0].dims[3]: out of range (0 to 16777216)"),
    ("dims-at-2-24", mutated("results/0/dims/3", 16777216), None),
    ("dims-three", mutated("results/0/dims", [1, 2, 3]),
     "results[0].dims: expected 4 values, got 3"),
    ("dims-bool", mutated("results/0/dims/0", True),
     "results[0].dims[0]: expected an integer, got a boolean"),
    ("case-empty", mutated("results/0/case", ""), "results[0].case: must not be empty"),
    ("case-escape", mutated("results/0/case", "gemm\x1b[2J"),
     "results[0].case: holds a control character"),
    ("case-c1", mutated("results/0/case", "gemm\x9b"),
     "results[0].case: holds a control character"),
    ("case-null", mutated("results/0/case", None), "results[0].case: expected a string, got null"),
    ("status-unknown", mutated("results/0/status", "fine"),
     "results[0].status: expected one of ok, n/a, skipped, wrong, error"),
    ("ran-on-other", mutated("results/0/ran_on", "fused"),
     "results[0].ran_on: not the forced backend"),
    ("ok-untimed", mutated("results/0/modes", {}), "results[0].modes: status ok without timings"),
    ("na-timed", mutated("results/4/modes", {"sync": {}}),
     "results[4].modes.sync.median_s: missing"),
    ("na-without-note", mutated("results/4/note", ""),
     "results[4].note: status n/a without a note saying why"),
    ("flops-string", mutated("results/0/flops", "many"),
     "results[0].flops: expected a number, got a string"),
    ("check-negative", mutated("results/0/check", -0.5),
     "results[0].check: out of range (at least 0)"),
    ("layout-8", mutated("results/0/lora_layout", 8),
     "results[0].lora_layout: out of range (0 to 7)"),
    ("params-step", mutated("results/0/params", {
        "alpha": 1, "eps": 1e-05, "theta": 500000, "position_offset": 0, "inverse": False,
        "causal": True, "ignore_index": -100, "ignored": 32}), None),
    ("params-causal-int", mutated("results/0/params", {"causal": 1}),
     "results[0].params.causal: expected a boolean, got an integer"),
    ("params-unknown", mutated("results/0/params", {"heads": 32}),
     "results[0].params.heads: unknown field"),
    ("params-ignored-negative", mutated("results/0/params", {"ignored": -1}),
     "results[0].params.ignored: out of range (0 to 16777216)"),
    ("params-ignore-index-wide", mutated("results/0/params", {"ignore_index": 1 << 31}),
     "results[0].params.ignore_index: out of range (-2147483648 to 2147483647)"),
    ("params-theta-zero", mutated("results/0/params", {"theta": 0}),
     "results[0].params.theta: out of range (greater than 0)"),
    ("params-adamw", mutated("results/0/params", {
        "rank": 16, "lr": 0.001, "beta1": 0.9, "beta2": 0.999, "eps": 1e-08,
        "weight_decay": 0.01, "max_grad_norm": 1}), None),
    ("params-rank-real", mutated("results/0/params", {"rank": 16.0}),
     "results[0].params.rank: expected an integer, got a real number"),
    ("params-lr-negative", mutated("results/0/params", {"lr": -0.001}),
     "results[0].params.lr: out of range (at least 0)"),
    ("key-escape", mutated("results/0/\x1b[2J\u00e9", 1), "results[0].?[2J??: unknown field"),
    ("record-array", mutated("results/0", []), "results[0]: expected an object, got an array"),
    ("results-object", mutated("results", {}), "results: expected an array, got an object"),
    ("results-missing", mutated("results", remove=True), "results: missing"),
    ("results-empty", mutated("results", []), None),
    ("schema-cases", mutated("schema", "hd-bench-cases/1"), "schema: expected hd-bench/1"),
    ("schema-missing", mutated("schema", remove=True), "schema: missing"),
    ("date-word", mutated("date", "yesterday"),
     "date: not a date of the form YYYY-MM-DDTHH:MM:SSZ"),
    ("cores-zero", mutated("machine/cores", 0), "machine.cores: out of range (1 to 16777216)"),
    ("cores-null", mutated("machine/cores", None), None),
    ("kind-tpu", mutated("device/kind", "tpu"), "device.kind: expected one of gpu, cpu, none"),
    ("peak-zero", mutated("roofline/peak_gflops", 0),
     "roofline.peak_gflops: out of range (greater than 0)"),
    ("roofline-array", mutated("roofline", []),
     "roofline: expected an object or null, got an array"),
    ("modes-empty", mutated("settings/modes", []), "settings.modes: must not be empty"),
    ("modes-twice", mutated("settings/modes", ["sync", "sync"]), "settings.modes[1]: repeated"),
    ("seed-negative", mutated("settings/seed", -1),
     "settings.seed: out of range (0 to 9223372036854775807)"),
    ("seed-max", mutated("settings/seed", (1 << 63) - 1), None),
    ("budget-string", mutated("settings/budget_ms", "300"),
     "settings.budget_ms: expected a number, got a string"),
    ("extra-field", mutated("extra", 0), "extra: unknown field"),
    ("note-nested-garbage", mutated("results/0/note", json.loads("[" * 20 + "1" + "]" * 20)),
     "nested more than 16 deep"),
    ("note-nested-shallow", mutated("results/0/note", {"a": [[{"b": None}]]}),
     "results[0].note: expected a string, got an object"),
    ("document-array", b"[]", "(document): expected an object, got an array"),
    ("document-number", b"1", "(document): expected an object, got an integer"),
]

# What no JSON parser of the two takes, or takes alike only by the rules of bench/SCHEMA.md.
NOT_JSON = [
    ("duplicate-evil-last", raw("schema", '"hd-bench/1", "schema": "evil"'),
     "not valid JSON: duplicate object key"),
    ("duplicate-evil-first", b'{"schema": "evil", ' + text_of_base()[1:],
     "not valid JSON: duplicate object key"),
    ("duplicate-nested", raw("results/1/modes/sync/runs", '5, "runs": 6'),
     "not valid JSON: duplicate object key"),
    ("real-overflow", raw("results/1/modes/sync/median_s", "1e400"),
     "not valid JSON: real number overflow"),
    ("integer-overflow", raw("settings/seed", "9223372036854775808"),
     "not valid JSON: too big integer"),
    ("integer-overflow-long", raw("settings/seed", "-" + "9" * 5000),
     "not valid JSON: too big negative integer"),
    ("nan", raw("results/0/check", "NaN"), "not valid JSON"),
    ("infinity", raw("results/0/check", "-Infinity"), "not valid JSON"),
    ("hex", raw("results/0/check", "0x10"), "not valid JSON"),
    ("trailing-comma", raw("settings/seed", "1,"), "not valid JSON"),
    ("trailing-text", text_of_base() + b" {}", "not valid JSON"),
    ("bom", b"\xef\xbb\xbf" + text_of_base(), "not valid JSON"),
    ("utf8-invalid", raw("machine/cpu", b'"test \xff cpu"'), "not valid JSON"),
    ("utf16", text_of_base().decode("utf-8").encode("utf-16"), "not valid JSON"),
    ("escaped-nul", raw("results/0/note", '"a\\u0000b"'),
     "not valid JSON: \\u0000 is not allowed"),
    ("escaped-nul-key", raw("settings/seed", '1, "se\\u0000ed": 1'),
     "not valid JSON"),
    ("lone-surrogate", raw("results/0/note", '"\\ud800"'),
     "not valid JSON: invalid Unicode"),
    ("raw-control", raw("results/0/note", '"a\x01b"'), "not valid JSON"),
    ("raw-nul", raw("results/0/note", "\0"), "not valid JSON"),
    ("empty", b"", "not valid JSON"),
    ("blanks", b" \n\t " * 1000, "not valid JSON"),
    ("deep-17", b"[" * 17 + b"]" * 17, "nested more than 16 deep"),
    ("deep-1500", b"[" * 1500 + b"]" * 1500, "nested more than 16 deep"),
    ("deep-100000", b"[" * 100000 + b"]" * 100000, "nested more than 16 deep"),
    ("deep-objects", b'{"a":' * 50000 + b"1" + b"}" * 50000, "nested more than 16 deep"),
]


def make_files():
    shutil.rmtree(work, ignore_errors=True)
    os.makedirs(work)
    cases = []
    for name, content, want in MUTATIONS + NOT_JSON:
        path = os.path.join(work, name + ".json")
        with open(path, "wb") as f:
            f.write(content)
        cases.append((path, want))
    fifo = os.path.join(work, "fifo.json")
    os.mkfifo(fifo)
    os.symlink(fifo, os.path.join(work, "link-to-fifo.json"))
    cases += [(fifo, "is not a regular file"),
              (os.path.join(work, "link-to-fifo.json"), "is not a regular file"),
              (work, "is not a regular file"),
              ("/dev/zero", "/dev/zero is not a regular file"),
              ("/dev/null", "/dev/null is not a regular file"),
              (os.path.join(work, "absent.json"), "cannot open"),
              ]
    huge = os.path.join(work, "huge.json")
    with open(huge, "wb") as f:  # sparse: no disk written
        f.truncate((16 << 20) + 1)
    cases.append((huge, "is larger than 16 MiB: not a result file"))
    at_limit = os.path.join(work, "at-limit.json")
    with open(at_limit, "wb") as f:
        f.write(b"[" * (16 << 20))
    cases.append((at_limit, "nested more than 16 deep"))
    big = mutated("results/4/note", "x" * (15 << 20))  # a long note is a result file
    big_path = os.path.join(work, "big-note.json")
    with open(big_path, "wb") as f:
        f.write(big)
    cases.append((big_path, None))
    # the result files kept in the repository: taken (or refused) alike
    for path in sorted(glob.glob(os.path.join(root, "bench", "results", "**", "*.json"),
                                 recursive=True)):
        cases.append((path, "?"))
    return cases


def run(cmd):
    """(exit status, last line of standard error, seconds): the best of three tries where the
    first took a second or more (the machine is shared; a hang stays a hang)."""
    best = None
    for _ in range(3):
        start = time.monotonic()
        try:
            p = subprocess.run(cmd, capture_output=True, text=True, errors="replace", timeout=10)
            rc, err = p.returncode, p.stderr.strip().splitlines()
        except subprocess.TimeoutExpired:
            rc, err = "timeout", ["(killed after 10 s)"]
        took = time.monotonic() - start
        result = (rc, err[-1] if err else "", took)
        best = result if best is None or took < best[2] else best
        if took < 1.0:
            break
    return best


def message(line, prefix):
    return line[len(prefix):] if line.startswith(prefix) else None


def check_file(i, path, want):
    # --ours for even files, --compare for odd ones: one reader behind both options
    opt, cmd = ("--ours", [bench, "--compare", peer, "--ours", path]) if i % 2 == 0 else \
        ("--compare", [bench, "--compare", path, "--ours", os.path.join(data, "ours.json")])
    c_rc, c_line, c_took = run(cmd)
    p_rc, p_line, p_took = run([sys.executable, check, "schema", path])
    c_msg = message(c_line, f"dispatch-bench: {opt}: ")
    p_msg = message(p_line, "check_results: ")
    name = os.path.relpath(path, work) if path.startswith(work) else path

    def bad(what):
        failures.append(f"{name}: {what}\n    dispatch-bench: exit {c_rc}, {c_line!r}"
                        f"\n    check_results:  exit {p_rc}, {p_line!r}")

    if want == "?":  # a kept result file: whatever the verdict, the same from both
        want = None if c_rc == 0 else ""
    if want is None:
        if c_rc != 0 or p_rc != 0:
            bad("a result file, refused")
        return
    if c_rc != 2 or p_rc != 2 or c_msg is None or p_msg is None:
        bad("expected exit status 2 from both, with the reader's message")
        return
    if want not in c_msg or want not in p_msg:
        bad(f"expected {want!r} in both messages")
    elif "not valid JSON" not in c_msg and c_msg != p_msg:
        bad("the readers' messages differ")
    elif c_took >= 1.0 or p_took >= 1.0:
        bad(f"took {c_took:.2f} s (dispatch-bench), {p_took:.2f} s (check_results): over 1 s")


def main():
    cases = make_files()
    for i, (path, want) in enumerate(cases):
        check_file(i, path, want)
    for f in failures:
        print(f, file=sys.stderr)
    print(f"bench_readers: {len(cases) - len(failures)} of {len(cases)} files read alike")
    shutil.rmtree(work, ignore_errors=True)
    sys.exit(1 if failures else 0)


main()
