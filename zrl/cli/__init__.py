"""The commands: argument parsing and exit codes only, one module per command (``launch`` is zrl-launch's,
``bench`` zrl-bench's, ...), with what several share in ``common``. setup.py registers each module's ``main``.

Exit codes: 0 a finished run, 1 a run that failed, 2 a usage or config mistake, 129 SIGHUP, 130 Ctrl-C, 143 SIGTERM.
"""
