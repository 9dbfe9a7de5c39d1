"""scripts/probe.py, the adversarial probe of docs/RELIABILITY.md, in its quick form: hostile
.npy files, CLI flags, `NPURT_*` values, ops against NumPy on every CPU tier and over acl-emu,
and Python misuse, each case in a process of its own. The test fails when any case is a panic,
a hang, a crash, a wrong answer or an unbounded read (the probe's exit status), and prints the
table either way.

It needs the `npurt` binary that `cargo test --workspace` builds (target/debug/npurt, or
$NPURT_BIN) and skips with the reason when there is none. The model-directory family (the
MiniLM model, a few seconds per case in a debug build) and the memory loops run only in the
full probe (`python scripts/probe.py`, see docs/RELIABILITY.md).
"""

from __future__ import annotations

import os
import pathlib
import subprocess
import sys

import pytest

REPO = pathlib.Path(__file__).resolve().parents[2]


def npurt_bin() -> "pathlib.Path | None":
    env = os.environ.get("NPURT_BIN")
    if env:
        return pathlib.Path(env) if pathlib.Path(env).is_file() else None
    for profile in ("debug", "release"):
        p = REPO / "target" / profile / "npurt"
        if p.is_file():
            return p
    return None


def test_the_quick_probe_finds_no_panic_hang_crash_wrong_answer_or_leak() -> None:
    binary = npurt_bin()
    if binary is None:
        pytest.skip("no npurt binary under target/debug or target/release (cargo build -p npurt-cli, or set NPURT_BIN)")
    p = subprocess.run([sys.executable, str(REPO / "scripts" / "probe.py"), "--quick", "--bin", str(binary),
                        "--families", "npy,cli,env,ops,python"], capture_output=True, text=True, timeout=1800)
    print(p.stdout[-6000:], p.stderr[-3000:])
    assert "| **all** |" in p.stdout, "the probe printed no table"
    assert p.returncode == 0, "the probe found a panic, hang, crash, wrong answer or leak (listed above)"
