#!/usr/bin/env bash
# Does a change leave the learning math alone? The defaults before 2026-11-28 (a queue alone, each unit trained
# on once, entropy cost 0.0006; pinned below, so that trees on either side of that change compare), or --set
# items after the tree, in
# deterministic mode (one worker, the learner in lockstep), trained by another tree's zrl-launch and by this
# one's, from the same seed for the same number of learner steps: the final weights and the actions trained on
# must be equal bit for bit. Free-running runs differ from run to run; these cannot.
#   bash perf/deterministic_ab.sh OTHER_TREE [STEPS] [--set ...]
# e.g. git clone -q . /tmp/old && git -C /tmp/old checkout -q d8ab295 && bash perf/deterministic_ab.sh /tmp/old 150
set -euo pipefail
other=$(cd "${1:?give the other tree (a clone at the commit to compare)}" && pwd)
steps=${2:-150}
shift $(( $# >= 2 ? 2 : 1 ))
here=$(cd "$(dirname "$0")/.." && pwd)
python=${PYTHON:-python}
# env frames per learner step, from the config these --set items make: one step's budget
batch=$(cd "$here" && $python -c "import sys; from zrl import config; c = config.load(None, sys.argv[2::2]); \
print(c.learner.batch_size * c.learner.unroll_length * c.env.frame_skip)" "$@")
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
pins=(--replay '[{"type": "queue", "capacity": 64, "sample_ratio": 1.0}]' --set learner.entropy_cost=0.0006)
for side in other here; do
  tree=$([ $side = other ] && echo "$other" || echo "$here")
  ratio=()  # trees that know learner.replay_ratio (its default is 4 since 2026-11-28) get it at 0
  grep -rqs "how many times each fresh sample is trained on" "$tree/zrl" && ratio=(--set learner.replay_ratio=0)
  mkdir -p "$work/$side"
  start=$(date +%s)
  (cd "$work/$side" && PYTHONPATH="$tree" $python "$tree/bin/zrl-launch" --set run.deterministic=true --set run.seed=1 \
    "${pins[@]}" "${ratio[@]}" --set run.max_env_frames=$((steps * batch)) "$@" --quiet)
  echo "$side ($(git -C "$tree" log --oneline -1 | cut -c1-60)): $steps learner steps in $(( $(date +%s) - start )) s"
done
$python - "$work" <<'PY'
import glob, sys
import torch
def final(side):
    path = sorted(glob.glob(f"{sys.argv[1]}/{side}/results/*/checkpoints/ckpt_*.pt"))[-1]
    return torch.load(path, weights_only=True)
a, b = final("other"), final("here")
same = a["learner_step"] == b["learner_step"] and a["model"].keys() == b["model"].keys()
same = same and all(torch.equal(a["model"][k], b["model"][k]) for k in a["model"])
actions = torch.equal(a["trained_actions"], b["trained_actions"])
print(f"learner steps {a['learner_step']} / {b['learner_step']}; weights identical: {same}; actions trained on identical: {actions}")
if not same:
    for k in a["model"]:
        print(f"  {k}: largest difference {(a['model'][k].float() - b['model'][k].float()).abs().max().item():.3g}")
sys.exit(0 if same and actions else 1)
PY
