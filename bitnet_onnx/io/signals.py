"""Signals on the command line: Ctrl-C, SIGTERM and SIGHUP unwind the stack (``exit_cleanly_on_termination``),
never while a temp output is being made or a module is imported (``signals_held``), nor in importlib's own
code or a ``__del__`` (``_SignalsHeld._deliver_again``), so every atomic output removes its temp files and the
exit status is 128 + the signal.
"""

from __future__ import annotations

import _thread
import importlib._bootstrap
import importlib._bootstrap_external
import signal
import sys
import threading
import time
from contextlib import contextmanager
from typing import Iterator


class Terminated(SystemExit):
    """SIGTERM or SIGHUP, unwinding the stack like Ctrl-C; its code is the exit status, 128 + signal."""

    def __init__(self, signum: int):
        super().__init__(128 + signum)
        self.signal_name = signal.Signals(signum).name


_UNWINDING = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)


def _unwinding(signum: int) -> BaseException:
    return KeyboardInterrupt() if signum == signal.SIGINT else Terminated(signum)


class _SignalsHeld:
    """A block of the main thread in which the signals of exit_cleanly_on_termination wait, then unwind
    at its end (the handler's rules: ``handler``).

    Creating a temp output and recording it for cleanup is not one step: a signal in between would
    leave it behind. Inside this block a signal is only noted; the block's end raises it, where the
    caller's cleanup knows the temp output. Effective under exit_cleanly_on_termination's handlers
    (the command line); elsewhere Python's own Ctrl-C handler raises at once.
    """

    def __init__(self) -> None:
        self.depth = 0
        self.pending: int | None = None
        self.received: int | None = None  # the first signal of the run, held or raised
        self.redelivery: int | None = None  # a signal deferred, on its way back from a helper thread
        self.deferring = False  # the handler or hook is starting that thread: a signal now defers too
        self.previous_unraisable = sys.unraisablehook  # the hook outside exit_cleanly_on_termination's block

    def __enter__(self) -> None:
        if _in_main_thread():  # where Python runs handlers: another thread's block must not hold them
            self.depth += 1

    def __exit__(self, *exc) -> bool:
        if not _in_main_thread():
            return False
        self.depth -= 1
        if self.depth == 0 and self.pending is not None:  # also over an error of the block: the user stops
            signum, self.pending = self.pending, None
            raise _unwinding(signum)
        return False

    def handler(self, signum: int, frame) -> None:
        self.received = self.received or signum
        if self.depth:
            self.pending = self.pending or signum
        elif self.deferring or _in_import_machinery(frame):
            self._deliver_again(signum)
        else:
            raise _unwinding(signum)

    def unraisable(self, unraisable) -> None:
        """sys.unraisablehook for exit_cleanly_on_termination's block: the signal's exception raised
        where Python can only print it (a ``__del__``, a weakref callback run by the garbage
        collector) comes back where it unwinds; any other goes to the previous hook."""
        if isinstance(unraisable.exc_value, (KeyboardInterrupt, Terminated)) and self.received:
            self._deliver_again(self.received)
        else:
            self.previous_unraisable(unraisable)

    def _deliver_again(self, signum: int) -> None:
        """The handler runs again for ``signum`` a few milliseconds on, wherever the main thread is then.

        A thread does it because the handler cannot: the interpreter runs a handler for a signal
        marked inside a handler at once, inside it. A bare thread: threading's would take its module
        lock, which the code this signal interrupted may hold."""
        if self.redelivery is not None:
            return  # one is on its way
        self.redelivery = signum
        self.deferring = True
        try:
            _thread.start_new_thread(self._redeliver, ())
        finally:
            self.deferring = False

    def _redeliver(self) -> None:
        time.sleep(0.002)  # past the end of the handler that deferred
        signum, self.redelivery = self.redelivery, None
        if signum is not None:
            _thread.interrupt_main(signum)  # nothing if the handlers are gone: the block has ended


def _in_main_thread() -> bool:
    return threading.get_ident() == threading.main_thread().ident


def _in_import_machinery(frame) -> bool:
    """Whether ``frame`` is importlib's own code, which takes and releases its module locks in plain
    Python (a module lock's weakref callback runs at any moment, from the garbage collector): an
    exception raised between two of its lines breaks a lock, or is printed and lost."""
    return frame is not None and frame.f_globals.get("__name__") in _IMPORT_MACHINERY


_IMPORT_MACHINERY = frozenset({importlib._bootstrap.__name__, importlib._bootstrap_external.__name__})

signals_held = _SignalsHeld()


def received_signal() -> int | None:
    """The signal that came during exit_cleanly_on_termination's block, if one did. The exception it
    raised may reach the caller as another (a library that catches BaseException and raises its own)."""
    return signals_held.received


@contextmanager
def exit_cleanly_on_termination() -> Iterator[None]:
    """Within the block, Ctrl-C raises KeyboardInterrupt and SIGTERM/SIGHUP ``Terminated`` (exit status
    128 + signal), never while a temp output is being created or a module imported (``_SignalsHeld``,
    ``_imports_held``), so every atomic_* block removes its temp output; the previous handlers come
    back after it. A signal the caller ignores (nohup's SIGHUP, a background job's SIGINT) stays
    ignored. For command-line entry points (a server installs its own handlers inside)."""
    signals_held.received = None  # this run's, read by the caller after the block
    if not _in_main_thread():
        yield  # only the main thread may set handlers (e.g. main() called from a test's thread)
        return
    previous = {sig: signal.getsignal(sig) for sig in _UNWINDING}
    for sig, handler in previous.items():
        if handler is not signal.SIG_IGN:
            signal.signal(sig, signals_held.handler)
    find_and_load = importlib._bootstrap._find_and_load
    importlib._bootstrap._find_and_load = _imports_held(find_and_load)  # looked up by name on every import
    signals_held.previous_unraisable, sys.unraisablehook = sys.unraisablehook, signals_held.unraisable
    try:
        yield
    finally:
        signals_held.redelivery = None  # a deferred signal not yet back stays with the block
        sys.unraisablehook = signals_held.previous_unraisable
        importlib._bootstrap._find_and_load = find_and_load
        for sig, handler in previous.items():
            if handler is not None:  # None: a handler not installed from Python, cannot be restored
                signal.signal(sig, handler)


def _imports_held(find_and_load):
    """importlib's ``_find_and_load``, which every import statement and ``importlib.import_module`` call
    of a module not yet loaded runs, run with the signals held (``_SignalsHeld``).

    The import machinery takes and releases its module locks in plain Python, and a handler may raise
    between any two of its lines: an export given SIGTERM there deadlocked on the next import, or had
    the exception printed and dropped by a lock's weakref callback and ran on. A C extension's init
    that calls back into Python cannot always unwind either (onnx 1.23's nanobind module called
    std::terminate on Ctrl-C). Held, the signal unwinds once the outermost import is done.
    """

    def held(name, import_):
        with signals_held:
            return find_and_load(name, import_)

    return held
