"""Signals on the command line: Ctrl-C, SIGTERM and SIGHUP unwind the stack (``exit_cleanly_on_termination``),
never while a temp output is being made or a C extension initialises (``signals_held``), so every atomic output
removes its temp files and the exit status is 128 + the signal.
"""

from __future__ import annotations

import importlib.machinery
import signal
import sys
import threading
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
    """A block in which the signals of exit_cleanly_on_termination wait, then unwind at its end.

    Creating a temp output and recording it for cleanup is not one step: a signal in between would
    leave it behind. Inside this block a signal is only noted; the block's end raises it, where the
    caller's cleanup knows the temp output. Effective under exit_cleanly_on_termination's handlers
    (the command line); elsewhere Python's own Ctrl-C handler raises at once.
    """

    def __init__(self) -> None:
        self.depth = 0
        self.pending: int | None = None
        self.received: int | None = None  # the first signal of the run, held or raised

    def __enter__(self) -> None:
        self.depth += 1

    def __exit__(self, *exc) -> bool:
        self.depth -= 1
        if self.depth == 0 and self.pending is not None:  # also over an error of the block: the user stops
            signum, self.pending = self.pending, None
            raise _unwinding(signum)
        return False

    def handler(self, signum: int, _frame) -> None:
        self.received = self.received or signum
        if self.depth:
            self.pending = self.pending or signum
            return
        raise _unwinding(signum)


signals_held = _SignalsHeld()


def received_signal() -> int | None:
    """The signal that came during exit_cleanly_on_termination's block, if one did. The exception it
    raised may reach the caller as another: a C extension importing when Ctrl-C comes reports an
    ImportError (numpy: 'PyCapsule_Import could not import module "datetime"')."""
    return signals_held.received


@contextmanager
def exit_cleanly_on_termination() -> Iterator[None]:
    """Within the block, Ctrl-C raises KeyboardInterrupt and SIGTERM/SIGHUP ``Terminated`` (exit status
    128 + signal), never while a temp output is being created (``_SignalsHeld``), so every atomic_*
    block removes its temp output; the previous handlers come back after it. A signal the caller
    ignores (nohup's SIGHUP, a background job's SIGINT) stays ignored. For command-line entry points
    (a server installs its own handlers inside)."""
    signals_held.received = None  # this run's, read by the caller after the block
    if threading.current_thread() is not threading.main_thread():
        yield  # only the main thread may set handlers (e.g. main() called from a test's thread)
        return
    previous = {sig: signal.getsignal(sig) for sig in _UNWINDING}
    for sig, handler in previous.items():
        if handler is not signal.SIG_IGN:
            signal.signal(sig, signals_held.handler)
    sys.meta_path.insert(sys.meta_path.index(importlib.machinery.PathFinder), _EXTENSIONS_INIT_HELD)
    try:
        yield
    finally:
        sys.meta_path.remove(_EXTENSIONS_INIT_HELD)
        for sig, handler in previous.items():
            if handler is not None:  # None: a handler not installed from Python, cannot be restored
                signal.signal(sig, handler)


class _ExtensionInitHeld:
    """An import finder, placed just before PathFinder, that runs a C extension's initialisation with
    the signals held (``_SignalsHeld``).

    A handler that raises while an extension module initialises raises inside C++ code that calls
    back into Python, and not every binding library can unwind from there: onnx 1.23's nanobind
    module, given Ctrl-C while it builds its enums, calls std::terminate (an abort and a C++ traceback
    instead of one line). Held, the signal unwinds when the module is made, in Python's import.
    Other modules are found as PathFinder would find them, since PathFinder is what comes next.
    """

    @staticmethod
    def find_spec(name, path=None, target=None):
        spec = importlib.machinery.PathFinder.find_spec(name, path, target)
        if spec is not None and isinstance(spec.loader, importlib.machinery.ExtensionFileLoader):
            spec.loader = _HeldLoader(spec.loader)
        return spec


class _HeldLoader:
    """A loader that runs another's create_module and exec_module (where an extension's init
    functions run: single- and multi-phase) with the signals held."""

    def __init__(self, loader) -> None:
        self.loader = loader

    def create_module(self, spec):
        with signals_held:
            return self.loader.create_module(spec)

    def exec_module(self, module) -> None:
        with signals_held:
            self.loader.exec_module(module)

    def __getattr__(self, name):  # get_filename, is_package, ... as the wrapped loader answers
        return getattr(self.loader, name)


_EXTENSIONS_INIT_HELD = _ExtensionInitHeld()
