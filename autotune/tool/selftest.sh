#!/bin/sh
# dispatch-autotune end to end: tune one shape with --quick into a fresh cache, check the
# file, the resume (a rerun skips the case), --show, --dry-run, usage errors, and that a new
# context chooses from the tuned record. Usage: selftest.sh TOOL WORKDIR
set -eu
tool=$1
dir=$2
rm -rf "$dir"
mkdir -p "$dir"
cache=$dir/tune.txt
printf '# one small case\nsoftmax 37 300\n' > "$dir/shapes.txt"

fail() { echo "selftest: $*" >&2; exit 1; }

"$tool" --quick --shapes "$dir/shapes.txt" --cache "$cache" > "$dir/run1.txt" 2>&1 ||
    { cat "$dir/run1.txt"; fail "the quick run failed"; }
cat "$dir/run1.txt"
grep -q '^hd-tune 1$' "$cache" || fail "no header in the cache"
grep -q '^calibration ' "$cache" || fail "no calibration in the cache"
grep -q '^softmax 37 300 ' "$cache" || fail "no record for the case"

"$tool" --quick --shapes "$dir/shapes.txt" --cache "$cache" > "$dir/run2.txt" 2>&1 ||
    fail "the rerun failed"
grep -q 'in the cache already' "$dir/run2.txt" || fail "the rerun did not resume"

"$tool" --dry-run --shapes "$dir/shapes.txt" --cache "$dir/none.txt" > "$dir/dry.txt" 2>&1 ||
    fail "--dry-run failed"
grep -q 'cpu' "$dir/dry.txt" || fail "--dry-run lists no candidates"
[ ! -e "$dir/none.txt" ] || fail "--dry-run wrote a cache"
# The backends' defaults are listed, and timed, fastest estimate first, so that a budget that
# runs out leaves the likely slowest untimed (a large row op: the CPU's estimate is far above
# the device's wherever one is present).
printf 'softmax 37 300\nrms_norm_backward 32768 1024\ngemm 64 64 64\n' > "$dir/order.txt"
"$tool" --dry-run --shapes "$dir/order.txt" --cache "$dir/none.txt" > "$dir/order-dry.txt" 2>&1 ||
    fail "--dry-run of several cases failed"
grep -q 'default parameters, est\. ' "$dir/order-dry.txt" || fail "--dry-run gives no estimates"
awk '/^[^ ]/ { prev = -1 }
     /default parameters, est\. / {
         v = $0; sub(/.*est\. /, "", v); split(v, p, " ")
         t = p[1] * (p[2] == "s" ? 1e6 : p[2] == "ms" ? 1e3 : 1)
         if (prev >= 0 && t < prev) bad = 1
         prev = t
     }
     END { exit bad }' "$dir/order-dry.txt" ||
    { cat "$dir/order-dry.txt"; fail "--dry-run: the defaults are not in the order of their estimates"; }

# The default level times kernel parameter variants, not only each backend's defaults. With
# the CPU backend left out (--backends) the fused kernels are the only candidates, so no
# timing of this machine can make their variants look hopeless next to another backend. The
# run re-tunes a copy of the cache, whose calibration it reuses.
if grep -q '^ *fused ' "$dir/dry.txt"; then
    cp "$cache" "$dir/variants-cache.txt"
    "$tool" --backends fused,clblast,clblast+fused --force --verbose --ops softmax \
        --shapes "$dir/shapes.txt" \
        --cache "$dir/variants-cache.txt" > "$dir/variants.txt" 2>&1 ||
        { cat "$dir/variants.txt"; fail "the default-level run failed"; }
    grep -q -E '^ *fused +[0-9.]+ (µs|ms|s) +[A-Z]+=' "$dir/variants.txt" ||
        { cat "$dir/variants.txt"; fail "no fused variant was timed"; }
    ! grep -q -E '^ *cpu +[0-9.]+ (µs|ms|s)' "$dir/variants.txt" ||
        { cat "$dir/variants.txt"; fail "--backends: the CPU left out was timed"; }
fi

# The backward ops, of several outputs each, are tuned like the others: every candidate's
# outputs checked against the reference, a record written per case. With the CPU backend left
# out the device backends (fused, CLBlast where present) are the candidates; the case budget
# leaves room for their first builds on a cold program cache.
if grep -q '^ *fused ' "$dir/dry.txt"; then
    printf 'lora_backward 5 37 29 3\nrms_norm_backward 7 129\n' > "$dir/backward.txt"
    "$tool" --backends fused,clblast,clblast+fused --quick --verbose --case-budget-s 300 \
        --shapes "$dir/backward.txt" \
        --cache "$dir/backward-cache.txt" > "$dir/backward-run.txt" 2>&1 ||
        { cat "$dir/backward-run.txt"; fail "tuning the backward ops failed"; }
    grep -q '^lora_backward 5 37 29 3 ' "$dir/backward-cache.txt" &&
        grep -q '^rms_norm_backward 7 129 ' "$dir/backward-cache.txt" ||
        { cat "$dir/backward-run.txt"; fail "no record for a backward op"; }
    if grep -q 'rejected' "$dir/backward-run.txt"; then
        cat "$dir/backward-run.txt"
        fail "a backward candidate failed the reference check"
    fi
fi

# Builds ahead (--build-threads; the default on a GPU, off on a CPU device): the variants'
# programs built on two worker threads while the candidates before them are timed. The case
# is tuned as without them, each variant timed, and the tool's own lines are not lost to the
# workers' builds, which send descriptor 2 to a file while they run.
if grep -q '^ *fused ' "$dir/dry.txt"; then
    printf 'gemm 37 29 41 tn\n' > "$dir/ahead.txt"
    "$tool" --backends fused --quick --verbose --build-threads 2 --case-budget-s 300 \
        --shapes "$dir/ahead.txt" --cache "$dir/ahead-cache.txt" > "$dir/ahead-run.txt" 2>&1 ||
        { cat "$dir/ahead-run.txt"; fail "tuning with builds ahead failed"; }
    grep -q '^gemm 37 29 41 tn ' "$dir/ahead-cache.txt" ||
        { cat "$dir/ahead-run.txt"; fail "builds ahead: no record"; }
    grep -q -E '^ *fused +[0-9.]+ (µs|ms|s) +[A-Z]+=' "$dir/ahead-run.txt" &&
        grep -q '^\[1/1\] gemm 37x29x41 TN: ' "$dir/ahead-run.txt" ||
        { cat "$dir/ahead-run.txt"; fail "builds ahead: a variant's time or the case's line is missing"; }
fi

"$tool" --show --cache "$cache" > "$dir/show.txt" || fail "--show failed"
grep -q '^softmax 37x300 ' "$dir/show.txt" || fail "--show lacks the record"

# On an OpenCL device that is itself the CPU (PoCL), a large GEMM must still try the CPU
# backend: only a GPU makes a slow CPU call hopeless.
printf 'gemm 2048 2048 2048\n' > "$dir/big.txt"
"$tool" --dry-run --shapes "$dir/big.txt" --cache "$dir/none.txt" > "$dir/dry-big.txt" 2>&1 ||
    fail "--dry-run of a large GEMM failed"
if grep -q -e '^device: pthread-' -e '^device: cpu-' "$dir/dry-big.txt"; then
    grep -q '^ *cpu ' "$dir/dry-big.txt" || fail "a CPU OpenCL device dropped the CPU candidate"
fi

"$tool" --explain 'softmax 37 300' --cache "$cache" > "$dir/explain.txt" ||
    fail "--explain failed"
cat "$dir/explain.txt"
grep -q "rule 'tuned'" "$dir/explain.txt" || fail "the context did not use the tuned record"

set +e
"$tool" --bogus > /dev/null 2>&1; [ $? -eq 2 ] || fail "unknown option: exit status not 2"
for n in 5 -1 two ''; do
    "$tool" --build-threads "$n" --dry-run > /dev/null 2>&1
    [ $? -eq 2 ] || fail "--build-threads '$n': exit status not 2"
done
printf 'softmax 0 3\n' > "$dir/bad.txt"
"$tool" --shapes "$dir/bad.txt" --cache "$cache" > /dev/null 2>&1
[ $? -eq 2 ] || fail "bad shapes file: exit status not 2"
"$tool" --show --cache "$dir/missing.txt" > /dev/null 2>&1
[ $? -eq 4 ] || fail "--show of a missing cache: exit status not 4"
echo "selftest: ok"
