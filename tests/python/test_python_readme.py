"""python/README.md as written: its ```sh commands of build/bin/ run in a scratch folder laid out as
the project root (build/bin and configs/ linked), then each ```python block runs there as a script,
in order; the blocks that are parts of a script, and the commands that set up an environment, are
listed below with where they run instead. A block or command in neither list fails the test, so the
lists follow the README."""

import importlib.util
import os
import re
import shlex
import subprocess
import sys

import pytest

import volshard

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
README = os.path.join(ROOT, "python", "README.md")

# Python blocks that are parts of a script, by their first line: not run here, and why.
FRAGMENTS = {
    "import torch.distributed as dist, volshard": "the outline of a DDP script, whose model and epochs are the "
                                                  "reader's (examples/train_ddp.py in full: test_ddp_example.py)",
    "scaler = torch.amp.GradScaler(device.type)": "the inside of a training loop (test_amp_recipe.py runs it)",
}
# Commands other than build/bin/'s: not run here, and why.
ELSEWHERE = {
    "pip install .": "python_wheel_pytest",
    "cd /tmp && python -c 'import volshard; print(volshard.__version__)'": "python_wheel_pytest imports the wheel",
    "volshard --help": "python_wheel_pytest runs the wheel's commands",
    "make python": "the build that runs this test",
    "PYTHONPATH=build/python $(scripts/pyenv.sh --path)/bin/python -c 'import volshard'": "this test's import",
    "PYTHONPATH=build/python $(scripts/pyenv.sh --path)/bin/python -m volshard.audit --nproc-per-node 2 --json "
    "audit.json --png audit.png tests/audit/torch_set_epoch.py --no-set-epoch": "python_audit_pytest's corpus",
}


def doc_commands():
    """tests/tools/doc_commands.py: the docs' ```sh lines, parsed as that test parses them."""
    spec = importlib.util.spec_from_file_location("doc_commands", os.path.join(ROOT, "tests", "tools",
                                                                              "doc_commands.py"))
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def python_blocks(text):
    return [m.group(1) for m in re.finditer(r"^```python\n(.*?)^```", text, re.S | re.M)]


def test_every_block_and_command_is_run_or_listed():
    text = open(README).read()
    firsts = [b.splitlines()[0] for b in python_blocks(text)]
    assert set(FRAGMENTS) <= set(firsts), set(FRAGMENTS) - set(firsts)
    commands = doc_commands().sh_blocks(text)
    assert set(ELSEWHERE) <= set(commands), set(ELSEWHERE) - set(commands)
    for command in commands:
        assert command.startswith("build/bin/") or command in ELSEWHERE, command


def test_the_readmes_commands_and_scripts_run_as_written(volshard_bin, tmp_path):
    pytest.importorskip("monai")  # the README's validation uses MONAI's DiceMetric
    text = open(README).read()
    os.makedirs(tmp_path / "build")
    os.symlink(os.path.dirname(os.path.abspath(volshard_bin)), tmp_path / "build" / "bin")
    os.symlink(os.path.join(ROOT, "configs"), tmp_path / "configs")
    for command in doc_commands().sh_blocks(text):
        if command.startswith("build/bin/"):
            p = subprocess.run(shlex.split(command), cwd=tmp_path, capture_output=True, text=True, timeout=600)
            assert p.returncode == 0, f"{command}\n{p.stderr[-3000:]}"
    # The volshard this test imports, wherever it is (build/python, or an installed wheel).
    package_root = os.path.dirname(os.path.dirname(os.path.abspath(volshard.__file__)))
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([package_root] + [
        os.path.abspath(p) for p in os.environ.get("PYTHONPATH", "").split(os.pathsep) if p]))
    for k in ("RANK", "WORLD_SIZE", "LOCAL_RANK", "MASTER_ADDR", "MASTER_PORT"):
        env.pop(k, None)
    ran = 0
    for block in python_blocks(text):
        if block.splitlines()[0] in FRAGMENTS:
            continue
        p = subprocess.run([sys.executable, "-c", block], cwd=tmp_path, env=env, capture_output=True, text=True,
                           timeout=600)
        assert p.returncode == 0, f"python/README.md's block:\n{block}\n{p.stdout[-2000:]}\n{p.stderr[-3000:]}"
        ran += 1
    assert ran >= 3, f"ran {ran} blocks"  # the split and validation, MONAI's keys, the audit's check()
