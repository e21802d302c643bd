#!/usr/bin/env python3
"""Markdown tables of one benchmark run, for BENCHMARKS.md: per suite, each case with the
fastest of our backends, the dispatcher's choice (auto) and every peer, in one timing mode,
and the peer's time over ours.

usage: benchmarks_md.py --ours OURS.json [--peer PEER.json ...] [--mode device|chain|sync|host]
                        [--suites a,b] [--extra NAME=OURS.json ...]

OURS.json and PEER.json are dispatch-bench / peer JSON (schema hd-bench/1). --extra adds a
column with the best backend of another run of ours (another GEMM precision, say). A peer with
no figure in the mode asked for (numpy has no device mode) is read in chain mode, and the
column says so (peers have no host mode: chain stands in). Prints to standard output.
"""
import argparse
import math
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


def main(argv):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--ours", required=True)
    ap.add_argument("--peer", action="append", default=[])
    ap.add_argument("--extra", action="append", default=[], metavar="NAME=OURS.json")
    ap.add_argument("--mode", default="device", choices=["device", "chain", "sync", "host"])
    ap.add_argument("--suites", default="")
    a = ap.parse_args(argv)
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
