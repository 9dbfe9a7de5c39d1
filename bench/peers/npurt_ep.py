"""ONNX Runtime sessions with npurt's execution provider, for the peer scripts' `ep` variant
(`ort_bert.py --serve --variant ep --ep-precision P`, driven by
`npurt bench bert --compare-ort --ort-variants ...,ep`).

The library is $NPURT_ORT_EP_LIB, else target/release/libnpurt_ort_ep.so of this checkout
(`cargo build -p npurt-ort-ep --release`), else the Python package's (`npurt.ort`).
"""

import os

EP_NAME = "NpurtExecutionProvider"
REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def library_path():
    env = os.environ.get("NPURT_ORT_EP_LIB")
    if env:
        return env
    built = os.path.join(REPO, "target", "release", "libnpurt_ort_ep.so")
    if os.path.isfile(built):
        return built
    try:
        import npurt.ort
    except ImportError as e:
        raise SystemExit(f"no npurt EP library: set NPURT_ORT_EP_LIB, build target/release/libnpurt_ort_ep.so "
                         f"or install the npurt package ({e})")
    return npurt.ort.get_library_path()


def ep_session(path, threads, precision):
    """An InferenceSession of `path` with every node npurt claims on its EP at `precision`
    (the EP option) and ORT's CPU EP for the rest, at `threads` intra-op threads; the CPU
    fallback of a failing run is off, so a failure is the EP's error."""
    import onnxruntime as ort
    ort.register_execution_provider_library(EP_NAME, library_path())
    devices = [d for d in ort.get_ep_devices() if d.ep_name == EP_NAME]
    if not devices:
        raise SystemExit(f"{EP_NAME} offers no device")
    so = ort.SessionOptions()
    so.intra_op_num_threads = threads
    so.inter_op_num_threads = 1
    so.add_provider_for_devices(devices, {"precision": precision})
    sess = ort.InferenceSession(path, sess_options=so)
    sess.disable_fallback()
    return sess
