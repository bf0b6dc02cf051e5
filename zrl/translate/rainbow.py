"""Rainbow-IQN Ape-X (valeoai/rainbow-iqn-apex): its ``launch_learner.py`` / ``launch_actor.py`` flags, and the
zrl keys they become."""

from __future__ import annotations

from zrl.translate.translation import Option, Translation

NAME = "Rainbow-IQN Ape-X (launch_learner.py)"
_o = Option  # the table's short name: flag, kind, default, home, note, alias

# fmt: off
OPTIONS: tuple[Option, ...] = (
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
)
# fmt: on


def _camel(rom: str) -> str:
    return "".join(part.capitalize() for part in rom.split("_"))


def build(tr: Translation) -> None:
    """Fill ``tr`` with the zrl keys and the prioritized [[replay]] of a Rainbow-IQN Ape-X command line."""
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
