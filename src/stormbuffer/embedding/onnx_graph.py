"""Build the all-MiniLM-L6-v2 ONNX graph from its safetensors weights with `onnx.helper` (no torch).

The graph takes `input_ids`, `attention_mask` and `token_type_ids` (int64, [batch, sequence]) and
returns `sentence_embedding` (float32, [batch, 384]): BERT encoder, mean pooling over the attention
mask, L2 normalisation. The encoder's token states are a second output, `last_hidden_state`
(float32, [batch, sequence, 384]), so that one pass over a text can also give the vectors of its
parts (`Embedder.embed_spans`).
"""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import TYPE_CHECKING, Any

from stormbuffer.core.atomic import write_atomic

from .constants import VARIANTS
from .files import copy_atomic
from .weights import read_safetensors

if TYPE_CHECKING:
    import logging

    import numpy as np
    import onnx

# Bump whenever the graph changes in a way that can change the vectors (2: token states output, which
# sentence vectors are pooled from; 3: fused attention).
GRAPH_VERSION = 3
OPSET = 17  # LayerNormalization needs opset 17
IR_VERSION = 8  # readable by every onnxruntime the project supports
CONTRIB_DOMAIN = "com.microsoft"  # onnxruntime's own operators
INPUTS = ("input_ids", "attention_mask", "token_type_ids")
TOKEN_STATES = "last_hidden_state"
WQ8_BLOCK = 32  # input rows sharing one int8 scale in the wq8 variant
_EXPECTED_CONFIG = {"model_type": "bert", "hidden_act": "gelu", "position_embedding_type": "absolute"}


class _GraphBuilder:
    """Accumulates nodes and initializers with unique names."""

    def __init__(self, int8_weights: bool) -> None:
        self.nodes: list[onnx.NodeProto] = []
        self.initializers: list[onnx.TensorProto] = []
        self._int8_weights = int8_weights
        self._count = 0

    def _name(self, prefix: str) -> str:
        self._count += 1
        return f"{prefix}_{self._count}"

    def tensor(self, name: str, value: np.ndarray) -> str:
        import numpy as np
        from onnx import numpy_helper

        self.initializers.append(numpy_helper.from_array(np.ascontiguousarray(value), name))
        return name

    def matrix(self, name: str, value: np.ndarray) -> str:
        """A [in, out] weight matrix. With int8 weights it is stored as int8 with one scale per block of
        WQ8_BLOCK input rows and output column, and dequantised by the graph (onnxruntime folds that into
        a constant at session load). Blocks keep short texts within cosine 0.999 of fp32; one scale per
        column does not."""
        import numpy as np

        if not self._int8_weights:
            return self.tensor(name, value)
        rows, cols = value.shape
        if rows % WQ8_BLOCK:
            raise ValueError(f"{name}: {rows} rows do not split into blocks of {WQ8_BLOCK}")
        quantized, scale = _quantize_int8(value.reshape(rows // WQ8_BLOCK, WQ8_BLOCK, cols), reduce_axis=1)
        blocks = self._dequantize(self.tensor(name + ".int8", quantized), self.tensor(name + ".scale", scale))
        return self.op("Reshape", blocks, self.tensor(name + ".shape", np.array([rows, cols], dtype=np.int64)))

    def lookup(self, name: str, table: np.ndarray, ids: str) -> str:
        """Rows of an embedding table; with int8 weights only the gathered rows are dequantised
        (one scale per row), so the large table stays int8 in memory and costs nothing at load."""
        if not self._int8_weights:
            return self.op("Gather", self.tensor(name, table), ids, axis=0)
        quantized, scale = _quantize_int8(table, reduce_axis=1)
        rows = self.op("Gather", self.tensor(name + ".int8", quantized), ids, axis=0)
        return self._dequantize(rows, self.op("Gather", self.tensor(name + ".scale", scale), ids, axis=0))

    def _dequantize(self, quantized: str, scale: str) -> str:
        from onnx import TensorProto

        return self.op("Mul", self.op("Cast", quantized, to=TensorProto.FLOAT), scale)

    def op(self, op_type: str, *inputs: str, output: str | None = None, **attrs: Any) -> str:
        from onnx import helper

        out = output or self._name(op_type)
        self.nodes.append(helper.make_node(op_type, list(inputs), [out], name=self._name("node"), **attrs))
        return out


def _quantize_int8(value: np.ndarray, reduce_axis: int) -> tuple[np.ndarray, np.ndarray]:
    """Symmetric int8 quantisation; one float32 scale for each slice along `reduce_axis`."""
    import numpy as np

    amax = np.abs(value).max(axis=reduce_axis, keepdims=True)
    scale = np.where(amax > 0, amax / 127.0, 1.0).astype(np.float32)
    return np.clip(np.rint(value / scale), -127, 127).astype(np.int8), scale


def build_model(source_dir: Path, *, int8_weights: bool) -> onnx.ModelProto:
    """The fp32 graph (or its int8-weight form) for the model files in `source_dir`."""
    import numpy as np
    import onnx
    from onnx import TensorProto, helper

    config = json.loads((source_dir / "config.json").read_text(encoding="utf-8"))
    for key, expected in _EXPECTED_CONFIG.items():
        if config.get(key) != expected:
            raise ValueError(f"unsupported model config: {key}={config.get(key)!r}")
    weights = read_safetensors(source_dir / "model.safetensors")
    hidden = int(config["hidden_size"])
    heads = int(config["num_attention_heads"])
    eps = float(config["layer_norm_eps"])

    g = _GraphBuilder(int8_weights)

    def const(name: str, value: Any, dtype: Any) -> str:
        return g.tensor(name, np.asarray(value, dtype=dtype))

    def layer_norm(x: str, prefix: str, output: str | None = None) -> str:
        scale = g.tensor(prefix + ".weight", weights[prefix + ".weight"])
        bias = g.tensor(prefix + ".bias", weights[prefix + ".bias"])
        return g.op("LayerNormalization", x, scale, bias, output=output, axis=-1, epsilon=eps)

    def linear(x: str, prefix: str) -> str:
        # Stored transposed ([in, out]) so MatMul needs no Transpose.
        w = g.matrix(prefix + ".weight_t", weights[prefix + ".weight"].T)
        return g.op("Add", g.op("MatMul", x, w), g.tensor(prefix + ".bias", weights[prefix + ".bias"]))

    zero = const("zero_1d", [0], np.int64)
    one = const("one", 1.0, np.float32)

    # Embeddings. The position table is sliced to the sequence length: a Gather over Range(0, S)
    # is rewritten by onnxruntime's optimiser into an invalid Slice.
    word = g.lookup("embeddings.word", weights["embeddings.word_embeddings.weight"], "input_ids")
    seq_len = g.op("Shape", "input_ids", start=1, end=2)
    positions = g.op(
        "Slice", g.tensor("embeddings.position", weights["embeddings.position_embeddings.weight"]), zero, seq_len, zero
    )
    token_types = g.op(
        "Gather",
        g.tensor("embeddings.token_type", weights["embeddings.token_type_embeddings.weight"]),
        "token_type_ids",
        axis=0,
    )
    x = layer_norm(g.op("Add", g.op("Add", word, positions), token_types), "embeddings.LayerNorm")

    # Attention runs as onnxruntime's fused `Attention` operator (com.microsoft): one packed Q|K|V
    # product per layer and the heads, scaling, padding mask and softmax in one kernel, where the
    # plain-ONNX form took three products, four transposes and four element-wise passes.
    mask = g.op("Cast", "attention_mask", to=TensorProto.FLOAT)
    mask_index = g.op("Cast", "attention_mask", to=TensorProto.INT32)
    half = const("half", 0.5, np.float32)
    sqrt2 = const("sqrt2", math.sqrt(2.0), np.float32)

    def attention(x: str, prefix: str) -> str:
        """Multi-head self-attention of `x` [batch, sequence, hidden], heads merged back."""
        parts = [prefix + part for part in ("query", "key", "value")]
        w = g.matrix(prefix + "qkv.weight_t", np.concatenate([weights[part + ".weight"].T for part in parts], axis=1))
        bias = g.tensor(prefix + "qkv.bias", np.concatenate([weights[part + ".bias"] for part in parts]))
        return g.op("Attention", x, w, bias, mask_index, domain=CONTRIB_DOMAIN, num_heads=heads)

    layers = int(config["num_hidden_layers"])
    for i in range(layers):
        p = f"encoder.layer.{i}."
        context = attention(x, p + "attention.self.")
        attended = g.op("Add", linear(context, p + "attention.output.dense"), x)
        x = layer_norm(attended, p + "attention.output.LayerNorm")
        h = linear(x, p + "intermediate.dense")
        gelu = g.op("Mul", g.op("Mul", h, g.op("Add", g.op("Erf", g.op("Div", h, sqrt2)), one)), half)
        out = g.op("Add", linear(gelu, p + "output.dense"), x)
        x = layer_norm(out, p + "output.LayerNorm", output=TOKEN_STATES if i == layers - 1 else None)

    # Mean pooling over the attention mask, then L2 normalisation (same epsilons as sentence-transformers).
    axis1 = const("axes_1", [1], np.int64)
    mask3 = g.op("Unsqueeze", mask, const("axes_2", [2], np.int64))
    summed = g.op("ReduceSum", g.op("Mul", x, mask3), axis1, keepdims=0)
    counts = g.op("Max", g.op("ReduceSum", mask3, axis1, keepdims=0), const("min_count", 1e-9, np.float32))
    mean = g.op("Div", summed, counts)
    norm = g.op("Sqrt", g.op("ReduceSum", g.op("Mul", mean, mean), axis1, keepdims=1))
    norm = g.op("Max", norm, const("min_norm", 1e-12, np.float32))
    g.op("Div", mean, norm, output="sentence_embedding")

    graph = helper.make_graph(
        g.nodes,
        "all-MiniLM-L6-v2",
        [helper.make_tensor_value_info(name, TensorProto.INT64, ["batch", "sequence"]) for name in INPUTS],
        [
            helper.make_tensor_value_info("sentence_embedding", TensorProto.FLOAT, ["batch", hidden]),
            helper.make_tensor_value_info(TOKEN_STATES, TensorProto.FLOAT, ["batch", "sequence", hidden]),
        ],
        g.initializers,
    )
    model = helper.make_model(
        graph,
        opset_imports=[helper.make_opsetid("", OPSET), helper.make_opsetid(CONTRIB_DOMAIN, 1)],
        producer_name="stormbuffer",
        producer_version=str(GRAPH_VERSION),
    )
    model.ir_version = IR_VERSION
    # Stored shapes let onnxruntime fuse the layers' element-wise steps, which it skips without them.
    model = onnx.shape_inference.infer_shapes(model, strict_mode=True, data_prop=True)
    onnx.checker.check_model(model, full_check=True)
    return model


def write_model(source_dir: Path, variant: str, dest: Path) -> None:
    """Build `variant` from the model files in `source_dir` and write it atomically to `dest`."""
    if variant not in VARIANTS:
        raise ValueError(f"unknown model variant {variant!r}; expected one of {', '.join(VARIANTS)}")
    model = build_model(source_dir, int8_weights=variant == "wq8")
    if variant != "int8":
        write_atomic(dest, model.SerializeToString())
        return
    import logging
    import tempfile

    from onnx import TensorProto
    from onnxruntime.quantization import QuantType, quantize_dynamic

    with tempfile.TemporaryDirectory(dir=dest.parent, prefix=".build-") as tmp:
        fp32_path = Path(tmp) / "fp32.onnx"
        int8_path = Path(tmp) / "int8.onnx"
        fp32_path.write_bytes(model.SerializeToString())
        del model
        root = logging.getLogger()
        root.addFilter(_drop_preprocessing_advice)
        try:
            quantize_dynamic(fp32_path, int8_path, per_channel=True, weight_type=QuantType.QInt8,
                             # the fused Attention's outputs have no inferred type; they are float
                             extra_options={"DefaultTensorType": TensorProto.FLOAT})  # fmt: skip
        finally:
            root.removeFilter(_drop_preprocessing_advice)
        copy_atomic(int8_path, dest)


def _drop_preprocessing_advice(record: logging.LogRecord) -> bool:
    """Silence onnxruntime's generic "consider pre-processing" warning during quantisation."""
    return "pre-processing" not in record.getMessage()
