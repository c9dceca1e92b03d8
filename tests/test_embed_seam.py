"""One call to embed (issue 29): callers outside runtime/ never reach inside the Embedder (its session,
tokenizer, finishing steps), and the server, the Ray job and the CLI each embed a request in one call.

Static half: an AST walk over every Python file of the checkout outside runtime/ for attribute access
to the Embedder's private members (its session, tokenizer, finishing steps: names read off the class
and an instance, so a new private member is covered without editing this file) or to the server's two
batch steps (``run_batch``, ``finish``) from non-test code. Behavioural half: every public Embedder
method is wrapped to record who calls it (the calling module), and each caller must make exactly its
one call (prepare + embed where it needs the token ids)."""

from __future__ import annotations

import ast
import sys
from pathlib import Path

import numpy as np
import pytest

from bitnet_onnx.runtime.embedder import Embedder
from embedder_calls import record_calls

REPO = Path(__file__).resolve().parents[1]
RUNTIME = REPO / "runtime"
SKIP_DIRS = {".venv", "build", "dist", ".git", "node_modules", "__pycache__"}
# The server's steps for batching many requests together (runtime/server); everyone else embeds whole requests.
SERVER_STEPS = {"run_batch", "finish"}
TEXTS = ["a cat sat on the mat", "spiders have eight legs", "a", "the quick brown fox jumps over the lazy dog"]


@pytest.fixture(scope="module")
def folder(tiny_model, tiny_export):
    return tiny_export(tiny_model("qwen3"), weights="int8")


def _python_files() -> list[Path]:
    files = []
    for path in REPO.rglob("*.py"):
        parts = set(path.relative_to(REPO).parts[:-1])
        if parts & SKIP_DIRS or any(p.startswith(".") for p in parts) or path.is_relative_to(RUNTIME):
            continue
        files.append(path)
    return files


def _private_members(embedder: Embedder) -> set[str]:
    names = set(vars(embedder)) | {n for klass in type(embedder).__mro__ for n in vars(klass)}
    return {n for n in names if n.startswith("_") and not n.startswith("__")}


def _reaches(path: Path, names: set[str], root: Path = REPO) -> list[str]:
    """``<expr>.<name>`` for ``name`` in ``names`` where ``<expr>`` is not ``self`` / ``cls``."""
    tree = ast.parse(path.read_text(encoding="utf-8"), filename=str(path))
    found = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Attribute) and node.attr in names:
            if isinstance(node.value, ast.Name) and node.value.id in ("self", "cls"):
                continue
            found.append(f"{path.relative_to(root)}:{node.lineno}: .{node.attr}")
    return found


def test_the_embedders_insides_are_private(folder):
    embedder = Embedder(folder, threads=1)
    for name in ("session", "text_session", "tokenizer", "encode_ids"):
        assert not hasattr(embedder, name), f"Embedder.{name} is public again: callers would reassemble it"
    assert {"_session", "_tokenizer", "_text_session", "_finishing"} <= _private_members(embedder)


def test_no_file_outside_runtime_reaches_inside_the_embedder(folder):
    private = _private_members(Embedder(folder, threads=1))
    files = _python_files()
    assert any(f.is_relative_to(REPO / "cli" / "integrations") for f in files)  # the walk sees the adapters
    found = [hit for f in files for hit in _reaches(f, private)]
    assert not found, "reaches into the Embedder from outside runtime/:\n" + "\n".join(found)
    shipped = [f for f in files if not f.is_relative_to(REPO / "tests")]
    found = [hit for f in shipped for hit in _reaches(f, SERVER_STEPS)]
    assert not found, "the server's batch steps used outside runtime/ (embed a whole request):\n" + "\n".join(found)


def test_the_walk_finds_a_reach(tmp_path, folder):
    """The check itself: a file that reaches for the session or a batch step is found, ``self`` access is not."""
    bad = tmp_path / "adapter.py"
    bad.write_text("def f(embedder):\n    return embedder._session.run(None, {})\n"
                   "class A:\n    def g(self):\n        return self._session\n"
                   "def h(e, rows, p):\n    return e.finish(p, rows)\n")
    private = _private_members(Embedder(folder, threads=1))
    assert _reaches(bad, private, tmp_path) == ["adapter.py:2: ._session"]
    assert _reaches(bad, SERVER_STEPS, tmp_path) == ["adapter.py:7: .finish"]


# --- each caller embeds in one call ----------------------------------------------------------------

@pytest.fixture
def calls(monkeypatch) -> list[tuple[str, str]]:
    """(calling module, Embedder method) of every call from outside the embedder module."""
    return record_calls(monkeypatch)


def test_the_ray_job_embeds_in_one_call(folder, calls):
    from bitnet_onnx.runtime.dataset import EmbedOptions, _EmbedderActor

    actor = _EmbedderActor(str(folder), EmbedOptions(dimensions=16, precision="ubinary").with_ranges(folder))
    vectors, counts = actor.embed(TEXTS)
    assert calls == [("bitnet_onnx.runtime.dataset", "prepare"), ("bitnet_onnx.runtime.dataset", "embed")]
    calls.clear()
    want = actor.embedder.encode(TEXTS, dimensions=16, precision="ubinary")
    np.testing.assert_array_equal(vectors, want)
    assert counts.tolist() == [len(x) for x in actor.embedder.tokenize(TEXTS)]


def test_the_server_embeds_in_one_call(folder, calls, monkeypatch):
    """Each embedding route calls Service.embed once; only the service (runtime/server) takes the
    Embedder's steps, and the embedder it serves is left as it was (no session swapped in)."""
    from fastapi.testclient import TestClient

    from bitnet_onnx.runtime.server import ServerConfig, create_app
    from bitnet_onnx.runtime.server.service import Service

    embedder = Embedder(folder, threads=1)
    before = dict(vars(embedder))

    def untouched() -> bool:  # the same objects under the same names: nothing installed on it
        now = vars(embedder)
        return now.keys() == before.keys() and all(now[k] is v for k, v in before.items())
    served = []
    original = Service.embed

    async def counted(self, *args, **kwargs):
        served.append(sys._getframe(1).f_globals.get("__name__"))
        return await original(self, *args, **kwargs)

    monkeypatch.setattr(Service, "embed", counted)
    with TestClient(create_app(embedder, ServerConfig(model_name="m"))) as client:
        assert untouched()
        for path, body in (("/v1/embeddings", {"model": "m", "input": TEXTS}), ("/embed", {"inputs": TEXTS})):
            served.clear()
            calls.clear()
            r = client.post(path, json=body)
            assert r.status_code == 200, r.text
            assert len(served) == 1 and served[0].startswith("bitnet_onnx.runtime.server.routers."), (path, served)
            assert {module for module, _ in calls} == {"bitnet_onnx.runtime.server.service"}, (path, calls)
            assert [name for _, name in calls if name != "run_batch"] == ["prepare", "finish"], (path, calls)
    assert untouched()


def test_the_cli_embeds_in_one_call(folder, calls, tmp_path):
    from bitnet_onnx.cli import main

    out = tmp_path / "v.npy"
    assert main(["embed", str(folder), *TEXTS, "--output", str(out), "--quiet"]) == 0
    assert calls == [("bitnet_onnx.commands.embed", "encode")]
    calls.clear()
    np.testing.assert_array_equal(np.load(out), Embedder(folder).encode(TEXTS))
