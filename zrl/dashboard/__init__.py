"""The live dashboard: a read-only page on 127.0.0.1 that shows a run as it goes (``zrl-launch --dashboard``) or
after it ended (``zrl-dashboard RUN``). ``view`` reads the run folder; ``server`` serves the page and its data."""

from zrl.dashboard.server import Dashboard, is_loopback
from zrl.dashboard.view import RunView, is_run

__all__ = ["Dashboard", "RunView", "is_loopback", "is_run"]
