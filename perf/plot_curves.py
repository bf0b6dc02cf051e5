"""Overlay the curves of several zrl-bench learning JSON files (return against env frames and against wall time),
e.g. a curve after a change beside the ones before it, drawn by zrl-bench learning's own plot (needs matplotlib:
pip install -e '.[test]').

    python perf/plot_curves.py perf/results/learning/pong_defaults_60min_seed1.json \
        perf/results/learning/pong_defaults_60min_seed1_bca70aa.json --out perf/results/learning/x.png

Each curve is labelled with its file's name (without .json), its seed and the machine's CPU, which sets the pace
per minute; the reference curves are the first file's.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

from zrl.bench.learning import from_json, plot


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("files", nargs="+", help="zrl-bench learning --json outputs")
    parser.add_argument("--out", required=True, help="the PNG to write")
    parser.add_argument("--title", default="several runs", help="the figure's title, after the env id")
    args = parser.parse_args()

    docs = [(Path(path), json.loads(Path(path).read_text())) for path in args.files]
    curves = []
    for path, doc in docs:
        cpu = doc["machine"]["cpu"].replace("(R)", "").replace(" Processor", "")
        for curve in from_json(doc["result"])["curves"]:
            curves.append({**curve, "label": f"{path.stem}, seed {curve.get('seed', '?')} ({cpu})"})
    first = docs[0][1]["result"]
    merged = {**first, "config": args.title, "sets": [], "runs": [], "curves": curves}
    print(f"wrote {plot(merged, args.out)}")


if __name__ == "__main__":
    main()
