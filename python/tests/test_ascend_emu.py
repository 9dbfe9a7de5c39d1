"""The Ascend backend from Python, over acl-emu (a host library exporting CANN's symbols).

As the Rust tests arrange it: a fake toolkit whose lib64/ links libascendcl.so,
libnnopbase.so and libopapi.so to libacl_emu.so, named by ASCEND_TOOLKIT_HOME, with
NPURT_BACKEND=acl. Each case runs Python in a subprocess (the loader opens the emulator
once per process). Skips, with the reason, when libacl_emu.so has not been built
(`cargo build -p acl-emu`, or ACL_EMU_LIB).
"""

from __future__ import annotations

import os
import pathlib
import subprocess
import sys

import pytest

from conftest import emu_lib

HERE = pathlib.Path(__file__).resolve().parent


@pytest.fixture(scope="module")
def toolkit(tmp_path_factory: pytest.TempPathFactory) -> pathlib.Path:
    lib = emu_lib()
    if lib is None:
        pytest.skip("libacl_emu.so not found under target/debug or target/release "
                    "(run `cargo build -p acl-emu` or set ACL_EMU_LIB)")
    root = tmp_path_factory.mktemp("acl-toolkit")
    (root / "lib64").mkdir()
    for name in ("libascendcl.so", "libnnopbase.so", "libopapi.so"):
        (root / "lib64" / name).symlink_to(lib)
    return root


def run(toolkit: pathlib.Path, args: list, **env: str) -> subprocess.CompletedProcess:
    e = {k: v for k, v in os.environ.items()
         if k not in ("NPURT_BACKEND", "NPURT_ACL_LIB_DIR", "ASCEND_HOME_PATH", "ACL_EMU_DEVICES", "ACL_EMU_FAIL",
                      "ACL_EMU_SOC")}
    e.update({"ASCEND_TOOLKIT_HOME": str(toolkit), "NPURT_BACKEND": "acl"})
    e.update(env)
    return subprocess.run([sys.executable, *args], env=e, capture_output=True, text=True, timeout=600, cwd=HERE)


@pytest.mark.parametrize("soc", ["Ascend910B2", "Ascend910A"])
def test_portable_script_runs_unchanged_on_ascend(toolkit: pathlib.Path, soc: str) -> None:
    p = run(toolkit, ["portable_api.py"], ACL_EMU_SOC=soc)
    print(p.stdout[-4000:], p.stderr[-4000:])
    assert p.returncode == 0
    assert f"backend acl device {soc}" in p.stdout
    assert "PORTABLE API OK" in p.stdout


SNIPPET = r"""
import numpy as np, npurt
assert npurt.backend() == "acl", npurt.backend()
assert not npurt.supports_zero_copy()
x = npurt.asarray(np.ones((4, 4), np.float32))
s = npurt.Stream()
with npurt.stream_scope(s):
    npurt.execute("Add", [x, x])
try:
    s.synchronize()
except npurt.DeviceError as e:
    print("DeviceError", e.stream, e.submission, e)
else:
    raise SystemExit("no error")
"""


def test_async_failure_is_a_device_error(toolkit: pathlib.Path) -> None:
    p = run(toolkit, ["-c", SNIPPET], ACL_EMU_FAIL="aclrtSynchronizeStream:1:507011")
    print(p.stdout, p.stderr[-3000:])
    assert p.returncode == 0 and "DeviceError" in p.stdout


def test_absent_toolkit_is_backend_unavailable(tmp_path: pathlib.Path) -> None:
    code = ("import npurt\ntry:\n    npurt.Runtime(backend='acl')\nexcept npurt.BackendUnavailableError as e:\n"
            "    print('unavailable:', e)\n")
    e = {k: v for k, v in os.environ.items() if k not in ("NPURT_ACL_LIB_DIR", "ASCEND_HOME_PATH")}
    e["ASCEND_TOOLKIT_HOME"] = str(tmp_path)
    p = subprocess.run([sys.executable, "-c", code], env=e, capture_output=True, text=True, timeout=120)
    print(p.stdout, p.stderr[-2000:])
    assert p.returncode == 0 and "unavailable:" in p.stdout
