"""Every op of the op table with small operands and its NumPy reference.

Shared by the CPU tests and the script run on the Ascend backend over acl-emu.
"""

from __future__ import annotations

import math
from typing import Any, Callable, Dict, List, Tuple

import numpy as np

_erf = np.vectorize(math.erf, otypes=[np.float64])


def gelu(x: np.ndarray) -> np.ndarray:
    x = x.astype(np.float64)
    return 0.5 * x * (1.0 + _erf(x / math.sqrt(2.0)))


def gelu_tanh(x: np.ndarray) -> np.ndarray:
    x = x.astype(np.float64)
    return 0.5 * x * (1 + np.tanh(math.sqrt(2 / math.pi) * (x + 0.044715 * x ** 3)))


def layernorm(x: np.ndarray, g: np.ndarray, b: np.ndarray, eps: float) -> np.ndarray:
    x = x.astype(np.float64)
    m = x.mean(-1, keepdims=True)
    v = ((x - m) ** 2).mean(-1, keepdims=True)
    return (x - m) / np.sqrt(v + eps) * g + b


def rmsnorm(x: np.ndarray, w: Any, eps: float) -> np.ndarray:
    x = x.astype(np.float64)
    y = x / np.sqrt((x * x).mean(-1, keepdims=True) + eps)
    return y if w is None else y * w


def silu(x: np.ndarray) -> np.ndarray:
    x = x.astype(np.float64)
    return x / (1 + np.exp(-x))


def softmax(x: np.ndarray, axis: int) -> np.ndarray:
    x = x.astype(np.float64)
    e = np.exp(x - x.max(axis, keepdims=True))
    return e / e.sum(axis, keepdims=True)


def attention(q: np.ndarray, k: np.ndarray, v: np.ndarray, mask: Any = None) -> np.ndarray:
    s = q.astype(np.float64) @ np.swapaxes(k, -1, -2) / math.sqrt(q.shape[-1])
    if mask is not None:
        s = np.where(mask != 0, s, -np.inf) if mask.dtype == np.uint8 else s + mask
    return softmax(s, -1) @ v


def rope(x: np.ndarray, cos: np.ndarray, sin: np.ndarray, pos: np.ndarray, interleaved: bool = False) -> np.ndarray:
    """Rope of x ``[B, H, S, D]`` at ``pos`` ``[B, S]``: rotate-half or interleaved pairs."""
    x = x.astype(np.float64)
    c, s = cos[pos][:, None].astype(np.float64), sin[pos][:, None].astype(np.float64)
    if interleaved:
        a, b = x[..., 0::2], x[..., 1::2]
        out = np.empty_like(x)
        out[..., 0::2], out[..., 1::2] = a * c - b * s, b * c + a * s
        return out
    h = x.shape[-1] // 2
    a, b = x[..., :h], x[..., h:]
    return np.concatenate([a * c - b * s, b * c + a * s], -1)


def causal_attention(q: np.ndarray, k: np.ndarray, v: np.ndarray) -> np.ndarray:
    """Causal grouped-query attention, bottom-right aligned."""
    g = q.shape[1] // k.shape[1]
    k, v = np.repeat(k, g, 1), np.repeat(v, g, 1)
    s_len, t_len = q.shape[2], k.shape[2]
    keep = np.arange(t_len)[None, :] <= np.arange(s_len)[:, None] + (t_len - s_len)
    return attention(q, k, v, keep.astype(np.uint8))
def kv_cache_write(kc, vc, key, value, slots):
    """The key cache after KvCacheWrite (output 0): rows at their slots, negative slots skipped."""
    out = kc.copy().reshape(-1, *kc.shape[2:])
    for i, s in enumerate(slots):
        if s >= 0:
            out[s] = key[i]
    return out.reshape(kc.shape)


def paged_attention(q, kc, vc, tables, lens):
    """Each sequence's query heads over its cached positions (block table), grouped-query."""
    b, h, d = q.shape
    bs, kvh = kc.shape[1], kc.shape[2]
    out = np.zeros((b, h, d))
    for i in range(b):
        slots = [tables[i][p // bs] * bs + p % bs for p in range(int(lens[i]))]
        if not slots:
            continue
        k = kc.reshape(-1, kvh, d)[slots].astype(np.float64)
        v = vc.reshape(-1, kvh, d)[slots].astype(np.float64)
        for hh in range(h):
            kv = hh // (h // kvh)
            out[i, hh] = softmax(k[:, kv] @ q[i, hh] / math.sqrt(d), -1) @ v[:, kv]
    return out


Case = Tuple[str, List[np.ndarray], Dict[str, Any], Callable[..., np.ndarray]]


def cases(seed: int = 0) -> List[Case]:
    """``(op_type, inputs, attrs, reference)`` for every op, op names as users spell them."""
    r = np.random.default_rng(seed)

    def f(*shape: int) -> np.ndarray:
        return r.standard_normal(shape).astype(np.float32)

    a, b = f(8, 16), f(16, 12)
    x = f(4, 6)
    y = f(4, 6)
    pos = (np.abs(f(4, 6)) + 0.1).astype(np.float32)
    g, beta = f(6), f(6)
    q, k, v = f(1, 2, 5, 8), f(1, 2, 7, 8), f(1, 2, 7, 8)
    mask = (r.random((1, 1, 5, 7)) > 0.3).astype(np.uint8)
    rx = f(2, 3, 4, 8)
    rcos, rsin = np.cos(f(16, 4)), np.sin(f(16, 4))
    rpos = r.integers(0, 16, (2, 4)).astype(np.int64)
    mask[..., 0] = 1
    table = f(10, 6)
    idx = np.array([[1, 3], [9, 0]], np.int64)
    bias = f(6)
    c = f(8, 12)
    u8a = r.integers(0, 256, (4, 6), dtype=np.uint8)
    u8b = r.integers(0, 256, (4, 6), dtype=np.uint8)
    u8b[0, :3] = 0
    cond = (r.random((4, 1)) > 0.5).astype(np.uint8) * np.array([[1, 7, 0, 255, 1, 0]], np.uint8)
    return [
        ("MatMul", [a, b], {}, lambda a, b: a.astype(np.float64) @ b),
        ("MatMul", [a, b.T.copy()], {"trans_b": True}, lambda a, bt: a.astype(np.float64) @ bt.T),
        ("Gemm", [a, b, c], {"alpha": 0.5, "beta": 2.0}, lambda a, b, c: 0.5 * (a.astype(np.float64) @ b) + 2 * c),
        ("Linear", [a, f(12, 16), f(12)], {}, lambda x, w, bb: x.astype(np.float64) @ w.T + bb),
        ("LinearGelu", [a, b.T.copy(), c[0].copy()], {}, lambda x, w, bb: gelu(x.astype(np.float64) @ w.T + bb)),
        ("Add", [x, y], {}, lambda x, y: x + y),
        ("Sub", [x, y], {}, lambda x, y: x - y),
        ("Mul", [x, y], {}, lambda x, y: x * y),
        ("Div", [x, pos], {}, lambda x, y: x / y),
        ("Add", [u8a, u8b], {}, lambda p, q: p + q),
        ("Mul", [u8a, u8b], {}, lambda p, q: p * q),
        ("Sub", [u8a, u8b[:1]], {}, lambda p, q: p - q),
        ("Div", [u8a, u8b], {}, lambda p, q: np.where(q == 0, 0, p // np.maximum(q, 1)).astype(np.uint8)),
        ("Relu", [x], {}, lambda x: np.maximum(x, 0)),
        ("Gelu", [x], {}, gelu),
        ("GELU", [x], {"approx": "tanh"}, gelu_tanh),
        ("Tanh", [x], {}, np.tanh),
        ("Erf", [x], {}, lambda x: _erf(x.astype(np.float64))),
        ("Exp", [x], {}, np.exp),
        ("Sqrt", [pos], {}, np.sqrt),
        ("Neg", [x], {}, lambda t: -t),
        ("Sigmoid", [x], {}, lambda t: 1 / (1 + np.exp(-t.astype(np.float64)))),
        ("Pow", [pos, x], {}, lambda b, e: np.power(b.astype(np.float64), e)),
        ("Equal", [x, np.where(r.random(x.shape) > 0.5, x, y)], {}, lambda a, b: (a == b).astype(np.uint8)),
        ("Where", [cond, x, y[:1]], {}, lambda c, a, b: np.where(c != 0, a, b)),
        ("Concat", [x, y[:, :2], x[:, :1]], {"axis": -1}, lambda *t: np.concatenate(t, -1)),
        ("Slice", [x], {"starts": (3, -1), "ends": (0, -100), "axes": (0, -1), "steps": (-1, -2)},
         lambda t: t[3:0:-1, ::-2]),
        ("Expand", [x[:1]], {"shape": (2, 4, 1)}, lambda t: np.broadcast_to(t, (2, 4, 6))),
        ("Softmax", [x], {"axis": -1}, lambda x: softmax(x, -1)),
        ("Softmax", [x], {"axis": 0}, lambda x: softmax(x, 0)),
        ("LayerNorm", [x, g, beta], {"eps": 1e-5}, lambda x, g, b: layernorm(x, g, b, 1e-5)),
        ("Transpose", [f(2, 3, 4)], {"perm": (2, 0, 1)}, lambda t: np.transpose(t, (2, 0, 1))),
        ("Permute", [x], {}, lambda t: t.T),
        ("Reshape", [x], {"shape": (3, -1)}, lambda t: t.reshape(3, -1)),
        ("Gather", [table, idx], {"axis": 0}, lambda t, i: t[i]),
        ("Cast", [x], {"to": np.float16}, lambda t: t.astype(np.float16)),
        ("Cast", [np.array([1, -2, 3], np.int64)], {"to": "float32"}, lambda t: t.astype(np.float32)),
        ("ReduceSum", [x], {"axes": (1,), "keepdims": False}, lambda t: t.astype(np.float64).sum(1)),
        ("ReduceMean", [x], {"axes": (0,)}, lambda t: t.astype(np.float64).mean(0, keepdims=True)),
        ("Scale", [x], {"factor": 2.5}, lambda t: 2.5 * t),
        ("Copy", [x], {}, lambda t: t),
        ("Attention", [q, k, v], {}, attention),
        ("Attention", [q, k, v, mask], {}, attention),
        ("Attention", [q, k[:, :1], v[:, :1]], {"causal": True}, causal_attention),
        ("Rope", [rx, rcos, rsin, rpos], {}, rope),
        ("Rope", [rx, rcos, rsin, rpos.astype(np.int32)], {"interleaved": True},
         lambda *t: rope(*t, interleaved=True)),
        ("BiasGelu", [x, bias], {}, lambda t, bb: gelu(t + bb)),
        ("AddLayerNorm", [x, y, g, beta], {"eps": 1e-5}, lambda t, rr, g, b: layernorm(t + rr, g, b, 1e-5)),
        ("RmsNorm", [x, g], {"eps": 1e-5}, lambda t, w: rmsnorm(t, w, 1e-5)),
        ("RMSNormalization", [x], {"eps": 1e-3}, lambda t: rmsnorm(t, None, 1e-3)),
        ("AddRmsNorm", [x, y, g], {"eps": 1e-5}, lambda t, rr, w: rmsnorm(t + rr, w, 1e-5)),
        ("Silu", [x], {}, silu),
        ("SwiGlu", [x], {}, lambda t: silu(t[:, :3]) * t[:, 3:]),
        ("SwiGlu", [x, y], {}, lambda gt, up: silu(gt) * up),
        ("KvCacheWrite", [f(3, 2, 1, 4), f(3, 2, 1, 4), f(2, 1, 4), f(2, 1, 4), np.array([4, -1], np.int64)], {},
         kv_cache_write),
        ("PagedAttention", [f(2, 4, 8), f(5, 2, 2, 8), f(5, 2, 2, 8), np.array([[3, 1, 0], [2, 4, 0]], np.int32),
                            np.array([5, 0], np.int32)], {}, paged_attention),
    ]


def tolerance(op: str, dtype: np.dtype, fp16_products: bool = False) -> float:
    """Absolute-and-relative tolerance of an op's result. ``fp16_products``: the device
    computes f32 matrix products in fp16 (Ascend 910A), so those compare at fp16 accuracy."""
    if dtype == np.float16:
        return 2e-3
    if fp16_products and op.lower() in ("matmul", "gemm", "linear", "attention", "pagedattention"):
        return 3e-2
    return 1e-4
