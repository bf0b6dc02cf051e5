#!/usr/bin/env bash
# How long CI takes, and how busy it keeps the machine: .ci/run on a fresh clone of this repository's HEAD (its
# own fresh venv, as CI makes it), with each test lane's 60 slowest durations, each test's CPU seconds (its own and
# its children's, tests/conftest.py), and /proc/stat sampled every 5 s. Writes OUT/ci.log (ending "rc=...
# seconds=... busy_fraction=..."), OUT/cpu.log (CPU s, wall s, test; the 25 costliest and the total at its end)
# and OUT/stat.txt.
#   bash perf/ci_time.sh OUT
set -u
out=$(mkdir -p "${1:?give a folder for the results}" && cd "$1" && pwd)
repo=$(cd "$(dirname "$0")/.." && pwd)
clone=$(mktemp -d)
git clone -q "$repo" "$clone" && cd "$clone" || exit 1
git log --oneline -1 > "$out/commit.txt"
cpu() { read -r _ u n s i w q sq st _ < <(grep '^cpu ' /proc/stat); echo "$((u + n + s + q + sq + st)) $((i + w))"; }
read -r busy0 idle0 < <(cpu)
(while true; do echo "$(date +%s) $(grep '^cpu ' /proc/stat)"; sleep 5; done) > "$out/stat.txt" &
sampler=$!
start=$(date +%s)
ZRL_TEST_CPU_LOG="$out/cpu.log" PYTEST_ADDOPTS="--durations=60" .ci/run > "$out/ci.log" 2>&1
rc=$?
end=$(date +%s)
kill $sampler
read -r busy1 idle1 < <(cpu)
share=$(python3 -c "print(round(($busy1 - $busy0) / (($busy1 - $busy0) + ($idle1 - $idle0)), 3))")
echo "rc=$rc seconds=$((end - start)) busy_fraction=$share" | tee -a "$out/ci.log"
if [ -s "$out/cpu.log" ]; then
    { echo "costliest tests, CPU s (wall s):"; sort -rn "$out/cpu.log" | head -25
      awk '{c += $1} END {printf "%.0f CPU s in %d tests\n", c, NR}' "$out/cpu.log"; } | tee -a "$out/ci.log"
fi
cd / && rm -rf "$clone"
exit $rc
