#!/usr/bin/env bash
# ab_pipeline.sh OLD OUT [ROUNDS]: `zrl-bench pipeline --seconds 60` on the defaults, from a worktree at commit OLD
# and from this checkout, alternating old/new for ROUNDS rounds (3), into OUT/{old,new}_N.json; run it alone.
# The old side is started through its own zrl.cli (a module before 0b43b31, a package since), with this venv.
set -u
old=$1; out=$2; rounds=${3:-3}
here=$(cd "$(dirname "$0")/.." && pwd)
tree=$(mktemp -d)/old
git -C "$here" worktree add -f "$tree" "$old" >/dev/null
trap 'git -C "$here" worktree remove --force "$tree"' EXIT
mkdir -p "$out"
main_of() { if [ -d "$1/zrl/cli" ]; then echo "from zrl.cli.bench import bench_main; bench_main()"; else echo "from zrl.cli import bench_main; bench_main()"; fi; }
for r in $(seq 1 "$rounds"); do
  for side in old new; do
    src=$here; [ $side = old ] && src=$tree
    ( cd "$out" && PYTHONPATH=$src ZRL_NAMESPACE=ab timeout 600 python -c "$(main_of "$src")" pipeline --seconds 60 \
        --json "$out/${side}_$r.json" > "$out/${side}_$r.log" 2>&1 )
    echo "$side $r rc=$? $(date +%T)"
  done
done
