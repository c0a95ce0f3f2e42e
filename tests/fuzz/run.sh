#!/bin/sh
# Runs one libFuzzer target for a time budget: tests/fuzz/run.sh NAME SECONDS BUILD
# The target works on a fresh copy of tests/fuzz/corpus/NAME (new inputs stay in BUILD/corpus/,
# never in the tree), with NAME.dict if there is one. libFuzzer's output goes to
# BUILD/fuzz-logs/NAME.log; one summary line is printed, or, on a crash, a leak, a timeout or a
# UBSan report, the end of the log and the reproducer under BUILD/artifacts/NAME/, and exit 1.
set -u
name=$1 secs=$2 build=$3
bin=$build/fuzz/$name
corpus=$build/corpus/$name
art=$build/artifacts/$name
log=$build/fuzz-logs/$name.log
rm -rf "$corpus"
mkdir -p "$corpus" "$art" "$build/fuzz-logs"
if [ -d "tests/fuzz/corpus/$name" ]; then
    cp tests/fuzz/corpus/"$name"/* "$corpus"/ 2>/dev/null
fi
dict=""
[ -f "tests/fuzz/$name.dict" ] && dict="-dict=tests/fuzz/$name.dict"
# a hang or a runaway allocation is a finding too: 25 s per input, 2 GiB
# shellcheck disable=SC2086
"$bin" -max_total_time="$secs" -timeout=25 -rss_limit_mb=2048 -print_final_stats=1 \
    -artifact_prefix="$art/" $dict "$corpus" >"$log" 2>&1
rc=$?
runs=$(sed -n 's/^stat::number_of_executed_units: *//p' "$log" | tail -1)
cov=$(grep -oE 'cov: [0-9]+ ft: [0-9]+ corp: [0-9]+' "$log" | tail -1)
if [ "$rc" -ne 0 ] || grep -qE 'runtime error:|ERROR: (AddressSanitizer|LeakSanitizer|libFuzzer)' "$log"; then
    echo "not ok - fuzz $name: exit $rc after ${runs:-?} runs (log $log)"
    grep -E 'runtime error:|ERROR: |SUMMARY: |Test unit written|^    #[0-9] ' "$log" | head -40
    exit 1
fi
echo "ok - fuzz $name: ${runs:-?} runs in $secs s, $cov"
