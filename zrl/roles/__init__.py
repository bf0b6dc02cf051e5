"""The process roles: worker, broker, learner; each a run(...) the launcher spawns."""
