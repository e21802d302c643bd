#!/usr/bin/env python3
"""Checks dispatch-bench output for the test suite.

    check_results.py schema FILE [--min-ok N]
        FILE must follow schema hd-bench/1 (bench/SCHEMA.md) and hold at least N results with
        status ok whose timings are positive and ordered (min <= median <= max).
    check_results.py run OUT.json --min-ok N -- dispatch-bench ARGS...
        runs the command with --json OUT.json appended, then checks OUT.json as above.
    check_results.py expect EXPECTED -- COMMAND...
        runs COMMAND; every non-empty line of the file EXPECTED must appear in its standard
        output, in order (runs of spaces compare equal).
"""
import json
import math
import subprocess
import sys

STATUSES = {"ok", "n/a", "skipped", "wrong", "error"}
MODES = {"device", "sync", "chain", "host"}


def fail(msg):
    sys.exit(f"check_results: {msg}")


def need(obj, key, types, where):
    if key not in obj:
        fail(f"{where}: missing '{key}'")
    if not isinstance(obj[key], types):
        fail(f"{where}: '{key}' has type {type(obj[key]).__name__}")
    return obj[key]


def check_schema(path, min_ok):
    with open(path) as f:
        doc = json.load(f)
    if doc.get("schema") != "hd-bench/1":
        fail(f"{path}: schema is {doc.get('schema')!r}, not 'hd-bench/1'")
    for key in ("tool", "version", "date"):
        need(doc, key, str, path)
    machine = need(doc, "machine", dict, path)
    for key in ("hostname", "os", "cpu"):
        need(machine, key, str, "machine")
    need(machine, "cores", int, "machine")
    device = need(doc, "device", dict, path)
    for key in ("name", "driver", "platform", "kind"):
        need(device, key, str, "device")
    if device["kind"] not in ("gpu", "cpu", "none"):
        fail(f"device kind {device['kind']!r}")
    roof = doc.get("roofline")
    if roof is not None:
        for key in ("bandwidth_gbs", "peak_gflops"):
            v = need(roof, key, (int, float), "roofline")
            if not v > 0:
                fail(f"roofline {key} is {v}")
    settings = need(doc, "settings", dict, path)
    modes = need(settings, "modes", list, "settings")
    if not modes or not set(modes) <= MODES:
        fail(f"settings.modes {modes}")
    ok = 0
    for i, r in enumerate(need(doc, "results", list, path)):
        where = f"results[{i}]"
        for key in ("suite", "case", "op", "backend", "status", "note"):
            need(r, key, str, where)
        dims = need(r, "dims", list, where)
        if len(dims) != 4 or not all(isinstance(d, int) and d >= 0 for d in dims):
            fail(f"{where}: dims {dims}")
        need(r, "flops", (int, float), where)
        need(r, "bytes", (int, float), where)
        if r["status"] not in STATUSES:
            fail(f"{where}: status {r['status']!r}")
        stats = need(r, "modes", dict, where)
        if r["status"] != "ok":
            if stats:
                fail(f"{where}: a result with status {r['status']} carries timings")
            if not r["note"]:
                fail(f"{where}: status {r['status']} without a note saying why")
            continue
        if not stats:
            fail(f"{where}: status ok without timings")
        for mode, s in stats.items():
            if mode not in MODES:
                fail(f"{where}: mode {mode!r}")
            t = [need(s, k, (int, float), f"{where}.{mode}") for k in ("min_s", "median_s", "max_s")]
            if not (0 < t[0] <= t[1] <= t[2]) or not all(math.isfinite(x) for x in t):
                fail(f"{where}.{mode}: times {t} not 0 < min <= median <= max")
            if need(s, "runs", int, f"{where}.{mode}") < 1:
                fail(f"{where}.{mode}: no runs")
            need(s, "host_timed", bool, f"{where}.{mode}")
            need(s, "chain_length", int, f"{where}.{mode}")
        if r["backend"] != "auto" and r.get("ran_on") not in (r["backend"], None):
            fail(f"{where}: forced {r['backend']} but ran on {r.get('ran_on')}")
        ok += 1
    if ok < min_ok:
        fail(f"{path}: {ok} results with status ok, expected at least {min_ok}")
    print(f"{path}: schema hd-bench/1 valid, {ok} ok results")


def main(argv):
    if len(argv) >= 2 and argv[0] == "schema":
        min_ok = int(argv[argv.index("--min-ok") + 1]) if "--min-ok" in argv else 0
        check_schema(argv[1], min_ok)
    elif len(argv) >= 4 and argv[0] == "run" and "--" in argv:
        out = argv[1]
        min_ok = int(argv[argv.index("--min-ok") + 1]) if "--min-ok" in argv[:argv.index("--")] else 1
        cmd = argv[argv.index("--") + 1:] + ["--json", out, "--quiet"]
        proc = subprocess.run(cmd, capture_output=True, text=True)
        sys.stdout.write(proc.stdout)
        sys.stderr.write(proc.stderr)
        if proc.returncode != 0:
            fail(f"{cmd[0]} exited with {proc.returncode}")
        check_schema(out, min_ok)
    elif len(argv) >= 4 and argv[0] == "expect" and argv[2] == "--":
        proc = subprocess.run(argv[3:], capture_output=True, text=True)
        sys.stdout.write(proc.stdout)
        if proc.returncode != 0:
            fail(f"exit status {proc.returncode}: {proc.stderr}")
        got = [" ".join(line.split()) for line in proc.stdout.splitlines()]
        pos = 0
        with open(argv[1]) as f:
            expected = f.read().splitlines()
        for want in expected:
            want = " ".join(want.split())
            if not want:
                continue
            while pos < len(got) and got[pos] != want:
                pos += 1
            if pos == len(got):
                fail(f"expected line not found (in order): {want!r}")
            pos += 1
    else:
        fail(__doc__)


if __name__ == "__main__":
    main(sys.argv[1:])
