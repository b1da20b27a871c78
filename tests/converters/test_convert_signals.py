"""SIGINT, SIGTERM and SIGKILL in the middle of `dspark convert`: the
destination never appears half-written.

The convert runs in a subprocess. As soon as its temporary folder holds a
shard being written, the test freezes it (SIGSTOP), checks it really is
mid-write, sends the signal and lets it run on (SIGCONT), so the signal
always lands mid-conversion however fast the machine is.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

torch = pytest.importorskip("torch")

from dspark.examples.fabricate import DraftSpec, draft_config, make_tensors, tensor_shapes, write_safetensors  # noqa: E402

pytestmark = pytest.mark.skipif(not hasattr(signal, "SIGSTOP"), reason="needs POSIX signals")

# About 220 MB of fp32: long enough to be caught mid-write.
MEDIUM = DraftSpec(
    hidden_size=1024, intermediate_size=4096, num_hidden_layers=2, num_attention_heads=8,
    q_lora_rank=512, kv_lora_rank=256, qk_nope_head_dim=64, qk_rope_head_dim=32, v_head_dim=64,
    vocab_size=16384, target_hidden_size=1024, target_num_hidden_layers=20,
    target_layer_ids=(1, 5, 9, 13, 17), markov_rank=128, confidence_hidden=8,
)


@pytest.fixture(scope="module")
def source(tmp_path_factory: pytest.TempPathFactory) -> Path:
    folder = tmp_path_factory.mktemp("medium") / "src"
    folder.mkdir()
    tensors = make_tensors(tensor_shapes(MEDIUM), dtype="float32", seed=1)
    write_safetensors(folder, {"model." + n: t for n, t in tensors.items()})
    (folder / "config.json").write_text(json.dumps(draft_config(MEDIUM)))
    return folder


def start(source: Path, destination: Path) -> subprocess.Popen:
    return subprocess.Popen(
        [sys.executable, "-m", "dspark.cli.main", "convert", str(source), str(destination), "--dtype", "bfloat16", "--quiet"],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
    )


def freeze_mid_write(process: subprocess.Popen, destination: Path) -> Path:
    """Stop the process once it is writing a shard; return its temporary folder."""
    temporary = destination.parent / f".{destination.name}.dspark-tmp-{process.pid}"
    existed = destination.exists()
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        if (temporary / "model.safetensors").exists():
            os.kill(process.pid, signal.SIGSTOP)
            # still mid-write: nothing has been moved into place yet
            assert temporary.is_dir(), "the conversion finished before it could be interrupted"
            assert destination.exists() == existed
            return temporary
        if process.poll() is not None:
            pytest.fail(f"convert exited early ({process.returncode}): {process.stderr.read()}")
        time.sleep(0.0005)
    process.kill()
    pytest.fail("convert never started writing")


def interrupt(process: subprocess.Popen, signum: int) -> tuple[int, str]:
    os.kill(process.pid, signum)
    os.kill(process.pid, signal.SIGCONT)
    _, stderr = process.communicate(timeout=60)
    return process.returncode, stderr


def leftovers(destination: Path) -> list[str]:
    return sorted(p.name for p in destination.parent.iterdir() if p.name.startswith(f".{destination.name}."))


def test_sigint_mid_convert_removes_the_temporary_folder(source: Path, tmp_path: Path) -> None:
    destination = tmp_path / "out"
    process = start(source, destination)
    freeze_mid_write(process, destination)
    code, stderr = interrupt(process, signal.SIGINT)
    assert code == 130, stderr
    assert "Traceback" not in stderr
    assert not destination.exists()
    assert leftovers(destination) == []


def test_sigterm_mid_convert_removes_the_temporary_folder(source: Path, tmp_path: Path) -> None:
    destination = tmp_path / "out"
    process = start(source, destination)
    freeze_mid_write(process, destination)
    code, stderr = interrupt(process, signal.SIGTERM)
    assert code in (-signal.SIGTERM, 128 + signal.SIGTERM), stderr  # ends by SIGTERM, as unhandled
    assert "Traceback" not in stderr
    assert not destination.exists()
    assert leftovers(destination) == []


def test_sigint_with_force_keeps_the_previous_destination(source: Path, tmp_path: Path) -> None:
    destination = tmp_path / "out"
    subprocess.run(
        [sys.executable, "-m", "dspark.cli.main", "convert", str(source), str(destination), "--quiet"],
        check=True, capture_output=True, timeout=120,
    )
    previous = (destination / "model.safetensors").read_bytes()
    process = subprocess.Popen(
        [sys.executable, "-m", "dspark.cli.main", "convert", str(source), str(destination), "--force", "--quiet"],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
    )
    freeze_mid_write(process, destination)
    code, stderr = interrupt(process, signal.SIGINT)
    assert code == 130, stderr
    assert (destination / "model.safetensors").read_bytes() == previous
    assert leftovers(destination) == []


def test_sigkill_mid_convert_leaves_no_destination_and_a_rerun_cleans_up(source: Path, tmp_path: Path) -> None:
    destination = tmp_path / "out"
    process = start(source, destination)
    temporary = freeze_mid_write(process, destination)
    code, _ = interrupt(process, signal.SIGKILL)
    assert code == -signal.SIGKILL
    assert not destination.exists()
    assert temporary.exists()  # nothing can run on SIGKILL; the next run cleans it

    rerun = subprocess.run(
        [sys.executable, "-m", "dspark.cli.main", "convert", str(source), str(destination), "--dtype", "bfloat16", "--quiet"],
        capture_output=True, text=True, timeout=120,
    )
    assert rerun.returncode == 0, rerun.stderr
    assert not temporary.exists()
    assert leftovers(destination) == []
    assert (destination / "model.safetensors").is_file()
