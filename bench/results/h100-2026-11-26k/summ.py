import json, math, re, sys
for d in sys.argv[1:]:
    ours = json.load(open(d + "/ours.json")); peer = json.load(open(d + "/torch.json"))
    def index(x):
        r = {}
        for e in x["results"]:
            if e.get("status") != "ok": continue
            r.setdefault((e["suite"], e["case"]), {})[e["backend"]] = e
        return r
    o = index(ours); p = index(peer)
    for mode in ("device", "chain"):
        logs = []; big = [0, 0]; suites = {}
        for key, bs in o.items():
            if "auto" not in bs or key not in p: continue
            pb = list(p[key].values())[0]
            if mode not in pb["modes"] or mode not in bs["auto"]["modes"]: continue
            r = pb["modes"][mode]["median_s"] / bs["auto"]["modes"][mode]["median_s"]
            logs.append(math.log(r)); suites.setdefault(key[0], []).append(math.log(r))
            m = re.match(r"(gemm|lora) (\d+)x", key[1])
            if m and int(m.group(2)) >= 512:
                big[1] += 1; big[0] += r >= 0.95
        print(d.split("/")[-1], mode, "geomean %.2fx over %d, faster on %d;" % (math.exp(sum(logs)/len(logs)), len(logs), sum(l > 0 for l in logs)),
              " ".join("%s %.2fx" % (s, math.exp(sum(v)/len(v))) for s, v in suites.items()), "| GEMM/LoRA >=512 rows at >=0.95x: %d of %d" % tuple(big))
