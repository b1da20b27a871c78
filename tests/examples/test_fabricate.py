"""The fabricator and dspark agree, family by family: every defect the
fabricator offers is reported by `check_checkpoint` with the code it names
(payload defects only with `deep`, target defects only with the target's
config), every good draft passes `--deep --strict` at tiny size, and every
full-size draft passes a header-only check over its payload hole."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from dspark.converters.check import check_checkpoint
from dspark.examples.fabricate import (
    FABRICATORS,
    FabricateError,
    defect_table,
    fabricate,
    target_config,
)
from dspark.schema.findings import FINDING_CODES, Severity

torch = pytest.importorskip("torch")

ALL_DEFECTS = [
    pytest.param(family, name, id=f"{family}-{name}")
    for family, fab in FABRICATORS.items() for name in fab.defects
]
HEADER_DEFECTS = [
    pytest.param(family, name, id=f"{family}-{name}")
    for family, fab in FABRICATORS.items() for name, defect in fab.defects.items() if not defect.deep
]

# Each family's good drafts: its defaults and each build option turned on.
GOOD_DRAFTS = [
    pytest.param("k3_dspark", {}, id="k3_dspark"),
    pytest.param("k3_dspark", {"fc_norm": False}, id="k3_dspark-no-fc_norm"),
    pytest.param("dflash_gqa", {}, id="dflash_gqa-dflash"),
    pytest.param("dflash_gqa", {"variant": "dspark"}, id="dflash_gqa-dspark"),
    pytest.param("dflash2", {}, id="dflash2-gqa"),
    pytest.param("dflash2", {"variant": "mla"}, id="dflash2-mla"),
    pytest.param("eagle3_llama", {}, id="eagle3_llama"),
    pytest.param("eagle3_llama", {"fc_norm": True, "norm_before_fc": True}, id="eagle3_llama-fc_norm-norm_before_fc"),
    pytest.param("eagle3_mla", {}, id="eagle3_mla"),
    pytest.param("eagle3_mla", {"fc_norm": True}, id="eagle3_mla-fc_norm"),
    pytest.param("eagle3_qwen3", {}, id="eagle3_qwen3"),
    pytest.param("eagle3_qwen3", {"fc_norm": True, "norm_before_fc": True}, id="eagle3_qwen3-fc_norm-norm_before_fc"),
]


def judged(report) -> dict[str, set[Severity]]:
    found: dict[str, set[Severity]] = {}
    for finding in report.findings:
        if finding.severity is not Severity.INFO:
            found.setdefault(finding.code, set()).add(finding.severity)
    return found


def engine(family: str) -> str | None:
    """The engine whose verdicts a family's defects name (vLLM for the Qwen3
    layer, which TokenSpeed does not serve)."""
    return FABRICATORS[family].engine


def write_target(folder: Path, family: str, scale: str) -> Path:
    path = folder / "target-config.json"
    path.write_text(json.dumps(target_config(family, scale)))
    return path


@pytest.mark.parametrize(("family", "name"), ALL_DEFECTS)
def test_every_defect_of_every_family_gets_its_code(tmp_path, family, name):
    defect = FABRICATORS[family].defects[name]
    draft = fabricate(tmp_path / "draft", family=family, defect=name)
    target = write_target(tmp_path, family, "tiny") if defect.target else None
    want = FINDING_CODES[defect.code].severity

    header_only = check_checkpoint(draft, target=target, engine=engine(family))
    if defect.deep:
        # A payload defect is invisible to a header-only check...
        assert defect.code not in judged(header_only), judged(header_only)
    report = check_checkpoint(draft, target=target, deep=True, engine=engine(family)) if defect.deep else header_only
    # ...and reported, at the code's own severity, by the check that reads it.
    assert judged(report).get(defect.code) == {want}, f"{family} {name}: expected {defect.code}, got {judged(report)}"
    assert not report.passed(strict=True)
    if want is Severity.ERROR:
        assert not report.passed()


@pytest.mark.parametrize(("family", "name"), [p for p in ALL_DEFECTS if FABRICATORS[p.values[0]].defects[p.values[1]].target])
def test_a_target_defect_needs_the_target(tmp_path, family, name):
    defect = FABRICATORS[family].defects[name]
    report = check_checkpoint(fabricate(tmp_path / "draft", family=family, defect=name), deep=True,
                              engine=engine(family))
    assert defect.code not in judged(report)


@pytest.mark.parametrize(("family", "options"), GOOD_DRAFTS)
def test_every_good_tiny_draft_passes_deep_and_strict(tmp_path, family, options):
    draft = fabricate(tmp_path / "draft", family=family, **options)
    report = check_checkpoint(draft, target=write_target(tmp_path, family, "tiny"), deep=True, engine=engine(family))
    assert report.family == family
    assert judged(report) == {} and report.passed(strict=True)
    assert report.scanned_bytes == report.total_bytes > 0


@pytest.mark.parametrize(("family", "options"), GOOD_DRAFTS)
def test_every_full_size_sparse_draft_passes_header_only(tmp_path, family, options):
    draft = fabricate(tmp_path / "draft", family=family, scale="full", sparse=True, **options)
    report = check_checkpoint(draft, target=write_target(tmp_path, family, "full"), engine=engine(family))
    assert report.family == family and report.passed()
    # The one thing a header-only check says of a payload hole.
    assert set(judged(report)) <= {"PAY006"}
    assert report.total_bytes > 10**9 and report.payloads_read is False


def test_full_sizes_are_the_real_ones(tmp_path):
    def config(family: str) -> dict:
        return json.loads((fabricate(tmp_path / family, family=family, scale="full", sparse=True)
                           / "config.json").read_text())

    gqa = config("dflash_gqa")  # Qwen3-8B target, TorchSpec's DFlash dimensions
    assert (gqa["hidden_size"], gqa["num_hidden_layers"], gqa["intermediate_size"], gqa["vocab_size"]) == (
        4096, 5, 12288, 151936)
    assert gqa["dflash_config"] == {"target_layer_ids": [1, 9, 17, 25, 33], "mask_token_id": 151669}
    llama = config("eagle3_llama")  # Llama-3.1-8B: 3 taps x 4096, 32k draft vocabulary
    assert (llama["hidden_size"], llama["vocab_size"], llama["draft_vocab_size"]) == (4096, 128256, 32000)
    mla = config("eagle3_mla")  # TorchSpec's Kimi-K2.5 MLA draft
    assert (mla["hidden_size"], mla["vocab_size"], mla["draft_vocab_size"], mla["q_lora_rank"]) == (
        7168, 163840, 163840, 1536)
    assert mla["eagle_config"]["eagle_aux_hidden_state_layer_ids"] == [1, 29, 57]
    qwen3 = config("eagle3_qwen3")  # Qwen3-8B: 32 heads of 128, 8 key/value heads, 32k draft vocabulary
    assert (qwen3["hidden_size"], qwen3["head_dim"], qwen3["num_key_value_heads"], qwen3["vocab_size"],
            qwen3["draft_vocab_size"]) == (4096, 128, 8, 151936, 32000)
    k3 = config("k3_dspark")
    assert (k3["hidden_size"], k3["target_num_hidden_layers"], k3["num_target_layers"]) == (7168, 93, 5)


@pytest.mark.parametrize(("family", "name"), HEADER_DEFECTS)
def test_header_defects_at_full_size_over_a_payload_hole(tmp_path, family, name):
    defect = FABRICATORS[family].defects[name]
    try:
        draft = fabricate(tmp_path / "draft", family=family, scale="full", sparse=True, defect=name)
    except FabricateError as error:
        # Only a defect with nothing to break at this size is refused, and
        # nothing is left behind.
        assert "no d2t" in str(error) or "already the 128" in str(error), error
        assert not (tmp_path / "draft").exists()
        return
    report = check_checkpoint(draft, target=write_target(tmp_path, family, "full") if defect.target else None,
                              engine=engine(family))
    assert defect.code in judged(report), judged(report)
    assert not report.passed(strict=True)


def test_the_defect_table_lists_every_defect_with_its_code():
    rows = defect_table()
    assert {(family, name) for family, name, _, _ in rows} == {
        (family, name) for family, fab in FABRICATORS.items() for name in fab.defects}
    assert all(code in FINDING_CODES for _, _, code, _ in rows)
    assert ("dflash_gqa", "fc-norm-shipped", "ENG001") in {row[:3] for row in rows}


@pytest.mark.parametrize(
    ("call", "message"),
    [
        pytest.param({"family": "dflash_gqa", "defect": "d2t-short"}, "defect of eagle3_llama, eagle3_mla",
                     id="defect-of-another-family"),
        pytest.param({"family": "eagle3_mla", "scale": "k3"}, "use --scale full", id="k3-scale-elsewhere"),
        pytest.param({"family": "k3_dspark", "variant": "dspark"}, "--variant does not apply", id="foreign-option"),
        pytest.param({"family": "dflash_gqa", "fc_norm": True}, "does not apply to dflash_gqa", id="gqa-fc_norm"),
        pytest.param({"family": "eagle3_llama", "defect": "fc-norm-count", "fc_norm": False}, "needs --fc-norm",
                     id="defect-against-option"),
        pytest.param({"family": "eagle3_mla", "defect": "nan", "sparse": True}, "drop --sparse",
                     id="payload-defect-sparse"),
        pytest.param({"family": "eagle3_mla", "scale": "full", "defect": "d2t-short"}, "no d2t",
                     id="nothing-to-break"),
        pytest.param({"family": "bogus"}, "no family 'bogus'", id="unknown-family"),
    ],
)
def test_what_cannot_be_made_is_refused_and_nothing_written(tmp_path, call, message):
    with pytest.raises(FabricateError, match=message.replace("-", r"\-")):
        fabricate(tmp_path / "draft", **call)
    assert not (tmp_path / "draft").exists()


def test_a_defect_sets_up_what_it_needs(tmp_path):
    # A DSpark-only defect makes a DSpark draft; an fc_norm defect an fc_norm draft.
    gqa = fabricate(tmp_path / "gqa", family="dflash_gqa", defect="no-markov-head")
    assert json.loads((gqa / "config.json").read_text())["architectures"] == ["DSparkDraftModel"]
    mla = fabricate(tmp_path / "mla", family="eagle3_mla", defect="fc-norm-count")
    assert json.loads((mla / "config.json").read_text())["fc_norm"] is True


def test_the_defect_table_says_which_defects_only_warn():
    # The engine serves these drafts (float32 weights are cast on load, an
    # identity fc_norm applies as trained): check passes, --strict fails.
    rows = {(family, name): text for family, name, _, text in defect_table()}
    assert "exits 0, 1 with --strict" in rows[("k3_dspark", "draft-vocab")]
    assert "exits 0, 1 with --strict" in rows[("eagle3_llama", "float32")]
    assert "exits 0" not in rows[("k3_dspark", "tap-count")]
