#!/usr/bin/env python3
"""Adversarial probe of npurt: malformed and hostile inputs through the CLI, the environment
and the Python package, each case classified by what npurt did with it.

Every case runs in a process of its own (a timeout, an address-space cap and its peak RSS
measured), so that a hang, a crash or an unbounded read is seen and counted instead of taking
the probe down. The outcome of a case is one of:

  clear    refused with an error that names its subject (the file, flag, variable, key, op
           or value the case is about)
  correct  accepted, and the result equals NumPy's (or the documented answer)
  panic    "panicked at" on standard error, or a PanicException in Python
  hang     still running at the timeout
  crash    killed by a signal (SIGSEGV, SIGABRT, ...)
  wrong    accepted when it should have been refused, refused when valid, a result that
           differs from the oracle, or an error that does not name its subject
  leak     a peak RSS above the case's bound (an unbounded read), or memory that grows over
           a loop of operations

Usage (numpy required; the Python families also need the npurt package installed, e.g. in
the virtual environment scripts/test-python.sh makes):

    cargo build --release -p npurt-cli -p acl-emu
    target/python-venv/bin/python scripts/probe.py [--bin target/release/npurt]
        [--families npy,model,cli,env,ops,python,memory] [--json out.json] [--quick]

It prints one Markdown row per family (the table of docs/RELIABILITY.md) and every case that
is not `clear` or `correct`, and exits non-zero when any case is a panic, hang, crash, wrong
or leak. A family whose prerequisite is missing (the MiniLM model of
scripts/fetch-test-assets.sh, libacl_emu.so, the npurt Python package) is skipped with the
reason printed.
"""
import argparse
import json
import math
import os
import pathlib
import resource
import shutil
import signal
import subprocess
import sys
import tempfile
import time
import warnings

try:
    import numpy as np
except ImportError:
    sys.exit("numpy is missing: pip install numpy")

ROOT = pathlib.Path(__file__).resolve().parent.parent
OUTCOMES = ("clear", "correct", "panic", "hang", "crash", "wrong", "leak")
BAD = ("panic", "hang", "crash", "wrong", "leak")
MIB = 1 << 20
# The references compute NumPy's answers on NaN, inf and empty axes on purpose.
warnings.filterwarnings("ignore", category=RuntimeWarning)


class Tally:
    def __init__(self):
        self.rows = {}
        self.notes = []
        self.skipped = {}

    def add(self, family, outcome, case, detail=""):
        row = self.rows.setdefault(family, {k: 0 for k in OUTCOMES})
        row[outcome] += 1
        if outcome in BAD:
            self.notes.append(f"{family}: {outcome}: {case}: {detail}"[:600])

    def table(self):
        head = "| family | tried | clear error | accepted and correct | panic | hang | crash | wrong | leak |"
        lines = [head, "|---|" + "---:|" * 9]
        for fam, r in self.rows.items():
            tried = sum(r.values())
            lines.append(f"| {fam} | {tried} | " + " | ".join(str(r[k]) for k in OUTCOMES) + " |")
        total = {k: sum(r[k] for r in self.rows.values()) for k in OUTCOMES}
        lines.append(f"| **all** | {sum(total.values())} | " + " | ".join(str(total[k]) for k in OUTCOMES) + " |")
        return "\n".join(lines)


class Run:
    """One finished process: return code (negative: the signal), output, peak RSS, timeout."""

    def __init__(self, rc, out, err, rss_mib, timed_out):
        self.rc, self.out, self.err, self.rss_mib, self.timed_out = rc, out, err, rss_mib, timed_out


def spawn(argv, env=None, timeout=120, stdin=None, as_limit_gib=8, cwd=None):
    """Runs argv with an address-space cap; peak RSS comes from wait4's rusage."""

    def limits():
        cap = as_limit_gib << 30
        resource.setrlimit(resource.RLIMIT_AS, (cap, cap))
        os.setsid()

    with tempfile.TemporaryFile() as fo, tempfile.TemporaryFile() as fe:
        p = subprocess.Popen(argv, env=env, stdout=fo, stderr=fe, preexec_fn=limits, cwd=cwd,
                             stdin=subprocess.PIPE if stdin is not None else subprocess.DEVNULL)
        if stdin is not None:
            try:
                p.stdin.write(stdin)
                p.stdin.close()
            except BrokenPipeError:
                pass
        deadline = time.monotonic() + timeout
        timed_out = False
        while True:
            pid, status, ru = os.wait4(p.pid, os.WNOHANG)
            if pid:
                break
            if time.monotonic() > deadline:
                timed_out = True
                os.killpg(p.pid, signal.SIGKILL)
                pid, status, ru = os.wait4(p.pid, 0)
                break
            time.sleep(0.005)
        p.returncode = os.waitstatus_to_exitcode(status)
        fo.seek(0)
        fe.seek(0)
        return Run(p.returncode, fo.read().decode("utf-8", "replace"), fe.read().decode("utf-8", "replace"),
                   ru.ru_maxrss / 1024, timed_out)


def classify(r, expect, subjects=(), check=None, rss_bound_mib=1024):
    """The outcome of a run. expect: "error" (must be refused naming every subject), "ok"
    (must succeed and pass check), or "either" (a clear refusal or a checked success)."""
    if r.timed_out:
        return "hang", "timed out"
    if "panicked at" in r.err or "PanicException" in r.err:
        return "panic", r.err[-300:]
    if r.rss_mib > rss_bound_mib:
        return "leak", f"peak RSS {r.rss_mib:.0f} MiB > {rss_bound_mib} MiB"
    if r.rc < 0:
        return "crash", f"signal {-r.rc}: {r.err[-300:]}"
    if r.rc != 0:
        if expect == "ok":
            return "wrong", f"refused a valid case: {r.err[-300:]}"
        missing = [s for s in subjects if s.lower() not in r.err.lower()]
        if missing:
            return "wrong", f"error does not name {missing}: {r.err[-300:]}"
        return "clear", ""
    if expect == "error":
        return "wrong", f"accepted: {r.out[-200:]} {r.err[-200:]}"
    if check is not None:
        why = check(r)
        if why:
            return "wrong", why
    return "correct", ""


def record(tally, family, case, r, expect, subjects=(), check=None, rss_bound_mib=1024):
    outcome, detail = classify(r, expect, subjects, check, rss_bound_mib)
    tally.add(family, outcome, case, detail)
    return outcome


def clean_env(**extra):
    e = {k: v for k, v in os.environ.items() if not k.startswith(("NPURT_", "ACL_EMU_", "ASCEND_"))}
    e.setdefault("RUST_BACKTRACE", "0")
    e.update(extra)
    return e


def same(got, want, rtol=1e-5, atol=1e-6):
    """None when got equals want (shapes, dtypes, NaN where NaN, infinities alike, finite
    values within tolerance); otherwise why not."""
    if got.shape != want.shape:
        return f"shape {got.shape} != {want.shape}"
    if got.dtype != want.dtype:
        return f"dtype {got.dtype} != {want.dtype}"
    if got.dtype.kind != "f":
        return None if np.array_equal(got, want) else "values differ"
    g, w = got.astype(np.float64), want.astype(np.float64)
    if not np.array_equal(np.isnan(g), np.isnan(w)):
        return "NaN positions differ"
    fin = np.isfinite(w)
    if not np.array_equal(g[~fin & ~np.isnan(w)], w[~fin & ~np.isnan(w)]):
        return "infinities differ"
    if not np.allclose(g[fin], w[fin], rtol=rtol, atol=atol):
        i = np.argmax(np.abs(g[fin] - w[fin]))
        return f"max difference {abs(g[fin][i] - w[fin][i]):.3g} at value {w[fin][i]:.6g}"
    return None


# ----------------------------------------------------------------------------------------
# .npy files read by `npurt op`


def npy_bytes(a):
    import io
    b = io.BytesIO()
    np.save(b, a)
    return b.getvalue()


def probe_npy(t, binary, tmp, quick):
    fam = ".npy files (`npurt op Relu -i F`)"
    rng = np.random.default_rng(1)
    out = tmp / "out.npy"

    def op_relu(path):
        if out.exists():
            out.unlink()
        return spawn([binary, "op", "Relu", "-i", str(path), "-o", str(out)], env=clean_env(), timeout=60)

    def relu_check(src):
        def check(r):
            try:
                got = np.load(out)
            except Exception as e:  # noqa: BLE001 - any failure to read back is the finding
                return f"output unreadable: {e}"
            return same(got, np.maximum(src, np.zeros((), src.dtype)))
        return check

    specials = np.array([np.nan, np.inf, -np.inf, -0.0, 3e38, -3e38, 1e-45], np.float32)
    shapes = [(), (0,), (1,), (7,), (2, 3), (2, 0, 4), (1, 1, 1, 1, 1), (3, 1, 5)]
    for dt in (np.float32, np.float16):
        for shape in shapes:
            a = rng.standard_normal(shape).astype(dt)
            if a.size:
                with np.errstate(over="ignore"):
                    a.flat[0] = specials[rng.integers(len(specials))]
            p = tmp / "valid.npy"
            np.save(p, a)
            record(t, fam, f"valid {np.dtype(dt).name} {shape}", op_relu(p), "ok", check=relu_check(a))
            if a.ndim >= 2:
                # Fortran order: read, or refused as a documented limit naming it.
                np.save(p, np.asfortranarray(a))
                record(t, fam, f"fortran order {shape}", op_relu(p), "either", subjects=["Fortran"],
                       check=relu_check(a))

    base = npy_bytes(rng.standard_normal((4, 8)).astype(np.float32))
    hlen = base.index(b"\n") + 1

    def write(name, data):
        p = tmp / name
        p.write_bytes(data)
        return p

    # Truncations and a tail too long, anywhere in the file.
    cuts = sorted(set([0, 1, 6, 8, 9, 10, 11, hlen - 1, hlen, hlen + 1, len(base) - 1] +
                      [int(x) for x in rng.integers(0, len(base), 4 if quick else 20)]))
    for c in cuts:
        p = write("cut.npy", base[:c])
        record(t, fam, f"truncated at {c}", op_relu(p), "error", subjects=["cut.npy"])
    for extra in (1, 4, 4096):
        p = write("long.npy", base + b"\0" * extra)
        record(t, fam, f"{extra} bytes past the data", op_relu(p), "error", subjects=["long.npy", "bytes"])

    # A valid header declaring 4 x 8 f32 and a 3 GiB sparse tail, and a header declaring 3 GiB
    # of data in a file of 128 bytes.
    p = write("tail.npy", base)
    with open(p, "r+b") as f:
        f.truncate(3 << 30)
    record(t, fam, "3 GiB tail", op_relu(p), "error", subjects=["tail.npy", "bytes"], rss_bound_mib=256)
    p.unlink()
    big = npy_bytes(np.zeros((0, 0), np.float32)).replace(b"(0, 0)", b"(1024, 786432)")
    p = write("declares.npy", big)
    record(t, fam, "header declares 3 GiB, file has none", op_relu(p), "error",
           subjects=["declares.npy", "bytes"], rss_bound_mib=256)
    for dims in ("(4294967296, 4294967296)", "(4611686018427387904, 384)", "(18446744073709551615,)",
                 "(-1, 3)", "(1.5, 2)", "('a',)"):
        h = npy_bytes(np.zeros((1,), np.float32))
        p = write("dims.npy", h[:hlen].replace(b"(1,)", dims.encode()))
        record(t, fam, f"dims {dims}", op_relu(p), "error", subjects=["dims.npy"], rss_bound_mib=256)

    # Files that are not regular files, and paths that do not lead to one.
    fifo = tmp / "fifo.npy"
    os.mkfifo(fifo)
    (tmp / "dir.npy").mkdir()
    (tmp / "zero.npy").symlink_to("/dev/zero")
    (tmp / "broken.npy").symlink_to(tmp / "nothing-here")
    (tmp / "valid-link.npy").symlink_to(tmp / "valid.npy")
    for name in ("fifo.npy", "dir.npy", "zero.npy", "broken.npy", "missing.npy"):
        record(t, fam, name, op_relu(tmp / name), "error", subjects=[name], rss_bound_mib=256)
    np.save(tmp / "valid.npy", np.arange(-3, 3, dtype=np.float32))
    record(t, fam, "link to a valid file", op_relu(tmp / "valid-link.npy"), "ok",
           check=relu_check(np.arange(-3, 3, dtype=np.float32)))
    record(t, fam, "/dev/zero", op_relu("/dev/zero"), "error", subjects=["/dev/zero"], rss_bound_mib=256)

    # Byte mutations of the header and the data: NumPy is the oracle of what is a valid file.
    for i in range(30 if quick else 200):
        b = bytearray(base)
        for _ in range(int(rng.integers(1, 4))):
            pos = int(rng.integers(0, hlen + 8))
            b[pos] = int(rng.integers(0, 256))
        p = write("mut.npy", bytes(b))
        try:
            ref = np.load(p, allow_pickle=False)
            ok = ref.dtype in (np.float32, np.float16) and ref.dtype.byteorder in ("=", "<", "|")
        except Exception:  # noqa: BLE001 - NumPy refusing is the oracle's answer
            ref, ok = None, False
        if ok:
            record(t, fam, f"mutation {i}", op_relu(p), "either", subjects=["mut.npy"], check=relu_check(ref))
        else:
            record(t, fam, f"mutation {i}", op_relu(p), "error", subjects=["mut.npy"])


# ----------------------------------------------------------------------------------------
# Hugging Face model directories read by `npurt embed` and `npurt bench bert --model`

MODEL_FILES = ("config.json", "model.safetensors", "tokenizer.json", "modules.json",
               "sentence_bert_config.json", "1_Pooling/config.json")


def model_copy(src, dst):
    """A copy of the model directory whose large weights file is a link to the original."""
    if dst.exists():
        shutil.rmtree(dst)
    shutil.copytree(src, dst, symlinks=True, ignore=shutil.ignore_patterns("model.safetensors"))
    (dst / "model.safetensors").symlink_to(src / "model.safetensors")
    return dst


def probe_model(t, binary, tmp, quick):
    fam = "model directories (`embed`, `bench bert --model`)"
    src = ROOT / "target" / "test-assets" / "all-MiniLM-L6-v2"
    if not (src / "model.safetensors").is_file():
        t.skipped[fam] = f"{src} is missing (bash scripts/fetch-test-assets.sh)"
        return
    ref = json.loads((ROOT / "tests" / "fixtures" / "minilm_reference.json").read_text())
    case0 = ref["cases"][0]
    want = np.array(case0["embedding"], np.float64)

    def embed(d):
        return spawn([binary, "embed", "--model-dir", str(d), case0["text"]], env=clean_env(), timeout=120)

    def bench(d):
        return spawn([binary, "bench", "bert", "--model", str(d), "--seq", "8", "--runs", "1"],
                     env=clean_env(), timeout=300)

    def embed_check(r):
        try:
            got = np.array(json.loads(r.out.splitlines()[0])["embedding"], np.float64)
        except Exception as e:  # noqa: BLE001 - unparsable output is the finding
            return f"output unreadable: {e}"
        cos = float(got @ want / (np.linalg.norm(got) * np.linalg.norm(want)))
        return None if cos > 0.9999 else f"cosine {cos} against the reference"

    d = model_copy(src, tmp / "m")
    record(t, fam, "intact directory: embed", embed(d), "ok", check=embed_check)
    record(t, fam, "intact directory: bench", bench(d), "ok")

    def first_line_says_random(r):
        first = (r.out.splitlines() or [""])[0]
        return None if "random weights" in first else f"first line {first!r} does not say random weights"

    (d / "model.safetensors").unlink()
    record(t, fam, "no weights file: bench", bench(d), "ok", check=first_line_says_random)
    record(t, fam, "no weights file: embed", embed(d), "error", subjects=["model.safetensors"])

    # Every file as something that is not a regular JSON file of bounded size.
    def spoil(d, rel, how):
        p = d / rel
        if p.exists() or p.is_symlink():
            p.unlink()
        if how == "dev-zero":
            p.symlink_to("/dev/zero")
        elif how == "directory":
            p.mkdir()
        elif how == "broken-link":
            p.symlink_to(d / "nothing-here")
        elif how == "empty":
            p.write_bytes(b"")
        elif how == "truncated":
            p.write_bytes((src / rel).read_bytes()[:40])
        elif how == "huge":
            with open(p, "wb") as f:
                f.write(b"{")
                f.truncate(65 << 20)
        elif how == "fifo":
            os.mkfifo(p)

    hows = ("dev-zero", "directory", "broken-link", "empty", "truncated", "huge", "fifo")
    for rel in MODEL_FILES:
        for how in hows:
            if rel == "model.safetensors" and how == "huge":
                continue
            d = model_copy(src, tmp / "m")
            spoil(d, rel, how)
            name = rel.split("/")[-1]
            record(t, fam, f"{rel} {how}: embed", embed(d), "error", subjects=[name], rss_bound_mib=512)
            if rel in ("config.json", "model.safetensors") and (not quick or how == "dev-zero"):
                record(t, fam, f"{rel} {how}: bench", bench(d), "error", subjects=[name], rss_bound_mib=512)

    # config.json: settings npurt does not implement, and hostile values of the keys it reads.
    cfg = json.loads((src / "config.json").read_text())
    unsupported = {"position_embedding_type": ["relative_key", "relative_key_query", 7],
                   "model_type": ["gpt2", "llama", ""], "is_decoder": [True], "add_cross_attention": [True],
                   "hidden_act": ["relu6", "swish"]}
    hostile = {k: ["x", -1, None, 1e300, 2 ** 64, [], {}]
               for k in ("hidden_size", "num_hidden_layers", "num_attention_heads", "intermediate_size",
                         "vocab_size", "max_position_embeddings", "type_vocab_size")}
    hostile["layer_norm_eps"] = ["x", -1, None, [], 1e300]
    for table in (unsupported, hostile):
        for key, values in table.items():
            for v in values[:2] if quick else values:
                d = model_copy(src, tmp / "m")
                c = dict(cfg)
                c[key] = v
                (d / "config.json").write_text(json.dumps(c))
                record(t, fam, f"config {key}={v!r}: embed", embed(d), "error", subjects=["config.json", key])
                if table is unsupported:
                    record(t, fam, f"config {key}={v!r}: bench", bench(d), "error", subjects=[key])

    # tokenizer.json: token type ids past type_vocab_size.
    tok = json.loads((src / "tokenizer.json").read_text())
    for tid in (2, 1000, 2 ** 40):
        d = model_copy(src, tmp / "m")
        tk = json.loads(json.dumps(tok))
        tk["post_processor"]["single"][0]["SpecialToken"]["type_id"] = tid
        (d / "tokenizer.json").write_text(json.dumps(tk))
        # Past u32, the tokenizers crate refuses the file itself (naming it, not the value).
        subjects = ["tokenizer.json", str(tid)] if tid < 2 ** 32 else ["tokenizer.json"]
        record(t, fam, f"tokenizer type_id {tid}", embed(d), "error", subjects=subjects)


# ----------------------------------------------------------------------------------------
# Command-line flags


def probe_cli(t, binary, tmp, quick):
    fam = "CLI flags and paths"
    v = tmp / "v.npy"
    np.save(v, np.arange(6, dtype=np.float32).reshape(2, 3))
    (tmp / "outdir").mkdir(exist_ok=True)
    model = ROOT / "target" / "test-assets" / "all-MiniLM-L6-v2"
    long_bench = ["bench", "bert", "--model", "bert-base", "--seq", "128", "--runs", "1000"]
    cases = [
        (["op", "NoSuchOp", "-i", v], ["NoSuchOp"]),
        (["op", "Relu"], ["--input"]),
        (["op", "Relu", "-i", v, "-i", v], ["Relu"]),
        (["op", "Add", "-i", v], ["Add"]),
        (["op", "Softmax", "-i", v, "--attr", "axis=0", "--attr", "axis=1"], ["axis", "given twice"]),
        (["op", "Softmax", "-i", v, "--attr", "nope=1"], ["nope"]),
        (["op", "Softmax", "-i", v, "--attr", "axis=zz"], ["axis"]),
        (["op", "Softmax", "-i", v, "--attr", "axis=7"], ["axis"]),
        (["op", "Softmax", "-i", v, "--attr", "axis"], ["axis"]),
        (["op", "LayerNorm", "-i", v, "-i", v, "-i", v, "--attr", "eps=nan"], ["eps"]),
        (["op", "Relu", "-i", v, "-o", "/proc/nope/out.npy"], ["/proc/nope/out.npy"]),
        (["op", "Relu", "-i", v, "-o", tmp / "outdir"], ["outdir"]),
        (["op", "Relu", "-i", v, "-o", ""], ["output"]),
        (["op", "Relu", "-i", ""], ["input"]),
        (long_bench + ["--json", "/proc/nope/x.json"], ["/proc/nope/x.json"]),
        (long_bench + ["--chart", "/proc/nope/c.png"], ["/proc/nope/c.png"]),
        (long_bench + ["--trace", ""], ["trace"]),
        (long_bench + ["--trace", "/proc/nope/t.json"], ["/proc/nope/t.json"]),
        (long_bench + ["--json", tmp / "outdir"], ["outdir"]),
        (["bench", "bert", "--model", ""], ["model"]),
        (["bench", "bert", "--model", "no-such-preset"], ["no-such-preset"]),
        (["bench", "bert", "--model", "tiny", "--seq", "0"], ["seq"]),
        (["bench", "bert", "--model", "tiny", "--seq", "99999999999999"], ["seq"]),
        (["bench", "bert", "--model", "tiny", "--batch", "0"], ["batch"]),
        (["bench", "bert", "--model", "tiny", "--runs", "-1"], ["runs"]),
        (["bench", "bert", "--model", "tiny", "--concurrent", "0"], ["concurrent"]),
        (["embed", "--model-dir", "", "x"], ["model-dir"]),
        (["embed", "--model-dir", tmp / "no-such-dir", "x"], ["no-such-dir"]),
        (["embed", "--model-dir", model, "--batch", "0", "x"], ["batch"]),
        (["embed", "--model-dir", model, "--pad-multiple", "0", "x"], ["pad-multiple"]),
        (["--backend", "zz", "info"], ["backend"]),
        (["--impl", "zz", "info"], ["impl"]),
        (["--devices", "0", "info"], ["devices"]),
        (["--devices", "99999", "info"], ["devices"]),
        (["--precision", "zz", "info"], ["precision"]),
        (["no-such-command"], ["no-such-command"]),
    ]
    for argv, subjects in cases:
        argv = [str(a) for a in argv]
        r = spawn([binary, *argv], env=clean_env(), timeout=60)
        record(t, fam, " ".join(argv), r, "error", subjects=subjects)
    # The valid counterparts of a few of them.
    out = tmp / "ok.npy"
    r = spawn([binary, "op", "Softmax", "-i", str(v), "-o", str(out), "--attr", "axis=0"], env=clean_env())
    x = np.arange(6, dtype=np.float32).reshape(2, 3)
    e = np.exp(x - x.max(0))
    record(t, fam, "op Softmax axis=0", r, "ok", check=lambda r: same(np.load(out), (e / e.sum(0)).astype(np.float32)))
    js = tmp / "b.json"
    r = spawn([binary, "bench", "bert", "--model", "tiny", "--seq", "8", "--runs", "1", "--json", str(js)],
              env=clean_env(), timeout=300)
    record(t, fam, "bench bert tiny --json", r, "ok",
           check=lambda r: None if json.loads(js.read_text()).get("rows") else "no rows in the JSON")


# ----------------------------------------------------------------------------------------
# NPURT_* environment variables

# One valid value of every run-time knob (README.md, "Configuration").
KNOBS = {
    "NPURT_BACKEND": "cpu", "NPURT_DEVICES": "0", "NPURT_CPU_DEVICES": "2", "NPURT_THREADS": "1",
    "NPURT_IMPL": "reference", "NPURT_POOL_LIMIT": "512M", "NPURT_ALIGNMENT": "128",
    "NPURT_MEMORY_REUSE": "off", "NPURT_MAX_STREAMS": "8", "NPURT_SCHEDULING": "latency",
    "NPURT_HW_MAPPING": "auto", "NPURT_CPU_ISA": "scalar", "NPURT_CPU_PIN": "off", "NPURT_PRECISION": "f32",
}
BAD_VALUES = ["", "   ", "zzz", b"\xff\xfe", "-1", "99999999999999999999999", "1e999"]


def probe_env(t, binary, tmp, quick):
    fam = "`NPURT_*` environment values"
    v = tmp / "env.npy"
    x = np.linspace(-2, 2, 12, dtype=np.float32).reshape(3, 4)
    np.save(v, x)
    out = tmp / "env-out.npy"
    check = lambda r: same(np.load(out), np.maximum(x, 0))  # noqa: E731
    for knob, good in KNOBS.items():
        r = spawn([binary, "op", "Relu", "-i", str(v), "-o", str(out)], env=clean_env(**{knob: good}))
        record(t, fam, f"{knob}={good}", r, "ok", check=check)
        for bad in BAD_VALUES:
            env = {k.encode(): (val if isinstance(val, bytes) else val.encode()) for k, val in clean_env().items()}
            env[knob.encode()] = bad if isinstance(bad, bytes) else bad.encode()
            r = spawn([binary, "op", "Relu", "-i", str(v), "-o", str(out)], env=env)
            record(t, fam, f"{knob}={bad!r}", r, "error", subjects=[knob])


# ----------------------------------------------------------------------------------------
# Ops against NumPy through `npurt op`, on each tier of the CPU backend and over acl-emu


def f64(fn):
    """A reference computed in f64 and rounded once to the first operand's dtype."""
    def ref(xs, attrs):
        with np.errstate(all="ignore"):
            return fn([a.astype(np.float64) for a in xs], attrs).astype(xs[0].dtype)
    return ref


def softmax(xs, attrs):
    x, axis = xs[0], int(attrs.get("axis", -1))
    e = np.exp(x - x.max(axis=axis, keepdims=True, initial=-np.inf))
    return e / e.sum(axis=axis, keepdims=True)


def layernorm(xs, attrs):
    x, g, b = xs
    m = x.mean(-1, keepdims=True)
    var = ((x - m) ** 2).mean(-1, keepdims=True)
    return (x - m) / np.sqrt(var + float(attrs.get("eps", 1e-5))) * g + b


def cast_i32(xs, attrs):
    x = xs[0].astype(np.float64)
    with np.errstate(all="ignore"):
        y = np.trunc(np.nan_to_num(x, nan=0.0, posinf=2.0 ** 31, neginf=-2.0 ** 31))
    return np.clip(y, -2.0 ** 31, 2.0 ** 31 - 1).astype(np.int32)


def reduce(fn):
    def ref(xs, attrs):
        axes = tuple(int(a) for a in attrs["axes"].split(",")) if attrs.get("axes") else None
        with np.errstate(all="ignore"):
            return fn(xs[0].astype(np.float64), axis=axes, keepdims=True).astype(xs[0].dtype)
    return ref


UNARY_SHAPES = [(), (0,), (5,), (2, 3), (2, 0, 3), (4, 1, 8)]
BINARY_SHAPES = [((2, 3), (2, 3)), ((2, 3), (3,)), ((2, 1, 4), (3, 1)), ((), (2, 2)), ((0, 3), (1, 3)),
                 ((1,), ())]
SPECIALS = [np.nan, np.inf, -np.inf, -0.0, 3e38, -3e38, 88.8, -100.0]


def op_cases(rng, quick):
    """(op, inputs, attrs, reference or None for "must be refused", tolerance)."""
    def arr(shape, dt=np.float32, special=True, scale=2.0):
        a = (rng.standard_normal(shape) * scale).astype(dt)
        if special and a.size:
            with np.errstate(over="ignore"):
                for _ in range(max(1, a.size // 6)):
                    a.flat[int(rng.integers(a.size))] = SPECIALS[int(rng.integers(len(SPECIALS)))]
        return a

    cases = []
    unary = {"Relu": lambda xs, a: np.maximum(xs[0], 0), "Tanh": f64(lambda xs, a: np.tanh(xs[0])),
             "Exp": f64(lambda xs, a: np.exp(xs[0])), "Sqrt": f64(lambda xs, a: np.sqrt(xs[0]))}
    for name, ref in unary.items():
        for shape in UNARY_SHAPES:
            for dt in (np.float32, np.float16):
                cases.append((name, [arr(shape, dt)], {}, ref, 1e-3 if dt == np.float16 else 2e-6))
    binary = {"Add": np.add, "Sub": np.subtract, "Mul": np.multiply, "Div": np.divide}
    for name, fn in binary.items():
        ref = f64(lambda xs, a, fn=fn: fn(xs[0], xs[1]))
        for sa, sb in BINARY_SHAPES:
            cases.append((name, [arr(sa), arr(sb)], {}, ref, 1e-6))
        cases.append((name, [arr((2, 3)), arr((4,))], {}, None, 0))
        cases.append((name, [arr((2, 3)), arr((2, 3), np.float16)], {}, None, 0))
        ia = rng.integers(-2 ** 31, 2 ** 31, (3, 4)).astype(np.int32)
        ib = rng.integers(-5, 5, (3, 4)).astype(np.int32)
        if name == "Div":
            iref = lambda xs, a: np.where(xs[1] == 0, 0, np.fix(xs[0].astype(np.float64) / np.where(xs[1] == 0, 1, xs[1]))).astype(np.int64).astype(np.int32)  # noqa: E731
        else:
            iref = lambda xs, a, fn=fn: fn(xs[0].astype(np.int64), xs[1].astype(np.int64)).astype(np.int32)  # noqa: E731
        cases.append((name, [ia, ib], {}, iref, 0))
    for shape in [(2, 5), (3, 1), (0, 4), (2, 3, 4)]:
        for axis in (-1, 0):
            cases.append(("Softmax", [arr(shape)], {"axis": axis}, f64(softmax), 1e-5))
    cases.append(("Softmax", [arr((2, 3))], {"axis": 2}, None, 0))
    for shape in [(2, 8), (1, 1), (3, 2, 16)]:
        h = shape[-1]
        cases.append(("LayerNorm", [arr(shape), arr((h,), special=False), arr((h,), special=False)],
                      {"eps": 1e-5}, f64(layernorm), 1e-4))
    cases.append(("LayerNorm", [arr((2, 8)), arr((7,)), arr((8,))], {}, None, 0))
    mm = [((2, 3), (3, 4)), ((2, 2, 3), (3, 5)), ((0, 3), (3, 4)), ((2, 0), (0, 3)), ((3, 1, 4, 6), (2, 6, 2))]
    for sa, sb in mm:
        a, b = arr(sa, special=False), arr(sb, special=False)
        if a.size and rng.random() < 0.5:
            a.flat[0] = np.nan
        cases.append(("MatMul", [a, b], {}, f64(lambda xs, at: np.matmul(xs[0], xs[1])), 1e-4))
    cases.append(("MatMul", [arr((3,)), arr((3,))], {}, None, 0))
    cases.append(("MatMul", [arr((2, 3)), arr((4, 5))], {}, None, 0))
    for shape, perm in [((2, 3), "1,0"), ((2, 3, 4), "2,0,1"), ((0, 3, 1), "1,2,0")]:
        p = tuple(int(i) for i in perm.split(","))
        cases.append(("Permute", [arr(shape)], {"perm": perm}, lambda xs, a, p=p: np.transpose(xs[0], p), 0))
    cases.append(("Permute", [arr((2, 3))], {"perm": "0,0"}, None, 0))
    for shape, axes in [((2, 3), "1"), ((2, 3, 4), "0,2"), ((0, 3), "0"), ((4, 5), "")]:
        at = {"axes": axes} if axes else {}
        cases.append(("ReduceSum", [arr(shape)], at, reduce(np.sum), 1e-5))
        cases.append(("ReduceMean", [arr(shape)], at, reduce(np.mean), 1e-5))
    cx = np.array([2.7, -2.7, 3e9, -3e9, np.nan, np.inf, -np.inf, 0.5], np.float32)
    cases.append(("Cast", [cx], {"to": "i32"}, cast_i32, 0))
    data = arr((5, 3))
    for idx, ok in (([0, 4, -1, 2], True), ([5], False), ([-6], False)):
        ind = np.array(idx, np.int64)
        cases.append(("Gather", [data, ind], {"axis": 0}, (lambda xs, a: np.take(xs[0], xs[1], axis=0)) if ok else None, 0))
    if quick:
        cases = cases[::4]
    return cases


def acl_toolkit(tmp):
    """A toolkit directory whose three CANN libraries are acl-emu, or None."""
    for lib in (os.environ.get("ACL_EMU_LIB"), ROOT / "target/release/libacl_emu.so", ROOT / "target/debug/libacl_emu.so"):
        if lib and pathlib.Path(lib).is_file():
            root = tmp / "acl-toolkit"
            (root / "lib64").mkdir(parents=True, exist_ok=True)
            for name in ("libascendcl.so", "libnnopbase.so", "libopapi.so"):
                link = root / "lib64" / name
                if not link.exists():
                    link.symlink_to(pathlib.Path(lib).resolve())
            return root
    return None


def probe_ops(t, binary, tmp, quick):
    fam = "ops against NumPy (`npurt op`, 3 CPU tiers + acl-emu)"
    rng = np.random.default_rng(7)
    # Three draws of every case (other values, other special values where they fall).
    cases = [c for _ in range(1 if quick else 3) for c in op_cases(rng, quick)]
    configs = [("cpu", tier, {}) for tier in ("reference", "generic", "fast")]
    kit = acl_toolkit(tmp)
    if kit is None:
        t.skipped[fam + " over acl-emu"] = "libacl_emu.so not found (cargo build -p acl-emu)"
    else:
        for soc in ("Ascend910B2",):
            configs.append(("acl", "auto", {"ASCEND_TOOLKIT_HOME": str(kit), "ACL_EMU_SOC": soc}))
    out = tmp / "op-out.npy"
    for backend, tier, extra in configs:
        for i, (op, xs, attrs, ref, tol) in enumerate(cases):
            argv = [binary, "op", op, "-o", str(out), "--backend", backend, "--impl", tier]
            for j, x in enumerate(xs):
                p = tmp / f"op-in{j}.npy"
                np.save(p, x)
                argv += ["-i", str(p)]
            for k, val in attrs.items():
                argv += ["--attr", f"{k}={val}"]
            if out.exists():
                out.unlink()
            r = spawn(argv, env=clean_env(**extra), timeout=120)
            name = f"{backend}/{tier} {op} {[x.shape for x in xs]} {[x.dtype.name for x in xs]} {attrs}"
            if ref is None:
                record(t, fam, name, r, "error", subjects=[op])
            else:
                want = ref(xs, attrs)
                atol = max(tol, 1e-30)
                if op.startswith("Reduce"):
                    # A sum of terms up to 3e38 that cancel is exact only to f64's rounding of
                    # its largest terms, whatever the order of summation (NumPy's is pairwise).
                    fin = xs[0][np.isfinite(xs[0])].astype(np.float64)
                    atol = max(atol, 1e-14 * float(np.abs(fin).sum()))
                record(t, fam, name, r, "ok", check=lambda r, want=want, tol=tol, atol=atol: same(
                    np.load(out), np.asarray(want), rtol=max(tol, 1e-7), atol=atol))


# ----------------------------------------------------------------------------------------
# The Python package: misuse, 0-d arrays, graphs; memory over long loops

PY_CASES = [
    # (name, code, expect, subjects). "ok" code asserts its own result.
    ("Value of another graph", """
g1, g2 = npurt.Graph(), npurt.Graph()
x = g1.input('x', (2,)); y = g2.input('y', (3, 3))
g2.node('Relu', [x])""", "error", ["graph"]),
    ("duplicate input names", """
g = npurt.Graph(); a = g.input('dup_in', (2,)); b = g.input('dup_in', (2,))""", "error", ["dup_in"]),
    ("duplicate node names", """
g = npurt.Graph(); a = g.input('x', (2,))
g.node('Relu', [a], name='dup_node'); g.node('Relu', [a], name='dup_node')""", "error", ["dup_node"]),
    ("duplicate output names", """
g = npurt.Graph(); a = g.input('x', (2,)); r = g.node('Relu', [a], name='r')
g.output(r, r)""", "error", ["r"]),
    ("0-d asarray", """
t = npurt.asarray(np.array(2.5, np.float32)); a = t.numpy()
assert a.shape == () and a == 2.5, a""", "ok", []),
    ("0-d Tensor", """
t = npurt.Tensor(()); assert tuple(t.shape) == () and t.numpy().shape == ()""", "ok", []),
    ("0-d execute", """
r = npurt.execute('Add', [np.array(2.0, np.float32), np.array(3.0, np.float32)])
a = r.output.numpy(); assert a.shape == () and a == 5.0, a""", "ok", []),
    ("0-d graph", """
g = npurt.Graph(); a = g.input('a', ()); b = g.input('b', (2,)); g.output(g.node('Add', [a, b]))
c = g.compile(); o = c.run({'a': np.array(1.5, np.float32), 'b': np.array([1, 2], np.float32)})[0].numpy()
assert o.shape == (2,) and list(o) == [2.5, 3.5], o""", "ok", []),
    ("non-contiguous input", """
a = np.arange(24, dtype=np.float32).reshape(4, 6)[:, ::2]
o = npurt.asarray(a).numpy(); assert np.array_equal(o, a)""", "ok", []),
    ("complex array", "npurt.asarray(np.zeros(3, np.complex64))", "error", ["complex64"]),
    ("object array", "npurt.asarray(np.array([object()]))", "error", ["object"]),
    ("string array", "npurt.asarray(np.array(['a']))", "error", ["<U1"]),
    ("unknown op", "npurt.execute('NoSuchOp', [np.zeros(2, np.float32)])", "error", ["NoSuchOp"]),
    ("wrong operand count", "npurt.execute('Add', [np.zeros(2, np.float32)])", "error", ["Add"]),
    ("attribute in another case", "npurt.execute('Softmax', [np.zeros((2, 2), np.float32)], axis=0, AXIS=1)",
     "error", ["axis"]),
    ("unknown attribute", "npurt.execute('Softmax', [np.zeros((2, 2), np.float32)], axes=0)", "error", ["axes"]),
    ("graph run: wrong shape", """
g = npurt.Graph(); a = g.input('inp', (2,)); g.output(g.node('Relu', [a]))
g.compile().run({'inp': np.zeros(3, np.float32)})""", "error", ["inp"]),
    ("graph run: missing input", """
g = npurt.Graph(); a = g.input('inp', (2,)); b = g.input('other', (2,)); g.output(g.node('Add', [a, b]))
g.compile().run({'inp': np.zeros(2, np.float32)})""", "error", ["other"]),
    ("tensor of another runtime", """
r1, r2 = npurt.Runtime(backend='cpu'), npurt.Runtime(backend='cpu')
a, b = r1.asarray(np.zeros(2, np.float32)), r2.asarray(np.zeros(2, np.float32)); r1.execute('Add', [a, b])""",
     "error", ["another runtime"]),
    ("huge shape", "npurt.Tensor((2 ** 40, 2 ** 40))", "error", ["2"]),
    ("negative dim", "npurt.Tensor((2, -1))", "error", ["-1"]),
]

MEMORY_CASES = [
    ("100,000 eager ops", """
a = npurt.asarray(np.ones((16, 16), np.float32)); b = npurt.asarray(np.ones((16, 16), np.float32))
def step():
    npurt.execute('Add', [a, b])
for _ in range(2000): step()
r0 = rss()
for _ in range(N): step()
grow = rss() - r0
assert grow < 32, f'RSS grew {grow:.1f} MiB'""", 100_000),
    ("2,000 compile/run/free cycles", """
def step():
    g = npurt.Graph(); x = g.input('x', (4, 8)); w = g.constant('w', np.ones((8, 8), np.float32))
    g.output(g.node('Relu', [g.node('MatMul', [x, w])]))
    c = g.compile(); c.run({'x': np.ones((4, 8), np.float32)}); del c, g
for _ in range(100): step()
r0 = rss()
for _ in range(N): step()
grow = rss() - r0
assert grow < 32, f'RSS grew {grow:.1f} MiB'""", 2_000),
]

PY_PRELUDE = """import numpy as np, npurt
def rss():
    for line in open('/proc/self/status'):
        if line.startswith('VmRSS'):
            return int(line.split()[1]) / 1024
"""


def python_ok():
    r = subprocess.run([sys.executable, "-c", "import npurt"], capture_output=True, text=True, env=clean_env())
    return None if r.returncode == 0 else r.stderr.strip().splitlines()[-1:]


def probe_python(t, binary, tmp, quick):
    fam = "Python API misuse and 0-d arrays"
    why = python_ok()
    if why:
        t.skipped[fam] = f"npurt is not importable by {sys.executable}: {why}"
        return
    for name, code, expect, subjects in PY_CASES:
        r = spawn([sys.executable, "-c", PY_PRELUDE + code], env=clean_env(), timeout=120, cwd=tmp)
        record(t, fam, name, r, expect, subjects=subjects)


def probe_memory(t, binary, tmp, quick):
    fam = "memory over long loops (Python)"
    why = python_ok()
    if why:
        t.skipped[fam] = f"npurt is not importable by {sys.executable}: {why}"
        return
    for name, code, n in MEMORY_CASES:
        n = n // 20 if quick else n
        r = spawn([sys.executable, "-c", PY_PRELUDE + f"N = {n}\n" + code], env=clean_env(), timeout=600, cwd=tmp)
        outcome, detail = classify(r, "ok", rss_bound_mib=4096)
        if outcome == "wrong" and "RSS grew" in r.err:
            outcome = "leak"
        t.add(fam, outcome, name, detail)


FAMILIES = {"npy": probe_npy, "model": probe_model, "cli": probe_cli, "env": probe_env, "ops": probe_ops,
            "python": probe_python, "memory": probe_memory}


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    default_bin = ROOT / "target" / "release" / "npurt"
    if not default_bin.exists():
        default_bin = ROOT / "target" / "debug" / "npurt"
    ap.add_argument("--bin", default=str(default_bin), help="the npurt binary (default: %(default)s)")
    ap.add_argument("--families", default=",".join(FAMILIES), help="comma-separated (default: all)")
    ap.add_argument("--json", help="write the counts and the findings to this file")
    ap.add_argument("--quick", action="store_true", help="a quarter of the cases, for a smoke run")
    args = ap.parse_args()
    if not os.access(args.bin, os.X_OK):
        sys.exit(f"{args.bin} is not an executable: cargo build --release -p npurt-cli")
    fams = [f for f in args.families.split(",") if f]
    unknown = [f for f in fams if f not in FAMILIES]
    if unknown:
        sys.exit(f"unknown families {unknown}; known: {', '.join(FAMILIES)}")
    t = Tally()
    start = time.monotonic()
    with tempfile.TemporaryDirectory(prefix="npurt-probe-") as d:
        for f in fams:
            sub = pathlib.Path(d) / f
            sub.mkdir()
            t0 = time.monotonic()
            FAMILIES[f](t, args.bin, sub, args.quick)
            print(f"probe: {f} done in {time.monotonic() - t0:.0f} s", file=sys.stderr)
    print(t.table())
    for fam, why in t.skipped.items():
        print(f"skipped: {fam}: {why}")
    for n in t.notes:
        print(n)
    print(f"{sum(sum(r.values()) for r in t.rows.values())} cases in {time.monotonic() - start:.0f} s with {args.bin}")
    if args.json:
        pathlib.Path(args.json).write_text(json.dumps({"rows": t.rows, "skipped": t.skipped, "findings": t.notes},
                                                      indent=1))
    bad = sum(r[k] for r in t.rows.values() for k in BAD)
    sys.exit(1 if bad else 0)


if __name__ == "__main__":
    main()
