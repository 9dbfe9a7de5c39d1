#!/usr/bin/env python3
"""Peer baseline: the BERT encoder of `npurt bench bert` run by ONNX Runtime (CPU).

Builds the same encoder as src/models/bert.rs as an ONNX graph with seeded random weights
(numpy, normal std 0.02, LayerNorm gamma 1; float32):

    embeddings: Gather(word) + Gather(token_type) + Gather(position) -> LayerNorm
    additive mask (1 - mask) * -10000  (== (mask - 1) * 10000)
    per layer:  Q/K/V MatMul+Add -> Reshape/Transpose -> QK^T / sqrt(dh) + mask -> Softmax
                -> @V -> Transpose/Reshape -> MatMul+Add -> +residual -> LayerNorm
                -> MatMul+Add -> GELU (erf) -> MatMul+Add -> +residual -> LayerNorm
    LayerNorm eps 1e-12; output last_hidden_state [B, S, H]

and times two variants of it with onnxruntime's CPUExecutionProvider
(graph_optimization_level ORT_ENABLE_ALL, intra_op_num_threads 1 and 2 by default):

  unfused  the graph as a PyTorch (HF transformers) export writes it: standard ONNX ops
           (opset 17 LayerNormalization, Erf GELU, ...). Note that ORT_ENABLE_ALL lets the
           session apply its own built-in (C++) fusions to it at load time; the probe step
           reports what the session actually ran.
  fused    the same file after onnxruntime.transformers.optimizer.optimize_model(
           model_type="bert", opt_level=0): EmbedLayerNormalization, Attention,
           SkipLayerNormalization, BiasGelu (com.microsoft contrib ops). (opt_level 0 = the
           Python fusions only; level 1 would first run an ORT pass that imports torch.) If the optimizer does not fuse it fully,
           the fused graph is built directly from those contrib ops instead (`--fused-build
           manual` forces that), and the output says so.

Weights live as ONNX external data in a temporary directory (BERT-Large f32 is ~1.34 GB),
removed at the end unless --keep. Inputs are those of `npurt bench bert`: input_ids
(101 + (i*7919) % (vocab-101)), token_type_ids 0, attention_mask 1 (int64 [B, S]).

Every (variant, threads) configuration runs in a fresh subprocess (this script with
--child), so its peak RSS belongs to it alone: 1 warm-up, then --runs timed runs; the
median (sorted[n//2], as npurt) and min..max are printed in ms. Peak memory is reported as
ru_maxrss (resource.getrusage) and as VmHWM (/proc/self/status, what npurt reports); the
building is done in its own subprocess too, because Linux carries the parent's peak into a
child's ru_maxrss across exec.

    python3 bench/peers/ort_bert.py --model bert-large --seq 512 --runs 5
    python3 bench/peers/ort_bert.py --model bert-base --seq 128 --runs 2 --check --json out.json

--check first verifies the numerics: a numpy float32 reference, the unfused graph with ORT
optimisations off, the unfused graph at ORT_ENABLE_ALL and the fused graph must agree
(max abs diff <= 1e-3) on the benchmark inputs and on a padded, two-segment batch.

Requires numpy, onnx and onnxruntime, and sympy for the fused build (`pip install onnx onnxruntime sympy`).
"""

import argparse
import importlib.util
import json
import os
import platform
import shutil
import subprocess
import sys
import tempfile
import time
import zlib

MARK = "@@ORT_BERT_RESULT "
PRESETS = {
    # name: (hidden, layers, heads, ffn); vocab 30522, max_pos 512, type_vocab 2, eps 1e-12
    "bert-large": (1024, 24, 16, 4096),
    "bert-base": (768, 12, 12, 3072),
    "minilm-l6": (384, 6, 12, 1536),
    "minilm": (384, 6, 12, 1536),
}
TOL = 1e-3


def config(name):
    if name == "tiny":  # as BertConfig::tiny(), for quick tests of this script
        return dict(vocab=50, hidden=32, layers=2, heads=4, ffn=64, max_pos=64, type_vocab=2, eps=1e-12)
    if name not in PRESETS:
        sys.exit(f"ort_bert.py: unknown --model {name!r} (one of {', '.join(PRESETS)})")
    h, n, nh, f = PRESETS[name]
    return dict(vocab=30522, hidden=h, layers=n, heads=nh, ffn=f, max_pos=512, type_vocab=2, eps=1e-12)


def parameters(c):
    h = c["hidden"]
    emb = (c["vocab"] + c["max_pos"] + c["type_vocab"]) * h + 2 * h
    layer = 4 * (h * h + h) + 2 * h * c["ffn"] + c["ffn"] + h + 4 * h
    return emb + c["layers"] * layer


def emit(obj):
    print(MARK + json.dumps(obj), flush=True)


def peak_mem():
    """(ru_maxrss bytes, VmHWM bytes or None) of this process."""
    import resource
    ru = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    ru = ru * 1024 if sys.platform.startswith("linux") else ru  # KiB on Linux, bytes on macOS
    hwm = None
    try:
        with open("/proc/self/status") as f:
            for line in f:
                if line.startswith("VmHWM:"):
                    hwm = int(line.split()[1]) * 1024
    except OSError:
        pass
    return ru, hwm


# ---------------------------------------------------------------------------------------
# Weights: deterministic per name (so both builders and the numpy reference agree).


def weight(np, seed, name, shape, kind):
    if kind == "ones":
        return np.ones(shape, dtype=np.float32)
    rng = np.random.default_rng([seed, zlib.crc32(name.encode())])
    return rng.standard_normal(shape, dtype=np.float32) * np.float32(0.02)


class ExternalWriter:
    """Writes float tensors into one external-data file next to the model."""

    def __init__(self, onnx, directory, filename):
        self.onnx, self.filename = onnx, filename
        self.f = open(os.path.join(directory, filename), "wb")
        self.offset = 0

    def tensor(self, name, arr):
        from onnx import TensorProto
        import numpy as np
        arr = np.asarray(arr, order="C")  # (np.ascontiguousarray would make scalars 1-D)
        t = TensorProto()
        t.name = name
        t.data_type = self.onnx.helper.np_dtype_to_tensor_dtype(arr.dtype)
        t.dims.extend(arr.shape)
        if arr.nbytes < 1024:  # small constants stay inline
            t.raw_data = arr.tobytes()
            return t
        pad = (-self.offset) % 64
        if pad:
            self.f.write(b"\0" * pad)
            self.offset += pad
        data = arr.tobytes()
        self.f.write(data)
        t.data_location = TensorProto.EXTERNAL
        for k, v in (("location", self.filename), ("offset", str(self.offset)), ("length", str(len(data)))):
            e = t.external_data.add()
            e.key, e.value = k, v
        self.offset += len(data)
        return t

    def close(self):
        self.f.close()


class GraphBuilder:
    def __init__(self, onnx, np, writer, seed, weights=None):
        self.onnx, self.np, self.w, self.seed, self.weights = onnx, np, writer, seed, weights
        self.nodes, self.inits, self.n = [], [], 0

    def const(self, name, arr):
        self.inits.append(self.w.tensor(name, arr))
        return name

    def param(self, name, shape, kind="normal"):
        arr = weight(self.np, self.seed, name, shape, kind) if self.weights is None else self.weights(name, shape, kind)
        return self.const(name, self.np.asarray(arr, self.np.float32).reshape(shape))

    def scalar(self, name, v, dtype="float32"):
        return self.const(name, self.np.array(v, dtype=dtype))

    def ints(self, name, v):
        return self.const(name, self.np.array(v, dtype="int64"))

    def op(self, op_type, inputs, name, domain=None, outputs=1, **attrs):
        self.n += 1
        outs = [f"{name}_output_{i}" for i in range(outputs)]
        node = self.onnx.helper.make_node(op_type, inputs, outs, name=name, domain=domain, **attrs)
        self.nodes.append(node)
        return outs[0] if outputs == 1 else outs

    def model(self, inputs, output, hidden, ms_domain):
        from onnx import TensorProto, helper
        self.nodes[-1].output[0] = "last_hidden_state"  # rename the final node's output
        for n in self.nodes:
            for i, x in enumerate(n.input):
                if x == output:
                    n.input[i] = "last_hidden_state"
        g = helper.make_graph(
            self.nodes, "bert",
            [helper.make_tensor_value_info(x, TensorProto.INT64, ["batch_size", "sequence_length"]) for x in inputs],
            [helper.make_tensor_value_info("last_hidden_state", TensorProto.FLOAT,
                                           ["batch_size", "sequence_length", hidden])],
            initializer=self.inits,
        )
        opsets = [helper.make_opsetid("", 17)]
        if ms_domain:
            opsets.append(helper.make_opsetid("com.microsoft", 1))
        # producer "pytorch": the graph mimics a torch.onnx export, and the optimizer checks it.
        m = helper.make_model(g, opset_imports=opsets, producer_name="pytorch",
                              doc_string="BERT encoder built by npurt bench/peers/ort_bert.py")
        m.ir_version = 8
        return m


def build_unfused(onnx, np, c, directory, seed, weights=None, shape_chains=False):
    """The encoder as a PyTorch/HF export writes it (opset 17), weights in `directory`/unfused.onnx.data.
    `weights(name, shape, kind)` replaces the seeded weights by HF name (linear weights [in, out]);
    `shape_chains` computes each attention Reshape target as torch.onnx does (Shape, Gather, Unsqueeze,
    Concat of `x.size()[:-1] + (heads, head_dim)`). python/tests/test_ort_bert.py imports this."""
    w = ExternalWriter(onnx, directory, "unfused.onnx.data")
    b = GraphBuilder(onnx, np, w, seed, weights)
    h, nh, L = c["hidden"], c["heads"], c["layers"]
    dh = h // nh
    ids, tt, mask = "input_ids", "token_type_ids", "attention_mask"
    we = b.param("embeddings.word_embeddings.weight", [c["vocab"], h])
    pe = b.param("embeddings.position_embeddings.weight", [c["max_pos"], h])
    te = b.param("embeddings.token_type_embeddings.weight", [c["type_vocab"], h])
    pos_buf = b.const("embeddings.position_ids", np.arange(c["max_pos"], dtype=np.int64)[None, :])
    x_w = b.op("Gather", [we, ids], "/embeddings/word_embeddings/Gather")
    x_t = b.op("Gather", [te, tt], "/embeddings/token_type_embeddings/Gather")
    e1 = b.op("Add", [x_w, x_t], "/embeddings/Add")
    # position_ids = self.position_ids[:, 0:seq_length]
    shp = b.op("Shape", [ids], "/embeddings/Shape")
    seq = b.op("Gather", [shp, b.ints("/embeddings/Constant_1", 1)], "/embeddings/Gather", axis=0)
    seq1 = b.op("Unsqueeze", [seq, b.ints("/embeddings/Constant_2", [0])], "/embeddings/Unsqueeze")
    pids = b.op("Slice", [pos_buf, b.ints("/embeddings/Constant_3", [0]), seq1,
                          b.ints("/embeddings/Constant_4", [1]), b.ints("/embeddings/Constant_5", [1])],
                "/embeddings/Slice")
    x_p = b.op("Gather", [pe, pids], "/embeddings/position_embeddings/Gather")
    e2 = b.op("Add", [e1, x_p], "/embeddings/Add_1")
    x = b.op("LayerNormalization", [e2, b.param("embeddings.LayerNorm.weight", [h], "ones"),
                                    b.param("embeddings.LayerNorm.bias", [h])],
             "/embeddings/LayerNorm/LayerNormalization", axis=-1, epsilon=c["eps"])
    # extended_attention_mask = (1.0 - mask[:, None, None, :].float()) * -10000.0
    m = b.op("Unsqueeze", [mask, b.ints("/Constant", [1])], "/Unsqueeze")
    m = b.op("Unsqueeze", [m, b.ints("/Constant_1", [2])], "/Unsqueeze_1")
    m = b.op("Cast", [m], "/Cast", to=onnx.TensorProto.FLOAT)
    m = b.op("Sub", [b.scalar("/Constant_2", 1.0), m], "/Sub")
    add_mask = b.op("Mul", [m, b.scalar("/Constant_3", -10000.0)], "/Mul")
    split = b.ints("/Constant_split", [0, 0, nh, dh])
    merge = b.ints("/Constant_merge", [0, 0, h])
    sqrt_dh = b.scalar("/Constant_sqrt_dh", float(np.sqrt(dh)))
    sqrt2 = b.scalar("/Constant_sqrt2", 1.4142135381698608)
    one = b.scalar("/Constant_one", 1.0)
    half = b.scalar("/Constant_half", 0.5)

    def linear(name, path, x, n_in, n_out):
        wt = b.param(f"{name}.weight", [n_in, n_out])  # MatMul B ([in, out]) as exported
        mm = b.op("MatMul", [x, wt], f"{path}/MatMul")
        return b.op("Add", [b.param(f"{name}.bias", [n_out]), mm], f"{path}/Add")

    def target(path, t, tail):  # t.size()[:2] + tail
        shp = b.op("Shape", [t], f"{path}/Shape")
        dims = [b.op("Unsqueeze", [b.op("Gather", [shp, b.ints(f"{path}/C{i}", i)], f"{path}/Gather_{i}", axis=0),
                                   b.ints(f"{path}/Axes{i}", [0])], f"{path}/Unsqueeze_{i}") for i in (0, 1)]
        return b.op("Concat", dims + [b.ints(f"{path}/Tail", tail)], f"{path}/Concat", axis=0)

    for l in range(L):
        p, q = f"encoder.layer.{l}", f"/encoder/layer.{l}"
        a = f"{q}/attention/self"
        heads = {}
        for part, perm in (("query", [0, 2, 1, 3]), ("key", [0, 2, 3, 1]), ("value", [0, 2, 1, 3])):
            t = linear(f"{p}.attention.self.{part}", f"{a}/{part}", x, h, h)
            to = target(f"{a}/{part}", t, [nh, dh]) if shape_chains else split
            t = b.op("Reshape", [t, to], f"{a}/{part}/Reshape")
            heads[part] = b.op("Transpose", [t], f"{a}/{part}/Transpose", perm=perm)
        s = b.op("MatMul", [heads["query"], heads["key"]], f"{a}/MatMul")
        s = b.op("Div", [s, sqrt_dh], f"{a}/Div")
        s = b.op("Add", [s, add_mask], f"{a}/Add")
        s = b.op("Softmax", [s], f"{a}/Softmax", axis=-1)
        ctx = b.op("MatMul", [s, heads["value"]], f"{a}/MatMul_1")
        ctx = b.op("Transpose", [ctx], f"{a}/Transpose", perm=[0, 2, 1, 3])
        ctx = b.op("Reshape", [ctx, target(a, ctx, [h]) if shape_chains else merge], f"{a}/Reshape")
        o = linear(f"{p}.attention.output.dense", f"{q}/attention/output/dense", ctx, h, h)
        r = b.op("Add", [o, x], f"{q}/attention/output/Add")
        x1 = b.op("LayerNormalization", [r, b.param(f"{p}.attention.output.LayerNorm.weight", [h], "ones"),
                                         b.param(f"{p}.attention.output.LayerNorm.bias", [h])],
                  f"{q}/attention/output/LayerNorm/LayerNormalization", axis=-1, epsilon=c["eps"])
        it = linear(f"{p}.intermediate.dense", f"{q}/intermediate/dense", x1, h, c["ffn"])
        # gelu: x * 0.5 * (1.0 + erf(x / sqrt(2.0)))
        g = f"{q}/intermediate/intermediate_act_fn"
        d = b.op("Div", [it, sqrt2], f"{g}/Div")
        e = b.op("Erf", [d], f"{g}/Erf")
        e = b.op("Add", [e, one], f"{g}/Add")
        hx = b.op("Mul", [it, half], f"{g}/Mul")
        act = b.op("Mul", [hx, e], f"{g}/Mul_1")
        o = linear(f"{p}.output.dense", f"{q}/output/dense", act, c["ffn"], h)
        r = b.op("Add", [o, x1], f"{q}/output/Add")
        x = b.op("LayerNormalization", [r, b.param(f"{p}.output.LayerNorm.weight", [h], "ones"),
                                        b.param(f"{p}.output.LayerNorm.bias", [h])],
                 f"{q}/output/LayerNorm/LayerNormalization", axis=-1, epsilon=c["eps"])
    w.close()
    return b.model([ids, tt, mask], x, h, ms_domain=False)


def build_fused_manual(onnx, np, c, directory, seed):
    """The encoder from com.microsoft contrib ops directly (same weights)."""
    MS = "com.microsoft"
    w = ExternalWriter(onnx, directory, "fused.onnx.data")
    b = GraphBuilder(onnx, np, w, seed)
    h, nh, L = c["hidden"], c["heads"], c["layers"]
    I32 = onnx.TensorProto.INT32
    ids = b.op("Cast", ["input_ids"], "cast_input_ids", to=I32)
    tt = b.op("Cast", ["token_type_ids"], "cast_token_type_ids", to=I32)
    mask = b.op("Cast", ["attention_mask"], "cast_attention_mask", to=I32)
    x, mask_index = b.op(
        "EmbedLayerNormalization",
        [ids, tt, b.param("embeddings.word_embeddings.weight", [c["vocab"], h]),
         b.param("embeddings.position_embeddings.weight", [c["max_pos"], h]),
         b.param("embeddings.token_type_embeddings.weight", [c["type_vocab"], h]),
         b.param("embeddings.LayerNorm.weight", [h], "ones"), b.param("embeddings.LayerNorm.bias", [h]), mask],
        "EmbedLayerNormalization_0", domain=MS, outputs=2, epsilon=c["eps"])

    def W(name, shape, kind="normal"):
        return weight(np, seed, name, shape, kind)

    for l in range(L):
        p = f"encoder.layer.{l}"
        parts = [f"{p}.attention.self.{s}" for s in ("query", "key", "value")]
        qkv_w = b.const(f"{p}.attention.qkv.weight", np.concatenate([W(f"{n}.weight", [h, h]) for n in parts], axis=1))
        qkv_b = b.const(f"{p}.attention.qkv.bias", np.concatenate([W(f"{n}.bias", [h]) for n in parts]))
        ctx = b.op("Attention", [x, qkv_w, qkv_b, mask_index], f"Attention_{l}", domain=MS, num_heads=nh)
        mm = b.op("MatMul", [ctx, b.param(f"{p}.attention.output.dense.weight", [h, h])], f"MatMul_ao_{l}")
        x1 = b.op("SkipLayerNormalization",
                  [mm, x, b.param(f"{p}.attention.output.LayerNorm.weight", [h], "ones"),
                   b.param(f"{p}.attention.output.LayerNorm.bias", [h]),
                   b.param(f"{p}.attention.output.dense.bias", [h])],
                  f"SkipLayerNorm_a_{l}", domain=MS, epsilon=c["eps"])
        mm = b.op("MatMul", [x1, b.param(f"{p}.intermediate.dense.weight", [h, c["ffn"]])], f"MatMul_i_{l}")
        act = b.op("BiasGelu", [mm, b.param(f"{p}.intermediate.dense.bias", [c["ffn"]])], f"BiasGelu_{l}", domain=MS)
        mm = b.op("MatMul", [act, b.param(f"{p}.output.dense.weight", [c["ffn"], h])], f"MatMul_o_{l}")
        x = b.op("SkipLayerNormalization",
                 [mm, x1, b.param(f"{p}.output.LayerNorm.weight", [h], "ones"),
                  b.param(f"{p}.output.LayerNorm.bias", [h]), b.param(f"{p}.output.dense.bias", [h])],
                 f"SkipLayerNorm_o_{l}", domain=MS, epsilon=c["eps"])
    w.close()
    return b.model(["input_ids", "token_type_ids", "attention_mask"], x, h, ms_domain=True)


def count_ops(model):
    from collections import Counter
    return dict(sorted(Counter(n.op_type for n in model.graph.node).items()))


def fusion_complete(stats, layers):
    """Attention, SkipLayerNormalization and BiasGelu/FastGelu in every layer."""
    gelu = stats.get("BiasGelu", 0) + stats.get("FastGelu", 0)
    return (stats.get("Attention", 0) + stats.get("MultiHeadAttention", 0) == layers
            and stats.get("SkipLayerNormalization", 0) == 2 * layers and gelu == layers)


def do_build(args):
    """Child: writes unfused.onnx and fused.onnx (+ external data) into args.workdir."""
    import numpy as np
    import onnx
    import onnxruntime as ort
    c = config(args.model)
    d = args.workdir
    t0 = time.perf_counter()
    m = build_unfused(onnx, np, c, d, args.seed)
    unfused = os.path.join(d, "unfused.onnx")
    onnx.save(m, unfused)
    onnx.checker.check_model(unfused)
    unfused_ops = count_ops(m)
    del m
    t_unfused = time.perf_counter() - t0
    info = {"unfused_path": unfused, "unfused_build_s": t_unfused, "unfused_ops": unfused_ops}

    fused = os.path.join(d, "fused.onnx")
    fused_build, reason, stats, fully = args.fused_build, None, None, None
    t0 = time.perf_counter()
    if fused_build == "optimizer":
        from onnxruntime.transformers.optimizer import optimize_model
        print(f"running onnxruntime.transformers.optimizer.optimize_model(model_type='bert', "
              f"num_heads={c['heads']}, hidden_size={c['hidden']}, opt_level=0) ...", flush=True)
        # opt_level=0: the Python fusions only. (opt_level 1, the default for bert, first runs
        # an ORT_ENABLE_BASIC pass that needs torch installed; the benchmark session applies
        # those basic optimisations at load time anyway.)
        opt = optimize_model(unfused, model_type="bert", num_heads=c["heads"], hidden_size=c["hidden"], opt_level=0)
        stats = {k: int(v) for k, v in opt.get_fused_operator_statistics().items() if v}
        fully = bool(opt.is_fully_optimized(opt.get_fused_operator_statistics()))
        print(f"optimizer fused-operator statistics: {stats}; is_fully_optimized: {fully}", flush=True)
        if fusion_complete(stats, c["layers"]):
            opt.save_model_to_file(fused, use_external_data_format=True, all_tensors_to_one_file=True)
            info["fused_ops"] = count_ops(opt.model)
        else:
            reason = (f"optimizer did not fuse every layer ({stats}); built the fused graph "
                      f"from com.microsoft contrib ops instead")
            print("WARNING: " + reason, flush=True)
            fused_build = "manual (optimizer fallback)"
        del opt
    if fused_build != "optimizer":
        m = build_fused_manual(onnx, np, c, d, args.seed)
        onnx.save(m, fused)
        info["fused_ops"] = count_ops(m)
        if stats is None:
            stats = {k: v for k, v in info["fused_ops"].items()
                     if k in ("EmbedLayerNormalization", "Attention", "SkipLayerNormalization", "BiasGelu")}
        del m
    info.update({"fused_path": fused, "fused_build": fused_build, "fused_build_s": time.perf_counter() - t0,
                 "fusion_stats": stats, "optimizer_fully_optimized": fully, "fallback_reason": reason,
                 "onnx": onnx.__version__, "onnxruntime": ort.__version__, "numpy": np.__version__,
                 "data_bytes": sum(os.path.getsize(os.path.join(d, f)) for f in os.listdir(d))})
    emit(info)


# ---------------------------------------------------------------------------------------
# Sessions, inputs, timing.


def session(path, threads, level="all", optimized_path=None):
    import onnxruntime as ort
    so = ort.SessionOptions()
    so.graph_optimization_level = {
        "all": ort.GraphOptimizationLevel.ORT_ENABLE_ALL,
        "disable": ort.GraphOptimizationLevel.ORT_DISABLE_ALL,
    }[level]
    so.intra_op_num_threads = threads
    so.inter_op_num_threads = 1
    so.execution_mode = ort.ExecutionMode.ORT_SEQUENTIAL
    if optimized_path:
        so.log_severity_level = 3  # (the warning that an ORT_ENABLE_ALL model is hardware specific)
        so.optimized_model_filepath = optimized_path
        so.add_session_config_entry("session.optimized_model_external_initializers_file_name",
                                    os.path.basename(optimized_path) + ".data")
        so.add_session_config_entry("session.optimized_model_external_initializers_min_size_in_bytes", "1024")
    return ort.InferenceSession(path, so, providers=["CPUExecutionProvider"])


def bench_inputs(np, c, batch, seq):
    """The inputs `npurt bench bert` feeds."""
    i = np.arange(batch * seq, dtype=np.int64)
    v = c["vocab"]
    ids = (101 + (i * 7919) % (v - 101) if v > 202 else (i * 7919) % v).reshape(batch, seq)  # (tiny: no 101 offset)
    return {"input_ids": ids, "token_type_ids": np.zeros((batch, seq), np.int64),
            "attention_mask": np.ones((batch, seq), np.int64)}


def padded_inputs(np, c, seq):
    """Two sequences: one full; one with two segments and its last quarter padded."""
    rng = np.random.default_rng(7)
    ids = rng.integers(min(1000, c["vocab"] // 2), c["vocab"], size=(2, seq), dtype=np.int64)
    tt = np.zeros((2, seq), np.int64)
    tt[1, seq // 2:] = 1
    mask = np.ones((2, seq), np.int64)
    keep = max(1, seq - seq // 4)
    mask[1, keep:] = 0
    ids[1, keep:] = 0
    return {"input_ids": ids, "token_type_ids": tt, "attention_mask": mask}


def feeds_for(sess, np, inputs):
    types = {"tensor(int64)": np.int64, "tensor(int32)": np.int32, "tensor(float)": np.float32}
    return {i.name: inputs[i.name].astype(types[i.type]) for i in sess.get_inputs()}


def warmed_session(args):
    """The (variant, threads) session of `args`, its feeds, the warm-up output and the
    session's load time in seconds."""
    import numpy as np
    c = config(args.model)
    path = os.path.join(args.workdir, "unfused.onnx" if args.variant == "ep" else f"{args.variant}.onnx")
    t0 = time.perf_counter()
    if args.variant == "ep":  # npurt's EP on the unfused graph (bench/peers/npurt_ep.py)
        sess = __import__("npurt_ep").ep_session(path, args.child_threads, args.ep_precision)
    else:
        sess = session(path, args.child_threads)
    load_s = time.perf_counter() - t0
    feeds = feeds_for(sess, np, bench_inputs(np, c, args.batch, args.seq))
    out = sess.run(["last_hidden_state"], feeds)[0]  # warm-up
    return sess, feeds, out, load_s


def do_child(args):
    """Child: times one (variant, threads) configuration."""
    import numpy as np
    c = config(args.model)
    sess, feeds, out, load_s = warmed_session(args)
    assert out.shape == (args.batch, args.seq, c["hidden"]), out.shape
    finite = bool(np.isfinite(out).all())
    del out
    times = []
    for _ in range(args.runs):
        t = time.perf_counter()
        out = sess.run(["last_hidden_state"], feeds)
        times.append((time.perf_counter() - t) * 1e3)
        del out
    ru, hwm = peak_mem()
    s = sorted(times)
    emit({"variant": args.variant, "threads": args.child_threads, "median_ms": s[len(s) // 2],
          "min_ms": s[0], "max_ms": s[-1], "times_ms": times, "rss_peak_bytes": ru, "vmhwm_bytes": hwm,
          "session_load_s": load_s, "finite": finite})


def do_probe(args):
    """Child: what the session runs after its own ORT_ENABLE_ALL optimisation."""
    import onnx
    path = os.path.join(args.workdir, f"{args.variant}.onnx")
    opt_path = os.path.join(args.workdir, f"probe_{args.variant}.onnx")
    try:
        session(path, 1, optimized_path=opt_path)
        ops = count_ops(onnx.load(opt_path, load_external_data=False))
        emit({"variant": args.variant, "session_ops": ops})
    except Exception as e:  # the probe is informative only
        emit({"variant": args.variant, "error": f"{type(e).__name__}: {e}"})
    finally:
        for f in (opt_path, opt_path + ".data"):
            if os.path.exists(f):
                os.remove(f)


# ---------------------------------------------------------------------------------------
# numpy reference and the numerical check.


def erf(np, x):
    """Abramowitz & Stegun 7.1.26 refined (|err| < 1.2e-7), computed in float64."""
    x = x.astype(np.float64)
    s = np.sign(x)
    a = np.abs(x)
    t = 1.0 / (1.0 + 0.5 * a)
    y = 1.0 - t * np.exp(-a * a - 1.26551223 + t * (1.00002368 + t * (0.37409196 + t * (0.09678418 + t * (
        -0.18628806 + t * (0.27886807 + t * (-1.13520398 + t * (1.48851587 + t * (-0.82215223 + t * 0.17087277)))))))))
    return (s * y).astype(np.float32)


def reference(np, c, seed, inputs):
    W = lambda name, shape, kind="normal": weight(np, seed, name, shape, kind)  # noqa: E731
    h, nh = c["hidden"], c["heads"]
    dh = h // nh
    ids, tt, mask = inputs["input_ids"], inputs["token_type_ids"], inputs["attention_mask"]
    B, S = ids.shape

    def ln(x, name):
        mu = x.mean(-1, keepdims=True)
        var = ((x - mu) ** 2).mean(-1, keepdims=True)
        return (x - mu) / np.sqrt(var + np.float32(c["eps"])) * W(f"{name}.weight", [h], "ones") + W(f"{name}.bias", [h])

    def lin(x, name, n_in, n_out):
        return x @ W(f"{name}.weight", [n_in, n_out]) + W(f"{name}.bias", [n_out])

    x = (W("embeddings.word_embeddings.weight", [c["vocab"], h])[ids]
         + W("embeddings.token_type_embeddings.weight", [c["type_vocab"], h])[tt]
         + W("embeddings.position_embeddings.weight", [c["max_pos"], h])[np.arange(S)][None])
    x = ln(x, "embeddings.LayerNorm")
    add_mask = ((mask.astype(np.float32) - 1.0) * 10000.0)[:, None, None, :]
    for l in range(c["layers"]):
        p = f"encoder.layer.{l}"
        q, k, v = (lin(x, f"{p}.attention.self.{s}", h, h).reshape(B, S, nh, dh).transpose(0, 2, 1, 3)
                   for s in ("query", "key", "value"))
        sc = q @ k.transpose(0, 1, 3, 2) / np.float32(np.sqrt(dh)) + add_mask
        sc = np.exp(sc - sc.max(-1, keepdims=True))
        pr = sc / sc.sum(-1, keepdims=True)
        ctx = (pr @ v).transpose(0, 2, 1, 3).reshape(B, S, h)
        x = ln(lin(ctx, f"{p}.attention.output.dense", h, h) + x, f"{p}.attention.output.LayerNorm")
        it = lin(x, f"{p}.intermediate.dense", h, c["ffn"])
        act = it * np.float32(0.5) * (np.float32(1.0) + erf(np, it / np.float32(np.sqrt(2.0))))
        x = ln(lin(act, f"{p}.output.dense", c["ffn"], h) + x, f"{p}.output.LayerNorm")
    return x.astype(np.float32)


def do_check(args):
    """Child: numpy reference vs unfused (no ORT optimisation) vs unfused/fused at ORT_ENABLE_ALL."""
    import numpy as np
    c = config(args.model)
    threads = args.child_threads
    cases = {
        f"bench inputs [{args.batch}x{args.seq}]": bench_inputs(np, c, args.batch, args.seq),
        f"padded 2-segment [2x{min(args.seq, 128)}]": padded_inputs(np, c, min(args.seq, 128)),
    }
    ref_case = list(cases)[1]
    outs = {name: {} for name in cases}
    t0 = time.perf_counter()
    outs[ref_case]["numpy reference"] = reference(np, c, args.seed, cases[ref_case])
    print(f"check: numpy reference on {ref_case} in {time.perf_counter() - t0:.1f} s", flush=True)
    for label, variant, level in (("unfused, ORT_DISABLE_ALL", "unfused", "disable"),
                                  ("unfused, ORT_ENABLE_ALL", "unfused", "all"),
                                  ("fused, ORT_ENABLE_ALL", "fused", "all")):
        sess = session(os.path.join(args.workdir, f"{variant}.onnx"), threads, level)
        for name, inp in cases.items():
            outs[name][label] = sess.run(["last_hidden_state"], feeds_for(sess, np, inp))[0]
        del sess
    rows, ok = [], True
    for name, o in outs.items():
        base_label = "numpy reference" if "numpy reference" in o else "unfused, ORT_DISABLE_ALL"
        base = o[base_label]
        for label, v in o.items():
            if label == base_label:
                continue
            d = float(np.abs(v.astype(np.float64) - base).max())
            rows.append({"case": name, "a": label, "b": base_label, "max_abs_diff": d, "ok": d <= TOL})
            ok &= d <= TOL and bool(np.isfinite(v).all())
        d = float(np.abs(o["fused, ORT_ENABLE_ALL"].astype(np.float64) - o["unfused, ORT_ENABLE_ALL"]).max())
        rows.append({"case": name, "a": "fused, ORT_ENABLE_ALL", "b": "unfused, ORT_ENABLE_ALL",
                     "max_abs_diff": d, "ok": d <= TOL})
        ok &= d <= TOL
    emit({"ok": bool(ok), "tolerance": TOL, "comparisons": rows})


def do_serve(args):
    """One (variant, threads) session kept loaded and timed on request, so another program
    (`npurt bench bert --compare-ort`) can alternate its own runs with ORT's in one run.

    Protocol (one line each way): after the warm-up this prints MARK {"ready": ...}; then
    each stdin line `run` is answered with MARK {"ms": <one timed run>}, and `quit` (or
    end of input) with MARK {"rss_peak_bytes", "vmhwm_bytes"} before exiting.
    """
    import numpy as np
    sess, feeds, out, load_s = warmed_session(args)
    emit({"ready": True, "variant": args.variant, "threads": args.child_threads, "session_load_s": load_s,
          "finite": bool(np.isfinite(out).all()), "onnxruntime": __import__("onnxruntime").__version__})
    del out
    for line in sys.stdin:
        cmd = line.strip()
        if cmd == "run":
            t = time.perf_counter()
            out = sess.run(["last_hidden_state"], feeds)
            ms = (time.perf_counter() - t) * 1e3
            del out
            emit({"ms": ms})
        elif cmd == "quit":
            break
    ru, hwm = peak_mem()
    emit({"rss_peak_bytes": ru, "vmhwm_bytes": hwm})


# ---------------------------------------------------------------------------------------
# Parent: orchestration.


def run_child(argv, what, script=__file__):
    """Runs `script` (this one by default) with `argv`; echoes its output; returns its
    MARK record."""
    cmd = [sys.executable, os.path.abspath(script)] + argv
    p = subprocess.Popen(cmd, stdout=subprocess.PIPE, text=True)
    result = None
    for line in p.stdout:
        if line.startswith(MARK):
            result = json.loads(line[len(MARK):])
        else:
            print("  | " + line.rstrip(), flush=True)
    rc = p.wait()
    if rc != 0 or result is None:
        sys.exit(f"{os.path.basename(script)}: {what} failed (exit status {rc})")
    return result


def thread_counts(ap, text):
    """`--threads`: a comma-separated list of integers >= 1 (an argparse error otherwise)."""
    try:
        threads = [int(t) for t in text.split(",") if t.strip()]
    except ValueError:
        ap.error("--threads: a comma-separated list of integers, e.g. 1,2")
    if not threads or any(t < 1 for t in threads):
        ap.error("--threads: integers >= 1")
    return threads


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--model", default="bert-large", help="bert-large | bert-base | minilm-l6 (default bert-large)")
    ap.add_argument("--seq", type=int, default=512, help="sequence length (default 512)")
    ap.add_argument("--batch", type=int, default=1, help="batch size (default 1)")
    ap.add_argument("--runs", type=int, default=5, help="timed runs after 1 warm-up (default 5)")
    ap.add_argument("--threads", default="1,2", help="intra_op_num_threads values (default 1,2)")
    ap.add_argument("--variants", default="unfused,fused", help="which variants to time (default unfused,fused)")
    ap.add_argument("--json", metavar="FILE", help="also write all results as JSON")
    ap.add_argument("--check", action="store_true",
                    help=f"first check the numerics (max abs diff <= {TOL}); exit 1 if they disagree")
    ap.add_argument("--fused-build", choices=["optimizer", "manual"], default="optimizer",
                    help="fused variant from optimize_model (default) or built from contrib ops")
    ap.add_argument("--no-probe", action="store_true", help="skip listing the ops each session runs")
    ap.add_argument("--seed", type=int, default=42, help="weight seed (default 42)")
    ap.add_argument("--workdir", help="directory for the models (default: a new temp dir, removed at the end)")
    ap.add_argument("--keep", action="store_true", help="keep the temp dir with the models")
    # internal
    ap.add_argument("--serve", action="store_true",
                    help="keep one session (--variant, --child-threads) loaded in --workdir (built with --build) "
                         "and answer `run` lines on stdin; used by `npurt bench bert --compare-ort`")
    ap.add_argument("--build", action="store_true",
                    help="only build unfused.onnx and fused.onnx into --workdir (prints one JSON record)")
    ap.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    ap.add_argument("--probe", action="store_true", help=argparse.SUPPRESS)
    ap.add_argument("--check-child", action="store_true", help=argparse.SUPPRESS)
    ap.add_argument("--variant", help="with --serve: unfused, fused or ep (unfused with npurt's EP)")
    ap.add_argument("--ep-precision", default="f32", help="with --variant ep: the EP's precision option")
    ap.add_argument("--child-threads", type=int, default=1, help="with --serve: intra_op_num_threads")
    args = ap.parse_args()

    missing = [m for m in ("numpy", "onnx", "onnxruntime") if importlib.util.find_spec(m) is None]
    if missing:
        pkgs = ("numpy " if "numpy" in missing else "") + "onnx onnxruntime"
        print(f"ort_bert.py: {', '.join(missing)} not installed: pip install {pkgs}", file=sys.stderr)
        sys.exit(2)

    c = config(args.model)
    if not 1 <= args.seq <= c["max_pos"] or args.batch < 1 or args.runs < 1:
        ap.error(f"need 1 <= --seq <= {c['max_pos']}, --batch >= 1, --runs >= 1")
    if (args.build or args.serve) and not args.workdir:
        ap.error("--build and --serve need --workdir")
    if args.build:
        os.makedirs(args.workdir, exist_ok=True)
        return do_build(args)
    if args.serve:
        if args.variant not in ("unfused", "fused", "ep"):
            ap.error("--serve needs --variant unfused, fused or ep")
        return do_serve(args)
    if args.child:
        return do_child(args)
    if args.probe:
        return do_probe(args)
    if args.check_child:
        return do_check(args)

    # The parent stays small (no numpy/onnx imported): children's ru_maxrss includes the
    # parent's RSS at exec time on Linux.
    threads = thread_counts(ap, args.threads)
    variants = [v.strip() for v in args.variants.split(",") if v.strip()]
    if not variants or any(v not in ("unfused", "fused") for v in variants):
        ap.error("--variants: unfused and/or fused")
    workdir = args.workdir or tempfile.mkdtemp(prefix="ort_bert_")
    os.makedirs(workdir, exist_ok=True)
    common = ["--model", args.model, "--seq", str(args.seq), "--batch", str(args.batch), "--runs", str(args.runs),
              "--seed", str(args.seed), "--workdir", workdir]
    try:
        with open("/proc/loadavg") as f:
            load = " ".join(f.read().split()[:3])
    except OSError:
        load = "?"
    print(f"BERT {args.model} (hidden {c['hidden']}, {c['layers']} layers, {c['heads']} heads, ffn {c['ffn']}), "
          f"batch {args.batch}, seq {args.seq}, {parameters(c)} parameters; {args.runs} runs after 1 warm-up")
    print(f"python {platform.python_version()}, {platform.machine()}, cpus={os.cpu_count()}, load average {load}; "
          f"models in {workdir}", flush=True)
    doc = {"tool": "onnxruntime CPUExecutionProvider", "model": args.model, "config": c, "parameters": parameters(c),
           "batch": args.batch, "seq": args.seq, "runs": args.runs, "threads": threads, "seed": args.seed,
           "graph_optimization_level": "ORT_ENABLE_ALL", "python": platform.python_version()}
    try:
        t0 = time.perf_counter()
        info = run_child(common + ["--build", "--fused-build", args.fused_build], "building the models")
        print(f"onnxruntime {info['onnxruntime']}, onnx {info['onnx']}, numpy {info['numpy']}; "
              f"built in {time.perf_counter() - t0:.1f} s ({info['data_bytes'] / 2**20:.0f} MiB on disk)")
        print(f"fused variant: {info['fused_build']}; fused operators: {info['fusion_stats']}")
        if info["fallback_reason"]:
            print(f"NOTE: {info['fallback_reason']}")
        doc["build"] = info
        doc["versions"] = {k: info[k] for k in ("onnxruntime", "onnx", "numpy")}

        if args.check:
            chk = run_child(common + ["--check-child", "--child-threads", str(max(threads))], "the numerical check")
            for r in chk["comparisons"]:
                print(f"check {r['case']:<28} {r['a']:<26} vs {r['b']:<26} max|diff| {r['max_abs_diff']:.2e} "
                      f"{'ok' if r['ok'] else 'FAIL'}")
            doc["check"] = chk
            if not chk["ok"]:
                print(f"check FAILED (tolerance {TOL})")
                sys.exit(1)
            print(f"check passed (tolerance {TOL})")

        if not args.no_probe:
            doc["session_ops"] = {}
            for v in variants:
                pr = run_child(common + ["--probe", "--variant", v], f"probing {v}")
                doc["session_ops"][v] = pr.get("session_ops") or pr.get("error")
                ops = pr.get("session_ops")
                if ops is None:
                    print(f"ops run by the {v} session: (probe failed: {pr.get('error')})")
                else:
                    print(f"ops run by the {v} session after ORT_ENABLE_ALL: "
                          + ", ".join(f"{k} {n}" for k, n in sorted(ops.items(), key=lambda kv: -kv[1])))

        print(f"{'variant':<9} {'threads':>7} {'median ms':>10} {'min..max ms':>18} {'RSS MiB':>8} "
              f"{'HWM MiB':>8} {'load s':>7}", flush=True)
        rows = []
        mib = lambda b: "?" if b is None else f"{b / 2**20:.0f}"  # noqa: E731
        for v in variants:
            for t in threads:
                r = run_child(common + ["--child", "--variant", v, "--child-threads", str(t)], f"{v} x{t}")
                r.update({"model": args.model, "seq": args.seq, "batch": args.batch})
                rows.append(r)
                spread = f"{r['min_ms']:.1f}..{r['max_ms']:.1f}"
                print(f"{v:<9} {t:>7} {r['median_ms']:>10.1f} {spread:>18} "
                      f"{mib(r['rss_peak_bytes']):>8} {mib(r['vmhwm_bytes']):>8} {r['session_load_s']:>7.1f}"
                      + ("" if r["finite"] else "  (non-finite output!)"), flush=True)
        best = min(rows, key=lambda r: r["median_ms"])
        print(f"best: {best['variant']} x{best['threads']} threads, median {best['median_ms']:.1f} ms "
              f"(RSS {mib(best['rss_peak_bytes'])} MiB)")
        print("RSS = ru_maxrss, HWM = VmHWM (npurt's RSS column), both peak of the child process")
        doc["results"] = rows
        doc["best"] = {k: best[k] for k in ("variant", "threads", "median_ms", "min_ms", "max_ms", "rss_peak_bytes")}
        if args.json:
            with open(args.json, "w", encoding="utf-8") as f:
                json.dump(doc, f, indent=2)
                f.write("\n")
            print(f"wrote {args.json}")
    finally:
        if args.keep or args.workdir:
            print(f"models kept in {workdir}")
        else:
            shutil.rmtree(workdir, ignore_errors=True)


if __name__ == "__main__":
    main()
