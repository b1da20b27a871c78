"""Reads at an offset where the platform has no pread (Windows): the
fallback (a lock per descriptor, seek, read) forced on Linux, with os.pread
and os.preadv taken away so that nothing can reach them. `check --deep`,
`--verify`, `convert` and the DCP and .pt readers give what they give with
pread."""

from __future__ import annotations

import os
import threading
from pathlib import Path

import pytest

from dspark.converters.check import check_checkpoint
from dspark.converters.convert import convert_checkpoint
from dspark.converters.readers import positional
from dspark.examples.fabricate import write_draft


@pytest.fixture
def no_pread(monkeypatch):
    monkeypatch.setattr(positional, "HAVE_PREAD", False)
    monkeypatch.delattr(os, "pread")
    monkeypatch.delattr(os, "preadv")


def test_the_fallback_reads_what_pread_reads_from_many_threads(tmp_path, no_pread):
    data = os.urandom(1 << 20)
    path = tmp_path / "blob"
    path.write_bytes(data)
    wrong: list[int] = []
    with open(path, "rb", buffering=0) as handle:
        fd = handle.fileno()

        def read(seed: int) -> None:
            for step in range(200):
                offset = (seed * 7919 + step * 104729) % (len(data) - 4096)
                size = 1 + (seed + step) % 4096
                target = memoryview(bytearray(size))
                if positional.pread(fd, size, offset) != data[offset:offset + size]:
                    wrong.append(offset)
                got = positional.pread_into(fd, target, offset)
                if bytes(target[:got]) != data[offset:offset + got] or got != size:
                    wrong.append(offset)

        threads = [threading.Thread(target=read, args=(seed,)) for seed in range(6)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
        assert positional.pread(fd, 10, len(data) - 4) == data[-4:]
        assert positional.pread_into(fd, memoryview(bytearray(8)), len(data)) == 0
    assert wrong == []


def test_check_deep_finds_a_nan_without_pread(tmp_path, no_pread):
    good = check_checkpoint(write_draft(tmp_path / "good", shards=2), deep=True)
    assert good.passed and good.payloads_read
    bad = check_checkpoint(write_draft(tmp_path / "bad", defect="nan"), deep=True)
    assert "PAY001" in {f.code for f in bad.errors}


def test_convert_and_verify_without_pread(tmp_path, no_pread):
    src = write_draft(tmp_path / "src", prefix="draft_model.", shards=2)
    convert_checkpoint(src, tmp_path / "dst")
    verified = check_checkpoint(tmp_path / "dst", verify_hashes=True)
    assert verified.passed and verified.payloads_read, [f.code for f in verified.errors]


def test_nothing_else_reads_with_os_pread():
    """Every positional read goes through the module that has a fallback."""
    root = Path(__file__).resolve().parents[2]
    users = sorted(
        str(path.relative_to(root))
        for folder in ("cli", "converters", "kernels", "schema")
        for path in (root / folder).rglob("*.py")
        if ("os.pread(" in path.read_text(encoding="utf-8") or "os.preadv(" in path.read_text(encoding="utf-8"))
    )
    assert users == ["converters/readers/positional.py"]


def _values(checkpoint) -> dict[str, bytes]:
    return {entry.stored_name: b"".join(bytes(c) for c in checkpoint.reader.iter_chunks(entry, 4096))
            for entry in checkpoint.entries}


@pytest.mark.parametrize("kind", ["pt", "dcp"])
def test_the_pt_and_dcp_readers_read_the_same_bytes_without_pread(tmp_path, monkeypatch, kind):
    torch = pytest.importorskip("torch")
    import json
    import warnings

    from dspark.converters.readers import open_checkpoint
    from dspark.examples.fabricate import SCALES, draft_config, make_tensors, tensor_shapes

    tensors = make_tensors(tensor_shapes(SCALES["tiny"]), dtype="float32", seed=5)
    folder = tmp_path / "ckpt"
    folder.mkdir()
    if kind == "pt":
        torch.save({f"draft_model.{k}": v for k, v in tensors.items()}, folder / "draft.pt")
        (folder / "config.json").write_text(json.dumps(draft_config(SCALES["tiny"])))
        where = folder
    else:
        import torch.distributed.checkpoint as dcp

        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            dcp.save({"draft_model": tensors}, storage_writer=dcp.FileSystemWriter(str(folder / "model")))
        (folder / "config.json").write_text(json.dumps(draft_config(SCALES["tiny"])))
        where = folder
    with_pread = _values(open_checkpoint(where))
    monkeypatch.setattr(positional, "HAVE_PREAD", False)
    monkeypatch.delattr(os, "pread")
    monkeypatch.delattr(os, "preadv")
    assert _values(open_checkpoint(where)) == with_pread
    assert len(with_pread) == len(tensors)
