"""Test instrumentation, not part of zrl: a Python started with this folder on its PYTHONPATH and
ZRL_AUDIT_FRAMES=<folder> checks every batch the learner gathers from the rings, for runs of the
``zrl_fault_envs:ZrlIdentity-v0`` env, whose observations carry their env instance, a counter and the action
that led to them. For each unit the rings gave as intact it checks that all T+1 frames come from one env
instance, one after another, and that each action of the unit's descriptor is the one its next frame
records. It appends ``<units checked> <units wrong> <instance ids seen>`` to <folder>/<pid>.txt."""

import os
import sys


def _audited(gather):
    import numpy as np

    def audited(self, batch):
        frames, steps, ok = gather(self, batch)
        t = batch.actions.shape[1]
        rows = frames[: len(ok)].numpy()[ok][:, : t + 1].astype(np.int64)  # [units, T+1, 4]
        actions = batch.actions[ok]
        instance = rows[..., 0] * 4096 + rows[..., 1]
        one_instance = (instance == instance[:, :1]).all(axis=1)
        consecutive = (np.diff(rows[..., 2], axis=1) == 1).all(axis=1)
        recorded = rows[:, 1:, 3]
        actions_match = ((recorded == actions) | (recorded == -1)).all(axis=1)
        bad = ~(one_instance & consecutive & actions_match)
        seen = " ".join(str(i) for i in np.unique(instance))
        folder = os.environ["ZRL_AUDIT_FRAMES"]
        with open(os.path.join(folder, f"{os.getpid()}.txt"), "a") as f:
            f.write(f"{len(rows)} {int(bad.sum())} {seen}\n")
        if bad.any():
            with open(os.path.join(folder, f"{os.getpid()}.wrong"), "a") as f:
                f.write(
                    f"instances {int((~one_instance).sum())}, counters {int((~consecutive).sum())}, actions "
                    f"{int((~actions_match).sum())}; first: {rows[bad][0].tolist()} actions {actions[bad][0].tolist()}\n"
                )
        return frames, steps, ok

    return audited


class _PatchGatherer:
    """Wraps zrl.gather's Gatherer.gather once the module is imported, wherever it is imported from (zrl is
    not imported here: at start-up sys.path may not yet point at the checkout under test)."""

    @classmethod
    def find_spec(cls, name, path=None, target=None):
        if name != "zrl.gather":
            return None
        for finder in sys.meta_path:
            if finder is cls:
                continue
            spec = getattr(finder, "find_spec", lambda *a: None)(name, path, target)
            if spec is not None:
                run = spec.loader.exec_module

                def exec_module(module, run=run):
                    run(module)
                    module.Gatherer.gather = _audited(module.Gatherer.gather)

                spec.loader.exec_module = exec_module
                return spec
        return None


if os.environ.get("ZRL_AUDIT_FRAMES"):
    sys.meta_path.insert(0, _PatchGatherer)
