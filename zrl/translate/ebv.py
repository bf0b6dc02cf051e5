"""The elite-replay platform (parralplex/elite_buffer_vtrace): its ``main.py`` flags, with its
``--replay_parameters`` list, and the zrl keys they become."""

from __future__ import annotations

import ast
import json

from zrl.config import ConfigError, replays_from_json
from zrl.translate.translation import Option, Translation

NAME = "the elite-replay platform (main.py)"
_o = Option  # the table's short name: flag, kind, default, home, note, alias

EBV_REPLAYS = '[{"type": "queue", "capacity": 1, "sample_ratio": 0.5}, {"type": "standard", "capacity": 1000, "sample_ratio": 0.5}]'

# fmt: off
OPTIONS: tuple[Option, ...] = (
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
)
# fmt: on


def build(tr: Translation) -> None:
    """Fill ``tr`` with the zrl keys and [[replay]] tables of an elite-replay platform command line."""
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
    put("learner.entropy_follows_lr", False, why="its entropy weight stays where it is set")
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
