"""Fixtures of the Python module's tests. ctest runs them with
PYTHONPATH=<build>/python and VOLSHARD_BIN=<build>/bin (see tests/CMakeLists.txt)."""

import os
import subprocess

import pytest


@pytest.fixture(scope="session")
def volshard_bin():
    path = os.path.join(os.environ.get("VOLSHARD_BIN", "build/bin"), "volshard")
    if not os.path.exists(path):
        pytest.skip(f"no volshard binary at {path} (set VOLSHARD_BIN)")
    return path


@pytest.fixture(scope="session")
def synth_data(tmp_path_factory, volshard_bin):
    """6 MONAI-style synthetic image/label pairs, 64^3 (synth needs > 60)."""
    out = tmp_path_factory.mktemp("synth")
    subprocess.run([volshard_bin, "synth", "--out", str(out), "--count", "6", "--size", "64", "--seed", "0"],
                   check=True, stdout=subprocess.DEVNULL)
    return str(out)


@pytest.fixture(scope="session")
def ct_data(tmp_path_factory, volshard_bin):
    """A Decathlon-style CT folder (`volshard synth --kind ct`): 4 cases, 64 x 64 x 16 at ~0.8 x 0.8 x 5 mm."""
    out = tmp_path_factory.mktemp("ct")
    subprocess.run([volshard_bin, "synth", "--kind", "ct", "--out", str(out), "--count", "4", "--size", "64",
                    "--seed", "0"], check=True, stdout=subprocess.DEVNULL)
    return str(out)


@pytest.fixture(scope="session")
def configs_dir():
    return os.path.join(os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))), "configs")


@pytest.fixture
def meta_device(monkeypatch):
    """Lets "meta" (tensors without data) stand in for a GPU: users are refused it, the GPU path's code runs on it."""
    import volshard.loader
    monkeypatch.setattr(volshard.loader, "_BATCH_DEVICE_TYPES", ("cpu", "cuda", "meta"))


@pytest.fixture
def reserved_port():
    """Yields a free port (a str for MASTER_PORT) held until the test ends: bound with SO_REUSEADDR and
    not listening, so that no other process (ctest runs tests side by side) is given it meanwhile,
    while the ranks' rendezvous store, binding with SO_REUSEADDR, still listens on it (as `volshard audit` holds its
    ranks' port)."""
    from volshard.audit.launch import reserve_port
    with reserve_port() as s:
        yield str(s.getsockname()[1])
