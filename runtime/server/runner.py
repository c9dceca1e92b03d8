"""Runs the app on uvicorn with a graceful SIGTERM: stop accepting, finish in-flight requests, exit 0."""

from __future__ import annotations

import contextlib
import signal
import socket
import threading

import uvicorn

from bitnet_onnx.errors import BitnetOnnxError


def listen(host: str, port: int) -> socket.socket:
    """A listening socket on host:port (port 0: a free port), or a one-line error naming the address."""
    sock = None
    try:
        family, kind, proto, _, address = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM,
                                                             proto=socket.IPPROTO_TCP)[0]
        # proto IPPROTO_TCP, not 0: asyncio sets TCP_NODELAY only on accepted sockets that say they are
        # TCP; without it a response's header and body writes wait ~40 ms for a delayed ACK.
        sock = socket.socket(family, kind, proto)
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.bind(address)
        sock.listen(2048)
    except (OSError, UnicodeError) as e:
        if sock is not None:
            sock.close()
        reason = getattr(e, "strerror", None) or str(e)
        raise BitnetOnnxError(f"cannot listen on {host}:{port} ({reason})") from None
    return sock


# Idle keep-alive connections are closed after this long: longer than clients keep theirs (httpx 5 s,
# aiohttp 15 s, load balancers 60 s), so a client never sends a request on a connection the server is
# closing at that moment (uvicorn's default of 5 s races httpx's: the request dies with a read error).
KEEP_ALIVE_S = 75


class _Server(uvicorn.Server):
    """uvicorn's server with our signal handling: the first SIGTERM / SIGINT drains (new requests get 503
    until the listener closes) and shuts down gracefully; the process then exits 0 instead of uvicorn
    re-raising the signal. A second SIGINT forces the exit."""

    def __init__(self, config: uvicorn.Config, on_exit_signal):
        super().__init__(config)
        self._on_exit_signal = on_exit_signal

    @contextlib.contextmanager
    def capture_signals(self):
        if threading.current_thread() is not threading.main_thread():
            yield
            return
        previous = {sig: signal.signal(sig, self._exit_signal) for sig in (signal.SIGINT, signal.SIGTERM)}
        try:
            yield
        finally:
            for sig, handler in previous.items():
                signal.signal(sig, handler)

    def _exit_signal(self, sig, frame) -> None:
        if self.should_exit and sig == signal.SIGINT:
            self.force_exit = True
            return
        self._on_exit_signal()
        self.should_exit = True


def serve(app, sock: socket.socket, graceful_timeout_s: float = 30.0, log_level: str = "info",
          access_log: bool = False) -> None:
    """Serves ``app`` (from ``create_app``) on ``sock`` until SIGTERM / SIGINT (or ``should_exit``)."""
    config = uvicorn.Config(app, log_level=log_level, access_log=access_log, lifespan="on",
                            timeout_graceful_shutdown=graceful_timeout_s, timeout_keep_alive=KEEP_ALIVE_S,
                            server_header=False)
    server = _Server(config, on_exit_signal=app.state.service.batcher.drain)
    app.state.uvicorn_server = server  # lets an embedding host (or a test) stop it: should_exit = True
    server.run(sockets=[sock])
