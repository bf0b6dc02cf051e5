"""Experiments over seeds and configs: zrl-sweep runs them, zrl-report aggregates them."""
