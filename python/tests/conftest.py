"""Fixtures: a CPU runtime per test module, and where the test assets live."""

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


def emu_lib() -> "pathlib.Path | None":
    """libacl_emu.so: $ACL_EMU_LIB, else the workspace's debug or release build."""
    env = os.environ.get("ACL_EMU_LIB")
    if env:
        return pathlib.Path(env) if pathlib.Path(env).is_file() else None
    for profile in ("debug", "release"):
        p = REPO / "target" / profile / "libacl_emu.so"
        if p.is_file():
            return p
    return None
