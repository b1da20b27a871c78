"""DFlash2 (`DFlash2DraftModel`): judged as TokenSpeed 0.1.1, vLLM and SGLang
load it, refused where no class is registered; the fields each engine reads
where it reads them."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

torch = pytest.importorskip("torch")
from safetensors.torch import load_file, save_file  # noqa: E402

from dspark.converters.check import check_checkpoint  # noqa: E402
from dspark.converters.layouts.speculators import read_speculators_config  # noqa: E402
from dspark.examples.fabricate import fabricate  # noqa: E402
from dspark.schema.engines import engine_by_spec  # noqa: E402


def errors(report) -> set[str]:
    return {f.code for f in report.errors}


def codes(report) -> set[str]:
    return {f.code for f in report.findings}


def edit_config(folder: Path, change) -> Path:
    path = folder / "config.json"
    config = json.loads(path.read_text())
    change(config)
    path.write_text(json.dumps(config))
    return folder


@pytest.fixture()
def gqa(tmp_path):
    return fabricate(tmp_path / "gqa", family="dflash2")


@pytest.fixture()
def mla(tmp_path):
    return fabricate(tmp_path / "mla", family="dflash2", variant="mla")


@pytest.mark.parametrize("engine", ["tokenspeed@0.1.1", "vllm@0.33.0", "vllm@0.32.0", "vllm@0.31.0", "vllm@0.30.0",
                                    "sglang@0.5.23", "sglang@0.5.22", "sglang@0.5.21", "sglang@0.5.20"])
def test_a_good_gqa_draft_passes_where_it_is_modelled(gqa, engine):
    report = check_checkpoint(gqa, engine=engine, deep=True)
    assert report.family == "dflash2" and report.passed(strict=True), [f.message for f in report.findings]


def test_the_mla_draft_is_tokenspeeds_alone(mla):
    assert check_checkpoint(mla, engine="tokenspeed@0.1.1", deep=True).passed(strict=True)
    # vLLM builds Qwen3 attention whatever attention_mode says: the MLA
    # projections have no destination there, q/k/v none shipped.
    report = check_checkpoint(mla, engine="vllm@0.33.0")
    assert {"INV002", "INV001"} <= errors(report) and not report.passed()


def test_older_tokenspeed_refuses_it(gqa):
    for snapshot in ("tokenspeed@0.1.0", "tokenspeed@main", "tokenspeed@pr1031"):
        assert errors(check_checkpoint(gqa, engine=snapshot)) == {"ENG006"}


def test_build_fields_at_the_top_level_are_read_by_tokenspeed_only(gqa):
    def to_top(config):
        for key in ("conv_kernel_size", "conv_group_size", "selector_rank"):
            config[key] = config["dflash_config"].pop(key)

    edit_config(gqa, to_top)
    # TokenSpeed's _dflash2_config_value falls back to the top level; vLLM reads dflash_config only.
    assert check_checkpoint(gqa, engine="tokenspeed@0.1.1").passed()
    report = check_checkpoint(gqa, engine="vllm@0.33.0")
    assert "CFG003" in errors(report)
    assert any("dflash_config only" in f.message for f in report.errors)


def test_selector_top_k_at_the_top_level_stops_both(gqa):
    edit_config(gqa, lambda c: c.__setitem__("selector_top_k", c["dflash_config"].pop("selector_top_k")))
    for engine in ("tokenspeed@0.1.1", "vllm@0.33.0"):
        assert "CFG003" in errors(check_checkpoint(gqa, engine=engine)), engine


def test_an_embedding_scale_at_the_top_level_is_unread_by_vllm_alone(gqa):
    edit_config(gqa, lambda c: c.__setitem__("input_embedding_scale", 2.0))
    assert check_checkpoint(gqa, engine="tokenspeed@0.1.1").passed(strict=True)
    assert "ENG001" in errors(check_checkpoint(gqa, engine="vllm@0.33.0"))
    edit_config(gqa, lambda c: c["dflash_config"].__setitem__("input_embedding_scale", c.pop("input_embedding_scale")))
    assert check_checkpoint(gqa, engine="vllm@0.33.0").passed()


# SGLang (models/dflash.py::DFlash2DraftModel, speculative/dflash_utils.py::
# parse_dflash_draft_config@sglang==0.5.23) -------------------------------------


def test_sglang_builds_no_convolution_from_top_level_sizes(gqa):
    def to_top(config):
        for key in ("conv_kernel_size", "conv_group_size"):
            config[key] = config["dflash_config"].pop(key)

    edit_config(gqa, to_top)
    assert check_checkpoint(gqa, engine="tokenspeed@0.1.1").passed()
    assert "CFG003" in errors(check_checkpoint(gqa, engine="vllm@0.33.0"))
    for release in ("sglang@0.5.23", "sglang@0.5.20"):
        report = check_checkpoint(gqa, engine=release)
        assert errors(report) == {"ENG001"}, release
        assert "without its grouped convolutions" in report.errors[0].message


def test_sglang_never_reads_the_embedding_scale(gqa):
    edit_config(gqa, lambda c: c["dflash_config"].__setitem__("input_embedding_scale", 2.0))
    for engine in ("tokenspeed@0.1.1", "vllm@0.33.0"):
        assert check_checkpoint(gqa, engine=engine).passed(strict=True), engine
    assert errors(check_checkpoint(gqa, engine="sglang@0.5.23")) == {"ENG001"}


def test_sglang_takes_a_top_k_of_one_and_no_block_size(gqa):
    edit_config(gqa, lambda c: c["dflash_config"].__setitem__("selector_top_k", 1))
    assert "CFG003" in errors(check_checkpoint(gqa, engine="tokenspeed@0.1.1"))
    assert check_checkpoint(gqa, engine="sglang@0.5.23").passed()
    edit_config(gqa, lambda c: c["dflash_config"].pop("block_size"))
    assert check_checkpoint(gqa, engine="sglang@0.5.23").passed()


@pytest.mark.parametrize("change, words", [
    (lambda n: n.pop("selector_rank"), "needs the pair set together"),
    (lambda n: (n.pop("selector_rank"), n.pop("selector_top_k")), "raises without a selector rank"),
    (lambda n: n.pop("conv_group_size"), "needs the pair set together"),
    (lambda n: n.__setitem__("conv_group_size", 7), "does not divide hidden_size"),
    (lambda n: n.__setitem__("selector_top_k", -1), "must be >= 0"),
    (lambda n: n.__setitem__("output_multiplier", 0), "wants it positive"),
    (lambda n: n.__setitem__("final_logit_softcapping", "high"), "float() cannot read it"),
])
def test_sglang_refuses_what_its_parser_and_model_raise_on(gqa, change, words):
    edit_config(gqa, lambda c: change(c["dflash_config"]))
    report = check_checkpoint(gqa, engine="sglang@0.5.23")
    assert "CFG003" in errors(report) and any(words in f.message for f in report.errors), report.errors


def test_sglang_builds_gqa_attention_whatever_attention_mode_says(gqa, mla):
    edit_config(gqa, lambda c: c["dflash_config"].__setitem__("attention_mode", "mla"))
    assert check_checkpoint(gqa, engine="sglang@0.5.23").passed(strict=True)
    assert {"INV002", "INV001"} <= errors(check_checkpoint(mla, engine="sglang@0.5.23"))


def test_sglang_reads_the_logit_fields_in_dflash_config_alone(gqa):
    edit_config(gqa, lambda c: c.__setitem__("final_logit_softcapping", 30.0))
    report = check_checkpoint(gqa, engine="sglang@0.5.22")
    assert errors(report) == {"ENG001"} and "final_logit_softcapping" in report.errors[0].message


def test_a_zero_kernel_projection_is_the_convolutions_initial_state_not_a_lost_weight(gqa):
    # speculators initialises it to zeros (the conv is then its base kernel alone).
    path = gqa / "model.safetensors"
    tensors = load_file(str(path))
    tensors["layers.0.mlp_conv.kernel_projection.weight"].zero_()
    save_file(tensors, str(path), metadata={"format": "pt"})
    report = check_checkpoint(gqa, deep=True)
    assert "PAY004" not in codes(report) and report.passed(strict=True)
    tensors["layers.0.mlp.up_proj.weight"].zero_()  # a weight matrix is still judged
    save_file(tensors, str(path), metadata={"format": "pt"})
    assert "PAY004" in codes(check_checkpoint(gqa, deep=True))


def test_speculators_dflash2_reads_as_vllms_reader_reads_it():
    config = {
        "architectures": ["DFlash2DraftModel"], "speculators_model_type": "dflash2",
        "transformer_layer_config": {"model_type": "qwen3", "hidden_size": 128, "num_hidden_layers": 2},
        "aux_hidden_state_layer_ids": [2, 4, 5], "mask_token_id": 511, "block_size": 8,
        "conv_kernel_size": 2, "conv_group_size": 16, "selector_rank": 32, "selector_top_k": 4,
    }
    read = read_speculators_config(config, "config.json")
    assert read.config["architectures"] == ["DFlash2DraftModel"]
    # algos.py::update_dflash2@vllm==0.33.0:129-149: ids one less, the four fields nested
    assert read.config["dflash_config"] == {"mask_token_id": 511, "target_layer_ids": [1, 3, 4],
                                            "conv_kernel_size": 2, "conv_group_size": 16, "selector_rank": 32,
                                            "selector_top_k": 4, "block_size": 8}
    assert read.findings[0].detail["family"] == "dflash2"


def test_older_vllm_releases_cite_their_own_lines():
    loader = engine_by_spec("vllm@0.30.0").loader_for("dflash2")
    # the lines move, the class they cite keeps its name
    assert loader.sources["convolution"].cite() == \
        "vllm/model_executor/models/qwen3_dflash2.py::DFlashGroupedConv@vllm==0.30.0:46-102"
    assert engine_by_spec("vllm@0.33.0").loader_for("dflash2").sources["convolution"].lines == "170-227"


def test_convert_writes_every_field_where_both_engines_read_it(gqa, tmp_path):
    from dspark.converters.convert import convert_checkpoint
    from dspark.converters.convert_plan import ConvertOptions

    def spread(config):
        # TokenSpeed's model reads these at the top level too; vLLM and
        # TokenSpeed's drafter and KV-cache layout only in dflash_config.
        for key in ("conv_group_size", "selector_top_k"):
            config[key] = config["dflash_config"].pop(key)
        config["output_multiplier"] = 2.0

    edit_config(gqa, spread)
    assert not check_checkpoint(gqa, engine="vllm@0.33.0").passed()
    for engine in ("vllm@0.33.0", "tokenspeed@0.1.1"):
        out = tmp_path / engine
        convert_checkpoint(gqa, out, ConvertOptions(engine=engine))
        nested = json.loads((out / "config.json").read_text())["dflash_config"]
        assert (nested["conv_group_size"], nested["selector_top_k"], nested["output_multiplier"]) == (8, 4, 2.0)
        for judge in ("vllm@0.33.0", "tokenspeed@0.1.1"):
            assert check_checkpoint(out, engine=judge).passed(strict=True), (engine, judge)
