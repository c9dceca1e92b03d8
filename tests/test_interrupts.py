"""Ctrl-C, SIGTERM and SIGHUP at any moment of a run: one line, the signal's exit status, nothing left.

The corpus (tests/bad_inputs) holds each writer at a known point (its temp output exists, or the
verb's modules are imported) and signals it there; here the signal lands wherever the run happens
to be after a range of delays (imports of torch/onnx, reading weights, building the graph, writing),
and whatever it interrupted the promise is the same. The delays only spread the signals over the
run: nothing about timing is asserted.
"""

from __future__ import annotations

import importlib._bootstrap
import importlib.machinery
import os
import re
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

import child_signals
from bitnet_onnx import cli
from bitnet_onnx.io import Terminated

DELAYS = (0.05, 0.2, 0.5, 1.0, 1.5, 2.0, 3.0, 4.0)  # seconds after the start; an export takes ~2-4 s here
STATUS = {signal.SIGINT: 130, signal.SIGTERM: 128 + signal.SIGTERM, signal.SIGHUP: 128 + signal.SIGHUP}


def _entries(folder: Path) -> set[str]:
    return {str(p.relative_to(folder)) for p in folder.rglob("*")}


@pytest.mark.parametrize("sig", list(STATUS), ids=[s.name for s in STATUS])
@pytest.mark.slow
def test_export_signalled_anywhere(sig, tiny_model, private_copy, tmp_path):
    model = private_copy(tiny_model("qwen3"))
    work = tmp_path / "work"
    work.mkdir()
    before = _entries(model)
    outcomes = []
    for delay in DELAYS:
        out = work / f"out-{delay}"
        proc = subprocess.Popen([sys.executable, "-m", "bitnet_onnx", "export", str(model), "--weights", "f32",
                                 "-o", str(out)], stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True,
                                preexec_fn=child_signals.reset_to_default, env={**os.environ, "PYTHONDONTWRITEBYTECODE": "1"})
        try:  # an export done before the delay is not waited for: its core idled until then
            proc.wait(timeout=delay)
        except subprocess.TimeoutExpired:
            proc.send_signal(sig)
        _, stderr = proc.communicate(timeout=300)
        outcomes.append((delay, proc.returncode))
        lines = [line for line in stderr.splitlines() if line.strip()]
        assert "Traceback" not in stderr, f"{sig.name} after {delay} s:\n{stderr}"
        complete = (out / "bitnet_onnx.json").is_file() and (out / "model.onnx").is_file()
        if proc.returncode == 0:  # finished before the signal came
            assert complete, stderr
            continue
        # the status a shell reports, 128 + signal, either way: exit(128 + signal), or death by the
        # signal (its default action outside the package's handlers; after the one line, seen once for
        # a Ctrl-C during numpy's import: CPython's own exit by SIGINT)
        assert proc.returncode in (STATUS[sig], -sig), f"{sig.name} after {delay} s: exit {proc.returncode}\n{stderr}"
        if lines and lines[0].startswith("exported ") and proc.returncode == -sig:  # after the handlers: done
            assert complete and len(lines) == 1, stderr
            continue
        assert len(lines) <= 1, stderr  # none: before the handlers, nothing was written yet
        if lines:
            assert re.fullmatch(rf"bitnet-onnx( export)?: interrupted by {sig.name}", lines[0]), \
                f"{sig.name} after {delay} s:\n{stderr}"
        left = sorted(p.name for p in work.iterdir() if p.name.startswith((f".out-{delay}", f"out-{delay}")))
        assert not left, f"{sig.name} after {delay} s left {left}"
    assert _entries(model) == before
    assert any(status == STATUS[sig] for _, status in outcomes), f"no run was interrupted by the package: {outcomes}"


def _verb_raising(monkeypatch, exc: BaseException) -> None:
    """The `inspect` verb's run raises ``exc`` (in this process: main's handling, nothing else)."""
    import bitnet_onnx.commands.inspect as verb

    def run(_args):
        raise exc

    monkeypatch.setattr(verb, "run", run)


@pytest.mark.parametrize("exc, status, name", [(KeyboardInterrupt(), 130, "SIGINT"),
                                               (Terminated(signal.SIGTERM), 143, "SIGTERM"),
                                               (Terminated(signal.SIGHUP), 129, "SIGHUP")])
def test_main_turns_signals_into_one_line(exc, status, name, monkeypatch, capsys):
    _verb_raising(monkeypatch, exc)
    assert cli.main(["inspect", "any.gguf"]) == status
    assert capsys.readouterr().err == f"bitnet-onnx inspect: interrupted by {name}\n"


@pytest.mark.parametrize("make, writer", [("mkdtemp", "atomic_folder"), ("mkstemp", "atomic_file")])
@pytest.mark.parametrize("sig", list(STATUS), ids=[s.name for s in STATUS])
def test_signal_while_the_temp_output_is_made_leaves_nothing(make, writer, sig, tmp_path, monkeypatch, request):
    """The signal lands right after the temp output exists on disk, before the code that will remove
    it knows its name (the corpus' export-sigint once left .out.tmp-* so): held, then raised where
    the cleanup knows it."""
    import tempfile

    from bitnet_onnx import io

    inherited = signal.signal(sig, signal.SIG_DFL)  # as a foreground run has it, whatever started pytest
    request.addfinalizer(lambda: signal.signal(sig, inherited))

    real = getattr(tempfile, make)

    def make_then_signal(*args, **kwargs):
        made = real(*args, **kwargs)
        os.kill(os.getpid(), sig)  # handled at the next bytecode boundary, inside the making
        return made

    monkeypatch.setattr(tempfile, make, make_then_signal)
    with pytest.raises(KeyboardInterrupt if sig == signal.SIGINT else Terminated):
        with io.exit_cleanly_on_termination():
            with getattr(io, writer)(tmp_path / "out"):
                pytest.fail("the block ran although a signal came before it")
    assert os.listdir(tmp_path) == []


@pytest.mark.parametrize("sig", list(STATUS), ids=[s.name for s in STATUS])
def test_signal_between_renames_that_go_together_waits_for_the_last(sig, tmp_path, monkeypatch, request):
    """io.replace_together (the HF layout's data file and the graphs that name it): a signal after the
    first rename is raised after the last, so no graph is left naming a file that moved."""
    from bitnet_onnx import io

    inherited = signal.signal(sig, signal.SIG_DFL)
    request.addfinalizer(lambda: signal.signal(sig, inherited))
    real = os.replace

    def replace_then_signal(source, target):
        real(source, target)
        os.kill(os.getpid(), sig)

    monkeypatch.setattr(os, "replace", replace_then_signal)
    names = ("data", "model.onnx", "model_text.onnx")
    for name in names:
        (tmp_path / name).write_text(name)
    with pytest.raises(KeyboardInterrupt if sig == signal.SIGINT else Terminated):
        with io.exit_cleanly_on_termination():
            io.replace_together([(tmp_path / name, tmp_path / f"{name}.new") for name in names])
    assert sorted(os.listdir(tmp_path)) == sorted(f"{name}.new" for name in names)


def _an_extension_module_not_imported() -> str:
    """A top-level C extension module on sys.path that this process has not imported (the stdlib's
    example module when the interpreter ships it)."""
    for folder in map(Path, sys.path):
        names = sorted(entry.name[:-len(suffix)] for entry in folder.glob("*") if entry.is_file()
                       for suffix in importlib.machinery.EXTENSION_SUFFIXES if entry.name.endswith(suffix))
        for name in sorted(names, key=lambda n: n != "xxlimited"):
            if name not in sys.modules and "." not in name:
                return name
    pytest.fail("no C extension module left to import on sys.path")


@pytest.mark.parametrize("sig", list(STATUS), ids=[s.name for s in STATUS])
def test_signal_while_an_extension_module_initialises_waits_for_its_end(sig, monkeypatch, request):
    """A C extension's init that calls back into Python (nanobind's enums in onnx 1.23) must not see a
    handler raise: onnx's module called std::terminate on Ctrl-C there (an abort and a C++ traceback).
    The signal lands in the init, the init's Python code after it runs to its end, then it unwinds."""
    from bitnet_onnx import io

    inherited = signal.signal(sig, signal.SIG_DFL)
    request.addfinalizer(lambda: signal.signal(sig, inherited))
    real = importlib.machinery.ExtensionFileLoader.create_module
    ran_after_the_signal = []

    def init_signalled_midway(loader, spec):
        os.kill(os.getpid(), sig)
        ran_after_the_signal.append(sum(range(1000)))  # bytecode a handler could have interrupted
        return real(loader, spec)

    monkeypatch.setattr(importlib.machinery.ExtensionFileLoader, "create_module", init_signalled_midway)
    name = _an_extension_module_not_imported()
    find_and_load = importlib._bootstrap._find_and_load
    with pytest.raises(KeyboardInterrupt if sig == signal.SIGINT else Terminated):
        with io.exit_cleanly_on_termination():
            importlib.import_module(name)
    assert ran_after_the_signal == [499500]
    assert importlib._bootstrap._find_and_load is find_and_load  # the hold is the block's, not the process's
    sys.modules.pop(name, None)


def test_another_threads_held_block_leaves_the_main_threads_signal_alone(request):
    """A signal is handled in the main thread: a hold another thread is in (an atomic write, an import)
    neither delays it nor has it raised in that thread when the hold ends."""
    from bitnet_onnx import io
    from bitnet_onnx.io.signals import signals_held

    inherited = signal.signal(signal.SIGTERM, signal.SIG_DFL)
    request.addfinalizer(lambda: signal.signal(signal.SIGTERM, inherited))
    entered, release, raised_in_thread = threading.Event(), threading.Event(), []

    def hold() -> None:
        try:
            with signals_held:
                entered.set()
                release.wait(30)
        except BaseException as e:  # noqa: BLE001 (what the thread's hold raised is the finding)
            raised_in_thread.append(e)

    thread = threading.Thread(target=hold)
    thread.start()
    try:
        assert entered.wait(30)
        with pytest.raises(Terminated):
            with io.exit_cleanly_on_termination():
                os.kill(os.getpid(), signal.SIGTERM)
                for _ in range(3000):  # Python code for the handler to run in: 3 s at most
                    time.sleep(0.001)
    finally:
        release.set()
        thread.join()
    assert raised_in_thread == []


# A child that signals itself inside the command line's block at one of the places where an exception
# raised by the handler used to break the run: importlib's own lines (its module locks are taken and
# released in plain Python; SIGTERM there deadlocked the next import, or was printed and lost in a lock's
# weakref callback and the run went on) and a __del__ (printed and lost). The tracer that sends it claims
# importlib's module name, so the handler sees the signal as arriving in the traced importlib frame.
_SIGNALLED_CHILD = r"""
import os, signal, sys, time
from bitnet_onnx.io import Terminated, exit_cleanly_on_termination
where, sig = sys.argv[1], getattr(signal, sys.argv[2])

TRACER = '''
def tracer(frame, event, arg):
    if event == "line" and frame.f_code.co_name == target and frame.f_globals["__name__"] == "importlib._bootstrap":
        sys.settrace(None)
        print("signalled in", target, flush=True)
        os.kill(os.getpid(), sig)
        return None
    return tracer
'''
names = {"__name__": "importlib._bootstrap", "sys": sys, "os": os, "sig": sig, "target": where.split("-")[0]}
exec(TRACER, names)


class Dropped:
    def __del__(self):
        print("signalled in __del__", flush=True)
        os.kill(os.getpid(), sig)


try:
    with exit_cleanly_on_termination():
        if where == "__del__":
            Dropped()
        elif where == "cb-outside-imports":  # the callback as the garbage collector runs it, between imports
            lock = sys.modules["importlib._bootstrap"]._get_module_lock("not_imported")
            sys.settrace(names["tracer"])
            del lock
        else:
            sys.settrace(names["tracer"])
            import outer_module
        sys.settrace(None)
        for _ in range(500):  # Python code to come back to, 5 s at most
            time.sleep(0.01)
        print("ran on after the signal", flush=True)
except (KeyboardInterrupt, Terminated):
    sys.settrace(None)
    print("unwound with", sorted(name for name in sys.modules if name.endswith("_module")), flush=True)
    import another_module  # the import machinery still works: no lock was left taken
    print("imported", another_module.__name__, flush=True)
"""


@pytest.mark.parametrize("where", ["acquire", "release", "cb", "cb-outside-imports", "__del__"])
@pytest.mark.parametrize("sig", list(STATUS), ids=[s.name for s in STATUS])
def test_a_signal_where_an_exception_cannot_unwind_comes_back_where_it_can(where, sig, tmp_path):
    """Inside an import the signal waits for the outermost import's end (``_imports_held``; CI's export
    signalled 0.2 s into its imports once died of SIGSEGV); in importlib's own code outside imports
    or in a ``__del__`` it is delivered again milliseconds later (``_SignalsHeld._deliver_again``)."""
    (tmp_path / "outer_module.py").write_text("import inner_module\n")
    (tmp_path / "inner_module.py").write_text("VALUE = 1\n")
    (tmp_path / "another_module.py").write_text("")
    (tmp_path / "child.py").write_text(_SIGNALLED_CHILD)
    proc = subprocess.run([sys.executable, str(tmp_path / "child.py"), where, sig.name], cwd=tmp_path,
                          capture_output=True, text=True, timeout=120, preexec_fn=child_signals.reset_to_default,
                          env={**os.environ, "PYTHONDONTWRITEBYTECODE": "1", "PYTHONPATH": str(tmp_path)})
    imported = "['inner_module', 'outer_module']" if where in ("acquire", "release", "cb") else "[]"
    assert proc.stdout.splitlines() == [f"signalled in {where.split('-')[0]}", f"unwound with {imported}",
                                        "imported another_module"], proc.stdout + proc.stderr
    assert proc.stderr == ""


def _export_sighup_ignored(model: Path, out: Path) -> subprocess.Popen:
    def ignore_sighup() -> None:  # what nohup hands its command
        child_signals.reset_to_default()
        signal.signal(signal.SIGHUP, signal.SIG_IGN)
    return subprocess.Popen([sys.executable, "-m", "bitnet_onnx", "export", str(model), "--weights", "f32",
                             "-o", str(out)], stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True,
                            preexec_fn=ignore_sighup, env={**os.environ, "PYTHONDONTWRITEBYTECODE": "1"})


def _dispositions(pid: int) -> tuple[set[int], set[int]] | None:
    """The signals process ``pid`` catches and ignores (/proc/PID/status SigCgt, SigIgn); None once it
    has exited (a zombie keeps no handlers)."""
    try:
        fields = dict(line.split(":\t", 1) for line in Path(f"/proc/{pid}/status").read_text().splitlines()
                      if ":\t" in line)
    except FileNotFoundError:
        return None
    if fields["State"].startswith(("Z", "X")):
        return None

    def signals(mask: str) -> set[int]:
        bits = int(mask, 16)
        return {n for n in range(1, 65) if bits >> (n - 1) & 1}
    return signals(fields["SigCgt"]), signals(fields["SigIgn"])


def test_an_inherited_sighup_ignore_stays_ignored(tiny_model, tmp_path):
    """Under nohup a hang-up must not stop the run: the export finishes as if no signal came. Hang-ups
    count only when they land inside the run's handlers (SIGTERM caught: cli.main's block, the verb's
    imports and work), the process alive on both sides of the kill; an export that ended before any
    did would prove nothing, so at least one must."""
    out = tmp_path / "out"
    proc = _export_sighup_ignored(tiny_model("qwen3"), out)
    landed, deadline = 0, time.monotonic() + 300
    while proc.poll() is None and time.monotonic() < deadline:
        seen = _dispositions(proc.pid)
        if seen is not None and signal.SIGTERM in seen[0]:
            assert signal.SIGHUP in seen[1], "the run's handlers replaced the inherited SIGHUP ignore"
            proc.send_signal(signal.SIGHUP)
            after = _dispositions(proc.pid)
            landed += after is not None and signal.SIGTERM in after[0]
        time.sleep(0.1)
    _, stderr = proc.communicate(timeout=300)
    assert proc.returncode == 0, stderr
    assert landed >= 1, "the export ended before a hang-up landed inside its handlers"
    assert (out / "bitnet_onnx.json").is_file() and (out / "model.onnx").is_file()


def test_sighup_cases_pass_when_pytest_inherits_an_ignore(tmp_path):
    """The suite under nohup: the SIGHUP cases (their children start with default dispositions) pass
    in a pytest that was itself started with SIGHUP ignored. The quickest of each kind: the in-process
    hold, a corpus writer held at its temp output."""
    tests = Path(__file__).parent

    def ignore_sighup() -> None:
        child_signals.reset_to_default()
        signal.signal(signal.SIGHUP, signal.SIG_IGN)
    selected = [f"{tests / 'test_interrupts.py'}::test_signal_while_the_temp_output_is_made_leaves_nothing",
                f"{tests / 'bad_inputs' / 'test_corpus.py'}::test_case"]
    run = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "--basetemp", str(tmp_path / "t"),
                          "-k", "SIGHUP or sighup", *selected], capture_output=True, text=True, timeout=900,
                         preexec_fn=ignore_sighup, cwd=tests.parent)
    assert run.returncode == 0, run.stdout[-4000:] + run.stderr[-2000:]
    passed = re.search(r"(\d+) passed", run.stdout)
    assert passed and int(passed.group(1)) >= 3, run.stdout[-2000:]
