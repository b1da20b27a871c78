"""What an EAGLE-3 draft's `d2t` decides, read from its values.

TokenSpeed proposes `hot_token_id[argmax] = argmax + d2t[argmax]` for a row
of the draft's head (models/llama_eagle3.py@f4d8ec6e:691-695,
models/deepseek_v3.py@f4d8ec6e:2358-2362, execution/drafter/eagle.py@
f4d8ec6e:162-164, 373-375, 447-448): only the first head-rows entries are
ever looked up. A draft `vocab_size` above the target's that pads to the
same 64-row multiple takes the target's embedding and head whole
(layers/vocab_parallel_embedding.py@f4d8ec6e:43, 82; llama_eagle3.py:727-751)
and cuts its logits no shorter than its head (layers/logits_processor.py@
f4d8ec6e:653): such a draft is served as trained when its d2t keeps every
head row inside the target's vocabulary. Every case is a tiny draft written
by the safetensors library (vocab_size 96, a 40-row head).
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

import dspark.converters.token_map as token_map_module
from dspark.converters.check import check_checkpoint
from dspark.examples.fabricate import write_eagle3_draft
from dspark.schema.findings import Severity

torch = pytest.importorskip("torch")

ROWS = 40  # the tiny drafts' draft_vocab_size: the head's rows and d2t's length


def target(folder: Path, vocab_size: int) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "config.json").write_text(json.dumps({
        "architectures": ["LlamaForCausalLM"], "model_type": "llama", "hidden_size": 32, "num_hidden_layers": 12,
        "vocab_size": vocab_size}))
    return folder


def d2t_onto(highest: int, extra: list[int] | None = None, dtype=torch.int64):
    """A d2t sending the 40 head rows onto [0, highest], plus `extra`
    entries past the head."""
    def edit(tensors):
        used = torch.linspace(0, highest, ROWS).round().to(torch.int64)
        table = used - torch.arange(ROWS, dtype=torch.int64)
        if extra:
            table = torch.cat([table, torch.tensor(extra, dtype=torch.int64)])
        tensors["d2t"] = table.to(dtype).contiguous()
    return edit


def tgt004(report):
    [finding] = [f for f in report.findings if f.code == "TGT004"]
    return finding


@pytest.mark.parametrize("scale", ["tiny-llama", "tiny-mla"])
def test_a_larger_vocabulary_whose_d2t_stays_inside_the_target_is_served(tmp_path, scale):
    # 96 and 90 both pad to 128 rows; d2t sends the head onto [0, 89].
    draft = write_eagle3_draft(tmp_path / "d", scale=scale, tensor_edit=d2t_onto(89))
    report = check_checkpoint(draft, target=target(tmp_path / "t", 90))  # header-only
    finding = tgt004(report)
    assert finding.severity is Severity.WARNING and report.passed()
    assert "served as trained" in finding.message and "from 0 to 89" in finding.message
    assert finding.detail["d2t_read"] and finding.detail["head_rows"] == ROWS
    assert not report.payloads_read


@pytest.mark.parametrize("scale", ["tiny-llama", "tiny-mla"])
def test_a_larger_vocabulary_whose_d2t_leaves_the_target_fails(tmp_path, scale):
    draft = write_eagle3_draft(tmp_path / "d", scale=scale)  # the fabricator's d2t reaches 95
    finding = tgt004(check_checkpoint(draft, target=target(tmp_path / "t", 90)))
    assert finding.severity is Severity.ERROR
    assert "from 0 to 95" in finding.message and "outside the target's [0, 90)" in finding.message


def test_d2t_entries_past_the_head_do_not_decide_the_verdict(tmp_path):
    draft = write_eagle3_draft(tmp_path / "d", tensor_edit=d2t_onto(89, extra=[10_000, -5]))
    report = check_checkpoint(draft, target=target(tmp_path / "t", 90), deep=True)
    assert tgt004(report).severity is Severity.WARNING
    assert [(f.code, f.severity) for f in report.findings if f.severity is not Severity.INFO] == [
        ("TGT004", Severity.WARNING), ("VOC002", Severity.WARNING)]


def test_deep_voc003_reads_only_the_entries_the_head_indexes(tmp_path):
    # Unused entries past vocab_size are never looked up: no VOC003 (before,
    # the whole table's range decided it).
    good = write_eagle3_draft(tmp_path / "g", tensor_edit=d2t_onto(95, extra=[10_000]))
    report = check_checkpoint(good, deep=True)
    assert report.passed() and "VOC003" not in {f.code for f in report.findings}
    # A head row sent past the vocabulary still is one.
    bad = write_eagle3_draft(tmp_path / "b", tensor_edit=d2t_onto(96, extra=[0]))
    [finding] = check_checkpoint(bad, deep=True).errors
    assert finding.code == "VOC003" and finding.detail["max"] == 96 and finding.detail["entries_read"] == ROWS


def test_a_larger_vocabulary_without_d2t_stays_an_error(tmp_path):
    # A full-vocabulary head (draft_vocab_size = vocab_size) proposes its row
    # indices as they are: 90..95 are not the target's.
    draft = write_eagle3_draft(tmp_path / "d", config_edit=lambda c: c.update(draft_vocab_size=96))
    finding = tgt004(check_checkpoint(draft, target=target(tmp_path / "t", 90)))
    assert finding.severity is Severity.ERROR and "no d2t is shipped" in finding.message


def test_a_d2t_that_cannot_be_read_leaves_the_error(tmp_path, monkeypatch):
    draft = write_eagle3_draft(tmp_path / "d", tensor_edit=d2t_onto(89))
    monkeypatch.setattr(token_map_module, "READ_CAP_BYTES", ROWS * 8 - 1)
    finding = tgt004(check_checkpoint(draft, target=target(tmp_path / "t", 90)))
    assert finding.severity is Severity.ERROR and finding.detail["d2t_read"] is False
    assert "could not be read" in finding.message
    float_table = write_eagle3_draft(tmp_path / "f", tensor_edit=d2t_onto(89, dtype=torch.float32))
    assert tgt004(check_checkpoint(float_table, target=target(tmp_path / "t", 90))).severity is Severity.ERROR


def test_another_padded_size_is_still_refused_whatever_d2t_holds(tmp_path):
    # 96 pads to 128 rows, 60 to 64: the Llama draft cannot take the target's embedding.
    draft = write_eagle3_draft(tmp_path / "d", tensor_edit=d2t_onto(59))
    finding = tgt004(check_checkpoint(draft, target=target(tmp_path / "t", 60)))
    assert finding.severity is Severity.ERROR and "refuses the draft at load" in finding.message


def test_reading_d2t_header_only_never_imports_torch(tmp_path):
    draft = write_eagle3_draft(tmp_path / "d", tensor_edit=d2t_onto(89))
    probe = (
        "import sys\n"
        "from dspark.converters.check import check_checkpoint\n"
        f"report = check_checkpoint({str(draft)!r}, target={str(target(tmp_path / 't', 90))!r})\n"
        "assert [f.detail.get('d2t_read') for f in report.findings if f.code == 'TGT004'] == [True]\n"
        "assert 'torch' not in sys.modules, 'torch was imported'\n"
    )
    subprocess.run([sys.executable, "-c", probe], check=True)


def test_convert_verifies_d2t_on_the_entries_the_head_indexes(tmp_path):
    from dspark.converters.convert import convert_checkpoint

    source = write_eagle3_draft(tmp_path / "src", tensor_edit=d2t_onto(95, extra=[10_000]))
    report = convert_checkpoint(source, tmp_path / "out")
    assert "VOC003" not in {f.code for f in report.verification.findings}
