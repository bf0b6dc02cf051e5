"""zrl-plot: run folders written in the real CSV format (zrl.metrics.writing.CsvLog) with contents a test controls; the
curves, the grouping over seeds with its band, the health panel, SVG, torn and growing files, and bad input."""

from __future__ import annotations

import subprocess
import sys
from collections import deque
from pathlib import Path

import numpy as np
import pytest
from click.testing import CliRunner, Result
from PIL import Image

from zrl import config
from zrl.agents import get as get_agent
from zrl.bench.learning import WINDOW
from zrl.cli.plot import plot_main
from zrl.experiment import plot
from zrl.experiment.runs import curve, group_runs, load_run
from zrl.metrics.columns import EPISODE_COLUMNS, EVAL_COLUMNS, metric_columns
from zrl.metrics.time_split import SECTIONS
from zrl.metrics.writing import CsvLog

START = 1_700_000_000.0  # the fake runs' start, unix seconds
INTERVAL_S = 2.0  # their metrics rows' interval


def _run(folder: Path, seed: int = 1, returns=(), rows: int = 30, sets=(), close: bool = True, entropy_end=0.01):
    """A run folder as zrl-launch writes it: its resolved config.toml, an episode of each of ``returns`` (one
    every second from START + 1, 1000 env frames apart) and ``rows`` metrics rows (every INTERVAL_S), whose
    full-queue drops grow while the others stay zero and whose entropy weight moves from 0.01 to
    ``entropy_end``. With ``close`` False the two CsvLogs are returned open."""
    folder.mkdir(parents=True)
    cfg = config.load(None, [f"run.seed={seed}", f"run.results_dir={str(folder.parent)!r}", *sets], {})
    (folder / "config.toml").write_text(config.dumps(cfg))
    episodes = CsvLog(folder / "episodes.csv", EPISODE_COLUMNS)
    for i, raw in enumerate(returns):
        episodes.write(
            {
                "episode": i + 1,
                "raw_return": float(raw),
                "env_frames": (i + 1) * 1000,
                "wall_time": f"{START + 1 + i:.3f}",
                "worker_id": i % 2,
                "env_index": 0,
            }
        )
    metrics = CsvLog(folder / "metrics.csv", metric_columns(get_agent("vtrace")))
    for i in range(rows):
        elapsed = (i + 1) * INTERVAL_S
        row = {
            "wall_time": f"{START + elapsed:.3f}",
            "elapsed_s": elapsed,
            "env_frames": i * 2000,
            "frames_per_s": 1000.0,
        }
        row |= {"samples_per_s": 320.0, "learner_step": i * 10, "total_loss": 1.0 / (i + 1), "pg_loss": -0.5}
        row |= {"baseline_loss": 0.25, "entropy_loss": -1.5, "grad_norm": 3.0, "learning_rate": 6e-4}
        row |= {"policy_lag": 1, "sample_age_mean": 1, "sample_age_max": 2, "unrolls_dropped_full": i}
        row |= {"entropy_cost": 0.01 + (entropy_end - 0.01) * i / max(1, rows - 1)}
        row |= {"unrolls_dropped_stale": 0, "units_dropped_torn": 0, "seq_gaps": 0}
        row |= {f"time_{s}_s": elapsed * 0.1 for group in SECTIONS.values() for s in group}
        metrics.write(row)
    if not close:
        return episodes, metrics
    episodes.close()
    metrics.close()
    return folder


@pytest.fixture(autouse=True)
def _close_figures():
    yield
    plot._matplotlib().close("all")


def _png(path: Path, size: tuple[float, float]) -> None:
    """A PNG of the figure's size in pixels, with something drawn on it (many colours, not a blank page)."""
    with Image.open(path) as image:
        assert image.format == "PNG"
        assert image.size == (int(size[0] * plot.DPI), int(size[1] * plot.DPI))
        assert len(image.convert("RGB").getcolors(maxcolors=1 << 20)) > 50


def _cli(*args) -> Result:
    return CliRunner().invoke(plot_main, [str(a) for a in args])


def _texts(ax) -> list[str]:
    return [t.get_text() for t in ax.texts]


@pytest.mark.unit
def test_the_curve_is_the_mean_of_the_last_100_episodes_in_the_order_they_ended(tmp_path):
    rng = np.random.default_rng(1)
    returns = rng.integers(-21, 22, size=250).astype(float)
    run = load_run(_run(tmp_path / "run", returns=returns))
    run.episodes.reverse()  # workers report apart: the file's order is not the order the episodes ended
    run.episodes[10]["env_frames"] = "5"  # a worker's count that lags the others'
    c = curve(run)
    window, expected = deque(maxlen=WINDOW), []
    for raw in returns:
        window.append(raw)
        expected.append(sum(window) / len(window))
    np.testing.assert_allclose(c.mean_return, expected)
    assert np.all(np.diff(c.frames) >= 0) and c.frames[-1] == 250_000
    assert c.frames[239] == 239_000  # the lagging count is lifted to the one before it
    # the start is the first metrics row's wall time less its elapsed seconds: START
    np.testing.assert_allclose(c.minutes, (np.arange(250) + 1) / 60.0)


@pytest.mark.unit
def test_runs_of_one_config_over_seeds_are_one_group_and_another_config_is_another(tmp_path):
    seeds = [load_run(_run(tmp_path / f"s{seed}", seed=seed, returns=[0.0])) for seed in (1, 2)]
    groups = group_runs(seeds)
    assert [len(g.runs) for g in groups] == [2]
    assert groups[0].name == "ALE/Pong-v5"
    budget = load_run(_run(tmp_path / "s3", seed=3, returns=[0.0], sets=["run.max_seconds=60"]))
    older = _run(tmp_path / "s4", seed=4, returns=[0.0])  # written before a key was added: it has the default
    text = (older / "config.toml").read_text()
    (older / "config.toml").write_text(text.replace("grad_norm_clip = 40.0\n", ""))
    assert "grad_norm_clip" not in (older / "config.toml").read_text()
    runs = [*seeds, budget, load_run(older)]
    assert [len(g.runs) for g in group_runs(runs)] == [4]  # the budget is not the config
    other = load_run(_run(tmp_path / "lr", seed=1, returns=[0.0], sets=["learner.learning_rate=0.0003"]))
    groups = group_runs([seeds[0], other, seeds[1]])
    assert [[r.folder.name for r in g.runs] for g in groups] == [["s1", "s2"], ["lr"]]
    assert groups[0].name == "ALE/Pong-v5, learner.learning_rate=0.0012"  # Pong's own rate
    assert groups[1].name == "lr, learner.learning_rate=0.0003"


@pytest.mark.unit
def test_a_long_legend_entry_is_wrapped_so_that_the_axes_keep_their_width():
    # Two runs whose configs differ in 10 keys: the run folder, 3 of the keys and "+7 keys", over 150 characters
    label = "ALE-Pong-v5_1795962278, " + ", ".join(f"learner.key_{i}=0.0006" for i in range(3)) + ", +7 keys"
    lines = plot._wrapped(label).split("\n")
    assert len(lines) > 1 and all(len(line) <= plot.LABEL_WIDTH for line in lines)
    assert " ".join(lines) == label
    assert plot._wrapped("ALE/Pong-v5 (3 seeds)") == "ALE/Pong-v5 (3 seeds)"


@pytest.mark.unit
def test_a_group_of_seeds_is_drawn_as_its_mean_with_a_bootstrap_band(tmp_path):
    runs = [load_run(_run(tmp_path / f"s{s}", seed=s, returns=[r] * 150)) for s, r in ((1, -20.0), (2, -10.0))]
    fig = plot.draw_curves(runs)
    frames_ax, minutes_ax = fig.axes
    for ax in (frames_ax, minutes_ax):
        (line,) = ax.lines
        assert line.get_label() == "ALE/Pong-v5 (2 seeds)"
        np.testing.assert_allclose(line.get_ydata(), -15.0)
        (band,) = ax.collections  # fill_between's
        ys = band.get_paths()[0].vertices[:, 1]
        assert ys.min() == pytest.approx(-20.0) and ys.max() == pytest.approx(-10.0)
    assert "95% bootstrap band" in fig._suptitle.get_text()


@pytest.mark.unit
def test_one_runs_curves_are_a_png_in_its_plots_folder(tmp_path):
    folder = _run(tmp_path / "run", returns=np.linspace(-21, 5, 150))
    result = _cli(folder)
    assert result.exit_code == 0, result.output
    _png(folder / "plots" / "curves.png", plot.CURVES_SIZE)
    assert result.stderr == f"wrote {folder / 'plots' / 'curves.png'}\n"


@pytest.mark.unit
def test_several_runs_go_to_zrl_plot_png_here_by_default(tmp_path, monkeypatch):
    folders = [_run(tmp_path / f"s{s}", seed=s, returns=np.linspace(-21, s, 120)) for s in (1, 2)]
    monkeypatch.chdir(tmp_path)
    result = _cli(*folders)
    assert result.exit_code == 0, result.output
    _png(tmp_path / "zrl-plot.png", plot.CURVES_SIZE)


@pytest.mark.unit
def test_the_health_panel_is_a_png_and_says_what_a_run_did_not_use(tmp_path):
    folder = _run(tmp_path / "run", returns=np.linspace(-21, 5, 150))
    result = _cli(folder, "--metrics")
    assert result.exit_code == 0, result.output
    _png(folder / "plots" / "metrics.png", plot.METRICS_SIZE)

    fig = plot.draw_metrics(load_run(folder))
    by_title = {ax.get_title(): ax for ax in fig.axes if ax.get_title()}
    assert "not used in this run" in _texts(by_title["elite feature distances"])[0]
    assert _texts(by_title["restarts and errors (cumulative)"]) == ["none in this run"]
    drops = [t.get_text() for t in by_title["drops and gaps (cumulative)"].get_legend().get_texts()]
    assert drops == [
        "full queue",
        "stale (frames overwritten): 0 throughout",
        "torn when read: 0 throughout",
        "messages missing: 0 throughout",
    ]
    workers = by_title["time split: workers"]
    assert len(workers.collections) == len(SECTIONS["workers"]) and not _texts(workers)
    # each section took 0.1 s per second: the stack of the workers' sections tops out at 0.5
    top = max(path.vertices[:, 1].max() for stack in workers.collections for path in stack.get_paths())
    assert top == pytest.approx(0.1 * len(SECTIONS["workers"]))
    # the learner's first row is before its first step: its zeros are not drawn
    (loss,) = [line for line in by_title["losses"].lines if line.get_label() == "total"]
    assert len(loss.get_xdata()) == 29


@pytest.mark.unit
def test_rows_before_the_learners_first_step_after_a_restart_draw_no_step_figures(tmp_path):
    """A restarted learner reports its step count with zeros for its step's figures until it steps again: those
    rows are not drawn (no loss or entropy weight falling to 0 and back)."""
    episodes, metrics = _run(tmp_path / "run", returns=np.linspace(-21, 5, 50), entropy_end=0.001, close=False)
    zeros = {key: 0 for key in ("total_loss", "pg_loss", "baseline_loss", "entropy_loss", "grad_norm", "entropy_cost")}
    for i, figures in ((31, zeros), (32, {}), (33, {"total_loss": 0.5})):  # the last row before: step 290
        steps = 300 if i == 33 else 290
        metrics.write(
            {"wall_time": f"{START + i * INTERVAL_S:.3f}", "elapsed_s": i * INTERVAL_S}
            | figures
            | {"learner_step": steps, "env_frames": i * 2000}
        )
    episodes.close()
    metrics.close()
    fig = plot.draw_metrics(load_run(tmp_path / "run"))
    by_title = {ax.get_title(): ax for ax in fig.axes if ax.get_title()}
    (loss,) = [line for line in by_title["losses"].lines if line.get_label() == "total"]
    assert len(loss.get_xdata()) == 30 and loss.get_ydata()[-1] == 0.5 and min(loss.get_ydata()) > 0
    (entropy,) = [ax for ax in fig.axes if ax.get_ylabel() == "entropy weight"]
    assert min(entropy.lines[0].get_ydata()) == pytest.approx(0.001)


@pytest.mark.unit
def test_an_entropy_weight_that_moves_is_drawn_beside_the_entropy_loss_and_a_fixed_one_is_not(tmp_path):
    def beside(folder: Path) -> list:
        fig = plot.draw_metrics(load_run(folder))
        (entropy,) = [ax for ax in fig.axes if ax.get_title() == "entropy loss"]
        return [ax for ax in fig.axes if ax is not entropy and ax.bbox.bounds == entropy.bbox.bounds]

    (weight,) = beside(_run(tmp_path / "decays", entropy_end=0.001))
    assert weight.get_ylabel() == "entropy weight"
    (line,) = weight.lines
    assert line.get_ydata()[0] == pytest.approx(0.01 + (0.001 - 0.01) / 29)  # the first row has no step yet
    assert line.get_ydata()[-1] == pytest.approx(0.001)
    assert beside(_run(tmp_path / "fixed")) == []


def _evaluations(folder: Path, scores: list[tuple[float, float, float]], torn: bool = False) -> None:
    """eval.csv as the launcher writes it: an evaluation of each (mean, low, high) of ``scores``, the weights of the
    i-th taken at 30 s times i and 20,000 env frames times i; ``torn``: and a last row cut short."""
    log = CsvLog(folder / "eval.csv", EVAL_COLUMNS)
    for i, (mean, low, high) in enumerate(scores, start=1):
        row = {"wall_time": f"{START + 30 * i:.3f}", "elapsed_s": 30.0 * i, "env_frames": 20_000 * i, "index": i}
        log.write(row | {"protocol": "deepmind", "episodes": 10, "mean": mean, "ci95_low": low, "ci95_high": high})
    log.close()
    if torn:
        with open(folder / "eval.csv", "a") as fh:
            fh.write(f"{START + 200:.3f},200,140000,7")


@pytest.mark.unit
def test_evaluations_during_training_are_points_with_their_intervals_on_both_figures(tmp_path):
    folder = _run(tmp_path / "run", returns=np.linspace(-21, 5, 150))
    _evaluations(folder, [(-20.0, -21.0, -19.5), (-15.0, -16.0, -13.0), (-9.0, -9.0, -9.0)], torn=True)
    result = _cli(folder)
    assert result.exit_code == 0, result.output
    assert "eval.csv: skipped a torn last line" in result.stderr
    fig = plot.draw_curves([load_run(folder)])
    for ax, xs in zip(fig.axes, ([0.02, 0.04, 0.06], [0.5, 1.0, 1.5])):  # millions of frames; minutes
        ((points, _, (bars,)),) = ax.containers  # errorbar's: the markers, the caps, the bars
        np.testing.assert_allclose(points.get_xdata(), xs)
        np.testing.assert_allclose(points.get_ydata(), [-20.0, -15.0, -9.0])
        np.testing.assert_allclose([seg[:, 1] for seg in bars.get_segments()], [[-21, -19.5], [-16, -13], [-9, -9]])
        labels = [t.get_text() for t in ax.get_legend().get_texts()]
        assert labels == ["run", "evaluations (deepmind, 10 episodes), 95% CI"]
    assert "points: evaluations during training" in fig._suptitle.get_text()
    health = plot.draw_metrics(load_run(folder))
    (ret,) = [ax for ax in health.axes if ax.get_title() == "return"]
    ((points, _, _),) = ret.containers
    np.testing.assert_allclose(points.get_xdata(), [0.5, 1.0, 1.5])
    # A run without eval.csv has no points and no note about the file.
    other = _run(tmp_path / "other", returns=np.linspace(-21, 5, 150))
    result = _cli(other)
    assert result.exit_code == 0 and result.stderr == f"wrote {other / 'plots' / 'curves.png'}\n", result.output
    assert "evaluations" not in plot.draw_curves([load_run(other)])._suptitle.get_text()


@pytest.mark.unit
def test_each_replay_table_is_its_own_line_where_the_counts_match_the_tables():
    rows = [{"replay_sizes": "3 40", "replay_size": "40"}, {"replay_sizes": "", "replay_size": ""}]
    rows.append({"replay_sizes": "5 x", "replay_size": "5"})  # a count that is not a number
    two = plot._replay_sizes(rows, {"replay": [{"type": "queue"}, {"type": "standard"}]})
    assert [label for label, _ in two] == ["units, 1: queue", "units, 2: standard"]
    np.testing.assert_array_equal(two[0][1], [3, np.nan, 5])
    np.testing.assert_array_equal(two[1][1], [40, np.nan, np.nan])
    ((label, fullest),) = plot._replay_sizes(rows, {"replay": [{"type": "queue"}]})
    assert label == "units held"
    np.testing.assert_array_equal(fullest, [40, np.nan, 5])


@pytest.mark.unit
def test_svg_beside_the_png_or_instead_of_it(tmp_path):
    folder = _run(tmp_path / "run", returns=[-21.0] * 5)
    result = _cli(folder, "--svg", "--out", tmp_path / "pics" / "c.png")
    assert result.exit_code == 0, result.output
    _png(tmp_path / "pics" / "c.png", plot.CURVES_SIZE)
    assert "<svg" in (tmp_path / "pics" / "c.svg").read_text()[:1000]
    assert result.stderr.splitlines() == [
        f"wrote {tmp_path / 'pics' / 'c.png'}",
        f"wrote {tmp_path / 'pics' / 'c.svg'}",
    ]
    result = _cli(folder, "--out", tmp_path / "c.svg")
    assert result.exit_code == 0, result.output
    assert "<svg" in (tmp_path / "c.svg").read_text()[:1000] and not (tmp_path / "c.png").exists()


@pytest.mark.unit
def test_a_torn_last_line_is_skipped_with_a_note(tmp_path):
    folder = _run(tmp_path / "run", returns=np.linspace(-21, 5, 150))
    torn = {"episodes.csv": "151,-3,-3,-3,30", "metrics.csv": f"{START + 99},"}
    for name, text in torn.items():
        with open(folder / name, "a") as fh:
            fh.write(text)
    result = _cli(folder)
    assert result.exit_code == 0, result.output
    assert result.stderr.splitlines() == [
        *(
            f"zrl-plot: note: {folder / n}: skipped a torn last line ({len(t)} bytes with no newline)"
            for n, t in torn.items()
        ),
        f"wrote {folder / 'plots' / 'curves.png'}",
    ]
    assert len(curve(load_run(folder)).mean_return) == 150


@pytest.mark.unit
def test_a_run_still_writing_is_drawn_as_it_stands_and_again_as_it_grows(tmp_path):
    episodes, metrics = _run(tmp_path / "run", returns=[-21.0] * 3, rows=4, close=False)
    with open(tmp_path / "run" / "episodes.csv", "a") as fh:  # a row half written, the run's writers still open
        fh.write("4,-20,-20,-2")
        fh.flush()
        result = _cli(tmp_path / "run", "--metrics")
        assert result.exit_code == 0, result.output
        assert "episodes.csv: skipped a torn last line" in result.stderr
        fh.write(f"0,900,225,4000,{START + 5:.3f},0,0\n")  # its end: 10 fields
    episodes.write({"episode": 5, "raw_return": -19.0, "env_frames": 5000, "wall_time": f"{START + 6:.3f}"})
    metrics.write({"wall_time": f"{START + 10:.3f}", "elapsed_s": 10.0, "env_frames": 9000, "learner_step": 50})
    result = _cli(tmp_path / "run")
    assert result.exit_code == 0 and "note" not in result.stderr, result.output
    np.testing.assert_allclose(curve(load_run(tmp_path / "run")).mean_return, [-21, -21, -21, -20.75, -20.4])
    episodes.close()
    metrics.close()


@pytest.mark.unit
def test_a_run_with_no_episodes_yet_is_drawn_and_says_so(tmp_path):
    folder = _run(tmp_path / "run", rows=3)
    for args in ([], ["--metrics"]):
        result = _cli(folder, *args)
        assert result.exit_code == 0, result.output
    assert [_texts(ax) for ax in plot.draw_curves([load_run(folder)]).axes] == [["no episodes yet"]] * 2
    fig = plot.draw_metrics(load_run(folder))
    assert _texts(fig.axes[0]) == ["no episodes yet"] and fig.axes[1].lines  # the losses are there


def _one_error_line(result, *parts: str) -> None:
    assert result.exit_code == 2, result.output
    assert result.stderr.count("\n") == 1 and result.stderr.startswith("zrl-plot: error: "), result.stderr
    for part in parts:
        assert part in result.stderr


@pytest.mark.unit
def test_a_folder_that_is_not_a_run_is_a_usage_error(tmp_path):
    (tmp_path / "empty").mkdir()
    _one_error_line(_cli(tmp_path / "empty"), str(tmp_path / "empty"), "no config.toml", "episodes.csv")
    (tmp_path / "config_only").mkdir()
    (tmp_path / "config_only" / "config.toml").write_text('algo = "vtrace"\n')
    _one_error_line(_cli(tmp_path / "config_only"), "no episodes.csv or metrics.csv")
    assert not (tmp_path / "config_only" / "plots").exists()


@pytest.mark.unit
def test_a_path_that_does_not_exist_is_a_usage_error(tmp_path):
    _one_error_line(_cli(tmp_path / "nowhere"), f"{tmp_path / 'nowhere'}: no such folder", "config.toml")


@pytest.mark.unit
def test_the_health_panel_takes_one_run(tmp_path):
    folders = [_run(tmp_path / f"s{s}", seed=s, returns=[0.0]) for s in (1, 2)]
    _one_error_line(_cli(*folders, "--metrics"), "one run folder, not 2")


@pytest.mark.unit
def test_an_out_that_is_neither_png_nor_svg_is_a_usage_error(tmp_path):
    folder = _run(tmp_path / "run", returns=[0.0])
    _one_error_line(_cli(folder, "--out", tmp_path / "c.jpg"), "c.jpg", "PNG (FILE.png) or SVG (FILE.svg)")
    assert not (tmp_path / "c.jpg").exists()


@pytest.mark.integration
def test_the_console_script_draws_a_run(tmp_path):
    folder = _run(tmp_path / "run", returns=np.linspace(-21, 5, 150))
    script = Path(sys.executable).with_name("zrl-plot")  # the entry point pip installed beside this interpreter
    proc = subprocess.run([script, folder, "--svg"], capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0, proc.stderr
    assert proc.stderr.splitlines() == [f"wrote {folder / 'plots' / s}" for s in ("curves.png", "curves.svg")]
    _png(folder / "plots" / "curves.png", plot.CURVES_SIZE)
    proc = subprocess.run([script, tmp_path / "nowhere"], capture_output=True, text=True, timeout=60)
    assert proc.returncode == 2 and proc.stderr.count("\n") == 1, proc.stderr
