"""TorchSpec's config.yaml read with PyYAML's safe loader (the loader
OmegaConf reads it with): what it reads that a line reader could not, what
it still refuses, and OmegaConf interpolations left as written."""

from __future__ import annotations

import pytest

from dspark.converters.layouts.omegaconf_yaml import read_yaml_int_list, read_yaml_key


@pytest.mark.parametrize("text, value", [
    pytest.param("model:\n  draft_model_config: ${oc.env:HOME}/draft.json\n", "${oc.env:HOME}/draft.json",
                 id="interpolation-as-written"),
    pytest.param("model:\n  draft_model_config: '${paths.root}/d.json'\n", "${paths.root}/d.json",
                 id="quoted-interpolation"),
    pytest.param('model:\n  draft_model_config: "\\x41\\u00e9.json"\n', "A\u00e9.json", id="yaml-escapes"),
    pytest.param("model: # the model\n  draft_model_config: x.json\n", "x.json", id="comment-after-section"),
    pytest.param("model:\n  draft_model_config: 16\n", "16", id="a-number-as-its-text"),
    pytest.param("model:\n  draft_model_config: 'null'\n", "null", id="quoted-null-is-text"),
])
def test_values_read_as_yaml_reads_them(text, value):
    assert read_yaml_key(text, "model", "draft_model_config") == value


@pytest.mark.parametrize("text, value", [
    pytest.param("inference:\n  aux_hidden_states_layers: [1,\n    2, 3]\n", [1, 2, 3], id="flow-over-lines"),
    pytest.param("inference:\n  aux_hidden_states_layers: [0x10, 1_000]\n", [16, 1000], id="yaml-ints"),
    pytest.param("inference:\n  aux_hidden_states_layers:\n  - '4'\n", [4], id="quoted-digits"),
])
def test_int_lists_read_as_yaml_reads_them(text, value):
    assert read_yaml_int_list(text, "inference", "aux_hidden_states_layers") == value


@pytest.mark.parametrize("text, reason", [
    pytest.param("model:\n  draft_model_config: !!str x.json\n", "tag", id="tag"),
    pytest.param("model: &m\n  draft_model_config: x.json\n", "anchor", id="anchor"),
    pytest.param("model:\n  draft_model_config:\n    nested: x.json\n", "nested", id="nested"),
    pytest.param("model:\n  draft_model_config: >\n    x.json\n", "multi-line", id="folded"),
    pytest.param("model:\n  draft_model_config: 'a\n    b'\n", "multi-line quoted", id="quoted-over-lines"),
    pytest.param("- model\n", "not a mapping", id="not-a-mapping"),
    pytest.param("model: x\n", "not a mapping", id="section-is-a-scalar"),
])
def test_what_is_not_read_for_certain_is_refused(text, reason):
    with pytest.raises(ValueError) as caught:
        read_yaml_key(text, "model", "draft_model_config")
    assert reason in str(caught.value)


def test_true_is_not_an_integer():
    with pytest.raises(ValueError, match="not an integer"):
        read_yaml_int_list("inference:\n  aux_hidden_states_layers: [1, true]\n", "inference",
                           "aux_hidden_states_layers")
