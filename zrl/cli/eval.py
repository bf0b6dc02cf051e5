"""zrl-eval: score a checkpoint under a standard Atari protocol, or compare two runs' evaluations."""

from __future__ import annotations

import sys

import click

from zrl.cli.common import trust_option, usage_error
from zrl.config import ConfigError


@click.command(context_settings={"help_option_names": ["-h", "--help"]})
@click.argument("checkpoint_or_run", required=False)
@click.option("--episodes", type=int, default=100, show_default=True, help="Episodes to play; episode i uses seed S+i.")
@click.option(
    "--protocol",
    type=click.Choice(["deepmind", "machado", "saber"]),
    default="deepmind",
    show_default=True,
    help="deepmind: 30 no-ops, 108k-frame cap; machado: sticky 0.25, full action set; saber: machado, a "
    "100-hour cap and 5 minutes without reward ends an episode (scores at 5 min, 30 min, uncapped).",
)
@click.option("--seed", type=int, default=0, show_default=True, help="S: episode i is played with seed S+i.")
@click.option("--workers", type=int, default=1, show_default=True, help="Processes that play episodes in parallel.")
@click.option("--greedy/--sample", default=False, help="Act on the most likely action, or sample the policy (default).")
@click.option(
    "--compare",
    "compare_runs",
    nargs=2,
    default=None,
    metavar="RUN_A RUN_B",
    help="Put two runs' newest evaluations under --protocol side by side, with the difference of means.",
)
@click.option(
    "--video",
    type=str,
    default=None,
    metavar="OUT.mp4|OUT.gif",
    help="Record the first episode as the agent sees it (84x84 frames, scaled up, real time).",
)
@click.option("--render", is_flag=True, help="Show the first episode in a window (needs a display).")
@click.option("--quiet", is_flag=True, help="Only the table.")
@trust_option("the checkpoint's stored config")
def eval_main(
    checkpoint_or_run, episodes, protocol, seed, workers, greedy, compare_runs, video, render, quiet, trusted
) -> None:
    """Score a checkpoint (or a run folder's best.pt) under a standard Atari protocol:
    zrl-eval results/ALE-Pong-v5_1795270480 --episodes 100 --protocol saber --workers 2"""
    from zrl import evaluate

    try:
        if compare_runs:
            run_a, run_b = compare_runs
            result = evaluate.compare(run_a, run_b, protocol=protocol, seed=seed)
            for side in ("a", "b"):
                r = result[side]
                click.echo(
                    f"{side.upper()} {r['run']}: mean {r['mean']:.1f} [{r['ci95_low']:.1f}, {r['ci95_high']:.1f}] "
                    f"over {r['episodes']} episodes"
                )
            click.echo(
                f"B - A: {result['difference_of_means']:+.1f}, 95% CI [{result['ci95_low']:+.1f}, "
                f"{result['ci95_high']:+.1f}]{' (significant)' if result['significant'] else ''}"
            )
            return
        if checkpoint_or_run is None:
            raise ConfigError("give a checkpoint or a run folder (or --compare RUN_A RUN_B)")
        report = evaluate.evaluate(
            checkpoint_or_run,
            episodes,
            protocol,
            seed,
            workers,
            greedy,
            progress=(lambda _: None) if quiet else click.echo,
            video=video,
            render=render,
            trusted=tuple(trusted),
        )
    except ConfigError as err:
        usage_error("zrl-eval", str(err))
    except KeyboardInterrupt:
        click.echo("zrl-eval: interrupted; nothing was written", err=True)
        sys.exit(130)
    click.echo(evaluate.table(report))
    if not quiet:
        click.echo("wrote " + " and ".join(report["files"]))
