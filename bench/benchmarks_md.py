#!/usr/bin/env python3
"""Markdown tables of benchmark runs, for BENCHMARKS.md: per suite, each case with the fastest
of our backends, the dispatcher's choice (auto) and every peer, and the peer's time over ours.

usage: benchmarks_md.py --update PAGE [--results DIR] [--check]
       benchmarks_md.py --ours OURS.json [--peer PEER.json ...] [--mode device|chain|sync|host]
                        [--suites a,b] [--extra NAME=OURS.json ...]

--update rewrites, in place, the part of PAGE between the lines "<!-- benchmarks_md: begin -->"
and "<!-- benchmarks_md: end -->" from every run under DIR (default: bench/results beside this
script), one folder per machine kind, GPUs first and newest first: ours.json (dispatch-bench),
the peers' JSON (every other .json file but llama-*.json, schema hd-bench/1), machine.txt (its
first "commit:" line), command.txt (the command that made the run), note.txt (optional, printed
under the run's heading) and llama-ours.json, llama-ours-<precision>.json and llama-torch.json
(optional: the Llama trainer's step against transformers + PEFT, bench/main.sh's llama stage).
Each run gets a summary per suite in two timing modes (the first two of device, sync and chain
that ours and its first peer both measured) and its trainer table; the newest GPU run with a PyTorch peer also gets one table
per suite, both modes side by side. With --check it writes nothing and exits 1 where PAGE is
not what the runs give.

The second form prints the tables of one run in one mode to standard output. OURS.json and
PEER.json are dispatch-bench / peer JSON (schema hd-bench/1). --extra adds a column with the
best backend of another run of ours (another GEMM precision, say). A peer with no figure in the
mode asked for (numpy has no device mode) is read in chain mode, and the column says so (peers
have no host mode: chain stands in).
"""
import argparse
import json
import math
import os
import sys

from check_results import Invalid, read_results

FALLBACK = {"device": "chain", "chain": "sync", "sync": "chain", "host": "chain"}


def load(path):
    """The result file at path, read and checked as dispatch-bench reads it (bench/SCHEMA.md)."""
    try:
        return read_results(path)
    except Invalid as e:
        print("benchmarks_md: %s" % e, file=sys.stderr)
        sys.exit(2)


def seconds(result, mode):
    m = result.get("modes", {}).get(mode)
    return m.get("median_s") if m else None


def scaled(s):
    if s is None:
        return "-"
    if s >= 1e-3:
        return "%.2f ms" % (s * 1e3)
    return "%.1f µs" % (s * 1e6)


def index(data):
    """Case -> backend -> result, and the order cases first appear in, per suite."""
    by_case, order = {}, {}
    for r in data["results"]:
        if r.get("status") != "ok":
            continue
        by_case.setdefault(r["case"], {})[r["backend"]] = r
        order.setdefault(r["suite"], [])
        if r["case"] not in order[r["suite"]]:
            order[r["suite"]].append(r["case"])
    return by_case, order


def best(runs, mode):
    """Fastest non-auto backend of a case: (seconds, backend)."""
    found = [(seconds(r, mode), b) for b, r in runs.items() if b != "auto"]
    found = [f for f in found if f[0] is not None]
    return min(found) if found else (None, None)


def peer_time(peer, case, mode):
    runs = peer[0].get(case, {})
    for r in runs.values():
        s = seconds(r, mode)
        if s is not None:
            return s, mode
        s = seconds(r, FALLBACK[mode])
        if s is not None:
            return s, FALLBACK[mode]
    return None, None


def table(suite, cases, ours, peers, extras, mode):
    head = ["case", "ours best (backend)", "auto (ran on)"]
    head += ["%s %s" % (name, label) for name, label, _ in extras]
    for name, _ in peers:
        head += [name, "ratio"]
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    ratios = {name: [] for name, _ in peers}
    for case in cases:
        runs = ours.get(case, {})
        s, backend = best(runs, mode)
        auto = runs.get("auto")
        a = seconds(auto, mode) if auto else None
        # what auto ran on in this mode (after the host mode's moves), else in its check
        ran_on = auto.get("modes", {}).get(mode, {}).get("ran_on", auto.get("ran_on", "?")) \
            if auto else "?"
        row = [case, "%s (%s)" % (scaled(s), backend) if s else "-",
               "%s (%s)" % (scaled(a), ran_on) if a else "-"]
        for _, _, extra in extras:
            es, eb = best(extra[0].get(case, {}), mode)
            row.append("%s (%s)" % (scaled(es), eb) if es else "-")
        for name, peer in peers:
            ps, pmode = peer_time(peer, case, mode)
            note = "" if pmode in (None, mode) else " (%s)" % pmode
            row.append(scaled(ps) + note)
            if ps and a:
                ratios[name].append(ps / a)
                row.append("%.2f×" % (ps / a))
            else:
                row.append("-")
        lines.append("| " + " | ".join(row) + " |")
    out = ["**%s** (%s mode; ratio = peer time / auto's time, above 1 we are faster)" % (suite, mode),
           ""] + lines
    for name, r in ratios.items():
        if r:
            g = math.exp(sum(math.log(x) for x in r) / len(r))
            out.append("")
            out.append("Geometric mean over %s: %.2f× over %d cases, faster on %d." %
                       (name, g, len(r), sum(1 for x in r if x > 1)))
    return "\n".join(out)


BEGIN = "<!-- benchmarks_md: begin -->"
END = "<!-- benchmarks_md: end -->"
MODE_ORDER = ["device", "sync", "chain"]
WITHIN = 1.05  # auto counts as the best forced backend's equal within 5 %


def peer_name(data, path):
    return data.get("tool", path).replace("_peer", "")


def read_text(path):
    try:
        with open(path) as f:
            return f.read().strip()
    except FileNotFoundError:
        return ""


def run_modes(ours_data, peer_data):
    """The timing modes both sides measured, device first, at most two."""
    ours = set(ours_data.get("settings", {}).get("modes", []))
    peer = set(peer_data.get("settings", {}).get("modes", [])) if peer_data else ours
    both = [m for m in MODE_ORDER if m in ours and m in peer]
    return (both or [m for m in MODE_ORDER if m in ours] or ["device"])[:2]


def mode_stats(cases, ours, peer, mode):
    """(geometric mean of peer/auto, faster on, compared, auto within 5 % of best, of)."""
    ratios, near, timed = [], 0, 0
    for case in cases:
        runs = ours.get(case, {})
        a = seconds(runs["auto"], mode) if "auto" in runs else None
        b, _ = best(runs, mode)
        if a and b:
            timed += 1
            near += a <= WITHIN * b
        p = None
        for r in (peer[0].get(case, {}).values() if peer else []):
            p = seconds(r, mode) or p
        if a and p:
            ratios.append(p / a)
    g = math.exp(sum(math.log(x) for x in ratios) / len(ratios)) if ratios else None
    return g, sum(1 for x in ratios if x > 1), len(ratios), near, timed


def summary(order, ours, peer, pname, modes):
    head = ["suite", "cases"]
    for m in modes:
        head += ["%s / auto, %s" % (pname, m), "auto within 5 %% of best, %s" % m]
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for suite, cases in order.items():
        row = [suite, str(len(cases))]
        for m in modes:
            g, faster, n, near, timed = mode_stats(cases, ours, peer, m)
            row.append("%.2f× (faster on %d of %d)" % (g, faster, n) if g else "-")
            row.append("%d of %d" % (near, timed) if timed else "-")
        lines.append("| " + " | ".join(row) + " |")
    return lines


def cell(s, backend):
    return "%s %s" % (scaled(s), backend) if s else "-"


def side_by_side(suite, cases, ours, peer, pname, modes):
    head = ["case", "best forced, %s" % modes[0]]
    for m in modes:
        head += ["auto, %s" % m, "%s, %s" % (pname, m), "×"]
    lines = ["**%s** (× = %s's time / auto's, above 1 the library is faster)" % (suite, pname),
             "", "| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for case in cases:
        runs = ours.get(case, {})
        row = [case, cell(*best(runs, modes[0]))]
        auto = runs.get("auto")
        for m in modes:
            a = seconds(auto, m) if auto else None
            ran_on = auto.get("modes", {}).get(m, {}).get("ran_on", auto.get("ran_on", "?")) \
                if auto else "?"
            ps, pmode = peer_time(peer, case, m)
            note = "" if pmode in (None, m) else " (%s)" % pmode
            row += [cell(a, ran_on), scaled(ps) + note,
                    "%.2f×" % (ps / a) if ps and a else "-"]
        lines.append("| " + " | ".join(row) + " |")
    return lines


def when(date):
    return date.replace("T", " ")[:16] + " UTC" if date else "?"


def trainer_section(folder):
    """The Llama LoRA trainer's steps against transformers + PEFT on the same weights, from
    llama-ours.json (examples/llama_lora --json; its losses and gradients are the ones
    compared), llama-ours-<precision>.json (the same trainer in another precision) and
    llama-torch.json (torch_llama.py compare); none where the run has no llama-torch.json."""
    path = os.path.join(folder, "llama-torch.json")
    if not os.path.isfile(path):
        return []
    with open(path) as f:
        peer = json.load(f)
    ours = {}
    if os.path.isfile(os.path.join(folder, "llama-ours.json")):
        with open(os.path.join(folder, "llama-ours.json")) as f:
            ours = json.load(f)
    # each precision's step of ours: llama-ours.json's, and llama-ours-<precision>.json's
    steps = {}
    for name in sorted(os.listdir(folder)):
        if name.startswith("llama-ours") and name.endswith(".json"):
            with open(os.path.join(folder, name)) as f:
                run = json.load(f)
            times = sorted(run.get("step_seconds", []))
            if times and run.get("precision"):
                steps[run["precision"]] = times[len(times) // 2]
    lines = ["**The LoRA trainer against PEFT** (`examples/llama_lora` and "
             "`bench/peers/torch_llama.py`, model %s, %s tokens a step, the same weights and "
             "data; median step of 10; ratio = PEFT's step / ours)" % (
                 peer.get("config", "?"), peer.get("tokens", "?")), "",
             "| precision | llama_lora | PyTorch %s + PEFT | ratio | PyTorch peak memory |" %
             peer.get("torch", "?"), "|---|---|---|---|---|"]
    for precision, m in peer.get("modes", {}).items():
        p = m.get("median_step_s")
        o = steps.get(precision)
        lines.append("| %s | %s | %s | %s | %.2f GiB |" % (
            precision, scaled(o) if o else "not run", scaled(p),
            "%.2f×" % (p / o) if o and p else "-", m.get("peak_bytes", 0) / 2**30))
    facts = []
    if "loss_rel_error_max" in peer:
        facts.append("losses over %d steps agree to %.1e relative" % (
            len(ours.get("losses", [])), peer["loss_rel_error_max"]))
    grad = peer.get("modes", {}).get(ours.get("precision"), {}).get("grad_rel_error_max")
    if grad is not None:
        facts.append("the worst LoRA gradient of step 1 differs by %.1e relative" % grad)
    if "model_bytes" in ours:
        facts.append("our model tensors take %.2f GiB" % (ours["model_bytes"] / 2**30))
    if facts:
        lines += ["", "In %s: %s." % (ours.get("precision", "?"), "; ".join(facts))]
    return lines


def run_section(folder, page_dir, ours_data, tables=True):
    """The page's part for one run folder whose ours.json holds ours_data: heading, what ran
    where, summary, the trainer's step against PEFT, and (with tables) a table per suite."""
    if ours_data.get("tool") != "dispatch-bench":
        sys.exit("benchmarks_md: %s/ours.json is not dispatch-bench's" % folder)
    peers = []
    for name in sorted(os.listdir(folder)):
        if not name.endswith(".json") or name.startswith("llama-") or name == "ours.json":
            continue
        data = load(os.path.join(folder, name))
        peers.append((peer_name(data, name), data))
    ours, order = index(ours_data)
    pname, pdata = peers[0] if peers else ("peer", None)
    peer = index(pdata) if pdata else None
    modes = run_modes(ours_data, pdata)
    dev, mach = ours_data.get("device", {}), ours_data.get("machine", {})
    roof = ours_data.get("roofline") or {}
    commit = next((l.split(":", 1)[1].strip()[:7] for l in read_text(
        os.path.join(folder, "machine.txt")).splitlines() if l.startswith("commit:")), "?")
    rel = os.path.relpath(folder, page_dir)
    out = ["### %s: %s" % (os.path.basename(folder), dev.get("name", "?")), ""]
    facts = ["[`%s/`](%s/): %s, commit %s; %s (%s, driver %s), host %s, %s cores." % (
        rel, rel, when(ours_data.get("date")), commit, dev.get("name", "?"),
        dev.get("platform", "?"), dev.get("driver", "?"), mach.get("cpu", "?"),
        mach.get("cores", "?"))]
    line = []
    if roof:
        peak = roof.get("peak_gflops", 0)
        line.append("Roofline: copy %.0f GB/s (%s), %s (%s)." % (
            roof.get("bandwidth_gbs", 0), roof.get("bandwidth_source", "?"),
            "%.1f TFLOP/s" % (peak / 1e3) if peak >= 1e3 else "%.0f GFLOP/s" % peak,
            roof.get("peak_source", "?")))
    for name, data in peers:
        drv = data.get("device", {}).get("driver", "")
        line.append("Peer: %s %s%s." % (name, data.get("version", "?"),
                                          "" if not drv or data.get("version", "") in drv
                                          else " on " + drv))
    if line:
        facts.append(" ".join(line))
    command = read_text(os.path.join(folder, "command.txt"))
    if command:
        facts.append("Command: `%s`." % command)
    out += facts
    note = read_text(os.path.join(folder, "note.txt"))
    if note:
        out += ["", note]
    out += [""] + summary(order, ours, peer, pname, modes)
    trainer = trainer_section(folder)
    if trainer:
        out += [""] + trainer
    if pname == "torch" and tables:
        for suite, cases in order.items():
            out += [""] + side_by_side(suite, cases, ours, peer, pname, modes)
    return out


def update(page, results, check=False):
    with open(page) as f:
        text = f.read()
    if text.count(BEGIN) != 1 or text.count(END) != 1 or text.index(BEGIN) > text.index(END):
        sys.exit("benchmarks_md: %s needs one line %s and, after it, one %s" % (page, BEGIN, END))
    folders = [os.path.join(results, d) for d in sorted(os.listdir(results))
               if os.path.isfile(os.path.join(results, d, "ours.json"))]
    ours = {f: load(os.path.join(f, "ours.json")) for f in folders}
    gpu = {f: ours[f].get("device", {}).get("kind") == "gpu" for f in folders}
    folders.sort(key=lambda f: ours[f].get("date", ""), reverse=True)
    folders.sort(key=lambda f: not gpu[f])  # GPUs first, each group newest first
    body = []
    for f in folders:
        # per-case tables for the newest GPU run only: the others get their summaries
        body += [""] + run_section(os.path.abspath(f), os.path.dirname(os.path.abspath(page)),
                                   ours[f], tables=gpu[f] and f == folders[0])
    head, rest = text.split(BEGIN, 1)
    tail = rest.split(END, 1)[1]
    new = head + BEGIN + "\n" + "\n".join(body) + "\n\n" + END + tail
    if new != text and check:
        print("benchmarks_md: %s is not what bench/results gives; run --update" % page,
              file=sys.stderr)
        return 1
    if new != text:
        with open(page, "w") as f:
            f.write(new)
    return 0


def main(argv):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--update", metavar="PAGE")
    ap.add_argument("--check", action="store_true",
                    help="with --update: write nothing, exit 1 if PAGE is out of date")
    ap.add_argument("--results", default=os.path.join(os.path.dirname(os.path.abspath(__file__)),
                                                      "results"))
    ap.add_argument("--ours")
    ap.add_argument("--peer", action="append", default=[])
    ap.add_argument("--extra", action="append", default=[], metavar="NAME=OURS.json")
    ap.add_argument("--mode", default="device", choices=["device", "chain", "sync", "host"])
    ap.add_argument("--suites", default="")
    a = ap.parse_args(argv)
    if a.update:
        return update(a.update, a.results, a.check)
    if not a.ours:
        ap.error("--ours or --update is required")
    ours, order = index(load(a.ours))
    peers = []
    for path in a.peer:
        data = load(path)
        peers.append((data.get("tool", path).replace("_peer", ""), index(data)))
    extras = []
    for spec in a.extra:
        label, _, path = spec.partition("=")
        if not path:
            sys.exit("benchmarks_md: --extra wants NAME=OURS.json, got %r" % spec)
        extras.append(("ours", label, index(load(path))))
    wanted = [s for s in a.suites.split(",") if s] or list(order)
    blocks = [table(s, order[s], ours, peers, extras, a.mode) for s in wanted if s in order]
    print("\n\n".join(blocks))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
