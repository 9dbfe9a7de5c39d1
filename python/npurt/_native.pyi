"""Type stubs of ``npurt._native``, the compiled module the ``npurt`` package wraps.

Users call the ``npurt`` package; these objects are its building blocks.
"""

from typing import Any, Dict, List, Optional, Sequence, Tuple, Union

import numpy as np

DLPACK_DEVICE_CPU: int

class Runtime:
    """One runtime over one backend, from a settings dictionary (over ``NPURT_*`` when ``env``)."""

    def __init__(self, settings: Dict[str, Any], env: bool = True) -> None: ...
    @property
    def id(self) -> int:
        """Identifies the runtime (equal to its tensors' and streams' ``runtime_id``)."""
    @property
    def backend(self) -> str: ...
    def device_count(self) -> int: ...
    def device_label(self, device: int) -> str: ...
    def device_name(self, device: int) -> str: ...
    def supports_zero_copy(self, device: int) -> bool: ...
    def config(self) -> Dict[str, Any]:
        """The effective configuration."""
    def kernels(self) -> List[Tuple[str, str, str, str]]:
        """``(name, tier, unit class, unit label)`` of every kernel."""
    def empty(self, dtype_name: str, shape: Sequence[int], device: int, zero: bool = False,
              stream: Optional[Stream] = None) -> Tensor:
        """An uninitialised (or zero-filled) tensor allocated for ``stream``."""
    def to_device(self, t: Tensor, device: int) -> Tensor: ...
    def default_stream(self, device: int) -> Stream: ...
    def new_stream(self, device: int) -> Stream: ...
    def event(self, device: int) -> Event: ...
    def synchronize(self, device: int) -> None:
        """Waits for all work on every stream of ``device`` (GIL released)."""
    def synchronize_all(self) -> None: ...
    def memory_info(self, device: int) -> Dict[str, Any]:
        """Memory figures in bytes with every pool statistic."""
    def pool_stats(self, device: int) -> Dict[str, Any]: ...
    def release_cached(self, device: int) -> int:
        """Returns cached pool memory to the system; the bytes released."""
    def utilisation(self) -> List[Dict[str, Any]]:
        """Per-unit utilisation since creation or the last reset."""
    def reset_utilisation(self) -> None: ...

class Tensor:
    """A runtime tensor and the runtime owning it (``npurt.Tensor`` wraps one).

    Its memory comes from the runtime's pool on one device and returns there when the
    last reference (this object, views, DLPack capsules, queued work) is gone.
    """

    @property
    def shape(self) -> List[int]: ...
    @property
    def strides(self) -> List[int]:
        """Element strides."""
    @property
    def dtype(self) -> str:
        """``f32``, ``f16``, ``bf16``, ``i32``, ``i64`` or ``u8``."""
    @property
    def device(self) -> int: ...
    @property
    def device_label(self) -> str: ...
    @property
    def nbytes(self) -> int: ...
    @property
    def numel(self) -> int: ...
    @property
    def runtime_id(self) -> int: ...
    def runtime(self) -> Runtime: ...
    def data_ptr(self) -> int: ...
    def is_contiguous(self) -> bool: ...
    def supports_zero_copy(self) -> bool: ...
    def shares_storage(self, other: Tensor) -> bool: ...
    def copy_from(self, arr: np.ndarray) -> None:
        """Copies a C-contiguous array of the tensor's element type (float32 for bf16) in."""
    def to_numpy(self) -> np.ndarray:
        """A NumPy copy (bf16 comes back as float32)."""
    def host_view(self) -> Tuple[int, List[int]]:
        """``(host address, byte strides)`` after the tensor's queued work finished."""
    def reshape(self, shape: Sequence[int]) -> Tensor: ...
    def dlpack(self, versioned: bool = False) -> Any:
        """A DLPack capsule sharing the tensor's memory (zero-copy devices only)."""

class Stream:
    """A runtime stream of one device (``npurt.Stream`` wraps one): the device's
    synchronous default stream, or an asynchronous user stream whose work runs in order
    and whose failures are reported by :meth:`synchronize`."""

    @property
    def device(self) -> int: ...
    @property
    def is_async(self) -> bool: ...
    @property
    def runtime_id(self) -> int: ...
    @property
    def label(self) -> str: ...
    def synchronize(self) -> None:
        """Waits for the work queued on this stream (GIL released) and raises its first
        failure; a Ctrl-C meanwhile raises ``KeyboardInterrupt`` when the wait ends."""
    def record(self) -> Event:
        """A new event recorded at the current end of this stream."""
    def wait(self, event: Event) -> None:
        """Makes later work on this stream wait for ``event``."""

class Event:
    """A marker in a stream (``npurt.Event`` wraps one): cross-stream waits and timing."""

    @property
    def device(self) -> int: ...
    def record(self, stream: Stream) -> None:
        """(Re-)records the event at the current end of ``stream``."""
    def query(self) -> bool:
        """True when the work before the record point has finished."""
    def synchronize(self) -> None:
        """Waits until the work before the record point has finished (GIL released)."""
    def elapsed_ms(self, end: Event) -> float:
        """Milliseconds from this event to ``end``."""

class Report:
    """What one execution did (the runtime's ``ExecReport``; ``npurt.ExecutionResult``
    is built from it)."""

    op: str
    implementation: str
    tier: str
    device: str
    unit: str
    unit_class: str
    stream: str
    seq: int
    elapsed_ms: Optional[float]
    flops: int
    bytes: int

def execute(op_type: str, inputs: Sequence[Tensor], outputs: Optional[Sequence[Optional[Tensor]]],
            attrs: Sequence[Tuple[str, str]], stream: Optional[Stream] = None) -> Tuple[Report, List[Tensor]]:
    """Runs one op on the first input's runtime; missing outputs are allocated."""

def execute_batch(tasks: Sequence[Tuple[str, Sequence[Tensor], Optional[Sequence[Optional[Tensor]]],
                                        Sequence[Tuple[str, str]]]],
                  stream: Optional[Stream] = None) -> List[Tuple[Report, List[Tensor]]]:
    """Validates every task, then submits them together."""

def op_names() -> List[str]: ...
def compiled_backends() -> List[str]: ...
def init_logging() -> None: ...
def validate_config(settings: Dict[str, Any], env: bool = True) -> None:
    """Checks settings as a runtime would, without opening a backend."""
def max_streams_bound() -> int: ...
def _inject_panic(name: Optional[str]) -> None:
    """For tests: every guarded native call named ``name`` (e.g. ``"Graph.node"``) panics
    inside its guard, raising ``npurt.Error``, until ``_inject_panic(None)``."""

class Graph:
    """A graph under construction (``npurt.Graph`` wraps one): values are numbered in the
    order they are made; shapes are checked as nodes are added, and a name given twice
    (input, constant, node) raises naming it."""

    def __init__(self) -> None: ...
    def input(self, name: str, dtype_name: str, shape: Sequence[int]) -> int: ...
    def constant(self, name: str, arr: np.ndarray) -> int: ...
    def node(self, name: str, op_type: str, inputs: Sequence[int], attrs: Sequence[Tuple[str, str]]) -> List[int]: ...
    def output(self, value: int) -> None:
        """Marks a value as an output; a value marked twice raises (``given twice``)."""
    def has_name(self, name: str) -> bool: ...
    def value(self, value: int) -> Tuple[str, str, List[int]]: ...
    def num_nodes(self) -> int: ...
    def dump(self) -> str: ...
    def compile(self, rt: Runtime, device: int, opts: Dict[str, Any]) -> CompiledGraph:
        """Compiles for ``device`` of ``rt``; ``opts``: ``fuse``, ``memory_reuse``,
        ``parallel``, ``scheduling``, ``precision``, ``store_slow_precision``, ``streams``,
        ``max_arenas`` (GIL released)."""

class CompiledGraph:
    """A compiled graph (``npurt.CompiledGraph`` wraps one); :meth:`run` may be called
    from many threads at once, each run with an arena of its own."""

    @property
    def device(self) -> int: ...
    def runtime(self) -> Runtime: ...
    def inputs(self) -> List[Tuple[str, str, List[int]]]: ...
    def outputs(self) -> List[Tuple[str, str, List[int]]]: ...
    def run(self, inputs: Sequence[Tensor]) -> List[Tensor]:
        """Runs the graph (GIL released; callable from many threads at once)."""
    def memory_plan(self) -> Optional[Dict[str, Any]]: ...
    def profile(self, inputs: Sequence[Tensor]) -> Dict[str, Any]: ...
    def constant_bytes(self) -> int: ...
    def fusion(self) -> Dict[str, int]: ...

def bert(rt: Runtime, model: str, batch: int, seq: int, device: int, opts: Dict[str, Any],
         seed: int = 42) -> CompiledGraph:
    """A compiled BERT encoder from a preset or a Hugging Face directory."""

class LLM:
    """A decoder LLM over a Hugging Face model directory (``npurt.LLM`` wraps one)."""

    def __init__(self, rt: Runtime, model_dir: str, device: int = 0, max_batch: int = 8, block_size: int = 16,
                 max_seq_len: Optional[int] = None) -> None: ...
    @property
    def eos_token_ids(self) -> List[int]: ...
    @property
    def kv_cache_bytes(self) -> int: ...
    @property
    def limits(self) -> Tuple[int, int]: ...
    @property
    def vocab_size(self) -> int: ...
    def encode(self, text: str) -> List[int]: ...
    def generate(self, prompts: Union[List[str], List[List[int]]], max_new_tokens: int, temperature: float,
                 top_k: int, top_p: float, seed: int,
                 stop_token_ids: Optional[List[int]]) -> List[Tuple[str, List[int], str]]:
        """``(text, generated ids, finish reason)`` per prompt, the GIL released."""
    def stream(self, prompt: Union[List[str], List[List[int]]], max_new_tokens: int, temperature: float,
               top_k: int, top_p: float, seed: int, stop_token_ids: Optional[List[int]]) -> LLMStream:
        """One prompt generated on a thread of its own."""

class LLMStream:
    """Iterator of ``(token_id, text, finish_reason or None)``."""

    def __iter__(self) -> LLMStream: ...
    def __next__(self) -> Tuple[int, str, Optional[str]]: ...

class Embedder:
    """The runtime's sentence embedder over a sentence-transformers model directory
    (``npurt.Embedder`` wraps one and L2-normalises its rows)."""

    def __init__(self, rt: Runtime, model_dir: str, batch_size: int = 32, device: int = 0) -> None: ...
    @property
    def dimension(self) -> int: ...
    @property
    def max_seq_length(self) -> int: ...
    @property
    def normalizes(self) -> bool:
        """Whether the model's ``modules.json`` ends with a Normalize module."""
    @property
    def batch_size(self) -> int: ...
    def embed(self, texts: Sequence[str]) -> np.ndarray:
        """``[len(texts), dimension]`` float32 rows as the model's pipeline makes them, one
        batch per pass; a Ctrl-C is raised between passes."""
