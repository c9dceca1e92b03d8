"""A small ONNX graph builder over ``onnx.helper``.

Tracks the opset of every domain it emits, names nodes hierarchically (``/layers.3/attn/q_proj``)
so profiles and errors point at the model part, and deduplicates small constants. Callers add
inputs, nodes (``op``, ``copy_node``), initializers and outputs through its methods only.
"""

from __future__ import annotations

from contextlib import contextmanager
from typing import Protocol

import numpy as np
import onnx
from onnx import helper, numpy_helper

from bitnet_onnx import customops

DEFAULT_OPSET = 21  # every default-domain op used here has a CPU kernel at this opset from ORT 1.20 on
MS_DOMAIN = "com.microsoft"
EXTENSIONS_DOMAIN = "ai.onnx.contrib"  # onnxruntime-extensions' ops (the strings-in graph's tokenizer)
# Opset of every non-default domain a graph may use; op() imports a domain on first use.
# The extensions register their ops at version 1.
DOMAIN_VERSIONS = {MS_DOMAIN: 1, customops.DOMAIN: customops.DOMAIN_VERSION, EXTENSIONS_DOMAIN: 1}
OPTIONAL_INPUT_OPSET = 15  # the first with OptionalHasElement and OptionalGetElement (add_optional_input)


class WeightSink(Protocol):
    """Where large initializers go instead of the proto (export/writer.py's WeightFile)."""

    def add(self, tensor: onnx.TensorProto, array: np.ndarray) -> bool: ...  # False: keep it inline


class GraphBuilder:
    """``const_prefix``: put before the shared constants' names (``/const/...``), so that a graph made to be
    merged with another (onnx.compose) cannot clash with that one's constants. ``weights``: takes the
    initializers' bytes as they are added (None: every initializer is inline)."""

    def __init__(self, opset: int = DEFAULT_OPSET, const_prefix: str = "", weights: WeightSink | None = None):
        self._opsets: dict[str, int] = {"": opset}
        self._nodes: list[onnx.NodeProto] = []
        self._model = onnx.ModelProto()  # initializers are written straight into it: no copies of big tensors
        self._initializers = self._model.graph.initializer
        self.weight_bytes = 0  # counted here: reading sizes back from the proto copies the data
        self._inputs: list[onnx.ValueInfoProto] = []
        self._outputs: list[onnx.ValueInfoProto] = []
        self._scope: list[str] = []
        self._used: set[str] = set()
        self._consts: dict[tuple, str] = {}
        self._const_prefix = const_prefix
        self._weights = weights

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
        if domain and domain not in self._opsets:
            if domain not in DOMAIN_VERSIONS:
                raise ValueError(f"no opset version known for domain {domain!r}: add it to DOMAIN_VERSIONS")
            self._opsets[domain] = DOMAIN_VERSIONS[domain]
        node_name = self._unique(self.path(name or op_type))
        outs = [node_name + ("" if outputs == 1 else f":{i}") for i in range(outputs)]
        attrs = {k: v for k, v in attrs.items() if v is not None}
        self._nodes.append(helper.make_node(op_type, inputs, outs, name=node_name, domain=domain or None, **attrs))
        return outs[0] if outputs == 1 else outs

    def copy_node(self, proto: onnx.NodeProto, inputs: list[str], name: str, outputs: int = 1) -> str | list[str]:
        """A node of ``proto``'s op, domain and attributes (e.g. one a library built) on the builder's
        own names; returns its output name(s) as ``op`` does."""
        out = self.op(proto.op_type, inputs, outputs=outputs, domain=proto.domain, name=name)
        self._nodes[-1].attribute.extend(proto.attribute)
        return out

    def initializer(self, name: str, array: np.ndarray) -> str:
        full = self._unique(self.path(name))
        array = np.ascontiguousarray(array)
        t = self._initializers.add()
        t.name = full
        t.data_type = helper.np_dtype_to_tensor_dtype(array.dtype)
        t.dims.extend(array.shape)
        if self._weights is None or not self._weights.add(t, array):
            t.raw_data = array.tobytes()
        self.weight_bytes += array.nbytes  # little-endian hosts only (x86, ARM), like onnx's from_array fast path
        return full

    def const(self, value, dtype=np.float32) -> str:
        """A small shared constant (scalars, shapes, axes; strings with ``dtype=object``)."""
        array = np.asarray(value, dtype=dtype)
        # an object array's bytes are pointers, which a later array may reuse: key strings by value
        data = tuple(array.ravel().tolist()) if array.dtype == object else array.tobytes()
        key = (array.dtype.str, array.shape, data)
        if key not in self._consts:
            kind = "string" if array.dtype == object else array.dtype.name
            name = self._unique(f"{self._const_prefix}/const/{kind}_{'x'.join(map(str, array.shape)) or 's'}")
            self._initializers.append(numpy_helper.from_array(array, name))  # small
            self._consts[key] = name
        return self._consts[key]

    def i64(self, value) -> str:
        return self.const(value, np.int64)

    def add_input(self, name: str, elem_type: int, shape: list) -> str:
        self._inputs.append(helper.make_tensor_value_info(name, elem_type, shape))
        return name

    def add_optional_input(self, name: str, elem_type: int, shape: list, default: np.ndarray) -> str:
        """A graph input the caller may leave out (ONNX optional type); returns the value fed, else
        ``default``. Not an initializer named as the input: ORT warns about each of those on every load."""
        if self._opsets[""] < OPTIONAL_INPUT_OPSET:
            raise ValueError(f"optional input {name!r} needs opset >= {OPTIONAL_INPUT_OPSET}, "
                             f"this graph has {self._opsets['']}")
        tensor_type = helper.make_tensor_type_proto(elem_type, shape)
        self._inputs.append(helper.make_value_info(name, helper.make_optional_type_proto(tensor_type)))
        given = self.op("OptionalHasElement", [name], name=f"{name}_given")
        fed = self._one_node_graph(f"{name}_fed", tensor_type, "OptionalGetElement", (name,))
        fallback = self._one_node_graph(f"{name}_default", tensor_type, "Constant",
                                        value=numpy_helper.from_array(np.asarray(default)))
        return self.op("If", [given], name=name, then_branch=fed, else_branch=fallback)

    def _one_node_graph(self, name: str, out_type: onnx.TypeProto, op_type: str, inputs: tuple[str, ...] = (),
                        **attrs) -> onnx.GraphProto:
        """A subgraph (a branch of If) of one node whose output, named uniquely in the whole model as ONNX
        requires, is the subgraph's output."""
        out = self._unique(self.path(name))
        node = helper.make_node(op_type, list(inputs), [out], name=out, **attrs)
        return helper.make_graph([node], out, [], [helper.make_value_info(out, out_type)])

    def add_output(self, source: str, name: str, elem_type: int, shape: list) -> None:
        self._nodes.append(helper.make_node("Identity", [source], [name], name=self._unique(f"/output/{name}")))
        self._outputs.append(helper.make_tensor_value_info(name, elem_type, shape))

    def model(self, graph_name: str, doc: str = "", producer_version: str = "") -> onnx.ModelProto:
        """The finished model. Call once: the builder hands over its ModelProto."""
        model = self._model
        graph = model.graph
        graph.name = graph_name
        graph.node.extend(self._nodes)
        graph.input.extend(self._inputs)
        graph.output.extend(self._outputs)
        model.opset_import.extend(helper.make_opsetid(d, v) for d, v in sorted(self._opsets.items()))
        model.producer_name, model.producer_version, model.doc_string = "bitnet-onnx", producer_version, doc
        model.ir_version = 10  # readable by ORT 1.20+ (newer onnx writes 11)
        return model
