"""Runs ``bitnet-onnx ARGV`` with one function held open, so the corpus can act while a temp output exists.

    python tests/bad_inputs/hold.py MODULE:FUNCTION GO_FILE ARGV...

FUNCTION runs, creates GO_FILE.held, then waits until GO_FILE exists (at most 60 s) before returning. The corpus sends a
signal, or makes a folder appear at the output path, during that wait: deterministic, whatever the
speed of the machine.

The corpus also runs it forked from its pre-imported server (fork_server.py), where the verb's modules
are imported before ``hold`` replaces FUNCTION: its callers must look it up when they call it (a global
of its own module, or ``module.FUNCTION``), never keep what ``from module import FUNCTION`` gave them.
"""

from __future__ import annotations

import importlib
import os
import sys
import time

HOLD_SECONDS = 60


def hold(target: str, go_file: str) -> None:
    module_name, name = target.split(":")
    module = importlib.import_module(module_name)
    original = getattr(module, name)

    def held(*args, **kwargs):
        result = original(*args, **kwargs)
        open(go_file + ".held", "w").close()  # for a case with no temp output to wait for
        deadline = time.monotonic() + HOLD_SECONDS
        while not os.path.exists(go_file) and time.monotonic() < deadline:
            time.sleep(0.01)
        return result

    setattr(module, name, held)


if __name__ == "__main__":
    hold(sys.argv[1], sys.argv[2])
    from bitnet_onnx.cli import main

    sys.exit(main(sys.argv[3:]))
