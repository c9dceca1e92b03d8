"""``bitnet-onnx serve``'s ``output_dtype`` (Voyage AI's field) on /v1/embeddings and TEI's /embed: the
real ``openai`` client and raw HTTP against sentence-transformers' ``quantize_embeddings`` byte for
byte (lists of integers, base64 of the stored bytes), with ``dimensions``, on both architectures; the
``serve`` verb's ``--ranges``; 422 naming the field; the /metrics label; a graph-quantized export refused."""

from __future__ import annotations

import base64

import numpy as np
import pytest

pytest.importorskip("fastapi")
httpx = pytest.importorskip("httpx")
openai = pytest.importorskip("openai")
# the reference: a plain import (sentence-transformers is in the test extra), so a module that moves or
# goes fails these tests instead of skipping them
from sentence_transformers.util.quantization import quantize_embeddings  # noqa: E402

from bitnet_onnx import Embedder  # noqa: E402
from bitnet_onnx.arch import ARCHITECTURES  # noqa: E402
from bitnet_onnx.errors import BitnetOnnxError  # noqa: E402
from bitnet_onnx.precision import PRECISIONS  # noqa: E402
from bitnet_onnx.runtime.server import ServerConfig, create_app  # noqa: E402
from bitnet_onnx.runtime.server.service import OUTPUT_DTYPES  # noqa: E402
from test_serve import TEXTS, LiveServer, _sample  # noqa: E402

DIM = 44  # a Matryoshka width of the tiny models, not a multiple of 8: the bits end in a padded byte


@pytest.fixture(scope="module")
def served(tiny_model, tiny_export, tmp_path_factory):
    """served(arch) -> (its tiny export, an Embedder of it, calibration ranges by width, a live server
    given those ranges); one server per architecture, started when first asked for."""
    started = {}

    def get(arch):
        if arch not in started:
            folder = tiny_export(tiny_model(arch))
            embedder = Embedder(folder, threads=1)
            path = tmp_path_factory.mktemp(f"serve-ranges-{arch}") / "ranges.json"
            calibration = [f"calibration {i}: " + "some words here " * (i % 7) for i in range(32)]
            table = embedder.calibrate(calibration, dimensions=(None, DIM), path=path)
            started[arch] = folder, embedder, table, LiveServer(folder, ranges=str(path))
        return started[arch]

    yield get
    for *_, server in started.values():
        server.close()


@pytest.fixture(scope="module")
def setup(served):
    """The Qwen3 server, for the checks that do not depend on the architecture (errors, refusals)."""
    return served("qwen3")


def _want(embedder: Embedder, table, output_dtype: str, dimensions=None, normalize=None) -> np.ndarray:
    precision = OUTPUT_DTYPES[output_dtype]
    floats = embedder.encode(TEXTS, dimensions=dimensions, normalize=normalize)
    ranges = table[dimensions or embedder.dimension] if PRECISIONS[precision].needs_ranges else None
    return quantize_embeddings(floats, precision=precision, ranges=ranges)


@pytest.mark.parametrize("output_dtype", list(OUTPUT_DTYPES))
@pytest.mark.parametrize("arch", ARCHITECTURES)
def test_openai_client_lists_and_base64(served, arch, output_dtype):
    _, embedder, table, server = served(arch)
    client = openai.OpenAI(base_url=server.url + "/v1", api_key="unused", max_retries=0)
    for dimensions in (None, DIM):
        want = _want(embedder, table, output_dtype, dimensions)
        extra = {"model": "m", "input": TEXTS, "extra_body": {"output_dtype": output_dtype}}
        if dimensions:
            extra["dimensions"] = dimensions
        listed = client.embeddings.create(encoding_format="float", **extra)
        got = np.array([d.embedding for d in listed.data])
        np.testing.assert_array_equal(got, want.astype(np.float64))  # the client's pydantic model holds floats
        encoded = client.embeddings.create(encoding_format="base64", **extra)  # asked for: handed over as is
        raw = [base64.b64decode(d.embedding) for d in encoded.data]
        assert b"".join(raw) == want.astype(want.dtype.newbyteorder("<")).tobytes()


@pytest.mark.parametrize("arch", ARCHITECTURES)
def test_raw_http_on_both_routes_and_the_metrics_label(served, arch):
    _, embedder, table, server = served(arch)
    before = _sample(server.metrics(), "bitnet_onnx_output_vectors_total", output_dtype="ubinary")
    r = httpx.post(server.url + "/v1/embeddings", json={"input": TEXTS, "output_dtype": "int8", "dimensions": DIM})
    assert r.status_code == 200
    assert [d["embedding"] for d in r.json()["data"]] == _want(embedder, table, "int8", DIM).tolist()
    r = httpx.post(server.url + "/embed", json={"inputs": TEXTS, "output_dtype": "ubinary"})
    assert r.status_code == 200 and r.json() == _want(embedder, table, "ubinary", normalize=True).tolist()
    r = httpx.post(server.url + "/embed", json={"inputs": TEXTS, "output_dtype": "uint8", "normalize": False})
    assert r.status_code == 200 and r.json() == _want(embedder, table, "uint8", normalize=False).tolist()
    after = _sample(server.metrics(), "bitnet_onnx_output_vectors_total", output_dtype="ubinary")
    assert after - before == len(TEXTS)


@pytest.mark.parametrize("body, words", [
    ({"input": "a", "output_dtype": "int4"}, "output_dtype must be one of float, int8, uint8, binary, ubinary"),
    ({"input": "a", "output_dtype": 8}, "got 8"),
    ({"input": "a", "output_dtype": "int8", "dimensions": 16}, "has ranges for width 44, 128, not 16"),
])
def test_bad_output_dtype_is_a_422_naming_the_field(setup, body, words):
    server = setup[3]
    for path, key in (("/v1/embeddings", "input"), ("/embed", "inputs")):
        r = httpx.post(server.url + path, json={key: body["input"], **{k: v for k, v in body.items() if k != "input"}})
        assert r.status_code == 422, r.text
        error = r.json()["error"]
        message = error["message"] if isinstance(error, dict) else error
        assert words in message
        if isinstance(error, dict):
            assert error["param"] == "output_dtype"


@pytest.mark.parametrize("arch", ARCHITECTURES)
def test_serve_verb_ranges_scale_output_dtype(served, arch, tmp_path, monkeypatch):
    """``bitnet-onnx serve EXPORT --ranges FILE``: the verb's server scales int8 / uint8 by that file (the
    export has no calibration file: without the option int8 is a 422) and packs the bits, at the full width
    and a Matryoshka one, as quantize_embeddings does. The app the verb would serve is asked through a test
    client (uvicorn stood in for)."""
    from fastapi.testclient import TestClient

    import bitnet_onnx.runtime.server as server
    from bitnet_onnx.cli import main
    from bitnet_onnx.precision import CALIBRATION_FILE

    folder, embedder, _, _ = served(arch)
    assert not (folder / CALIBRATION_FILE).exists()
    path = tmp_path / "ranges.json"  # ranges of other texts than the live server's, so these are the file's
    table = embedder.calibrate([f"other calibration {i}: " + "words " * i for i in range(24)], dimensions=(None, DIM),
                               path=path)
    asked = [("int8", None), ("uint8", DIM), ("ubinary", DIM), ("binary", None)]
    answers = []

    def serve_requests(app, sock, **kwargs):
        sock.close()
        with TestClient(app) as client:
            for output_dtype, dimensions in asked:
                body = {"model": "m", "input": TEXTS, "output_dtype": output_dtype, "encoding_format": "float",
                        **({"dimensions": dimensions} if dimensions else {})}
                answers.append(client.post("/v1/embeddings", json=body))

    monkeypatch.setattr(server, "serve", serve_requests)
    argv = ["serve", str(folder), "--port", "0", "--model-name", "m", "--threads", "1"]
    assert main([*argv, "--ranges", str(path)]) == 0
    for (output_dtype, dimensions), r in zip(asked, answers, strict=True):
        assert r.status_code == 200, r.text
        assert [d["embedding"] for d in r.json()["data"]] == _want(embedder, table, output_dtype, dimensions).tolist(), \
            (output_dtype, dimensions)
    answers.clear()
    assert main(argv) == 0
    assert answers[0].status_code == 422 and "needs calibration ranges" in answers[0].json()["error"]["message"]


def test_int8_without_ranges_is_a_422_and_a_quantized_graph_is_refused(setup, tiny_model, tmp_path):
    folder = setup[0]
    server = LiveServer(folder)  # no --ranges and no calibration file in the export
    try:
        r = httpx.post(server.url + "/v1/embeddings", json={"input": "a", "output_dtype": "uint8"})
        assert r.status_code == 422 and "needs calibration ranges" in r.json()["error"]["message"]
        assert httpx.post(server.url + "/v1/embeddings", json={"input": "a", "output_dtype": "binary"}).status_code == 200
    finally:
        server.close()
    from bitnet_onnx.export.exporter import export

    packed = export(tiny_model("qwen3"), tmp_path / "packed", output_precision="binary")
    with pytest.raises(BitnetOnnxError, match="its graph outputs binary embeddings"):
        create_app(Embedder(packed, threads=1), ServerConfig(model_name="m"))
