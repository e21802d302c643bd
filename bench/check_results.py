#!/usr/bin/env python3
"""Checks dispatch-bench output for the test suite.

    check_results.py schema FILE [--min-ok N]
        FILE must follow schema hd-bench/1 (bench/SCHEMA.md), read as dispatch-bench reads
        --compare and --ours files: else exit status 2 and the message dispatch-bench gives
        for it. Then it must hold at least N results with status ok (else exit status 1).
    check_results.py run OUT.json --min-ok N -- dispatch-bench ARGS...
        runs the command with --json OUT.json appended, then checks OUT.json as above.
    check_results.py expect EXPECTED -- COMMAND...
        runs COMMAND; every non-empty line of the file EXPECTED must appear in its standard
        output, in order (runs of spaces compare equal).
"""
import json
import math
import os
import re
import stat
import subprocess
import sys

# Schema hd-bench/1 (bench/SCHEMA.md), as bench/schema.c and bench/results_file.c read it: the
# same tables in the same order, so that both readers name the same first failure of a file.
MAX_BYTES = 16 << 20
MAX_DEPTH = 16
MODES = ("device", "sync", "chain", "host")
STATUSES = ("ok", "n/a", "skipped", "wrong", "error")

# kinds: "string", "name" (non-empty string), "date", "one_of", "int", "number", "bool",
# "object", "dims", "mode_list", "modes", "results"
NON_NEGATIVE = (0.0, math.inf, False, "at least 0")
POSITIVE = (0.0, math.inf, True, "greater than 0")
ANY_NUMBER = (-math.inf, math.inf, False, "any")
SECONDS = (1e-12, 1e6, False, "1e-12 to 1e6")
COUNT32 = (0, 4294967295, False, "0 to 4294967295")
COUNT32_FROM_1 = (1, 4294967295, False, "1 to 4294967295")
CORES = (1, 16777216, False, "1 to 16777216")
DIM = (0, 16777216, False, "0 to 16777216")
SEED = (0, 9223372036854775807, False, "0 to 9223372036854775807")
LAYOUT = (0, 7, False, "0 to 7")
INT32 = (-2147483648, 2147483647, False, "-2147483648 to 2147483647")


def field(name, kind, optional=False, nullable=False, rng=None, values=None, members=None):
    return {"name": name, "kind": kind, "optional": optional, "nullable": nullable,
            "range": rng, "values": values, "members": members}


MACHINE = [field("hostname", "string"), field("os", "string"), field("cpu", "string"),
           field("cores", "int", nullable=True, rng=CORES)]
DEVICE = [field("name", "string"), field("driver", "string"), field("platform", "string"),
          field("kind", "one_of", values=("gpu", "cpu", "none"))]
ROOFLINE = [field("bandwidth_gbs", "number", nullable=True, rng=POSITIVE),
            field("bandwidth_source", "string"),
            field("peak_gflops", "number", nullable=True, rng=POSITIVE),
            field("peak_source", "string"),
            field("host_bandwidth_gbs", "number", nullable=True, rng=NON_NEGATIVE),
            field("device_bandwidth_gbs", "number", nullable=True, rng=NON_NEGATIVE)]
SETTINGS = [field("modes", "mode_list"), field("warmup", "int", rng=COUNT32),
            field("min_runs", "int", rng=COUNT32), field("max_runs", "int", rng=COUNT32),
            field("rounds", "int", optional=True, rng=COUNT32_FROM_1),
            field("seed", "int", nullable=True, rng=SEED),
            field("budget_ms", "number", rng=NON_NEGATIVE)]
MODE = [field("median_s", "number", rng=SECONDS), field("min_s", "number", rng=SECONDS),
        field("max_s", "number", rng=SECONDS), field("runs", "int", rng=COUNT32_FROM_1),
        field("chain_length", "int", rng=COUNT32_FROM_1), field("host_timed", "bool"),
        field("gflops", "number", nullable=True, rng=NON_NEGATIVE),
        field("gbs", "number", nullable=True, rng=NON_NEGATIVE),
        field("roofline_pct", "number", nullable=True, rng=NON_NEGATIVE),
        field("ran_on", "name", optional=True),
        field("regret_pct", "number", optional=True, nullable=True, rng=ANY_NUMBER),
        field("best_backend", "name", optional=True)]
# A step op's or AdamW's scalars (autotune/case_params.h), each where the case has it.
PARAMS = [field("alpha", "number", optional=True, rng=ANY_NUMBER),
          field("eps", "number", optional=True, rng=NON_NEGATIVE),
          field("theta", "number", optional=True, rng=POSITIVE),
          field("position_offset", "int", optional=True, rng=DIM),
          field("inverse", "bool", optional=True), field("causal", "bool", optional=True),
          field("ignore_index", "int", optional=True, rng=INT32),
          field("ignored", "int", optional=True, rng=DIM),
          field("rank", "int", optional=True, rng=DIM),
          field("lr", "number", optional=True, rng=NON_NEGATIVE),
          field("beta1", "number", optional=True, rng=NON_NEGATIVE),
          field("beta2", "number", optional=True, rng=NON_NEGATIVE),
          field("weight_decay", "number", optional=True, rng=NON_NEGATIVE),
          field("max_grad_norm", "number", optional=True, rng=NON_NEGATIVE)]
RESULT = [field("suite", "name"), field("case", "name"), field("op", "name"),
          field("dims", "dims"), field("trans_a", "bool"), field("trans_b", "bool"),
          field("lora_layout", "int", optional=True, rng=LAYOUT),
          field("params", "object", optional=True, members=PARAMS),
          field("flops", "number", rng=NON_NEGATIVE), field("bytes", "number", rng=NON_NEGATIVE),
          field("backend", "name"), field("ran_on", "string"),
          field("status", "one_of", values=STATUSES), field("note", "string"),
          field("check", "number", nullable=True, rng=NON_NEGATIVE), field("modes", "modes")]
DOCUMENT = [field("schema", "one_of", values=("hd-bench/1",)), field("tool", "name"),
            field("version", "string"), field("date", "date"),
            field("machine", "object", members=MACHINE),
            field("device", "object", members=DEVICE),
            field("roofline", "object", nullable=True, members=ROOFLINE),
            field("settings", "object", members=SETTINGS), field("results", "results")]

CONTROL = re.compile("[\x00-\x1f\x7f-\x9f]")
DATE = re.compile("[0-9]{4}-[0-9]{2}-[0-9]{2}T[0-9]{2}:[0-9]{2}:[0-9]{2}Z")
SURROGATE = re.compile("[\ud800-\udfff]")


class Invalid(Exception):
    """A file that is not a result file of the schema; the message says why."""


class Failure(Exception):
    """The first field that breaks the schema: "PATH: PROBLEM"."""


class NotJson(Exception):
    """What the parser's hooks refuse, as jansson refuses it."""


def shown(name):
    """A member name in a path: its printable ASCII bytes, any other byte as '?', 64 at most."""
    return "".join(chr(b) if 0x20 <= b < 0x7f else "?" for b in name.encode("utf-8")[:64])


def type_name(v):
    if isinstance(v, bool):
        return "a boolean"
    if isinstance(v, int):
        return "an integer"
    if isinstance(v, float):
        return "a real number"
    if isinstance(v, str):
        return "a string"
    if isinstance(v, dict):
        return "an object"
    if isinstance(v, list):
        return "an array"
    return "null"


EXPECTED = {"string": "a string", "name": "a string", "date": "a string", "one_of": "a string",
            "int": "an integer", "number": "a number", "bool": "a boolean",
            "object": "an object", "modes": "an object",
            "dims": "an array", "mode_list": "an array", "results": "an array"}


def has_type(kind, v):
    if kind in ("string", "name", "date", "one_of"):
        return isinstance(v, str)
    if kind == "int":
        return isinstance(v, int) and not isinstance(v, bool)
    if kind == "number":
        return isinstance(v, (int, float)) and not isinstance(v, bool)
    if kind == "bool":
        return isinstance(v, bool)
    if kind in ("object", "modes"):
        return isinstance(v, dict)
    return isinstance(v, list)


def fail(path, problem):
    raise Failure(f"{path or '(document)'}: {problem}")


def member(path, name):
    return f"{path}.{shown(name)}" if path else shown(name)


def check_string(path, f, s):
    if CONTROL.search(s):
        fail(path, "holds a control character")
    if f["kind"] == "name" and not s:
        fail(path, "must not be empty")
    if f["kind"] == "date" and not DATE.fullmatch(s):
        fail(path, "not a date of the form YYYY-MM-DDTHH:MM:SSZ")
    if f["kind"] == "one_of" and s not in f["values"]:
        values = f["values"]
        fail(path, f"expected {'one of ' if len(values) > 1 else ''}{', '.join(values)}")


def check_range(path, rng, x):
    lo, hi, lo_open, text = rng
    if x < lo or (lo_open and x == lo) or x > hi:
        fail(path, f"out of range ({text})")


def check_members(path, members, obj):
    names = [m["name"] for m in members]
    for m in members:
        where = member(path, m["name"])
        if m["name"] not in obj:
            if not m["optional"]:
                fail(where, "missing")
            continue
        check_value(where, m, obj[m["name"]])
    for key in obj:
        if key not in names:
            fail(member(path, key), "unknown field")


def check_dims(path, v):
    if len(v) != 4:
        fail(path, f"expected 4 values, got {len(v)}")
    dim = field("dims", "int", rng=DIM)
    for i, d in enumerate(v):
        check_value(f"{path}[{i}]", dim, d)


def check_mode_list(path, v):
    if not v:
        fail(path, "must not be empty")
    mode = field("modes", "one_of", values=MODES)
    for i, e in enumerate(v):
        check_value(f"{path}[{i}]", mode, e)
        if e in v[:i]:
            fail(f"{path}[{i}]", "repeated")


def check_modes(path, v):
    for key, figures in v.items():
        where = member(path, key)
        if key not in MODES:
            fail(where, "unknown mode")
        check_value(where, field("mode", "object", members=MODE), figures)
        if not figures["min_s"] <= figures["median_s"] <= figures["max_s"]:
            fail(where, "not min_s <= median_s <= max_s")


def check_result_rules(path, r):
    ok = r["status"] == "ok"
    if ok and not r["modes"]:
        fail(member(path, "modes"), "status ok without timings")
    if not ok and r["modes"]:
        fail(member(path, "modes"), f"timings with status {r['status']}")
    if not ok and not r["note"]:
        fail(member(path, "note"), f"status {r['status']} without a note saying why")
    if ok and r["backend"] != "auto" and r["ran_on"] != r["backend"]:
        fail(member(path, "ran_on"), "not the forced backend")


def check_results(path, v):
    result = field("result", "object", members=RESULT)
    for i, r in enumerate(v):
        check_value(f"{path}[{i}]", result, r)
        check_result_rules(f"{path}[{i}]", r)


def check_value(path, f, v):
    if v is None and f["nullable"]:
        return
    kind = f["kind"]
    if not has_type(kind, v):
        fail(path, f"expected {EXPECTED[kind]}{' or null' if f['nullable'] else ''}, "
                   f"got {type_name(v)}")
    if kind in ("string", "name", "date", "one_of"):
        check_string(path, f, v)
    elif kind in ("int", "number"):
        check_range(path, f["range"], v)
    elif kind == "object":
        check_members(path, f["members"], v)
    elif kind == "dims":
        check_dims(path, v)
    elif kind == "mode_list":
        check_mode_list(path, v)
    elif kind == "modes":
        check_modes(path, v)
    elif kind == "results":
        check_results(path, v)


def _pairs(pairs):
    obj = {}
    for key, value in pairs:
        if key in obj:
            raise NotJson(f"duplicate object key {shown(key)!r}")
        obj[key] = value
    return obj


def _int(text):
    # jansson keeps integers in 64 bits and refuses larger ones, whatever their length
    v = int(text) if len(text) <= 20 else None
    if v is None or not -(1 << 63) <= v < (1 << 63):
        raise NotJson("too big negative integer" if text.startswith("-") else "too big integer")
    return v


def _float(text):
    v = float(text)
    if math.isinf(v):
        raise NotJson("real number overflow")
    return v


def _constant(text):
    raise NotJson(f"invalid token {text!r}")


def _strings_and_depth(doc):
    """False where doc is nested too deep; NotJson for what jansson refuses in strings (an
    escaped NUL, an unpaired surrogate), which it finds first."""
    stack, too_deep = [(doc, 1)], False
    while stack:
        v, depth = stack.pop()
        too_deep = too_deep or depth > MAX_DEPTH
        if isinstance(v, dict):
            strings = list(v.keys())
            stack.extend((x, depth + 1) for x in v.values())
        elif isinstance(v, list):
            strings = []
            stack.extend((x, depth + 1) for x in v)
        else:
            strings = [v] if isinstance(v, str) else []
        for s in strings:
            if "\0" in s:
                raise NotJson("\\u0000 is not allowed")
            if SURROGATE.search(s):
                raise NotJson("invalid Unicode escape (an unpaired surrogate)")
    return not too_deep


def parse_results(data, name):
    """The document in data (bytes), checked against the schema; Invalid says why not."""
    try:
        text = data.decode("utf-8")
        doc = json.loads(text, object_pairs_hook=_pairs, parse_int=_int, parse_float=_float,
                         parse_constant=_constant)
        if not _strings_and_depth(doc):
            raise RecursionError
    except UnicodeDecodeError as e:
        raise Invalid(f"{name}: not valid JSON: invalid UTF-8 at byte {e.start}") from None
    except RecursionError:
        raise Invalid(f"{name}: nested more than {MAX_DEPTH} deep") from None
    except json.JSONDecodeError as e:
        raise Invalid(f"{name}: not valid JSON: {e.msg} (line {e.lineno}, column {e.colno})") \
            from None
    except NotJson as e:
        raise Invalid(f"{name}: not valid JSON: {e}") from None
    try:
        check_value("", field("(document)", "object", members=DOCUMENT), doc)
    except Failure as e:
        raise Invalid(f"{name}: {e}") from None
    return doc


def read_results(path):
    """The result file at path, read as dispatch-bench reads it: only a regular file, opened
    without blocking, at most MAX_BYTES, then parse_results(). Invalid says why not."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC | os.O_NOCTTY)
    except OSError as e:
        raise Invalid(f"cannot open {path}: {os.strerror(e.errno)}") from None
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode):
            raise Invalid(f"{path} is not a regular file")
        if st.st_size > MAX_BYTES:
            raise Invalid(f"{path} is larger than {MAX_BYTES >> 20} MiB: not a result file")
        os.set_blocking(fd, True)
        chunks, size = [], 0
        while size <= MAX_BYTES:
            chunk = os.read(fd, MAX_BYTES + 1 - size)
            if not chunk:
                break
            chunks.append(chunk)
            size += len(chunk)
        data = b"".join(chunks)
    except OSError as e:
        raise Invalid(f"cannot read {path}: {os.strerror(e.errno)}") from None
    finally:
        os.close(fd)
    if len(data) > MAX_BYTES:
        raise Invalid(f"{path} is larger than {MAX_BYTES >> 20} MiB: not a result file")
    return parse_results(data, path)


def fail_checks(msg):
    sys.exit(f"check_results: {msg}")


def check_schema(path, min_ok):
    """Exits with status 2 and the reader's message where the file is not a result file, and
    with status 1 where it holds fewer than min_ok results with status ok."""
    try:
        doc = read_results(path)
    except Invalid as e:
        print(f"check_results: {e}", file=sys.stderr)
        sys.exit(2)
    ok = sum(r["status"] == "ok" for r in doc["results"])
    if ok < min_ok:
        fail_checks(f"{path}: {ok} results with status ok, expected at least {min_ok}")
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
            fail_checks(f"{cmd[0]} exited with {proc.returncode}")
        check_schema(out, min_ok)
    elif len(argv) >= 4 and argv[0] == "expect" and argv[2] == "--":
        proc = subprocess.run(argv[3:], capture_output=True, text=True)
        sys.stdout.write(proc.stdout)
        if proc.returncode != 0:
            fail_checks(f"exit status {proc.returncode}: {proc.stderr}")
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
                fail_checks(f"expected line not found (in order): {want!r}")
            pos += 1
    else:
        fail_checks(__doc__)


if __name__ == "__main__":
    main(sys.argv[1:])
