"""What zrl-bench's modes share: the group (a usage mistake in one line, --suggest as the old spelling of
suggest), the options several modes take, the checks of their values, and running a mode to its tables and JSON."""

from __future__ import annotations

import contextlib
import sys

import click

from zrl.cli.common import EXIT_USAGE, usage_error
from zrl.config import ConfigError

HELP = {"help_option_names": ["-h", "--help"]}


class _OneLine(click.ClickException):
    """A usage mistake click found (an option the mode does not take, a value of the wrong type), shown as every
    other refusal of zrl's commands is: one line, exit 2."""

    exit_code = EXIT_USAGE

    def show(self, file=None) -> None:
        click.echo(f"zrl-bench: error: {self.message}", err=True)


def _one_line(err: click.UsageError) -> _OneLine:
    ctx = err.ctx
    if ctx is None:
        return _OneLine(err.format_message())
    return _OneLine(f"{err.format_message()} See {ctx.command_path} --help.")


class BenchGroup(click.Group):
    """The modes, in the order MODES gives. ``zrl-bench --suggest ...``, the spelling from before the modes were
    subcommands, runs ``zrl-bench suggest ...``."""

    def list_commands(self, ctx: click.Context) -> list[str]:
        return list(self.commands)

    def format_commands(self, ctx: click.Context, formatter: click.HelpFormatter) -> None:
        width = formatter.width - 6 - max(map(len, self.commands))
        with formatter.section("Modes"):
            formatter.write_dl([(name, self.commands[name].get_short_help_str(width)) for name in self.commands])

    def parse_args(self, ctx: click.Context, args: list[str]) -> list[str]:
        if "--suggest" in args and not (args and args[0] in self.commands):
            args = ["suggest", *(a for a in args if a != "--suggest")]
        return super().parse_args(ctx, args)

    def make_context(self, info_name, args, parent=None, **extra) -> click.Context:
        try:
            return super().make_context(info_name, args, parent, **extra)
        except click.UsageError as err:
            raise _one_line(err) from None

    def invoke(self, ctx: click.Context):
        try:
            return super().invoke(ctx)
        except click.UsageError as err:  # a subcommand's options, or no such mode
            raise _one_line(err) from None


# -- the options several modes share --------------------------------------------------------------------------


def combined(*decorators):
    """Several click options as one decorator, in the order given."""

    def apply(f):
        for decorator in reversed(decorators):
            f = decorator(f)
        return f

    return apply


config_options = combined(
    click.option(
        "--config",
        "config_path",
        type=str,
        default=None,
        help="TOML run file whose env, network and batch shape are measured.",
    ),
    click.option(
        "--set", "sets", multiple=True, metavar="SECTION.KEY=VALUE", help="Override one config key; repeatable."
    ),
)
json_option = click.option(
    "--json", "json_path", type=str, default=None, metavar="PATH", help="Write the figures and the machine's facts."
)
capacity_option = click.option(
    "--capacity", type=int, default=1000, show_default=True, help="Replay capacity in units."
)


def seconds_option(text: str, default: float | None = 5.0):
    """--seconds, with what the mode measures for that long."""
    return click.option("--seconds", type=float, default=default, show_default=default is not None, help=text)


def warmup_option(default: float):
    """--warmup, with the mode's default."""
    return click.option("--warmup", type=float, default=default, show_default=True, help="Seconds before measuring.")


def workers_option(many: bool):
    """--workers: one number (workers.count), or a comma list that makes a grid."""
    if many:
        return click.option(
            "--workers", type=str, default=None, metavar="N[,N...]", help="Worker processes; a comma list makes a grid."
        )
    return click.option("--workers", type=str, default=None, metavar="N", help="Worker processes (workers.count).")


def envs_option(many: bool):
    """--envs-per-worker: one number (workers.envs_per_worker), or a comma list that makes a grid."""
    if many:
        return click.option(
            "--envs-per-worker",
            type=str,
            default=None,
            metavar="M[,M...]",
            help="Envs per worker; a comma list makes a grid.",
        )
    return click.option(
        "--envs-per-worker", type=str, default=None, metavar="M", help="Envs per worker (workers.envs_per_worker)."
    )


# -- checks on values ----------------------------------------------------------------------------------------


def counts(text: str | None, flag: str) -> list[int]:
    """--workers 2 or --workers 1,2,4: positive integers."""
    if text is None:
        return []
    try:
        values = [int(v) for v in text.split(",")]
    except ValueError:
        raise ConfigError(f"{flag} {text!r}: expected a positive integer or a comma list such as 1,2,4") from None
    if any(v < 1 for v in values):
        raise ConfigError(f"{flag} {text!r}: every value must be at least 1")
    return values


def count(text: str | None, flag: str, mode: str) -> list[int]:
    """One positive integer, for a mode that measures one split: [] without the option."""
    if text is not None and "," in text:
        raise ConfigError(f"{mode}: {flag} takes one number, not a list")
    if text is not None and not (text.strip().isdigit() and int(text) >= 1):
        raise ConfigError(f"{flag} {text!r}: expected a positive integer")
    return counts(text, flag)


def one_split(workers: str | None, envs_per_worker: str | None, mode: str) -> dict:
    """bench.Options' workers and envs_per_worker for a mode that measures one split."""
    return {
        "workers": count(workers, "--workers", mode),
        "envs_per_worker": count(envs_per_worker, "--envs-per-worker", mode),
    }


def grid(workers: str | None, envs_per_worker: str | None) -> dict:
    """bench.Options' workers and envs_per_worker for a mode that runs a grid of them."""
    return {"workers": counts(workers, "--workers"), "envs_per_worker": counts(envs_per_worker, "--envs-per-worker")}


RULES = {
    "seconds": ("--seconds", "> 0", lambda v: v > 0),
    "warmup": ("--warmup", ">= 0", lambda v: v >= 0),
    "frames": ("--frames", "> 0", lambda v: v > 0),
    "capacity": ("--capacity", ">= 1", lambda v: v >= 1),
    "repeats": ("--repeats", ">= 1", lambda v: v >= 1),
    "rounds": ("--rounds", ">= 1", lambda v: v >= 1),
    "lam": ("--lambda", ">= 1", lambda v: v >= 1),
}


def in_range(**values) -> None:
    """ConfigError naming the rule of every option given, where one is out of its range (None: not given)."""
    if any(v is not None and not RULES[k][2](v) for k, v in values.items()):
        raise ConfigError(", ".join(f"{RULES[k][0]} must be {RULES[k][1]}" for k in values))


@contextlib.contextmanager
def refusals():
    """A config or usage mistake is one line and exit 2, Ctrl-C exit 130, a failed measurement exit 1."""
    from zrl.launch import namespace

    try:
        namespace()
        yield
    except ConfigError as err:
        usage_error("zrl-bench", str(err))
    except KeyboardInterrupt:
        click.echo("zrl-bench: interrupted; nothing was written", err=True)
        sys.exit(130)
    except RuntimeError as err:
        click.echo(f"zrl-bench: error: {err}", err=True)
        sys.exit(1)


def measure(mode: str, json_path: str | None, **options) -> None:
    """Run ``mode`` with ``options`` (bench.Options' fields), print its tables and write its --json."""
    import json
    from pathlib import Path

    from zrl import bench
    from zrl.bench.facts import machine

    opt = bench.Options(**options)
    with refusals():
        result = bench.run(mode, opt, progress=lambda text: click.echo(f"zrl-bench: {text} ...", err=True))
    click.echo(bench.render(mode, result))
    if json_path:
        path = Path(json_path)
        path.parent.mkdir(parents=True, exist_ok=True)
        doc = {"mode": mode, "seconds": opt.seconds, "machine": machine(), "result": result}
        path.write_text(json.dumps(doc, indent=2) + "\n")
        click.echo(f"wrote {path}")
