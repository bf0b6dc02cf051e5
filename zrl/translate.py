"""zrl-translate: a reference platform's command line as a zrl run file.

Two references, their options read from their own option files (docs/reference_options.md has every one, with
its source line):

- ``ebv``: the elite-replay platform (parralplex/elite_buffer_vtrace), ``main.py`` flags with its
  ``--replay_parameters`` list;
- ``rainbow``: Rainbow-IQN Ape-X (valeoai/rainbow-iqn-apex), ``launch_learner.py`` / ``launch_actor.py`` flags.

A translation is the run the reference would make: every option it has, given or left at its default, becomes
the zrl key that does the same, where zrl's default differs (the run file names the flag each key came from).
An option with no equivalent is named on stderr with the reason when it is given, never dropped silently; an
option the reference does not have is a usage error. ``OPTIONS[reference]`` is the table the README's
translation tables are written from (``python -m zrl.translate --table ebv``).
"""

from __future__ import annotations

import argparse
import ast
import difflib
import json
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import tomli_w

from zrl.config import ConfigError, load, replays_from_json
from zrl.config.schema import SECTIONS

NAMES = {"ebv": "the elite-replay platform (main.py)", "rainbow": "Rainbow-IQN Ape-X (launch_learner.py)"}


@dataclass(frozen=True)
class Option:
    """One reference option: its flag (its other spelling too), how its text is read, its default as the
    reference gives it, where it lives in zrl (a key, or a command's option; "" for nowhere) and one line on
    any difference (for an option with no home: why)."""

    flag: str
    kind: str  # str, int, float, bool (ebv: any non-empty text is true), int01 (0/1 or a word), flag, json
    default: Any
    home: str
    note: str = ""
    alias: str = ""


def _o(flag, kind, default, home, note="", alias=""):
    return Option(flag, kind, default, home, note, alias)


EBV_REPLAYS = '[{"type": "queue", "capacity": 1, "sample_ratio": 0.5}, {"type": "standard", "capacity": 1000, "sample_ratio": 0.5}]'

# fmt: off
OPTIONS: dict[str, tuple[Option, ...]] = {
    "ebv": (
        _o("--op_mode", "str", "train", "zrl-launch / --resume / zrl-eval", "train_w_load is zrl-launch --resume RUN; test is zrl-eval"),
        _o("--load_model_url", "str", None, "zrl-launch --init-from / --resume", "a checkpoint file or run folder, not a folder of the reference's two files"),
        _o("--load_optimizer_save", "bool", True, "zrl-launch --init-optimizer", "--resume always takes the optimiser's state"),
        _o("--save_model_period", "int", 1000, "run.checkpoint_every_steps", "learner updates in both"),
        _o("--debug", "bool", False, "", "no equivalent: zrl's roles are processes; run one under a debugger with its own command"),
        _o("--lr", "float", 0.0008, "learner.learning_rate"),
        _o("--batch_size", "int", 100, "learner.batch_size", "unrolls in both"),
        _o("--r_f_steps", "int", 10, "learner.unroll_length"),
        _o("--gradient_clip_by_norm_threshold", "float", 40.0, "learner.grad_norm_clip"),
        _o("--gamma", "float", 0.99, "learner.discount"),
        _o("--seed", "int", None, "run.seed", "the reference draws a random seed when none is given; zrl's default is 0"),
        _o("--reproducible", "bool", False, "run.deterministic", "zrl's needs one worker and one queue replay"),
        _o("--env", "str", "AtlantisNoFrameskip-v4", "env.id", "zrl takes the same <Game>NoFrameskip-v4 ids; its default is ALE/Pong-v5"),
        _o("--clip_rewards", "bool", True, "env.clip_rewards"),
        _o("--reward_clipping_method", "str", "abs_one_sign", "env.clip_method"),
        _o("--skipped_frames", "int", 4, "env.frame_skip"),
        _o("--frames_stacked", "int", 4, "env.frame_stack"),
        _o("--noop_threshold", "int", 30, "env.noop_max", "the reference draws 1 to N no-ops, ale-py 0 to N"),
        _o("--grayscaling_frames", "bool", True, "env.grayscale", "colour broke its network; zrl's takes 3 x frame_stack channels"),
        _o("--episodic_life", "bool", True, "env.episodic_life"),
        _o("--frame_scale_resolution", "str", "84,84", "env.resolution", "its text is width,height (as its resize read it); zrl's key is [height, width]; its conv nets take 20 x 20 and up (atari: 36 x 36)"),
        _o("--actions_count", "int", None, "", "no key: zrl reads the action count from the game (the reference's default came from its default game, whatever --env said)"),
        _o("--observation_shape", "str", "(4, 84, 84)", "", "no key: zrl derives it from the frames and env.frame_stack"),
        _o("--learner_thread_count", "int", 1, "", "no equivalent: one learner process; learner.torch_threads sets its PyTorch threads"),
        _o("--worker_count", "int", 7, "workers.count", "zrl's default is 1 worker of 8 envs for 2 cores"),
        _o("--envs_per_worker", "int", 5, "workers.envs_per_worker"),
        _o("--multiprocessing_backend", "str", "ray", "zrl-launch --ray", "python_native is zrl's own launcher; ray places remote workers with zrl-launch --ray"),
        _o("--shared_queue_size", "int", 4, "", "no equivalent: unrolls travel over ZeroMQ (transport.hwm bounds them)"),
        _o("--environment_max_steps", "int", 15_000_000, "run.max_env_frames", "agent steps there, frames here: x --skipped_frames"),
        _o("--replay_writer_queue_size", "int", 1, "", "no equivalent: workers write frames into shared-memory rings, the broker takes every unroll"),
        _o("--discarding_strategy", "str", "keep_latest", "replay.discard (queue replays)", "applied to what a full queue replay drops; the reference's writer never applied it"),
        _o("--use_replay_compression", "bool", True, "", "no equivalent: replays hold ring indices, not copies of the frames"),
        _o("--lz4_compression_level", "int", 0, "", "no equivalent: replays hold ring indices, not copies of the frames"),
        _o("--caching", "bool", True, "broker.prefetch_batches", "zrl's broker always prepares batches ahead"),
        _o("--caching_threads", "int", 1, "", "no equivalent: one broker process prepares batches"),
        _o("--cache_sample_size", "int", 1, "", "no equivalent: used only in the reference's reproducible mode"),
        _o("--cache_output_buffer_size", "int", 3, "broker.prefetch_batches"),
        _o("--avg_buff_size", "int", 100, "", "no equivalent: zrl reports the 100-episode mean"),
        _o("--verbose_worker_out_int", "int", 50, "", "no equivalent: zrl prints progress every run.log_interval_s seconds"),
        _o("--verbose_learner_out_int", "int", 250, "", "no equivalent: zrl prints progress every run.log_interval_s seconds"),
        _o("--basic_verbose", "bool", True, "zrl-launch --quiet"),
        _o("--worker_verbose", "bool", False, "", "no equivalent: workers' errors reach zrl.log"),
        _o("--background_save", "bool", False, "run.background_save", "no effect: zrl always writes its logs as the run goes"),
        _o("--test_episode_count", "int", 1000, "zrl-eval --episodes"),
        _o("--render", "bool", True, "zrl-eval --render", "used only when testing"),
        _o("--feature_out_layer_size", "int", 512, "model.feature_size"),
        _o("--use_additional_scaling_FC_layer", "bool", True, "model.feature_layer"),
        _o("--lr_scheduler_steps", "int", 10_000, "learner.lr_decay_steps", "its polynomial decay has power 2 (learner.lr_decay_power = 2), and its first update already took lr(1)"),
        _o("--optimizer", "str", "rmsprop", "learner.optimizer", "rmsprop is PyTorch's in both; zrl's default is rmsprop_tf"),
        _o("--rmsprop_eps", "float", 0.01, "learner.rmsprop_eps"),
        _o("--lr_end_value", "float", 0.00001, "learner.lr_end"),
        _o("--replay_parameters", "json", EBV_REPLAYS, "[[replay]]", "standard is uniform; custom is elite or attentive"),
        _o("--training_fill_in_factor", "float", 0.2, "replay.fill_fraction", "zrl also waits for 10 batches in no replay"),
        _o("--policy_gradient_loss_weight", "float", 1.0, "learner.pg_cost"),
        _o("--value_loss_weight", "float", 0.5, "learner.baseline_cost"),
        _o("--entropy_loss_weight", "float", 0.01, "learner.entropy_cost"),
        _o("--c-const", "float", 1.0, "vtrace.clip_pg_rho", "it clipped the policy-gradient ratio; the trace's c is vtrace.clip_c (1 there, hard-wired)"),
        _o("--rho-const", "float", 1.0, "vtrace.clip_rho"),
        _o("--use_policy_cloning_loss", "bool", True, "vtrace.clear_policy_weight", "off is weight 0; the reference's KL direction is clear_policy_kl = pi_mu"),
        _o("--use_value_cloning_loss", "bool", True, "vtrace.clear_value_weight", "off is weight 0; the reference's form is clear_value_loss = l2_norm"),
        _o("--policy_cloning_loss_weight", "float", 0.05, "vtrace.clear_policy_weight"),
        _o("--value_cloning_loss_weight", "float", 0.005, "vtrace.clear_value_weight"),
        _o("--use_kl_mask", "bool", False, "vtrace.laser"),
        _o("--kl_div_threshold", "float", 0.3, "vtrace.laser_kl_threshold"),
    ),
    "rainbow": (
        _o("--seed", "int", 123, "run.seed", "the reference adds each actor's id"),
        _o("--disable-cuda", "flag", False, "learner.device = cpu"),
        _o("--game", "str", "space_invaders", "env.id", "an ALE ROM name; zrl's id is ALE/<Game>-v5"),
        _o("--proba-sticky-actions", "float", 0.25, "env.sticky_action_prob", "zrl's default is 0: the Ape-X paper played without sticky actions, so its scores compare"),
        _o("--T-max", "int", 50_000_000, "run.max_env_frames", "steps there (x --action-repeat frames), frames here"),
        _o("--history-length", "int", 4, "env.frame_stack"),
        _o("--action-repeat", "int", 4, "env.frame_skip"),
        _o("--hidden-size", "int", 512, "model.hidden_size"),
        _o("--noisy-std", "float", 0.1, "apex.noisy_sigma0"),
        _o("--model", "str", None, "zrl-launch --init-from", "a zrl checkpoint, not the reference's .pth"),
        _o("--memory-capacity", "int", 1_000_000, "replay.capacity (prioritized)", "transitions in both"),
        _o("--replay-frequency", "int", 4, "apex.replay_ratio", "one learner update per this many env steps; the learner's counters below are in its steps"),
        _o("--priority-exponent", "float", 0.2, "apex.priority_exponent", "the README's version; later ones say --priority-exponent-IQN"),
        _o("--priority-weight", "float", 0.4, "apex.importance_beta", "it anneals to 1 over the run in both (apex.beta_anneal_steps)"),
        _o("--multi-step", "int", 3, "apex.n_step"),
        _o("--discount", "float", 0.99, "learner.discount"),
        _o("--target-update", "int", 32_000, "apex.target_update", "its learner steps, one update per --replay-frequency (32,000 = 8,000 updates); zrl counts updates (2,000, near the Ape-X paper's 2,500)"),
        _o("--reward-clip", "int", 1, "env.clip_rewards, env.clip_method", "1 is abs_one_clamp; zrl clips to [-1, 1] only"),
        _o("--lr", "float", 0.00005, "learner.learning_rate", "constant there (learner.lr_end = the rate)"),
        _o("--adam-eps", "float", 0.0003125, "learner.adam_eps"),
        _o("--batch-size", "int", 32, "learner.batch_size"),
        _o("--learn-start", "int", 80_000, "apex.learn_start", "transitions in both"),
        _o("--evaluation-interval", "int", 500_000, "eval.interval_frames", "steps there (x --action-repeat frames), frames here; the reference averaged its last --evaluation-episodes training episodes (metrics.csv's mean_return_100 does that); zrl plays evaluation episodes of its own in a process beside training, set when one of the three --evaluation flags is given (off otherwise)"),
        _o("--evaluation-episodes", "int", 100, "eval.episodes", "the reference's window of training episodes; zrl plays this many evaluation episodes (10 by default, minutes on 2 cores)"),
        _o("--evaluation-size", "int", 500, "eval.held_out_states", "the reference declared it and never read it; zrl tracks the mean max-Q over that many held-out states"),
        _o("--log-interval", "int", 25_000, "", "no equivalent: zrl prints progress every run.log_interval_s seconds"),
        _o("--render", "flag", False, "zrl-eval --render", "used only when testing"),
        _o("--disable-cudnn", "flag", False, "", "no equivalent: zrl leaves cuDNN on"),
        _o("--host-redis", "str", "localhost", "zrl-worker --connect", "no Redis: remote workers connect to the run's gate"),
        _o("--port-redis", "int", 6379, "transport.remote_port", "no Redis: the run's gate port", alias="-p_red"),
        _o("--weight-synchro-frequency", "int", 400, "learner.publish_every", "its steps there, updates here"),
        _o("--length-actor-buffer", "int", 1000, "apex.priority_batch"),
        _o("--nb-actor", "int", 1, "workers.count"),
        _o("--id-actor", "int", -1, "", "no equivalent: zrl-launch starts every worker (zrl-worker --connect for other hosts)"),
        _o("--queue-size", "int", 5, "broker.prefetch_batches"),
        _o("--kappa", "float", 1.0, "apex.kappa"),
        _o("--num-tau-samples", "int", 64, "apex.quantiles"),
        _o("--num-tau-prime-samples", "int", 64, "apex.target_quantiles"),
        _o("--num-quantile-samples", "int", 32, "apex.acting_quantiles"),
        _o("--quantile-embedding-dim", "int", 64, "apex.embedding_dim"),
        _o("--priority-exponent-IQN", "float", 0.2, "apex.priority_exponent", "later versions; zrl's 0.5 is Rainbow's (Hessel et al.), the reference gives no reason for its 0.2"),
        _o("--lr-IQN", "float", 0.00005, "learner.learning_rate", "later versions"),
        _o("--adam-eps-IQN", "float", 0.0003125, "learner.adam_eps", "later versions"),
        _o("--rainbow-only", "int01", 0, "apex.head = c51", "later versions"),
        _o("--atoms", "int", 51, "apex.atoms"),
        _o("--V-min", "float", -10.0, "apex.v_min"),
        _o("--V-max", "float", 10.0, "apex.v_max"),
        _o("--priority-exponent-Rainbow", "float", 0.5, "apex.priority_exponent", "later versions, with --rainbow-only 1"),
        _o("--lr-Rainbow", "float", 0.0000625, "learner.learning_rate", "later versions, with --rainbow-only 1"),
        _o("--adam-eps-Rainbow", "float", 0.00015, "learner.adam_eps", "later versions, with --rainbow-only 1"),
        _o("--gpu-number", "int", 0, "learner.device = cuda:N"),
        _o("--disable-SABER-mode", "flag", False, "env.max_episode_frames", "SABER's 100-hour episodes in training (zrl-eval --protocol saber scores with its 5-minute stuck rule)"),
        _o("--synchronize-actors-with-learner", "int01", 1, "apex.replay_ratio", "on: the learner keeps pace with the actors (replay_ratio = --replay-frequency); off: actors run free (0)"),
        _o("--path-to-results", "str", None, "run.results_dir"),
    ),
}
# fmt: on

_FALSE_WORDS = ("false", "0", "no", "off")


class Translation:
    """The zrl keys a reference command line gives (dotted key -> value, and the flag each came from), the
    [[replay]] tables, and the notes for stderr."""

    def __init__(self, reference: str, given: dict[str, str]) -> None:
        self.reference, self.given = reference, given
        self.values: dict[str, Any] = {}
        self.sources: dict[str, tuple[str, ...]] = {}
        self.replays: list[dict[str, Any]] = []
        self.notes: list[str] = []
        self.used: set[str] = set()  # the flags some key or note took
        self.why: dict[str, str] = {}  # keys set by what the reference hard-wires, not by a flag
        self.only_given = False  # continuing or testing: the reference took the rest from the checkpoint

    def value(self, flag: str) -> Any:
        """The flag's value as the reference reads it: given, or its default."""
        option = _option(self.reference, flag)
        text = self.given.get(option.flag)
        return option.default if text is None else _read(option, text, self.notes)

    def source(self, key: str) -> str:
        """The flags a key came from, as given or as the reference's default, and why where it is no flag's."""
        parts = []
        for flag in self.sources[key]:
            text = self.given.get(flag)
            default = _option(self.reference, flag).default
            parts.append(f"{flag} (default {default})" if text is None else f"{flag} {text}" if text else f"{flag}=")
        if key in self.why:
            parts.append(self.why[key])
        return ", ".join(parts)

    def put(self, key: str, value: Any, *flags: str, why: str = "") -> None:
        self.values[key] = value
        self.sources[key] = flags
        if why:
            self.why[key] = why
        self.used.update(flags)

    def note(self, flag: str, why: str) -> None:
        """Say on stderr what became of a given flag that no key takes."""
        if flag in self.given:
            self.notes.append(f"{flag} {self.given[flag]}".rstrip() + f": {why}")  # a store_true flag has no text
            self.used.add(flag)

    def unplaced(self) -> None:
        """A note for every given flag that neither a key nor a note took: nothing is dropped silently."""
        for flag in self.given:
            if flag not in self.used:
                option = _option(self.reference, flag)
                home = f" ({option.home})" if option.home else ""
                self.note(flag, (option.note or "no zrl key takes it") + home)


def _option(reference: str, flag: str) -> Option:
    for option in OPTIONS[reference]:
        if flag in (option.flag, option.alias):
            return option
    raise KeyError(flag)


def _read(option: Option, text: str, notes: list[str]) -> Any:
    """An option's text as its reference reads it (ConfigError naming it when it cannot)."""
    try:
        if option.kind == "int":
            return int(text)
        if option.kind == "float":
            return float(text)
        if option.kind == "flag":
            return True
        if option.kind == "int01":  # 0 or 1 in later versions; the README's version read true/false with bool()
            if text.strip().lower() in ("true", "false"):
                meant = text.strip().lower() == "true"
                if not meant:
                    notes.append(
                        f"{option.flag} {text}: the README's version read any text as true; taken as 0, as meant"
                    )
                return int(meant)
            return int(text)
        if option.kind == "bool":
            if text.strip().lower() in _FALSE_WORDS:  # the reference's bool("False") is True: zrl takes the word
                notes.append(
                    f"{option.flag} {text}: the reference reads any non-empty text as true; taken as false, as meant"
                )
                return False
            return text != ""
    except ValueError:
        raise ConfigError(
            f"{option.flag}: {text!r} is not {'an integer' if option.kind == 'int' else 'a number'}"
        ) from None
    return text


def _camel(rom: str) -> str:
    return "".join(part.capitalize() for part in rom.split("_"))


def _ebv(tr: Translation) -> None:
    v = tr.value
    put = tr.put
    tr.values["algo"], tr.sources["algo"] = "vtrace", ()
    if v("--op_mode") != "train":  # flags not given came from the checkpoint's stored flags, not the defaults
        tr.only_given = True
        zrl = "zrl-launch --resume RUN, with the run's own config" if v("--op_mode") == "train_w_load" else "zrl-eval"
        tr.note(
            "--op_mode",
            f"the run file holds only the flags given (the reference took the rest from the checkpoint); use {zrl}",
        )
    put("env.id", v("--env"), "--env")
    put("env.clip_rewards", v("--clip_rewards"), "--clip_rewards")
    put("env.clip_method", v("--reward_clipping_method"), "--reward_clipping_method")
    put("env.frame_skip", v("--skipped_frames"), "--skipped_frames")
    put("env.frame_stack", v("--frames_stacked"), "--frames_stacked")
    put("env.noop_max", v("--noop_threshold"), "--noop_threshold")
    put("env.episodic_life", v("--episodic_life"), "--episodic_life")
    put("env.grayscale", v("--grayscaling_frames"), "--grayscaling_frames")
    put("env.resolution", _resolution(v("--frame_scale_resolution")), "--frame_scale_resolution")
    put(
        "run.max_env_frames",
        v("--environment_max_steps") * v("--skipped_frames"),
        "--environment_max_steps",
        "--skipped_frames",
    )
    put("run.checkpoint_every_steps", v("--save_model_period"), "--save_model_period")
    put("run.deterministic", v("--reproducible"), "--reproducible")
    put("run.background_save", v("--background_save"), "--background_save")
    if v("--seed") is not None:
        put("run.seed", v("--seed"), "--seed")
    put("workers.count", v("--worker_count"), "--worker_count")
    put("workers.envs_per_worker", v("--envs_per_worker"), "--envs_per_worker")
    put("learner.learning_rate", v("--lr"), "--lr")
    put("learner.batch_size", v("--batch_size"), "--batch_size")
    put("learner.unroll_length", v("--r_f_steps"), "--r_f_steps")
    put("learner.grad_norm_clip", v("--gradient_clip_by_norm_threshold"), "--gradient_clip_by_norm_threshold")
    put("learner.discount", v("--gamma"), "--gamma")
    put("learner.optimizer", v("--optimizer"), "--optimizer")
    put("learner.rmsprop_eps", v("--rmsprop_eps"), "--rmsprop_eps")
    put("learner.lr_decay_steps", v("--lr_scheduler_steps"), "--lr_scheduler_steps")
    put("learner.lr_end", v("--lr_end_value"), "--lr_end_value")
    put("learner.lr_decay_power", 2.0, why="its polynomial decay has power 2")
    put("learner.pg_cost", v("--policy_gradient_loss_weight"), "--policy_gradient_loss_weight")
    put("learner.baseline_cost", v("--value_loss_weight"), "--value_loss_weight")
    put("learner.entropy_cost", v("--entropy_loss_weight"), "--entropy_loss_weight")
    put("learner.replay_ratio", 0.0, why="it trains on each fresh unit once, as it arrives")
    put("vtrace.clip_pg_rho", v("--c-const"), "--c-const")
    put("vtrace.clip_rho", v("--rho-const"), "--rho-const")
    put("vtrace.clip_c", 1.0, why="its trace coefficient c is clipped at 1, hard-wired")
    policy = v("--policy_cloning_loss_weight") if v("--use_policy_cloning_loss") else 0.0
    put("vtrace.clear_policy_weight", policy, "--use_policy_cloning_loss", "--policy_cloning_loss_weight")
    put("vtrace.clear_policy_kl", "pi_mu", why="its policy cloning is KL(pi || mu)")
    value = v("--value_cloning_loss_weight") if v("--use_value_cloning_loss") else 0.0
    put("vtrace.clear_value_weight", value, "--use_value_cloning_loss", "--value_cloning_loss_weight")
    put("vtrace.clear_value_loss", "l2_norm", why="its value cloning is the unsquared norm")
    put("vtrace.laser", v("--use_kl_mask"), "--use_kl_mask")
    put("vtrace.laser_kl_threshold", v("--kl_div_threshold"), "--kl_div_threshold")
    put("model.feature_size", v("--feature_out_layer_size"), "--feature_out_layer_size")
    put("model.feature_layer", v("--use_additional_scaling_FC_layer"), "--use_additional_scaling_FC_layer")
    if v("--use_additional_scaling_FC_layer"):
        put("model.hidden_size", 512, why="its hidden layer is 512 wide")
    else:  # its hidden layer is then feature_out_layer_size wide
        put(
            "model.hidden_size",
            v("--feature_out_layer_size"),
            "--use_additional_scaling_FC_layer",
            "--feature_out_layer_size",
        )
    if not tr.only_given:
        tr.notes.append(
            "its network's convolutions (64 3x3/3, 64 3x3/2, 128 3x3/2) have no zrl equivalent: zrl's model.kind "
            "auto (atari_small) takes their place"
        )
    put("broker.prefetch_batches", v("--cache_output_buffer_size"), "--cache_output_buffer_size")
    if tr.only_given and "--replay_parameters" not in tr.given:
        return
    tr.replays = replays_from_json(_replay_json(v("--replay_parameters")), "--replay_parameters")
    tr.used.add("--replay_parameters")
    for rep in tr.replays:
        if rep["type"] == "queue":
            rep["discard"] = v("--discarding_strategy")
            tr.used.add("--discarding_strategy")
        else:
            rep["fill_fraction"] = v("--training_fill_in_factor")
            tr.used.add("--training_fill_in_factor")
    if v("--op_mode") == "train":
        tr.used.add("--op_mode")


def _resolution(text: str) -> list[int]:
    """--frame_scale_resolution's "W,H" (its wrappers resized to element 0 wide, element 1 high) as zrl's
    [height, width]."""
    try:
        width, height = (int(x) for x in text.split(","))
    except ValueError:
        raise ConfigError(
            f"--frame_scale_resolution: {text!r} is not two integers, width,height (e.g. 84,84)"
        ) from None
    return [height, width]


def _replay_json(text: str) -> str:
    """The reference read --replay_parameters with Python's literal_eval: its Python literals (single quotes,
    True) are taken, as JSON."""
    try:
        json.loads(text)
        return text
    except json.JSONDecodeError:
        pass
    try:
        return json.dumps(ast.literal_eval(text))
    except (ValueError, SyntaxError, RecursionError, MemoryError):
        return text  # replays_from_json names what is wrong with it


def _rainbow(tr: Translation) -> None:
    v = tr.value
    put = tr.put
    tr.values["algo"], tr.sources["algo"] = "apex_iqn", ()
    rainbow = bool(v("--rainbow-only"))
    steps_per_update = max(1, v("--replay-frequency"))
    put("env.id", f"ALE/{_camel(v('--game'))}-v5", "--game")
    put("env.sticky_action_prob", v("--proba-sticky-actions"), "--proba-sticky-actions")
    put("env.frame_skip", v("--action-repeat"), "--action-repeat")
    put("env.frame_stack", v("--history-length"), "--history-length")
    env = "its Atari env: all 18 actions, no no-op starts, no life-loss signal, no fire reset"
    put("env.full_action_space", True, why=env)
    put("env.noop_max", 0, why=env)
    put("env.episodic_life", False, why=env)
    put("env.fire_reset", False, why=env)
    put("env.max_episode_frames", 108_000 if v("--disable-SABER-mode") else 100 * 3600 * 60, "--disable-SABER-mode")
    clip = v("--reward-clip")
    put("env.clip_rewards", clip > 0, "--reward-clip")
    if clip > 0:
        put("env.clip_method", "abs_one_clamp", "--reward-clip")
    if clip not in (0, 1):
        tr.notes.append(f"--reward-clip {clip}: zrl clamps to [-1, 1] only (env.clip_method = abs_one_clamp)")
    put("run.max_env_frames", v("--T-max") * v("--action-repeat"), "--T-max", "--action-repeat")
    put("run.seed", v("--seed"), "--seed")
    if v("--path-to-results") is not None:
        put("run.results_dir", v("--path-to-results"), "--path-to-results")
    put("workers.count", max(1, v("--nb-actor")), "--nb-actor")
    put("learner.optimizer", "adam", why="its optimiser is Adam")
    lr_flag, eps_flag, alpha_flag = ("--lr", "--adam-eps", "--priority-exponent")
    if rainbow:
        lr_flag, eps_flag, alpha_flag = "--lr-Rainbow", "--adam-eps-Rainbow", "--priority-exponent-Rainbow"
    else:  # the later versions' -IQN spellings, where given, over the README version's
        lr_flag = "--lr-IQN" if "--lr-IQN" in tr.given else lr_flag
        eps_flag = "--adam-eps-IQN" if "--adam-eps-IQN" in tr.given else eps_flag
        alpha_flag = "--priority-exponent-IQN" if "--priority-exponent-IQN" in tr.given else alpha_flag
    spellings = {"--lr": lr_flag, "--adam-eps": eps_flag, "--priority-exponent": alpha_flag}
    for flag, taken in {**spellings, **{f"{f}-IQN": t for f, t in spellings.items()}}.items():
        if flag != taken:
            tr.note(flag, f"ignored: {taken} is the one this run takes")
    put("learner.learning_rate", v(lr_flag), lr_flag)
    put("learner.lr_end", v(lr_flag), lr_flag, why="a constant rate")
    put("learner.adam_eps", v(eps_flag), eps_flag)
    put("learner.batch_size", v("--batch-size"), "--batch-size")
    put("learner.discount", v("--discount"), "--discount")
    put(
        "learner.publish_every",
        max(1, v("--weight-synchro-frequency") // steps_per_update),
        "--weight-synchro-frequency",
        "--replay-frequency",
    )
    if v("--disable-cuda"):
        put("learner.device", "cpu", "--disable-cuda")
        put("broker.device", "cpu", "--disable-cuda")
    elif "--gpu-number" in tr.given:
        put("learner.device", f"cuda:{v('--gpu-number')}", "--gpu-number")
    put("model.hidden_size", v("--hidden-size"), "--hidden-size")
    put("model.kind", "atari", why="its torso is the Nature DQN's (with a padding of 1 on the first convolution)")
    put("learner.grad_norm_clip", 0.0, why="its learner does not clip gradients")
    if not v("--disable-SABER-mode"):
        tr.notes.append(
            "SABER mode: its training episodes also ended after 5 minutes without reward; zrl's training env has no "
            "such rule (zrl-eval --protocol saber scores with it)"
        )
    put("apex.head", "c51" if rainbow else "iqn", "--rainbow-only")
    put("apex.priority_exponent", v(alpha_flag), alpha_flag)
    put("apex.importance_beta", v("--priority-weight"), "--priority-weight")
    anneal = max(1, (v("--T-max") - v("--learn-start")) // steps_per_update)
    put("apex.beta_anneal_steps", anneal, "--T-max", "--learn-start", "--replay-frequency")
    put("apex.n_step", v("--multi-step"), "--multi-step")
    put("apex.target_update", max(1, v("--target-update") // steps_per_update), "--target-update", "--replay-frequency")
    put("apex.learn_start", v("--learn-start"), "--learn-start")
    put("apex.priority_batch", v("--length-actor-buffer"), "--length-actor-buffer")
    put("apex.kappa", v("--kappa"), "--kappa")
    put("apex.quantiles", v("--num-tau-samples"), "--num-tau-samples")
    put("apex.target_quantiles", v("--num-tau-prime-samples"), "--num-tau-prime-samples")
    put("apex.acting_quantiles", v("--num-quantile-samples"), "--num-quantile-samples")
    put("apex.embedding_dim", v("--quantile-embedding-dim"), "--quantile-embedding-dim")
    put("apex.noisy", True, why="its nets are noisy")
    put("apex.noisy_sigma0", v("--noisy-std"), "--noisy-std")
    put("apex.atoms", v("--atoms"), "--atoms")
    put("apex.v_min", v("--V-min"), "--V-min")
    put("apex.v_max", v("--V-max"), "--V-max")
    synchronised = bool(v("--synchronize-actors-with-learner"))
    put(
        "apex.replay_ratio",
        float(steps_per_update) if synchronised else 0.0,
        "--synchronize-actors-with-learner",
        "--replay-frequency",
    )
    put("learner.replay_ratio", 0.0, why="Ape-X is paced by apex.replay_ratio")
    put("broker.prefetch_batches", v("--queue-size"), "--queue-size")
    if {"--evaluation-interval", "--evaluation-episodes", "--evaluation-size"} & set(tr.given):
        # the reference ran no evaluation of its own (it averaged training episodes): zrl's is on when asked for
        put(
            "eval.interval_frames",
            v("--evaluation-interval") * v("--action-repeat"),
            "--evaluation-interval",
            "--action-repeat",
        )
        for flag, key in (("--evaluation-episodes", "eval.episodes"), ("--evaluation-size", "eval.held_out_states")):
            if flag in tr.given:  # else zrl's own (the reference's 100 episodes were a window of training ones)
                put(key, v(flag), flag)
        put("eval.protocol", "machado" if v("--disable-SABER-mode") else "saber", "--disable-SABER-mode")
    tr.replays = [{"type": "prioritized", "capacity": v("--memory-capacity"), "sample_ratio": 1.0}]
    tr.used.add("--memory-capacity")
    if v("--nb-actor") < 1:
        tr.notes.append(
            f"--nb-actor {v('--nb-actor')}: the reference divides by it; taken as 1 (did you mean --id-actor?)"
        )
    if not rainbow:  # the C51 flags, and the versions' other spellings, do nothing here
        for flag in (
            "--atoms",
            "--V-min",
            "--V-max",
            "--priority-exponent-Rainbow",
            "--lr-Rainbow",
            "--adam-eps-Rainbow",
        ):
            tr.note(flag, "used only with --rainbow-only 1")


BUILDERS: dict[str, Callable[[Translation], None]] = {"ebv": _ebv, "rainbow": _rainbow}


def parse(reference: str, argv: list[str]) -> dict[str, str]:
    """The reference's flags given in ``argv`` (``--flag value`` or ``--flag=value``; a store_true flag alone),
    by their main spelling; ConfigError naming an option the reference does not have, with the closest one."""
    if reference not in OPTIONS:
        raise ConfigError(f"--from: {reference!r} is not one of {', '.join(OPTIONS)}")
    parser = argparse.ArgumentParser(prog=reference, add_help=False, allow_abbrev=False, exit_on_error=False)
    for option in OPTIONS[reference]:
        names = [option.flag] + ([option.alias] if option.alias else [])
        if option.kind == "flag":
            parser.add_argument(*names, dest=option.flag, action="store_const", const="")
        else:
            parser.add_argument(*names, dest=option.flag, action="append", default=None)
    while argv and not argv[0].startswith("-"):  # "python main.py ...": the words before the first flag
        argv = argv[1:]
    try:
        known, extra = parser.parse_known_args(argv)
    except argparse.ArgumentError as err:
        raise ConfigError(f"{NAMES[reference]}: {err}") from None
    if extra:
        flags = [o.flag for o in OPTIONS[reference]]
        word = extra[0].split("=", 1)[0]
        if word in ("--out", "--from", "-h", "--help"):
            raise ConfigError(f"{word} is zrl-translate's own option: give it before --")
        hint = difflib.get_close_matches(word, flags, n=1)
        raise ConfigError(
            f"{word!r} is not an option of {NAMES[reference]}" + (f" (did you mean {hint[0]}?)" if hint else "")
        )
    given = {}
    for flag, values in vars(known).items():
        if values is None:
            continue
        given[flag] = values if isinstance(values, str) else values[-1]  # the last one wins, as in argparse
    return given


def translate(reference: str, argv: list[str]) -> tuple[str, list[str]]:
    """The run file (TOML text) for a reference command line, and the notes for stderr. The run file is loaded
    as zrl-launch would load it: a translation zrl would refuse is a ConfigError, with the reason."""
    given = parse(reference, argv)
    tr = Translation(reference, given)
    BUILDERS[reference](tr)
    tr.unplaced()
    text = render(tr)
    try:
        load_text(text)
    except ConfigError as err:  # say it by the flags the key came from, not by the scratch file
        reason = str(err).split(": ", 1)[1] if ": " in str(err) else str(err)
        key = err.key or ""
        flags = f" (from {tr.source(key)})" if key in tr.sources and (tr.sources[key] or key in tr.why) else ""
        if tr.values.get("run.deterministic"):
            flags += "; --reproducible is zrl's run.deterministic, which needs one worker and one queue replay"
        raise ConfigError(f"the translation is not a run zrl can make{flags}: {reason}") from None
    return text, tr.notes


def render(tr: Translation) -> str:
    """The run file: the top keys, then each section with the keys whose value differs from zrl's default (or
    whose flag was given), each after a comment naming the reference flags it came from."""
    defaults = _flat_defaults()
    lines = [f"# zrl run file translated from {NAMES[tr.reference]}'s command line by zrl-translate."]
    sections: dict[str, list[str]] = {}
    for key, value in tr.values.items():
        section, _, name = key.rpartition(".")
        given = any(f in tr.given for f in tr.sources[key])
        if (defaults.get(key, object()) == value or tr.only_given) and not given:
            continue
        comment = [f"# {tr.source(key)}"] if tr.sources[key] or key in tr.why else []
        entry = [*comment, tomli_w.dumps({name: value}).rstrip("\n")]
        sections.setdefault(section, []).extend(entry)
    if "" in sections:  # the top keys (algo)
        lines += ["", *sections.pop("")]
    for section in SECTIONS:
        if section in sections:
            lines += ["", f"[{section}]", *sections[section]]
    for rep in tr.replays:
        ordered = {k: rep[k] for k in ("type", "capacity", "sample_ratio") if k in rep} | rep
        lines += ["", "[[replay]]", tomli_w.dumps(ordered).rstrip("\n")]
    return "\n".join(lines) + "\n"


def _flat_defaults() -> dict[str, Any]:
    from zrl.config import to_dict

    data = to_dict(load(None, ()))
    flat = {}
    for section, values in data.items():
        if isinstance(values, dict):
            flat.update({f"{section}.{k}": v for k, v in values.items()})
        elif section != "replay":
            flat[section] = values
    return flat


def load_text(text: str):
    """Load a run file's text as zrl-launch --config would (through a file: the loader names it)."""
    import os
    import tempfile

    fd, path = tempfile.mkstemp(prefix="zrl-translate-", suffix=".toml")
    try:
        with os.fdopen(fd, "w") as fh:
            fh.write(text)
        return load(path, ())
    finally:
        os.unlink(path)


def table(reference: str) -> str:
    """The README's translation table of one reference: every option, its zrl home, the reference default,
    zrl's default there, and the difference."""
    defaults = _flat_defaults()
    out = ["| reference option | zrl | reference default | zrl default | difference |", "|---|---|---|---|---|"]
    for o in OPTIONS[reference]:
        key = o.home.split(" ")[0].rstrip(",")
        zrl_default = defaults.get(key, "")
        shown = "" if zrl_default == "" else f"`{_toml_value(zrl_default)}`"
        default = "" if o.default is None else f"`{o.default}`"
        home = f"`{o.home}`" if o.home else "(none)"
        flag = o.flag + (f" / {o.alias}" if o.alias else "")
        out.append(f"| `{flag}` | {home} | {default} | {shown} | {o.note} |")
    return "\n".join(out)


def _toml_value(value: Any) -> str:
    if isinstance(value, (list, tuple)):  # inline, one table row
        return "[" + ", ".join(_toml_value(v) for v in value) + "]"
    return tomli_w.dumps({"x": value})[4:].strip()


if __name__ == "__main__":
    import sys

    if len(sys.argv) == 3 and sys.argv[1] == "--table":
        print(table(sys.argv[2]))
    else:
        print("python -m zrl.translate --table ebv|rainbow", file=sys.stderr)
        sys.exit(2)
