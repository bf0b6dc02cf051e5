"""The live page (zrl-launch --dashboard) as a launch holds it: its socket bound before anything else is made, its
pages served once the run folder exists, and closed at the end, after open pages had a moment to show the run's
end."""

from __future__ import annotations

import contextlib
import logging
from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from zrl.dashboard import Dashboard

log = logging.getLogger("zrl")

DASHBOARD_LINGER_S = 2.5  # after the run, open pages have this long to show its end before the page server stops


def open_dashboard(where: tuple[str, int] | None) -> Dashboard | None:
    """The dashboard's socket for ``(host, port)``, bound before anything else is made (a port in use is a
    ConfigError that leaves nothing behind); None without --dashboard."""
    if where is None:
        return None
    from zrl.dashboard import Dashboard  # the page's package reads run folders as this package lays them out

    return Dashboard(*where)


@contextlib.contextmanager
def bound_dashboard(where: tuple[str, int] | None) -> Iterator[Dashboard | None]:
    """``open_dashboard(where)`` for the length of a launch, closed at its end."""
    page = open_dashboard(where)
    try:
        yield page
    finally:
        if page is not None:
            page.close()


def serve(dashboard: Dashboard, run_dir: Path) -> None:
    """Serve the live page, and say where (even with --quiet: the address, and its token, are said once)."""
    dashboard.serve(run_dir)
    where = f"http://{dashboard.host}:{dashboard.port}/"
    log.info("dashboard at %s%s", where, " (with a token, said on the terminal)" if dashboard.token else "")
    print(f"dashboard: {dashboard.url}", flush=True)
