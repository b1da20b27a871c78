"""vLLM's default runner never reads eagle_config's tap list and captures its
defaults, hidden_states [2, N//2, N-3]: the outputs of layers [1, N//2-1,
N-4]. A SpecForge draft whose eagle_config list is exactly that (its own
default) is served as trained on that target, and on no other."""

from __future__ import annotations

import json

import pytest

from dspark.converters.check import check_checkpoint
from dspark.examples.fabricate import target_config, write_eagle3_draft
from dspark.schema.findings import Severity

pytest.importorskip("torch")


def specforge_style(folder, ids):
    def under_eagle_config(config):
        config.pop("eagle_aux_hidden_state_layer_ids", None)
        config["eagle_config"] = {"eagle_aux_hidden_state_layer_ids": ids}

    return write_eagle3_draft(folder, config_edit=under_eagle_config)


def target_with(folder, layers):
    config = target_config("eagle3_llama", "tiny")
    config["num_hidden_layers"] = layers
    folder.write_text(json.dumps(config))
    return folder


def tap002(report):
    [finding] = [f for f in report.findings if f.code == "TAP002"]
    return finding


def test_the_defaults_list_is_a_warning_without_a_target_and_passes_on_its_target(tmp_path):
    draft = specforge_style(tmp_path / "d", [1, 3, 4])  # vLLM's defaults on an 8-layer target
    unjudged = check_checkpoint(draft, engine="vllm")
    assert tap002(unjudged).severity is Severity.WARNING and unjudged.passed()
    assert "8-layer target" in tap002(unjudged).message
    on_it = check_checkpoint(draft, engine="vllm", target=target_with(tmp_path / "t8.json", 8))
    assert tap002(on_it).severity is Severity.INFO and on_it.passed()
    other = check_checkpoint(draft, engine="vllm", target=target_with(tmp_path / "t12.json", 12))
    assert tap002(other).severity is Severity.ERROR and not other.passed()


def test_a_list_that_is_no_target_s_defaults_stays_an_error(tmp_path):
    report = check_checkpoint(specforge_style(tmp_path / "d", [0, 3, 6]), engine="vllm")
    assert tap002(report).severity is Severity.ERROR and not report.passed()
