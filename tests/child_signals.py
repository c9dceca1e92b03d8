"""The signal dispositions a test's child processes start with.

A child inherits its parent's ignored signals across exec, and the package rightly keeps an ignore it
inherits (``io.exit_cleanly_on_termination``: nohup's SIGHUP, a background job's SIGINT). So a suite
started under ``nohup`` (or by any launcher that ignores a signal) would hand that ignore to every child
that a test means to stop with it. Tests that check what a signal does start their children with the
default dispositions, as a terminal's foreground job has them.
"""
from __future__ import annotations

import signal

SIGNALS_A_RUN_HANDLES = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)


def reset_to_default() -> None:
    """For ``preexec_fn`` (between fork and exec) or for this process."""
    for sig in SIGNALS_A_RUN_HANDLES:
        signal.signal(sig, signal.SIG_DFL)
