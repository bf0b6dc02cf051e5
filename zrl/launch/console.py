"""What zrl-launch says on the terminal: lines on stdout (none with --quiet), the live progress line (redrawn in
place on a terminal, one line per report otherwise), and errors on stderr, which also go to the run's log."""

from __future__ import annotations

import logging
import sys

log = logging.getLogger("zrl")


class Console:
    def __init__(self, quiet: bool = False) -> None:
        self.quiet = quiet
        self.tty = sys.stdout.isatty()

    def say(self, text: str) -> None:
        if not self.quiet:
            print(text, flush=True)

    def line(self, text: str) -> None:
        """Show the live line; an empty ``text`` ends it (on a terminal), so that what follows starts afresh."""
        if self.quiet or not text and not self.tty:
            return
        if self.tty:
            print("\r" + text.ljust(120)[:120], end="" if text else "\n", flush=True)
        else:
            print(text, flush=True)

    def error(self, text: str) -> None:
        log.error(text)
        self.line("")
        print(f"zrl-launch: error: {text}", file=sys.stderr, flush=True)
