#!/bin/sh
# The command lines of dispatch-autotune and dispatch-bench: the same spellings, --version,
# short errors that name the bad value (not the whole usage), the documented exit codes, and
# --json - alone on standard output. Usage: tools_cli.sh AUTOTUNE BENCH WORKDIR
set -eu
tune=$1
bench=$2
dir=$3
rm -rf "$dir"
mkdir -p "$dir"

fail() { echo "tools_cli: $*" >&2; exit 1; }

# expect CODE NEEDLE COMMAND...: COMMAND exits with CODE and its stderr holds NEEDLE in at most
# two lines.
expect() {
    code=$1 needle=$2
    shift 2
    set +e
    "$@" >"$dir/out.txt" 2>"$dir/err.txt"
    rc=$?
    set -e
    [ "$rc" -eq "$code" ] || fail "$*: exit $rc, expected $code ($(cat "$dir/err.txt"))"
    grep -q -- "$needle" "$dir/err.txt" || fail "$*: stderr lacks '$needle': $(cat "$dir/err.txt")"
    [ "$(wc -l <"$dir/err.txt")" -le 2 ] || fail "$*: more than a short error: $(cat "$dir/err.txt")"
}

for tool in "$tune" "$bench"; do
    "$tool" --version | grep -q -E '^dispatch-(autotune|bench) [0-9]+\.[0-9]+\.[0-9]+ \(library ' ||
        fail "$tool --version"
    expect 2 "'--no-such-option'" "$tool" --no-such-option
    expect 2 "'nosuite'" "$tool" --suites seed,nosuite
    expect 2 "needs a value" "$tool" --cache
    # an unset variable in --cache "$CACHE" must not select the user's own cache
    expect 2 "the path is empty" "$tool" --cache ''
done
expect 2 "too long" "$tune" --cache "$dir/$(printf '%01100d' 0)" --dry-run

# --device in both tools: a device that matches none is a start failure (3) that names it.
for tool in "$tune" "$bench"; do
    set +e
    "$tool" --device no-such-device --suites ci --cache "$dir/none.txt" >/dev/null 2>"$dir/err.txt"
    rc=$?
    set -e
    [ "$rc" -eq 3 ] || fail "$tool --device no-such-device: exit $rc, expected 3"
    grep -q "'no-such-device'" "$dir/err.txt" || fail "$tool --device: the bad name is not said"
done
# 'all' is every suite but ci in both tools; the help of each names the suites.
"$tune" --suites all --dry-run --cache "$dir/none.txt" >/dev/null 2>&1 || fail "tuner: --suites all"
"$bench" --suites all --list-cases --json "$dir/all.json" >/dev/null 2>&1 || fail "bench: --suites all"
for tool in "$tune" "$bench"; do
    "$tool" --help | grep -q "backward" || fail "$tool --help does not name the backward suite"
done

# Lists are read whole however long; an empty one, one with an empty name, or suites and --ops
# that leave no case are a bad command line, not the defaults.
none="--cache $dir/none.txt"
expect 2 "--suites: the list is empty" "$tune" --suites '' --dry-run $none
expect 2 "--suites: the list is empty (commas alone)" "$tune" --suites , --dry-run $none
expect 2 "--ops: an empty name in the list 'gemm,,lora'" "$tune" --ops gemm,,lora --dry-run $none
expect 2 "no case matched: the suites 'seed' hold none of --ops 'gemm_batched'" \
    "$tune" --suites seed --ops gemm_batched --dry-run $none
expect 2 "--suites: the list is empty" "$bench" --suites '' --list-cases
expect 2 "--backends: the list is empty (commas alone)" "$bench" --backends , --list-cases
expect 2 "--modes: the list is empty (commas alone)" "$bench" --modes , --list-cases
expect 2 "--suites: an empty name in the list 'seed,'" "$bench" --suites seed, --list-cases
long=$(printf 'seed,%.0s' $(seq 60))
expect 2 "unknown suite 'nosuite'" "$bench" --suites "${long}nosuite" --list-cases
expect 2 "unknown suite 'nosuite'" "$tune" --suites "${long}nosuite" --dry-run $none
expect 2 "unknown mode 'warp'" "$bench" --modes "$(printf 'sync,%.0s' $(seq 60))warp" --list-cases
"$bench" --suites "${long}ci" --list-cases >/dev/null || fail "bench: a --suites list of 302 bytes"
expect 2 "exclude each other" "$tune" --quick --full
expect 2 "'foo'" "$tune" --ops gemm,foo --dry-run
expect 2 "--backends: unknown backend 'auto'" "$tune" --backends fused,auto --dry-run $none
expect 2 "not a file" "$tune" --shapes "$dir" --dry-run
printf 'gemm 4 4 4\nsoftmax 3 5 7\n' >"$dir/bad-shapes.txt"
expect 2 "bad-shapes.txt:2" "$tune" --shapes "$dir/bad-shapes.txt" --dry-run
# A case's words are separated by blanks and its dimensions are digits alone, at most 2^24, as
# the cache reads them: no sign, no wrap past 2^64, no transposes or layout glued to a number,
# no text hidden after a NUL byte. A read error is not the end of the file.
for bad in 'gemm -18446744073709551615 4 4' 'gemm 18446744073709551617 4 4' 'softmax +5 7' \
    'lora 2 8 8 -0' 'gemm 1 2 3tt' 'lora 8 16 16 4pt' 'gemm 4 4 16777217' 'softmax 0x10 4' \
    'softmax 3 5\000 7' 'softmax 3\r 5'; do
    printf "$bad\\n" >"$dir/x.txt"
    expect 2 "x.txt:1: " "$tune" --shapes "$dir/x.txt" --dry-run
    expect 2 "x.txt:1: " "$bench" --shapes "$dir/x.txt" --list-cases
done
expect 2 "cannot read line 1: Input/output error" "$tune" --shapes /proc/self/mem --dry-run
printf 'sofmax 3 5\n' >"$dir/bad-op.txt"
expect 2 "'sofmax'" "$tune" --shapes "$dir/bad-op.txt" --dry-run
# AdamW in a shapes file: five dimensions, each from 1 (at most 1024 layers), nothing after
# them, refused alike by both tools; the tuner takes none (AdamW runs where its tensors are)
# and explains none; the bench lists its tensors for the peers.
for bad in 'adamw 2 4096 1024 14336' 'adamw 0 4096 1024 14336 16' 'adamw 1025 8 8 8 8' \
    'adamw 2 4096 1024 14336 16 pt' 'adamw 2 4096 1024 14336 -16'; do
    printf "$bad\\n" >"$dir/x.txt"
    expect 2 "x.txt:1: '$bad': " "$tune" --shapes "$dir/x.txt" --dry-run
    expect 2 "x.txt:1: '$bad': " "$bench" --shapes "$dir/x.txt" --list-cases
done
printf 'adamw 2 4096 1024 14336\n' >"$dir/x.txt"
expect 2 "adamw takes 5 dimensions (layers hidden kv_dim mlp rank)" "$bench" --shapes "$dir/x.txt" \
    --list-cases
printf 'adamw 1 48 16 80 3\n' >"$dir/adamw.txt"
expect 2 "adamw 1x48x16x80 r3 is not tuned" "$tune" --shapes "$dir/adamw.txt" --dry-run
expect 2 "AdamW has no plan to explain" "$tune" --explain 'adamw 1 48 16 80 3'
"$bench" --shapes "$dir/adamw.txt" --list-cases --json - | python3 -c '
import json, sys
f = [s for s in json.load(sys.stdin)["suites"] if s["name"] == "file"][0]["cases"]
assert [c["case"] for c in f] == ["adamw 1x48x16x80 r3"], f
c = f[0]
assert c["op"] == "adamw" and c["dims"] == [1, 48, 16, 80] and c["params"]["rank"] == 3, c
assert c["tensors"][:3] == [[3, 48], [48, 3], [3, 48]] and len(c["tensors"]) == 14, c
assert c["bytes"] == 28 * sum(r * k for r, k in c["tensors"]), c
' || fail "--shapes --list-cases --json: the AdamW case and its tensors"
expect 2 "'abc'" "$tune" --case-budget-s abc
# A cache that cannot be read is not replaced: its records are kept for repair.
printf 'hd-tune 1\nlibrary 0.1.0\nplatform unquoted\nsoftmax 8 8 cpu - 3 - -\n' >"$dir/damaged.txt"
cp "$dir/damaged.txt" "$dir/damaged-before.txt"
expect 4 "not replaced" "$tune" --suites ci --cache "$dir/damaged.txt"
cmp -s "$dir/damaged.txt" "$dir/damaged-before.txt" || fail "a damaged cache was replaced"
# Seconds are finite numbers >= 0, 0 meaning no limit.
for bad in inf nan 1e400 -1; do
    expect 2 "'$bad' is not a finite number" "$tune" --case-budget-s "$bad" --dry-run
    expect 2 "'$bad' is not a finite number" "$tune" --max-time "$bad" --dry-run
done
HD_DISABLE_OPENCL=1 "$tune" --suites ci --case-budget-s 0 --max-time 0 --dry-run \
    --cache "$dir/none.txt" >/dev/null 2>&1 || fail "tuner: --case-budget-s 0 --max-time 0"
"$tune" --help | grep -q "0: unlimited" || fail "tuner: --help does not say what 0 means"
# Blanks before a case are no part of it, in a shapes file and in --explain; a line is read
# whole however long, so a long comment or long run of blanks stays in its line.
blanks=$(printf '%300s' '')
comment=$(echo "$blanks" | tr ' ' x)
printf '  softmax 3 5\n\tgemm 4 4 4 nt\ngemm 8 8 8%snt\nrms_norm 2 3 # %s\n' "$blanks" "$comment" \
    >"$dir/blanks.txt"
HD_DISABLE_OPENCL=1 "$tune" --shapes "$dir/blanks.txt" --dry-run --cache "$dir/none.txt" \
    >"$dir/blanks-out.txt" 2>&1 || fail "blanks and long lines: $(cat "$dir/blanks-out.txt")"
for case in 'softmax 3x5:' 'gemm 4x4x4 NT:' 'gemm 8x8x8 NT:' 'rms_norm 2x3:'; do
    grep -q "^$case" "$dir/blanks-out.txt" || fail "no '$case' case: $(cat "$dir/blanks-out.txt")"
done
printf 'softmax 3 5 # %s\nsofmax 3 5\n' "$comment" >"$dir/long-then-bad.txt"
expect 2 "long-then-bad.txt:2: unknown operation 'sofmax'" \
    "$tune" --shapes "$dir/long-then-bad.txt" --dry-run
out=$dir/explain-blanks.txt
HD_DISABLE_OPENCL=1 "$tune" --cache "$dir/none.txt" --explain '  softmax 64 1024' >"$out" 2>&1 &&
    grep -q "^softmax 64x1024: chosen" "$out" || fail "--explain with leading blanks: $(cat "$out")"
# LoRA's layouts in a shapes file: tuned as records of their own, written with the layout.
printf 'lora 3 16 8 2 pt\nlora 3 16 8 2\nlora_backward 2 8 8 1 layout1\n' >"$dir/layouts.txt"
"$tune" --shapes "$dir/layouts.txt" --quick --case-budget-s 1 --cache "$dir/layouts-cache.txt" \
    >/dev/null 2>&1 || fail "tuning LoRA's layouts failed"
for rec in 'lora 3 16 8 2 pt [a-z]' 'lora 3 16 8 2 (cpu|fused|clblast)' \
    'lora_backward 2 8 8 1 layout1 [a-z]'; do
    grep -q -E "^$rec" "$dir/layouts-cache.txt" ||
        fail "no '$rec' record: $(cat "$dir/layouts-cache.txt")"
done
"$tune" --cache "$dir/layouts-cache.txt" --explain 'lora 3 16 8 2 pt' >"$dir/explain.txt" 2>&1 ||
    fail "--explain of a layout failed"
grep -q "lora 3x16x8 r2 pt: chosen .* tuned record: lora 3x16x8 r2 pt" "$dir/explain.txt" ||
    fail "--explain does not use the layout's record: $(cat "$dir/explain.txt")"
# A line of the cache the tuner cannot read is kept as a comment at its next save, which says so.
bad_no=$(($(wc -l <"$dir/layouts-cache.txt") + 1))
printf 'sofmax 3 16 cpu - 1 - -\n' >>"$dir/layouts-cache.txt"
"$tune" --shapes "$dir/layouts.txt" --quick --case-budget-s 1 --cache "$dir/layouts-cache.txt" \
    >/dev/null 2>"$dir/kept-err.txt" || fail "tuning again after a bad line: $(cat "$dir/kept-err.txt")"
grep -q "kept 1 line(s) .* line $bad_no: unknown keyword 'sofmax'" "$dir/kept-err.txt" ||
    fail "the tuner does not say it kept the bad line: $(cat "$dir/kept-err.txt")"
grep -q '^# not read: sofmax 3 16 cpu - 1 - -$' "$dir/layouts-cache.txt" ||
    fail "the bad line is not kept: $(cat "$dir/layouts-cache.txt")"
printf 'lora 3 16 8 2 tp\n' >"$dir/bad-layout.txt"
expect 2 "pt or layout1..7" "$tune" --shapes "$dir/bad-layout.txt" --dry-run
printf 'gemm 4 4 4 nn pt\n' >"$dir/bad-gemm-layout.txt"
expect 2 "bad-gemm-layout.txt:1" "$tune" --shapes "$dir/bad-gemm-layout.txt" --dry-run

expect 2 "'x'" "$bench" --repeats x
# Counts are decimal whole numbers within their bounds (a count past 2^32 once wrapped), the
# seed a decimal number up to 2^63 - 1, what the results' JSON holds (once read in the base
# its prefix named, after strtod checked it), seconds and milliseconds finite.
for bad in '--repeats 1e10' '--repeats 10001' '--max-runs 4294967297' '--warmup 2.5' \
    '--chain 5e9' '--chain -1' '--rounds 17' '--seed 1e3' '--seed -1' \
    '--seed 18446744073709551616' '--seed 9223372036854775808' '--seed 0x10'; do
    opt=${bad% *} value=${bad#* }
    expect 2 "$opt: '$value' is not a whole number" "$bench" "$opt" "$value" --list-cases
done
for bad in '--budget-ms inf' '--max-time 1e400' '--case-budget-s nan' '--peak-flops -1'; do
    opt=${bad% *} value=${bad#* }
    expect 2 "$opt: '$value' is not a finite number" "$bench" "$opt" "$value" --list-cases
done
# --compare's file is read and checked before any case runs; --ours and --compare-mode belong to
# it; a --json path that cannot be written says why.
data=$(dirname "$0")/data/bench
expect 2 "--compare: cannot open $dir/no-peer.json: No such file or directory" \
    "$bench" --compare "$dir/no-peer.json" --suites ci --cpu-only
expect 2 "other-schema.json: schema: expected hd-bench/1" \
    "$bench" --compare "$data/other-schema.json" --suites ci
expect 2 "/dev/zero is not a regular file" "$bench" --compare /dev/zero --suites ci
# a FIFO with no writer is refused at once, not waited on (timeout: a hang fails the test)
mkfifo "$dir/fifo.json"
expect 2 "fifo.json is not a regular file" timeout 10 "$bench" --compare "$dir/fifo.json" --suites ci
expect 2 "fifo.json is not a regular file" \
    timeout 10 "$bench" --compare "$data/peer.json" --ours "$dir/fifo.json"
printf '{"schema": "hd-bench/1", "results": [], "x": 0x10}\n' >"$dir/hex.json"
expect 2 "hex.json: not valid JSON" "$bench" --compare "$dir/hex.json" --suites ci
# one member twice: refused whichever value comes first (bench/SCHEMA.md; bench_readers.py
# feeds many more hostile files to this reader and to check_results.py)
printf '{"schema": "hd-bench/1", "schema": "evil"}\n' >"$dir/twice.json"
expect 2 "twice.json: not valid JSON: duplicate object key" \
    "$bench" --compare "$data/peer.json" --ours "$dir/twice.json"
sed 's/"median_s": 20e-6/"median_s": "fast"/' "$data/peer.json" >"$dir/fast.json"
expect 2 "fast.json: results\[0\].modes.sync.median_s: expected a number, got a string" \
    "$bench" --compare "$dir/fast.json" --ours "$data/ours.json"
expect 2 "--ours: cannot open $dir/no-ours.json" \
    "$bench" --compare "$data/peer.json" --ours "$dir/no-ours.json"
expect 2 "--ours is an option of --compare" "$bench" --ours "$data/ours.json" --list-cases
expect 2 "--compare-mode is an option of --compare" "$bench" --compare-mode device --list-cases
expect 1 "cannot write $dir/no-dir/c.json: No such file or directory" \
    "$bench" --list-cases --json "$dir/no-dir/c.json"
expect 1 "cannot write /dev/full: No space left on device" "$bench" --list-cases --json /dev/full
set +e
"$bench" --list-cases --json - >/dev/full 2>"$dir/err.txt"
rc=$?
set -e
[ "$rc" -eq 1 ] && grep -q "cannot write standard output: No space left" "$dir/err.txt" ||
    fail "--json - into a full device: exit $rc, $(cat "$dir/err.txt")"
# the case list and the gap table on standard output: a full device is an output failure too
for args in "--list-cases" "--compare $data/peer.json --ours $data/ours.json"; do
    set +e
    # shellcheck disable=SC2086 # the words of args are separate options
    "$bench" $args >/dev/full 2>"$dir/err.txt"
    rc=$?
    set -e
    [ "$rc" -eq 1 ] && grep -q "cannot write standard output" "$dir/err.txt" ||
        fail "$args into a full device: exit $rc, $(cat "$dir/err.txt")"
done
expect 2 "'warp'" "$bench" --modes device,warp
expect 2 "'cuda'" "$bench" --backends cpu,cuda
expect 2 "both want standard output" "$bench" --csv --json -

# --json - leaves standard output to the JSON: it parses as a whole.
"$bench" --suites ci --cpu-only --modes sync --repeats 1 --budget-ms 1 --warmup 1 --rounds 1 \
    --seed 010 --quiet --json - >"$dir/json.txt" 2>"$dir/table.txt" || fail "--json - run failed"
python3 -c 'import json, sys; d = json.load(open(sys.argv[1])); assert d["schema"] == "hd-bench/1"' \
    "$dir/json.txt" || fail "--json - output is not JSON alone: $(head -3 "$dir/json.txt")"
python3 -c 'import json, sys; assert json.load(open(sys.argv[1]))["settings"]["seed"] == 10' \
    "$dir/json.txt" || fail "--seed 010 is not seed 10"
# A case that its share of --max-time cannot hold at the full --budget-ms is timed with fewer
# runs, not skipped: the seed suite's small cases at 0.6 s each, in a run of a few seconds.
"$bench" --suites seed --cpu-only --modes sync,chain --budget-ms 600 --max-time 4 --quiet \
    --json - >"$dir/tight.json" 2>/dev/null || fail "the --max-time 4 run failed"
python3 - "$dir/tight.json" <<'PY' || fail "--max-time skipped cases a shorter budget holds"
import json, sys
rows = [r for r in json.load(open(sys.argv[1]))["results"] if r["case"] == "lora 1x512x512 r8"]
timed = {r["backend"] for r in rows if r["status"] == "ok"}
assert timed == {"cpu", "auto"}, [(r["backend"], r["status"], r["note"]) for r in rows]
PY
# Where standard error is not a terminal: one progress line per case with the elapsed time;
# --quiet (-q) none.
"$bench" --suites ci --cpu-only --modes sync --repeats 1 --budget-ms 1 --warmup 1 --rounds 1 \
    --json "$dir/p.json" >/dev/null 2>"$dir/progress.txt" || fail "the progress run failed"
[ "$(grep -c '(elapsed ' "$dir/progress.txt")" -ge 10 ] ||
    fail "no progress line per case: $(head -3 "$dir/progress.txt")"
"$bench" -q --suites ci --cpu-only --modes sync --repeats 1 --budget-ms 1 --warmup 1 --rounds 1 \
    --json "$dir/q.json" >/dev/null 2>"$dir/quiet.txt" || fail "the -q run failed"
! grep -q '(elapsed ' "$dir/quiet.txt" || fail "-q still printed progress"
# interrupt WHEN COMMAND...: runs COMMAND, sends SIGINT once WHEN holds (a number: after that
# many seconds; else once a line of stderr matches WHEN, within 300 s), and expects exit 130
# within 5 s of the signal and the "stopping" line on stderr.
interrupt() {
    when=$1
    shift
    "$@" >"$dir/int-out.txt" 2>"$dir/int-err.txt" &
    pid=$!
    case "$when" in
    *[!0-9]*)
        waited=0
        until grep -q -- "$when" "$dir/int-err.txt"; do
            [ "$waited" -lt 1500 ] || fail "$*: no line matching '$when' within 300 s"
            kill -0 "$pid" 2>/dev/null || fail "$*: ended before a line matching '$when'"
            sleep 0.2
            waited=$((waited + 1))
        done
        ;;
    *) sleep "$when" ;;
    esac
    kill -INT "$pid" 2>/dev/null || fail "$*: ended before the interrupt"
    start=$(date +%s)
    set +e
    wait "$pid"
    rc=$?
    set -e
    took=$(($(date +%s) - start))
    [ "$rc" -eq 130 ] || fail "$*: exit $rc after SIGINT, expected 130 ($(tail -3 "$dir/int-err.txt"))"
    [ "$took" -le 5 ] || fail "$*: took $took s to stop after SIGINT"
    grep -q "interrupted: stopping" "$dir/int-err.txt" || fail "$*: did not say it was stopping"
}

# dispatch-bench --shapes: the file's cases as the suite "file", each once, listed for the
# peers and timed; the tuner's errors for a bad file.
expect 2 "not a file" "$bench" --shapes "$dir" --list-cases
expect 2 "bad-shapes.txt:2" "$bench" --shapes "$dir/bad-shapes.txt" --list-cases
printf '# nothing\n\n' >"$dir/no-cases.txt"
expect 2 "no case" "$bench" --shapes "$dir/no-cases.txt" --list-cases
printf 'gemm 5 7 3 tn\n  softmax 3 9 # a comment\nlora 2 6 5 2 pt\ngemm 5 7 3 tn\n' >"$dir/user.txt"
expect 2 "twice" "$bench" --shapes "$dir/user.txt" --shapes "$dir/user.txt" --list-cases
"$bench" --shapes "$dir/user.txt" --list-cases --json - | python3 -c '
import json, sys
d = json.load(sys.stdin)
f = [s for s in d["suites"] if s["name"] == "file"]
assert len(f) == 1, "no suite file"
names = [c["case"] for c in f[0]["cases"]]
assert names == ["gemm 5x7x3 TN", "softmax 3x9", "lora 2x6x5 r2 pt"], names
assert "seed" in [s["name"] for s in d["suites"]]
' || fail "--shapes --list-cases --json: the file's cases"
HD_DISABLE_OPENCL=1 "$bench" --shapes "$dir/user.txt" --modes chain --budget-ms 5 --repeats 2 \
    --json "$dir/user.json" -q >/dev/null 2>"$dir/user-err.txt" ||
    fail "--shapes run: $(cat "$dir/user-err.txt")"
python3 -c '
import json, sys
d = json.load(open(sys.argv[1]))
got = sorted({(r["suite"], r["case"]) for r in d["results"]})
want = [("file", "gemm 5x7x3 TN"), ("file", "lora 2x6x5 r2 pt"), ("file", "softmax 3x9")]
assert got == want, got
assert all(r["status"] == "ok" for r in d["results"] if r["backend"] in ("cpu", "auto")), d
' "$dir/user.json" || fail "--shapes run: the file's cases, and them alone"

# A case the library refuses (RoPE whose head_dim, twice the pairs, does not divide the
# columns) is an error record whose note is the library's message.
printf 'rope 7 24 8\n' >"$dir/refused.txt"
HD_DISABLE_OPENCL=1 "$bench" --shapes "$dir/refused.txt" --backends cpu --modes device \
    --repeats 1 --max-runs 1 --warmup 1 --rounds 1 --cache "$dir/none.txt" \
    --json "$dir/refused.json" >/dev/null 2>&1 || fail "--shapes run of a refused case"
python3 -c '
import json, sys
r = [r for r in json.load(open(sys.argv[1]))["results"] if r["backend"] == "cpu"][0]
assert r["status"] == "error", r
assert "head_dim 16 must be even, > 0 and divide the 24 columns" in r["note"], r
' "$dir/refused.json" || fail "a refused case: its error record lacks the library's message"

# Ctrl-C: the bench writes the JSON of the cases it finished, the tuner keeps its cache.
interrupt 3 "$bench" --suites ci,seed --budget-ms 2000 --json "$dir/int.json"
python3 -c 'import json, sys; json.load(open(sys.argv[1]))' "$dir/int.json" ||
    fail "the interrupted bench wrote no valid JSON"
# (after its first case: before it, there is nothing measured to keep)
interrupt '^\[1/' "$tune" --suites ci,seed --force --cache "$dir/int-tune.txt" --case-budget-s 200
grep -q '^hd-tune 1$' "$dir/int-tune.txt" || fail "the interrupted tuner left no cache"
echo "tools_cli: ok"
