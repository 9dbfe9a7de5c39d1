"""Compiled models: the graph builder, compiled graphs, BERT and sentence embeddings."""

from __future__ import annotations

import itertools
import os
from typing import TYPE_CHECKING, Any, Dict, List, Mapping, Optional, Sequence, Tuple, Union

import numpy as np

from . import _native
from ._attrs import _attr
from ._default import default_runtime
from ._dtypes import numpy_dtype, runtime_name
from ._errors import ValidationError
from ._results import MIB
from ._tensor import ShapeLike, Tensor, _shape

if TYPE_CHECKING:
    from ._runtime import Runtime


class Value:
    """A value of a :class:`Graph`: an input, a constant or a node's output. It belongs
    to the graph that made it (:attr:`graph`); another graph refuses it."""

    __slots__ = ("id", "name", "dtype_name", "shape", "graph")

    def __init__(self, id: int, name: str, dtype_name: str, shape: Sequence[int],  # noqa: A002
                 graph: Optional["Graph"] = None) -> None:
        self.id = id
        self.name = name
        self.dtype_name = dtype_name
        self.shape = tuple(shape)
        self.graph = graph

    @property
    def dtype(self) -> np.dtype:
        """The NumPy dtype of the value (float32 for bf16)."""
        return numpy_dtype(self.dtype_name)

    def __repr__(self) -> str:
        return f"Value(#{self.id} {self.name!r}: {self.dtype_name} {list(self.shape)})"


_graph_numbers = itertools.count(1)


class Graph:
    """A graph under construction: inputs, constants from NumPy, nodes by op name with
    attributes, outputs. Shapes are checked as nodes are added (errors name the node).

    >>> g = npurt.Graph()
    >>> x = g.input("x", (4, 8))
    >>> w = g.constant("w", np.ones((8, 2), np.float32))
    >>> y = g.node("Relu", [g.node("MatMul", [x, w])])
    >>> g.output(y)
    >>> cg = g.compile()

    Every name (inputs, constants, nodes, outputs) is given once: a repeated one raises
    :class:`npurt.ValidationError` naming it, as does a :class:`Value` of another graph
    (naming both graphs: ``name``, default ``graph-1``, ``graph-2``, ...).
    """

    def __init__(self, *, runtime: Optional[Runtime] = None, name: Optional[str] = None) -> None:
        self._owner = runtime if runtime is not None else default_runtime()
        self._g = _native.Graph()
        self._count = 0
        self.name = str(name) if name is not None else f"graph-{next(_graph_numbers)}"

    def _value(self, vid: int) -> Value:
        name, dt, shape = self._g.value(vid)
        return Value(vid, name, dt, shape, self)

    def _own(self, what: str, v: Any) -> int:
        """The id of ``v`` (``what``: where it is passed), which must be a value of this graph."""
        if not isinstance(v, Value):
            raise ValidationError(f"{what} must be a graph value, got {type(v).__name__}")
        if v.graph is not self:
            whose = f"graph {v.graph.name!r}" if isinstance(v.graph, Graph) else "no graph"
            raise ValidationError(f"{what} {v.name!r} is a value of {whose}, not of graph {self.name!r} (a value is "
                                  "used only in the graph that made it)")
        return v.id

    def input(self, name: str, shape: ShapeLike, dtype: Any = np.float32) -> Value:
        """Adds a graph input (``shape`` may be ``()``: a 0-d input)."""
        return self._value(self._g.input(str(name), runtime_name(dtype), list(_shape(shape))))

    def constant(self, name: str, array: Any) -> Value:
        """Adds a constant holding a copy of ``array`` (float64 is stored as float32)."""
        a = np.asarray(array)
        if a.dtype == np.float64:
            a = a.astype(np.float32)
        return self._value(self._g.constant(str(name), np.asarray(a, order="C")))

    def node(self, op_type: str, inputs: Sequence[Value], name: Optional[str] = None,
             **attrs: Any) -> Union[Value, Tuple[Value, ...]]:
        """Adds a node of ``op_type`` (as :func:`npurt.execute` names ops) with attributes;
        its output value (a tuple for several). Without ``name`` the node is named
        ``<op>_<n>``, skipping names already taken."""
        ids = [self._own(f"Graph.node {op_type!r}: input", v) for v in inputs]
        if name is None:
            self._count += 1
            name = f"{op_type.lower()}_{self._count}"
            while self._g.has_name(name):
                self._count += 1
                name = f"{op_type.lower()}_{self._count}"
        outs = [self._value(o) for o in self._g.node(str(name), str(op_type), ids,
                                                      [(k, _attr(x)) for k, x in attrs.items()])]
        return outs[0] if len(outs) == 1 else tuple(outs)

    op = node

    def output(self, *values: Value) -> None:
        """Marks values as graph outputs (in order)."""
        ids = [self._own("Graph.output: output", v) for v in values]
        for i in ids:
            self._g.output(i)

    def compile(self, device: Optional[int] = None, precision: Optional[str] = None,
                streams: Optional[int] = None, store_slow_precision: bool = False) -> "CompiledGraph":
        """Compiles the graph (fusion, kernel selection, static memory plan, streams) for
        ``device`` (default: the current device).

        ``precision`` (default: the runtime's ``precision`` setting, else ``"auto"``):
        ``"f32"``/``"fp32"`` (the graph's own dtypes), ``"bf16"`` (Linear weights in bf16
        where the backend has a bf16 unit), ``"f16"``/``"fp16"``/``"half"`` (Linear weights
        in fp16, f32 accumulation; activations, LayerNorm and Softmax statistics in f32),
        ``"int8"`` (Linear products in dynamic int8 on a CPU with AMX-INT8 or
        AVX-512-VNNI; f32 with a warning elsewhere) or ``"auto"`` (f32 on the CPU and
        CUDA); anything else raises ``ValueError``.
        ``store_slow_precision``: store bf16 Linear weights even where the device computes
        bf16 slowly (a CPU without AVX-512-BF16 or AMX, which then widens them to f32 in its
        kernels). Worth it for a memory-bound graph (an LLM decode step reads each weight
        once per token, so half the bytes is nearly half the time); a compute-bound encoder
        is faster with f32 weights there, which is why it is off by default.
        ``streams``: most streams the schedule uses (1 = serial). The GIL is released while
        compiling; a Ctrl-C meanwhile raises ``KeyboardInterrupt`` when compiling ends."""
        rt = self._owner
        n = rt._rt()
        opts = rt._compile_opts(precision, streams)
        if store_slow_precision:
            opts["store_slow_precision"] = True
        return CompiledGraph(self._g.compile(n, rt._device(device), opts), rt)

    def __repr__(self) -> str:
        return f"npurt.Graph({self.name!r}, {self._g.num_nodes()} nodes)"


class MemoryPlan:
    """A compiled graph's static memory plan: ``arena_bytes`` (the arena holding every
    intermediate), ``load_bytes`` (the most bytes live at once: a lower bound),
    ``ratio`` (= arena / LOAD), ``strategy`` (the ordering chosen) and ``candidates``."""

    def __init__(self, d: Dict[str, Any]) -> None:
        self.arena_bytes: int = d["arena_bytes"]
        self.load_bytes: int = d["load_bytes"]
        self.ratio: float = d["ratio"]
        self.strategy: str = d["strategy"]
        self.candidates: List[Tuple[str, int]] = list(d["candidates"])
        self.buffers: int = d["buffers"]

    @property
    def arena_mb(self) -> float:
        """``arena_bytes`` in MiB."""
        return self.arena_bytes / MIB

    @property
    def load_mb(self) -> float:
        """``load_bytes`` in MiB."""
        return self.load_bytes / MIB

    def __repr__(self) -> str:
        return (f"MemoryPlan(arena_mb={self.arena_mb:.3f}, load_mb={self.load_mb:.3f}, ratio={self.ratio:.3f}, "
                f"strategy={self.strategy!r})")


class Profile:
    """Per-node timings of one run: ``total_ms``, ``nodes`` (dicts with name, op,
    implementation, unit, stream, start_ms, elapsed_ms, flops, bytes), ``by_op``
    (``(op, ms, flops, count)``) and :meth:`chrome_trace`."""

    def __init__(self, d: Dict[str, Any]) -> None:
        self.total_ms: float = d["total_ms"]
        self.nodes: List[Dict[str, Any]] = list(d["nodes"])
        self.by_op: List[Tuple[str, float, int, int]] = list(d["by_op"])
        self._trace: str = d["trace"]

    def chrome_trace(self) -> str:
        """The run as a Chrome trace (JSON text for chrome://tracing or Perfetto)."""
        return self._trace

    def __repr__(self) -> str:
        return f"Profile(total_ms={self.total_ms:.3f}, nodes={len(self.nodes)})"


class CompiledGraph:
    """A compiled graph. :meth:`run` may be called from several Python threads at once
    (the GIL is released; each run takes an arena of its own), with the results of
    serial runs."""

    def __init__(self, native: Any, owner: Runtime) -> None:
        self._cg = native
        self._owner = owner
        self._native_rt = native.runtime()
        self._inputs = [(n, dt, tuple(s)) for n, dt, s in native.inputs()]
        self._outputs = [(n, dt, tuple(s)) for n, dt, s in native.outputs()]

    @property
    def input_names(self) -> List[str]:
        """The inputs, in the order :meth:`run` takes them."""
        return [n for n, _, _ in self._inputs]

    @property
    def input_shapes(self) -> List[Tuple[int, ...]]:
        """The inputs' shapes, in :attr:`input_names` order."""
        return [s for _, _, s in self._inputs]

    @property
    def input_dtypes(self) -> List[np.dtype]:
        """The inputs' NumPy dtypes, in :attr:`input_names` order."""
        return [numpy_dtype(dt) for _, dt, _ in self._inputs]

    @property
    def output_names(self) -> List[str]:
        """The outputs, in the order :meth:`run` returns them."""
        return [n for n, _, _ in self._outputs]

    @property
    def output_shapes(self) -> List[Tuple[int, ...]]:
        """The outputs' shapes."""
        return [s for _, _, s in self._outputs]

    @property
    def device(self) -> int:
        """The device the graph runs on."""
        return int(self._cg.device)

    def _arguments(self, inputs: Union[Sequence[Any], Mapping[str, Any]]) -> List[Any]:
        names = self.input_names
        if isinstance(inputs, Mapping):
            missing = [n for n in names if n not in inputs]
            extra = [k for k in inputs if k not in names]
            if missing or extra:
                raise ValidationError(f"CompiledGraph.run: inputs are {names}; missing {missing}, unknown {extra}")
            inputs = [inputs[n] for n in names]
        if isinstance(inputs, (Tensor, np.ndarray)):
            inputs = [inputs]
        inputs = list(inputs)
        if len(inputs) != len(names):
            raise ValidationError(f"CompiledGraph.run: {len(names)} input(s) {names}, {len(inputs)} given")
        out = []
        for (name, dt, shape), x in zip(self._inputs, inputs):
            if isinstance(x, Tensor):
                out.append(x._t)
                continue
            a = np.asarray(x)
            want = numpy_dtype(dt)
            if tuple(a.shape) != shape:
                raise ValidationError(f"CompiledGraph.run: input {name!r} is {list(shape)}, got {list(a.shape)}")
            if a.dtype != want:
                if a.dtype.kind in "biuf" and want.kind in "iuf":
                    a = a.astype(want)
                else:
                    raise ValidationError(f"CompiledGraph.run: input {name!r} is {want}, got {a.dtype}")
            t = Tensor._wrap(self._native_rt.empty(dt, list(shape), self.device, False, None), self._owner)
            t.from_numpy(a)
            out.append(t._t)
        return out

    def run(self, inputs: Union[Sequence[Any], Mapping[str, Any]]) -> List[Tensor]:
        """Runs the graph: ``inputs`` are Tensors or NumPy arrays in :attr:`input_names`
        order, or a dict by name (arrays are converted to the input's dtype, so an int64
        attention mask is accepted for a float32 one). Returns the output tensors."""
        return [Tensor._wrap(t, self._owner) for t in self._cg.run(self._arguments(inputs))]

    __call__ = run

    @property
    def memory_plan(self) -> Optional[MemoryPlan]:
        """The static memory plan (``None`` when memory reuse is off)."""
        d = self._cg.memory_plan()
        return None if d is None else MemoryPlan(dict(d))

    def profile(self, inputs: Optional[Union[Sequence[Any], Mapping[str, Any]]] = None) -> Profile:
        """Runs once with per-node timings (zero inputs unless ``inputs`` are given)."""
        if inputs is None:
            inputs = [np.zeros(s, numpy_dtype(dt)) for _, dt, s in self._inputs]
        return Profile(dict(self._cg.profile(self._arguments(inputs))))

    @property
    def constant_bytes(self) -> int:
        """Bytes the compiled graph's constants (weights, biases, tables) take in the dtypes
        they are stored in: about half the f32 figure once precision ``bf16`` or ``f16``
        stores the Linear weights in 16 bits."""
        return int(self._cg.constant_bytes())

    def fusion(self) -> Dict[str, int]:
        """Nodes the fusion pass made: ``attention``, ``bias_gelu``, ``linear_gelu`` (those of
        ``bias_gelu`` fused into their product as ``LinearGelu``, where the device has a
        kernel for it), ``add_layer_norm``, ``merged_linears`` (groups of Linears that read one
        input with constant weights, run as one product over their stacked weights where the
        device has no cost model: the CPU and CUDA)."""
        return dict(self._cg.fusion())

    def __repr__(self) -> str:
        return f"npurt.CompiledGraph(inputs={self.input_names}, outputs={self.output_names}, device={self.device})"


def bert(preset_or_model_dir: Union[str, "os.PathLike[str]"], batch: Optional[int] = None, seq: int = 128,
         precision: Optional[str] = None, device: Optional[int] = None, *, streams: Optional[int] = None,
         runtime: Optional[Runtime] = None, seed: int = 42) -> CompiledGraph:
    """A compiled BERT encoder.

    ``preset_or_model_dir``: ``"bert-large"``, ``"bert-base"``, ``"minilm-l6"`` or
    ``"tiny"`` (seeded random weights), or a Hugging Face directory with ``config.json``
    and its ``model.safetensors`` weights (a directory without the weights raises
    :class:`npurt.Error` naming the missing file). ``batch`` defaults to the value of
    :func:`npurt.set_batch_size`, else 1. ``precision`` as :meth:`Graph.compile` takes it.
    Inputs ``input_ids`` (int64), ``token_type_ids`` (int64) and ``attention_mask``
    (float32 1/0; int64 accepted), each ``[batch, seq]``; the output is the last hidden
    state ``[batch, seq, hidden]``. The GIL is released while building and compiling.
    """
    rt = runtime if runtime is not None else default_runtime()
    if batch is None:
        batch = rt._settings.get("batch_size", 1)
    b = _config_int("batch", batch)
    s = _config_int("seq", seq)
    model = os.fspath(preset_or_model_dir)
    n = rt._rt()
    native = _native.bert(n, model, b, s, rt._device(device), rt._compile_opts(precision, streams), seed)
    return CompiledGraph(native, rt)


def _config_int(name: str, v: Any) -> int:
    from ._config import _int

    return _int(name, v, 1)


class Embedder:
    """Sentence embeddings from a sentence-transformers model directory (``config.json``,
    ``model.safetensors``, ``tokenizer.json``, ``modules.json``, pooling config): the
    pipeline of the Rust embedder (tokenise, BERT, pooling, and the L2 normalisation
    when ``modules.json`` has a Normalize module), then every row L2-normalised here, so
    rows have unit length for every model.

    ``batch_size`` (texts per forward pass) defaults to the value of
    :func:`npurt.set_batch_size`, else 32.
    """

    def __init__(self, model_dir: Union[str, "os.PathLike[str]"], batch_size: Optional[int] = None, *,
                 device: Optional[int] = None, runtime: Optional[Runtime] = None) -> None:
        rt = runtime if runtime is not None else default_runtime()
        self._owner = rt
        if batch_size is None:
            batch_size = rt._settings.get("batch_size", 32)
        self._e = _native.Embedder(rt._rt(), os.fspath(model_dir), _config_int("batch_size", batch_size),
                                   rt._device(device))

    @property
    def dimension(self) -> int:
        """Length of each embedding."""
        return int(self._e.dimension)

    @property
    def max_seq_length(self) -> int:
        """Tokens per text after truncation."""
        return int(self._e.max_seq_length)

    @property
    def batch_size(self) -> int:
        """Texts per forward pass."""
        return int(self._e.batch_size)

    @property
    def model_normalizes(self) -> bool:
        """Whether the model's own pipeline ends with a Normalize module."""
        return bool(self._e.normalizes)

    def embed(self, texts: Union[str, Sequence[str]], *, normalize: bool = True) -> np.ndarray:
        """Embeddings of ``texts`` as a ``[len(texts), dimension]`` float32 array.

        Rows are L2-normalised (unit length) whether or not the model's ``modules.json``
        has a Normalize module; ``normalize=False`` returns the model pipeline's own output
        (the pooled vectors, normalised only when the model says so). The GIL is released
        while embedding; a Ctrl-C raises ``KeyboardInterrupt`` when the current batch of
        ``batch_size`` texts ends, before the next starts.
        """
        if isinstance(texts, str):
            texts = [texts]
        texts = list(texts)
        if not all(isinstance(t, str) for t in texts):
            raise ValidationError("Embedder.embed takes a list of strings")
        if not texts:
            return np.zeros((0, self.dimension), np.float32)
        rows = self._e.embed(texts)
        if normalize and not self.model_normalizes:  # else the pipeline already did, in f64
            norms = np.sqrt(np.einsum("ij,ij->i", rows, rows, dtype=np.float64))
            rows = (rows / np.maximum(norms, 1e-12)[:, None]).astype(np.float32)
        return rows

    def __repr__(self) -> str:
        return (f"npurt.Embedder(dimension={self.dimension}, max_seq_length={self.max_seq_length}, "
                f"batch_size={self.batch_size})")
