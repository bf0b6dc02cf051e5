"""Learning algorithms: V-trace off-policy correction and actor-critic losses."""
