"""Fixtures: a CPU runtime per test module, and where the test assets and the built libraries
(the Ascend emulator, the ONNX Runtime EP) live."""

from __future__ import annotations

import os
import pathlib

import pytest

import npurt

REPO = pathlib.Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def rt() -> npurt.Runtime:
    """A CPU runtime of the test module's own (two logical devices, for `.to(device)`)."""
    return npurt.Runtime(backend="cpu", cpu_devices=2, env=False)


def _built(name: str, env: str, profiles: "tuple[str, ...]") -> "pathlib.Path | None":
    """`name` as $`env` names it (None when that is not a file), else the first of the
    workspace's `profiles` builds that has it."""
    given = os.environ.get(env)
    if given:
        return pathlib.Path(given) if pathlib.Path(given).is_file() else None
    for profile in profiles:
        p = REPO / "target" / profile / name
        if p.is_file():
            return p
    return None


def emu_lib() -> "pathlib.Path | None":
    """libacl_emu.so: $ACL_EMU_LIB, else the workspace's debug or release build."""
    return _built("libacl_emu.so", "ACL_EMU_LIB", ("debug", "release"))


def ep_lib() -> "pathlib.Path | None":
    """libnpurt_ort_ep.so: $NPURT_ORT_EP_LIB, else the workspace's release or debug build."""
    return _built("libnpurt_ort_ep.so", "NPURT_ORT_EP_LIB", ("release", "debug"))
