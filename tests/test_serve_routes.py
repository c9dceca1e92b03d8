"""The "Add a server endpoint" recipe (docs/contributing.md), kept true: every route of the app has its
metrics label (derived from the route, never "other"), a request schema from ``schemas`` when it takes a
body, a row in docs/serve.md's endpoint table saying whether it needs the API key, and errors in its
router's shape. A route added without one of these steps fails here."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

pytest.importorskip("fastapi")

from fastapi.routing import APIRoute  # noqa: E402
from fastapi.testclient import TestClient  # noqa: E402

from bitnet_onnx import Embedder  # noqa: E402
from bitnet_onnx.runtime.server import ServerConfig, create_app, schemas  # noqa: E402
from bitnet_onnx.runtime.server.errors import TEI  # noqa: E402
from bitnet_onnx.runtime.server.middleware import OTHER_ROUTE  # noqa: E402
from bitnet_onnx.runtime.server.routers import ROUTERS  # noqa: E402

REPO = Path(__file__).resolve().parents[1]
KEY = "routes-key"
VALID_BODIES = {"/v1/embeddings": {"input": "a cat"}, "/embed": {"inputs": "a cat"}}  # one per POST route


@pytest.fixture(scope="module")
def client(tiny_model, tiny_export):
    embedder = Embedder(tiny_export(tiny_model("qwen3"), weights="i2s"), threads=1)
    app = create_app(embedder, ServerConfig(model_name="m", api_key=KEY, max_body_bytes=1024))
    with TestClient(app) as c:
        c.served_app = app  # TestClient.app may be a wrapper
        yield c


def routes(client) -> list[APIRoute]:
    """The routes of the routers (each with its body model)."""
    return [r for api in ROUTERS for r in api.router.routes]


def route_ids(client) -> list[tuple[str, str]]:
    """(METHOD, path) of every route the app serves, from its OpenAPI description (FastAPI's own list)."""
    paths = client.served_app.openapi()["paths"]
    return sorted((method.upper(), path) for path, methods in paths.items() for method in methods)


def api_of(path: str):
    return next(api for api in ROUTERS if path in api.paths)


def requests_counted(client) -> dict[tuple[str, str], float]:
    """(route label, status) -> requests, from /metrics."""
    text = client.get("/metrics").text
    found = re.findall(r'^bitnet_onnx_requests_total\{route="([^"]*)",status="(\d+)"\} (\S+)$', text, re.M)
    return {(route, status): float(value) for route, status, value in found}


def test_every_route_comes_from_a_router_of_the_table(client):
    from_routers = sorted((method, r.path) for r in routes(client) for method in r.methods)
    assert route_ids(client) == from_routers


def test_every_route_is_listed_in_metrics_before_its_first_request(tiny_model, tiny_export):
    app = create_app(Embedder(tiny_export(tiny_model("qwen3"), weights="i2s"), threads=1), ServerConfig(model_name="m"))
    with TestClient(app) as fresh:
        text = fresh.get("/metrics").text
    for path in app.openapi()["paths"]:
        assert f'bitnet_onnx_request_duration_seconds_count{{route="{path}"}}' in text, path


def test_every_route_has_its_own_metrics_label(client):
    headers = {"Authorization": f"Bearer {KEY}"}
    for method, path in route_ids(client):
        before = requests_counted(client)
        r = client.request(method, path, json=VALID_BODIES.get(path) if method == "POST" else None, headers=headers)
        assert r.status_code == 200, (method, path, r.text)
        after = requests_counted(client)
        scrapes = 1 if path == "/metrics" else 0  # the scrape that took ``before`` is counted in ``after``
        assert after.get((path, "200"), 0) == before.get((path, "200"), 0) + 1 + scrapes, (method, path)
        assert after.get((OTHER_ROUTE, "200"), 0) == before.get((OTHER_ROUTE, "200"), 0)


def test_refused_and_unknown_requests_are_labelled_too(client):
    headers = {"Authorization": f"Bearer {KEY}"}
    before = requests_counted(client)
    assert client.post("/embed", content=b"x" * 2048, headers=headers).status_code == 413  # before routing
    assert client.delete("/v1/embeddings", headers=headers).status_code == 405  # a path match, wrong method
    assert client.get("/v2/nothing", headers=headers).status_code == 404
    after = requests_counted(client)
    for label, status in (("/embed", "413"), ("/v1/embeddings", "405"), (OTHER_ROUTE, "404")):
        assert after.get((label, status), 0) == before.get((label, status), 0) + 1, (label, status)


def test_every_body_is_a_schema_of_the_schemas_module(client):
    for route in routes(client):
        if "POST" in route.methods:
            assert route.body_field is not None, f"{route.path} takes no body model"
            model = route.body_field.field_info.annotation
            assert model.__module__ == schemas.__name__, f"{route.path}: {model} is not in {schemas.__name__}"
            assert route.path in VALID_BODIES, f"add a valid body for {route.path} to VALID_BODIES"


def test_every_route_needs_the_key_unless_its_router_is_open(client):
    for method, path in route_ids(client):
        r = client.request(method, path, json=VALID_BODIES.get(path) if method == "POST" else None)
        assert (r.status_code == 401) != api_of(path).open, (method, path, r.status_code)


def test_errors_come_in_the_shape_of_the_route_s_router(client):
    for method, path in route_ids(client):
        r = client.request("PATCH", path)  # 405 on every route
        body = r.json()
        if api_of(path).error_shape == TEI:
            assert set(body) == {"error", "error_type"}, (path, body)
        else:
            assert set(body["error"]) == {"message", "type", "param", "code"}, (path, body)


def documented_endpoints() -> dict[tuple[str, str], str]:
    """(method, path) -> the 'API key' cell of docs/serve.md's endpoint table."""
    text = (REPO / "docs" / "serve.md").read_text()
    table = text[text.index("| endpoint | API key | what |"):]
    rows = re.findall(r"^\| `(GET|POST|PUT|PATCH|DELETE) (/\S*)` \| (yes|no) \|", table.split("\n\n")[0], re.M)
    return {(method, path): key for method, path, key in rows}


def test_every_route_is_documented_with_its_key_rule(client):
    documented = documented_endpoints()
    assert sorted(documented) == sorted(route_ids(client)), "docs/serve.md's endpoint table and the app differ"
    for (method, path), key in documented.items():
        assert key == ("no" if api_of(path).open else "yes"), f"docs/serve.md: {method} {path} API key column"


def test_the_recipe_names_files_that_exist():
    text = (REPO / "docs" / "contributing.md").read_text()
    recipe = text[text.index("## Add a server endpoint"):]
    recipe = recipe[:recipe.find("\n## ", 1)] if "\n## " in recipe[1:] else recipe
    named = set(re.findall(r"`((?:runtime|tests|docs|benchmarks)/[\w/.-]+)`", recipe))
    assert {"runtime/server/schemas.py", "runtime/server/routers/__init__.py", "docs/serve.md",
            "tests/test_serve_routes.py"} <= named, named
    for path in named:
        assert (REPO / path).exists(), f"docs/contributing.md names {path}, which does not exist"
