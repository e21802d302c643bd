import csv, sys, collections
for fn in sys.argv[1:]:
    rows = list(csv.reader(open(fn)))
    hdr = rows[1]; data = rows[2:]
    ix = {h: i for i, h in enumerate(hdr)}
    stall_cols = [h for h in hdr if h.startswith("stall_") and "Not Issued" not in h]
    tot = collections.Counter(); ops = collections.Counter(); samples = 0; execd = collections.Counter()
    for r in data:
        if len(r) < len(hdr): continue
        op = r[ix["Source"]].strip()
        op = op.split()[0] if not op.startswith("@") else op.split()[1]
        op = op.split(".")[0]
        n = int(r[ix["Instructions Executed"]] or 0)
        execd[op] += n
        for h in stall_cols:
            v = int(r[ix[h]] or 0); tot[h] += v
    allex = sum(execd.values())
    T = sum(tot.values())
    print(fn, "instructions executed %d, FFMA %.1f%%" % (allex, 100.0 * execd["FFMA"] / allex))
    print("  mix:", " ".join("%s %.1f%%" % (k, 100.0 * v / allex) for k, v in execd.most_common(12)))
    print("  stalls:", " ".join("%s %.1f%%" % (k[6:], 100.0 * v / T) for k, v in tot.most_common(12)))
