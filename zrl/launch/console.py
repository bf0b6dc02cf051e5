"""What zrl-launch says on the terminal: lines on stdout (none with --quiet), the live progress line (redrawn in
place on a terminal, one line per report otherwise), and errors on stderr, which also go to the run's log.

A terminal can go away under a run (a closed window, a dropped ssh session: SIGHUP, which stops the run in order):
from then on a write to it fails (EIO, EPIPE), and the console falls silent rather than let the failure cut the
orderly stop short. The run's log has every line the console said."""

from __future__ import annotations

import logging
import sys

log = logging.getLogger("zrl")


class Console:
    def __init__(self, quiet: bool = False) -> None:
        self.quiet = quiet
        self.tty = sys.stdout.isatty()
        self.gone = False  # the terminal went away: nothing more is written to it

    def _print(self, text: str, end: str = "\n", stream=None) -> None:
        if self.gone:
            return
        try:
            print(text, end=end, file=stream or sys.stdout, flush=True)
        except OSError:
            self.gone = True

    def say(self, text: str) -> None:
        if not self.quiet:
            self._print(text)

    def line(self, text: str) -> None:
        """Show the live line; an empty ``text`` ends it (on a terminal), so that what follows starts afresh."""
        if self.quiet or not text and not self.tty:
            return
        if self.tty:
            self._print("\r" + text.ljust(120)[:120], end="" if text else "\n")
        else:
            self._print(text)

    def error(self, text: str) -> None:
        log.error(text)
        self.line("")
        self._print(f"zrl-launch: error: {text}", stream=sys.stderr)
