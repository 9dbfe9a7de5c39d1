"""Result objects: execution reports, memory figures, utilisation."""

from __future__ import annotations

from typing import Any, Dict, List, Optional

MIB = float(1 << 20)


class ExecutionResult:
    """What one :func:`npurt.execute` did.

    Attributes:
        op: the op's canonical name (``MatMul``, ``ReLU``, ...).
        selected_implementation: the kernel that ran (e.g. ``matmul_packed_avx2``).
        tier: ``fast``, ``generic`` or ``reference``.
        device: ``backend:index``, e.g. ``cpu:0``.
        execution_time_ms: wall time of the call on the default stream; ``None`` when
            the work was queued on an asynchronous stream (time it with events).
        hardware_unit: the unit class, ``"Cube"``, ``"Vector"`` or ``"Scalar"``.
        unit: the concrete unit, e.g. ``avx2-fma`` or ``Cube``.
        flops, bytes: the op's arithmetic and memory traffic.
        stream: the stream the work went to; submission: its sequence number there.
        outputs: the output tensors (given ones, in place, and allocated ones).
    """

    __slots__ = ("op", "selected_implementation", "tier", "device", "execution_time_ms", "hardware_unit", "unit",
                 "flops", "bytes", "stream", "submission", "outputs")

    def __init__(self, report: Any, outputs: List[Any]) -> None:
        self.op: str = report.op
        self.selected_implementation: str = report.implementation
        self.tier: str = report.tier
        self.device: str = report.device
        self.execution_time_ms: Optional[float] = report.elapsed_ms
        self.hardware_unit: str = str(report.unit_class).capitalize()
        self.unit: str = report.unit
        self.flops: int = report.flops
        self.bytes: int = report.bytes
        self.stream: str = report.stream
        self.submission: int = report.seq
        self.outputs = outputs

    @property
    def output(self) -> Any:
        """The first output."""
        return self.outputs[0]

    @property
    def gflops(self) -> Optional[float]:
        """Achieved GFLOP/s, when timed."""
        t = self.execution_time_ms
        return self.flops / (t * 1e6) if t else None

    def __repr__(self) -> str:
        t = "queued" if self.execution_time_ms is None else f"{self.execution_time_ms:.3f} ms"
        return (f"ExecutionResult(op={self.op}, selected_implementation={self.selected_implementation!r}, "
                f"tier={self.tier}, device={self.device}, hardware_unit={self.hardware_unit}, unit={self.unit}, "
                f"execution_time_ms={t}, flops={self.flops}, bytes={self.bytes}, stream={self.stream}, "
                f"submission={self.submission}, outputs={len(self.outputs)})")


class MemoryInfo:
    """Memory figures of one device (MB means MiB).

    Attributes:
        total_mb: the device's memory.
        used_mb: held by live tensors (blocks handed out).
        pool_mb: held by the pool's segments besides large allocations in use.
        system_mb: obtained from the system, large allocations included.
        free_mb: what the system or driver reports free, when known (else ``None``).
        and every pool statistic in bytes or counts: ``total_bytes``, ``in_use_bytes``,
        ``cached_bytes``, ``system_bytes``, ``peak_in_use_bytes``, ``peak_total_bytes``,
        ``largest_free_block``, ``fragmentation``, ``pending_blocks``, ``segments``,
        ``system_allocations``, ``cache_hits``, ``allocations``, ``limit_bytes``,
        ``alignment``.
    """

    def __init__(self, d: Dict[str, Any]) -> None:
        self.__dict__.update(d)
        self.total_mb = d["device_total_bytes"] / MIB
        self.used_mb = d["in_use_bytes"] / MIB
        self.system_mb = d["total_bytes"] / MIB
        self.pool_mb = (d["total_bytes"] - d["system_bytes"]) / MIB
        free = d.get("system_free_bytes")
        self.free_mb = None if free is None else free / MIB

    def as_dict(self) -> Dict[str, Any]:
        """Every figure as a dictionary."""
        return dict(self.__dict__)

    def __repr__(self) -> str:
        return (f"MemoryInfo(total_mb={self.total_mb:.1f}, used_mb={self.used_mb:.3f}, pool_mb={self.pool_mb:.3f}, "
                f"system_mb={self.system_mb:.3f}, peak_in_use_mb={self.peak_in_use_bytes / MIB:.3f}, "
                f"cache_hits={self.cache_hits}, allocations={self.allocations})")


class HardwareUtilization:
    """Cumulative utilisation since the runtime was made or since
    :func:`npurt.reset_hardware_utilization`.

    Attributes:
        cube_percent, vector_percent: achieved FLOP/s over the nominal peak of the Cube
            (matrix) and Vector units, averaged over their busy time (0..100).
        memory_bandwidth_percent: achieved bytes/s over the units' peak bandwidth,
            averaged over all busy time (0..100).
        units: per (device, unit) detail: ``device``, ``unit``, ``unit_class``,
            ``launches``, ``busy_ms``, ``flops``, ``bytes``, ``compute``, ``bandwidth``
            (fractions) and ``method``.
        method: how the figures were obtained.
    """

    def __init__(self, units: List[Dict[str, Any]]) -> None:
        self.units = units

        def avg(rows: List[Dict[str, Any]], key: str) -> float:
            busy = sum(r["busy_ms"] for r in rows)
            if busy <= 0:
                return 0.0
            return 100.0 * sum(r[key] * r["busy_ms"] for r in rows) / busy

        self.cube_percent = avg([u for u in units if u["unit_class"] == "cube"], "compute")
        self.vector_percent = avg([u for u in units if u["unit_class"] == "vector"], "compute")
        self.scalar_percent = avg([u for u in units if u["unit_class"] == "scalar"], "compute")
        self.memory_bandwidth_percent = avg(units, "bandwidth")
        self.launches = sum(u["launches"] for u in units)
        methods = sorted({u["method"] for u in units})
        self.method = ("per unit: op FLOP and byte counts over the measured busy time of timed executions, "
                       "against each unit's nominal peak; " + ("; ".join(methods) if methods else "no timed work yet"))

    def __repr__(self) -> str:
        return (f"HardwareUtilization(cube_percent={self.cube_percent:.2f}, vector_percent={self.vector_percent:.2f}, "
                f"memory_bandwidth_percent={self.memory_bandwidth_percent:.2f}, launches={self.launches}, "
                f"units={len(self.units)})")
