#!/bin/sh
# fuzz/run.sh SECONDS HARNESS... — runs each harness SECONDS under libFuzzer, then SECONDS under
# AFL++, one process at a time; prints execs/s, total execs, corpus size and coverage for each
# run; exits 1 if any run found a crash (or failed to run). Binaries come from fuzz/fuzz.mk:
# $FUZZ_DIR/<harness>/libfuzzer and $FUZZ_DIR/<harness>/afl-bin. Run from the repository top.
set -u
secs=$1
shift
dir=${FUZZ_DIR:-build/fuzz}
failed=0
summary=""

note() {
    summary="$summary$1
"
    echo "$1"
}

for h in "$@"; do
    w=$dir/$h
    # a harness's own dictionary (fuzz/<harness>.dict) when it has one, else the HTTP tokens
    dict=fuzz/$h.dict
    [ -f "$dict" ] || dict=fuzz/http.dict
    mkdir -p "$w/corpus" "$w/crashes"
    # seeds and reproducers join the working corpus (cp -n: never overwrite a grown entry)
    for f in fuzz/corpus/$h/* fuzz/regressions/$h/*; do
        [ -f "$f" ] && cp -n "$f" "$w/corpus/" 2>/dev/null
    done

    # ---- libFuzzer
    echo "== $h: libFuzzer, ${secs}s"
    rm -f "$w"/crashes/crash-* "$w"/crashes/leak-* "$w"/crashes/timeout-* "$w"/crashes/oom-*
    "$w/libfuzzer" -max_total_time="$secs" -print_final_stats=1 -dict="$dict" -max_len=4096 \
        -timeout=10 -rss_limit_mb=2048 -artifact_prefix="$w/crashes/" "$w/corpus" \
        >"$w/libfuzzer.log" 2>&1
    rc=$?
    execs=$(sed -n 's/^stat::number_of_executed_units: *//p' "$w/libfuzzer.log" | tail -1)
    rate=$(sed -n 's/^stat::average_exec_per_sec: *//p' "$w/libfuzzer.log" | tail -1)
    cov=$(grep -o 'cov: [0-9]*' "$w/libfuzzer.log" | tail -1 | cut -d' ' -f2)
    pcs=$(sed -n 's/.*PC tables (\([0-9]*\) PCs).*/\1/p' "$w/libfuzzer.log" | head -1)
    ncorp=$(ls "$w/corpus" | wc -l)
    note "$h libfuzzer: ${secs}s execs=${execs:-?} execs/s=${rate:-?} corpus=$ncorp cov=${cov:-?}/${pcs:-?} PCs rc=$rc"
    if [ $rc -ne 0 ] || ls "$w"/crashes/* >/dev/null 2>&1; then
        failed=1
        note "$h libfuzzer: FAILED, see $w/libfuzzer.log and $w/crashes/"
        tail -40 "$w/libfuzzer.log"
    fi

    # ---- AFL++ (from libFuzzer's corpus; a fresh output directory each run)
    echo "== $h: AFL++, ${secs}s"
    rm -rf "$w/afl"
    AFL_NO_UI=1 AFL_SKIP_CPUFREQ=1 AFL_I_DONT_CARE_ABOUT_MISSING_CRASHES=1 AFL_NO_AFFINITY=1 \
    AFL_SKIP_CRASHES=1 AFL_IMPORT_FIRST=1 AFL_NO_WARN_INSTABILITY=1 \
        afl-fuzz -V "$secs" -m none -t 1000+ -i "$w/corpus" -o "$w/afl" -x "$dict" -- "$w/afl-bin" \
        >"$w/afl.log" 2>&1
    rc=$?
    st=$w/afl/default/fuzzer_stats
    stat() { sed -n "s/^$1 *: *//p" "$st" 2>/dev/null; }
    crashes=$(stat saved_crashes)
    [ -n "$crashes" ] || crashes=$(stat unique_crashes)
    note "$h afl++: ${secs}s execs=$(stat execs_done) execs/s=$(stat execs_per_sec) corpus=$(stat corpus_count) edges=$(stat edges_found)/$(stat total_edges) bitmap=$(stat bitmap_cvg) crashes=${crashes:-?} hangs=$(stat saved_hangs) rc=$rc"
    if [ $rc -ne 0 ] || [ ! -f "$st" ] || [ "${crashes:-1}" != 0 ]; then
        failed=1
        note "$h afl++: FAILED, see $w/afl.log and $w/afl/default/crashes/"
        tail -30 "$w/afl.log"
    fi
    # what AFL++ found seeds the next libFuzzer run
    for f in "$w"/afl/default/queue/id:*; do
        [ -f "$f" ] && cp "$f" "$w/corpus/afl-$(basename "$f" | cut -d, -f1 | tr -d :)-$(cksum <"$f" | cut -d' ' -f1)"
    done
done

echo "== fuzz summary"
printf '%s' "$summary"
exit $failed
