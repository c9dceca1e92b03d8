"""A small ONNX graph builder over ``onnx.helper``.

Tracks the opset of every domain it emits, names nodes hierarchically (``/layers.3/attn/q_proj``)
so profiles and errors point at the model part, and deduplicates small constants.
"""

from __future__ import annotations

from contextlib import contextmanager

import numpy as np
import onnx
from onnx import helper, numpy_helper

from bitnet_onnx import customops

DEFAULT_OPSET = 21  # every default-domain op used here has a CPU kernel at this opset from ORT 1.20 on
MS_DOMAIN = "com.microsoft"
# Opset of every non-default domain a graph may use; op() imports a domain on first use.
DOMAIN_VERSIONS = {MS_DOMAIN: 1, customops.DOMAIN: customops.DOMAIN_VERSION}


class GraphBuilder:
    def __init__(self, opset: int = DEFAULT_OPSET):
        self.opsets: dict[str, int] = {"": opset}
        self.nodes: list[onnx.NodeProto] = []
        self._model = onnx.ModelProto()  # initializers are written straight into it: no copies of big tensors
        self.initializers = self._model.graph.initializer
        self.weight_bytes = 0  # counted here: reading sizes back from the proto copies the data
        self.inputs: list[onnx.ValueInfoProto] = []
        self.outputs: list[onnx.ValueInfoProto] = []
        self._scope: list[str] = []
        self._used: set[str] = set()
        self._consts: dict[tuple, str] = {}

    # -- naming -------------------------------------------------------------------------------
    @contextmanager
    def scope(self, name: str):
        self._scope.append(name)
        try:
            yield
        finally:
            self._scope.pop()

    def _unique(self, base: str) -> str:
        name, k = base, 1
        while name in self._used:
            name, k = f"{base}_{k}", k + 1
        self._used.add(name)
        return name

    def path(self, name: str) -> str:
        return "/" + "/".join([*self._scope, name])

    # -- graph parts --------------------------------------------------------------------------
    def op(self, op_type: str, inputs: list[str], name: str | None = None, outputs: int = 1,
           domain: str = "", **attrs) -> str | list[str]:
        """Add one node; returns its output name (or names when ``outputs`` > 1)."""
        if domain and domain not in self.opsets:
            if domain not in DOMAIN_VERSIONS:
                raise ValueError(f"no opset version known for domain {domain!r}: add it to DOMAIN_VERSIONS")
            self.opsets[domain] = DOMAIN_VERSIONS[domain]
        node_name = self._unique(self.path(name or op_type))
        outs = [node_name + ("" if outputs == 1 else f":{i}") for i in range(outputs)]
        attrs = {k: v for k, v in attrs.items() if v is not None}
        self.nodes.append(helper.make_node(op_type, inputs, outs, name=node_name, domain=domain or None, **attrs))
        return outs[0] if outputs == 1 else outs

    def initializer(self, name: str, array: np.ndarray) -> str:
        full = self._unique(self.path(name))
        array = np.ascontiguousarray(array)
        t = self.initializers.add()
        t.name = full
        t.data_type = helper.np_dtype_to_tensor_dtype(array.dtype)
        t.dims.extend(array.shape)
        t.raw_data = array.tobytes()
        self.weight_bytes += array.nbytes  # little-endian hosts only (x86, ARM), like onnx's from_array fast path
        return full

    def const(self, value, dtype=np.float32) -> str:
        """A small shared constant (scalars, shapes, axes)."""
        array = np.asarray(value, dtype=dtype)
        key = (array.dtype.str, array.shape, array.tobytes())
        if key not in self._consts:
            name = self._unique(f"/const/{array.dtype.name}_{'x'.join(map(str, array.shape)) or 's'}")
            self.initializers.append(numpy_helper.from_array(array, name))  # small
            self._consts[key] = name
        return self._consts[key]

    def i64(self, value) -> str:
        return self.const(value, np.int64)

    def add_input(self, name: str, elem_type: int, shape: list) -> str:
        self.inputs.append(helper.make_tensor_value_info(name, elem_type, shape))
        return name

    def add_output(self, source: str, name: str, elem_type: int, shape: list) -> None:
        self.nodes.append(helper.make_node("Identity", [source], [name], name=self._unique(f"/output/{name}")))
        self.outputs.append(helper.make_tensor_value_info(name, elem_type, shape))

    def model(self, graph_name: str, doc: str = "", producer_version: str = "") -> onnx.ModelProto:
        """The finished model. Call once: the builder hands over its ModelProto."""
        model = self._model
        graph = model.graph
        graph.name = graph_name
        graph.node.extend(self.nodes)
        graph.input.extend(self.inputs)
        graph.output.extend(self.outputs)
        model.opset_import.extend(helper.make_opsetid(d, v) for d, v in sorted(self.opsets.items()))
        model.producer_name, model.producer_version, model.doc_string = "bitnet-onnx", producer_version, doc
        model.ir_version = 10  # readable by ORT 1.20+ (newer onnx writes 11)
        return model
