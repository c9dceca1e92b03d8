"""A pre-imported parent for the corpus' runs: each run is still a process of its own, forked from this
server instead of started as a cold interpreter, so it does not pay numpy's, onnx's (over a second:
ml_dtypes) and the package's imports again.

    python tests/bad_inputs/fork_server.py CONTROL_FD [MODULE ...]

``ForkServer`` (the session fixture ``fork_server`` of conftest.py) starts it once, with one end of a
socket pair as CONTROL_FD and the modules to import besides PRELOAD (the verbs the runs use), and ``ForkServer.popen`` asks it for a run: a JSON request (the ``python``
arguments, ``-m MODULE ARGV...`` or ``SCRIPT ARGV...``, the working folder, environment, umask and
rlimits) with four file descriptors (SCM_RIGHTS): a socket for the answers, then the run's stdin, stdout
and stderr. The server forks; the child takes the request's folder, environment, umask and rlimits,
the signal dispositions a new interpreter has, the three descriptors as 0-2, and then runs the
arguments as ``python ARGS`` would: a fresh ``__main__``, ``sys.argv``, ``sys.path[0]``, and the
interpreter's own way out (threads joined, atexit handlers, stdio flushed, the status of a SystemExit,
a traceback and status 1 for an uncaught exception, death by SIGINT after an uncaught Ctrl-C). The
answers: ``{"pid": N}`` with a pidfd (a signal sent through it never reaches a process that reused the pid), then
``{"status": S}``, its wait status, once it is reaped. ``ForkedProcess`` reads them as Popen would.

The server ends when the control socket closes (the session ended, or pytest died), killing the runs
still going. What the environment, argv or rlimits change while an interpreter starts (its imports
under a memory limit, a signal during them) cannot be reproduced by a fork: such cases run cold
(``Case.cold`` in cases.py).
"""

from __future__ import annotations

import ctypes
import importlib
import json
import os
import resource
import runpy
import select
import selectors
import signal
import socket
import subprocess
import sys
import tempfile
import types
from pathlib import Path

# What the corpus' verbs' runs import on the way (python -X importtime -m bitnet_onnx VERB ...), besides
# the verb modules themselves, which the caller names (from cli.VERBS: the verbs its runs use). onnx
# alone is over a second (ml_dtypes). Not onnxruntime: its import starts a thread (a child would inherit
# its state without the thread), for ~50 ms; nor torch: only `verify`'s reference needs it.
PRELOAD = (
    "bitnet_onnx.cli",
    "bitnet_onnx.convert_gguf.inspect",
    "bitnet_onnx.convert_gguf.writer",
    "bitnet_onnx.export.exporter",
    "bitnet_onnx.runtime.embedder",
    "gguf",
    "onnx",
    "safetensors.numpy",
    "tokenizers",
    "tqdm.auto",
)
MAX_REQUEST_BYTES = 1 << 20
START_SECONDS = 300  # the imports, on a loaded 2-vCPU machine
ANSWER_SECONDS = 60  # a fork's pid; the server answers at once unless it is gone
STOP_SECONDS = 30


# ---- the test's side ------------------------------------------------------------------------------

class ForkServer:
    """The running server, started with ``env`` in ``folder`` (its log: folder/server.log);
    ``popen`` starts one run from it, ``close`` stops it."""

    def __init__(self, folder: Path, env: dict[str, str], modules: list[str]):
        self.log = folder / "server.log"
        self._control, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
        self._control.settimeout(ANSWER_SECONDS)  # a request waits for room at most this long
        with theirs, open(self.log, "wb") as log:
            self.process = subprocess.Popen([sys.executable, __file__, str(theirs.fileno()), *modules], cwd=folder, env=env,
                                            pass_fds=[theirs.fileno()], stdin=subprocess.DEVNULL,
                                            stdout=subprocess.DEVNULL, stderr=log)
        self._ready = False  # the imports go on while the session builds its inputs

    def popen(self, args: list[str], *, cwd: Path, env: dict[str, str], stdin, stderr, umask: int | None = None,
              rlimits: dict[int, tuple[int, int]] | None = None) -> ForkedProcess:
        """``python ARGS`` (``-m MODULE ...`` or ``SCRIPT ...``) as a fork of the server; stdout goes to
        /dev/null, stdin is DEVNULL or PIPE, stderr a file. Without ``umask`` the run gets this process's."""
        self._wait_ready()
        if umask is None:
            umask = os.umask(0o022)
            os.umask(umask)
        request = {"args": args, "cwd": str(cwd), "env": env, "umask": umask,
                   "rlimits": [[which, *limits] for which, limits in (rlimits or {}).items()]}
        mine, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
        stdin_fd, writer = _stdin(stdin)
        devnull = os.open(os.devnull, os.O_WRONLY)
        try:
            socket.send_fds(self._control, [json.dumps(request).encode()],
                            [theirs.fileno(), stdin_fd, devnull, stderr.fileno()])
        except OSError as e:
            raise RuntimeError(f"the fork server is gone ({e}); its log:\n{self._log_tail()}") from None
        finally:  # the server holds its own copies now (or never will)
            for fd in (stdin_fd, devnull):
                os.close(fd)
            theirs.close()
        return ForkedProcess(args, mine, writer, self._log_tail)

    def close(self) -> None:
        """Stops the server (it kills the runs still going) and waits for it."""
        self._control.close()
        try:
            self.process.wait(STOP_SECONDS)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait()

    def _wait_ready(self) -> None:
        if self._ready:
            return
        answer = _receive(self._control, START_SECONDS, "the fork server's imports")
        if answer is None or not answer[0].get("ready"):
            raise RuntimeError(f"the fork server did not start; its log:\n{self._log_tail()}")
        self._ready = True

    def _log_tail(self) -> str:
        return self.log.read_text(errors="replace")[-4000:]


def _stdin(spec) -> tuple[int, object]:
    """(the descriptor the run reads, the file this process writes into, for PIPE)."""
    if spec == subprocess.DEVNULL:
        return os.open(os.devnull, os.O_RDONLY), None
    if spec == subprocess.PIPE:
        read, write = os.pipe()
        return read, open(write, "wb")
    raise ValueError(f"stdin must be DEVNULL or PIPE, not {spec!r}")


def _receive(sock: socket.socket, seconds: float, what: str) -> tuple[dict, list[int]] | None:
    """The next message on ``sock`` (JSON) and the descriptors it carries; None at end of file."""
    if not select.select([sock], [], [], seconds)[0]:
        raise RuntimeError(f"no answer from the fork server after {seconds} s: {what}")
    data, fds, _, _ = socket.recv_fds(sock, MAX_REQUEST_BYTES, 4)
    return (json.loads(data), fds) if data else None


class ForkedProcess:
    """A run the server forked, with what the corpus uses of subprocess.Popen: ``pid``, ``stdin`` (for
    PIPE), ``poll``, ``wait``, ``send_signal``, ``terminate``, ``kill``, ``returncode`` (-N: killed by
    signal N)."""

    def __init__(self, args: list[str], answers: socket.socket, stdin, log_tail):
        self.args = args
        self.stdin = stdin
        self.returncode: int | None = None
        self._answers = answers
        self._log_tail = log_tail
        answer = _receive(answers, ANSWER_SECONDS, f"the pid of python {' '.join(args)}")
        if answer is None or "pid" not in answer[0]:
            answers.close()
            raise RuntimeError(f"the fork server did not start python {' '.join(args)}: {answer and answer[0]}; "
                               f"its log:\n{log_tail()}")
        self.pid = answer[0]["pid"]
        self._pidfd = answer[1][0]

    def poll(self) -> int | None:
        if self.returncode is None and select.select([self._answers], [], [], 0)[0]:
            self._take_status()
        return self.returncode

    def wait(self, timeout: float | None = None) -> int:
        if self.returncode is None:
            if not select.select([self._answers], [], [], timeout)[0]:
                raise subprocess.TimeoutExpired(self.args, timeout)
            self._take_status()
        return self.returncode

    def send_signal(self, sig: int) -> None:
        if self.returncode is None:  # a pidfd never names another process: no poll() first, as Popen needs
            try:
                signal.pidfd_send_signal(self._pidfd, sig)
            except ProcessLookupError:  # exited, its status not read yet
                pass

    def terminate(self) -> None:
        self.send_signal(signal.SIGTERM)

    def kill(self) -> None:
        self.send_signal(signal.SIGKILL)

    def _take_status(self) -> None:
        data = self._answers.recv(MAX_REQUEST_BYTES)
        self._answers.close()
        if not data:  # nothing will tell its status: it may not outlive the test
            _kill(self._pidfd)
        os.close(self._pidfd)
        if not data:
            raise RuntimeError(f"the fork server went away before pid {self.pid} ended; its log:\n{self._log_tail()}")
        self.returncode = os.waitstatus_to_exitcode(json.loads(data)["status"])


# ---- the server -----------------------------------------------------------------------------------

def main(control_fd: int, modules: list[str]) -> None:
    control = socket.socket(fileno=control_fd)
    sys.path[0] = os.getcwd()  # as `python -m` has it, not this script's folder (the tests')
    for name in (*PRELOAD, *modules):
        importlib.import_module(name)
    _stop_openblas_threads()
    _check_single_threaded()
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # a Ctrl-C reaches the session's process group: stop with it
    control.send(json.dumps({"ready": True}).encode())
    request, stdio = serve(control)  # in a forked child only: the server exits from serve()
    become_the_run(request, stdio)


def _stop_openblas_threads() -> None:
    """numpy's OpenBLAS starts its thread pool at import. OpenBLAS stops the pool itself before every
    fork (its pthread_atfork handler) and a child starts it again at its first parallel call, as many
    threads as a cold import would; stopping it now leaves no thread at any fork, the first included."""
    with open("/proc/self/maps") as maps:
        paths = {line.split()[-1] for line in maps if "openblas" in line.rsplit("/", 1)[-1]}
    for path in paths:
        shutdown = getattr(ctypes.CDLL(path), "blas_thread_shutdown_", None)
        if shutdown is not None:
            shutdown()


def _check_single_threaded() -> None:
    """A fork copies the calling thread only: another thread's locks would stay taken in every child."""
    tasks = os.listdir("/proc/self/task")
    if len(tasks) > 1:
        raise RuntimeError(f"the imports started {len(tasks) - 1} thread(s); fork only from a single thread")


def serve(control: socket.socket) -> tuple[dict, list[int]]:
    """Forks a run for each request on ``control``, tells each its pid and, once reaped, its wait status;
    returns in a forked child only (its request and stdio), exits when ``control`` closes."""
    selector = selectors.DefaultSelector()
    selector.register(control, selectors.EVENT_READ)
    runs: dict[int, tuple[int, socket.socket]] = {}  # pidfd -> (pid, the socket its answers go to)
    while True:
        for key, _ in selector.select():
            if selector.get_map().get(key.fd) is not key:  # a run's end, reported earlier in this batch
                continue
            if key.fileobj is control:
                received = _receive_request(control)
                if received is None:  # the session is over
                    _exit_killing(runs)
                request, (answers_fd, *stdio) = received
                answers = socket.socket(fileno=answers_fd)
                if _fork(answers, stdio, selector, runs):
                    _leave_the_server(selector, control, answers, runs)
                    return request, stdio
            elif key.data == "ended":
                _report_status(key.fileobj, selector, runs)
            else:  # the test closed its end before the run ended: nothing may outlive it
                _kill(key.data)
                selector.unregister(key.fileobj)


def _receive_request(control: socket.socket) -> tuple[dict, list[int]] | None:
    data, fds, flags, _ = socket.recv_fds(control, MAX_REQUEST_BYTES, 4)
    if not data:
        return None
    if flags & (socket.MSG_TRUNC | socket.MSG_CTRUNC) or len(fds) != 4:
        raise RuntimeError(f"a truncated request ({len(data)} bytes, {len(fds)} descriptors)")
    return json.loads(data), fds


def _fork(answers: socket.socket, stdio: list[int], selector, runs: dict) -> bool:
    """Starts the run; True in the child. The parent tells the test the pid and watches for the end."""
    sys.stdout.flush()
    sys.stderr.flush()  # nothing the server buffered is written again by a child
    pid = os.fork()
    if pid == 0:
        return True
    for fd in stdio:
        os.close(fd)
    pidfd = os.pidfd_open(pid)
    runs[pidfd] = (pid, answers)
    selector.register(pidfd, selectors.EVENT_READ, "ended")
    selector.register(answers, selectors.EVENT_READ, pidfd)
    answers.settimeout(ANSWER_SECONDS)
    socket.send_fds(answers, [json.dumps({"pid": pid}).encode()], [pidfd])
    return False


def _report_status(pidfd: int, selector, runs: dict) -> None:
    pid, answers = runs.pop(pidfd)
    _, status = os.waitpid(pid, 0)
    selector.unregister(pidfd)
    os.close(pidfd)
    if answers.fileno() in selector.get_map():  # not if the test went away first
        selector.unregister(answers)
    try:
        answers.send(json.dumps({"status": status}).encode())
    except OSError:  # the test is gone
        pass
    answers.close()


def _kill(pidfd: int) -> None:
    try:
        signal.pidfd_send_signal(pidfd, signal.SIGKILL)
    except ProcessLookupError:
        pass


def _exit_killing(runs: dict) -> None:
    for pidfd, (pid, _) in runs.items():
        _kill(pidfd)
        os.waitpid(pid, 0)
    sys.exit(0)


def _leave_the_server(selector, control: socket.socket, answers: socket.socket, runs: dict) -> None:
    """Closes, in the child, every descriptor of the server by its object (no object may later close a
    number the run reuses)."""
    selector.close()
    control.close()
    answers.close()
    for pidfd, (_, other_answers) in runs.items():
        os.close(pidfd)
        other_answers.close()


# ---- the child: a cold interpreter's state, then the run -------------------------------------------

def become_the_run(request: dict, stdio: list[int]) -> None:
    """Runs ``python ARGS`` of the request in this (forked) process; returns only when it ends without a
    SystemExit, as the interpreter's top level would."""
    _signals_as_at_start()
    for fd, stdio_fd in zip(stdio, (0, 1, 2)):
        os.dup2(fd, stdio_fd)
        os.close(fd)
    os.chdir(request["cwd"])
    _take_environment(request["env"])
    os.umask(request["umask"])
    for which, soft, hard in request["rlimits"]:
        resource.setrlimit(which, (soft, hard))
    _run_python(request["args"])


def _signals_as_at_start() -> None:
    """The dispositions of a new interpreter started from a terminal: every signal at its default, then
    CPython's own (SIGPIPE and SIGXFSZ ignored, SIGINT raising KeyboardInterrupt); none blocked."""
    signal.pthread_sigmask(signal.SIG_SETMASK, [])
    for sig in signal.valid_signals():
        if sig not in (signal.SIGKILL, signal.SIGSTOP):
            try:
                signal.signal(sig, signal.SIG_DFL)
            except (OSError, ValueError):  # the C library's own (real-time) signals
                pass
    signal.signal(signal.SIGPIPE, signal.SIG_IGN)
    signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
    signal.signal(signal.SIGINT, signal.default_int_handler)


def _take_environment(env: dict[str, str]) -> None:
    """``env`` for the run, and what an interpreter reads from it once at start (and the server's imports
    may have cached)."""
    os.environ.clear()
    os.environ.update(env)
    sys.dont_write_bytecode = bool(env.get("PYTHONDONTWRITEBYTECODE"))
    tempfile.tempdir = None


def _run_python(args: list[str]) -> None:
    """``python ARGS``: ``-m MODULE ARGV...`` as runpy runs it for -m, or ``SCRIPT ARGV...``."""
    sys.orig_argv = [sys.executable, *args]
    sys.modules["fork_server"] = sys.modules["__main__"]  # this module stays alive under its own name
    sys.modules["__main__"] = types.ModuleType("__main__")
    if args[0] == "-m":
        sys.argv = ["-m", *args[2:]]  # runpy puts the module's path in argv[0]
        sys.path[0] = os.getcwd()
        runpy._run_module_as_main(args[1])  # what the interpreter itself calls for -m
    else:
        sys.argv = list(args)
        sys.path[0] = os.path.dirname(os.path.realpath(args[0]))
        runpy.run_path(args[0], run_name="__main__")


if __name__ == "__main__":
    main(int(sys.argv[1]), sys.argv[2:])
