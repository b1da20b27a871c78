"""What a TorchSpec run trained with beyond its draft config: the tap list
in config.yaml (`inference.aux_hidden_states_layers`), a DFlash draft's
block size (`training.dflash_block_size`), the taps a DFlash config leaves
to TorchSpec's default; and a DCP folder of optimizer state, which holds no
draft. Runs written with torch's own DCP save and TorchSpec's key layout."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

torch = pytest.importorskip("torch")
dcp = pytest.importorskip("torch.distributed.checkpoint")

from test_torchspec_layouts import dflash_config, dflash_training_state, dspark, make_run  # noqa: E402

from dspark.converters.check import check_checkpoint  # noqa: E402
from dspark.converters.layouts.omegaconf_yaml import read_yaml_int_list  # noqa: E402
from dspark.converters.layouts.torchspec_run import build_target_layer_ids  # noqa: E402
from dspark.examples.fabricate import EAGLE3_SCALES, eagle3_config, eagle3_tensors  # noqa: E402

RUN_YAML = """\
model:
  target_model_path: {target}
  draft_model_config: {draft_config}
inference:
  aux_hidden_states_layers:{aux}
  inference_engine_type: sgl
training:
  dflash_block_size: {block}
  learning_rate: 0.0001
"""


def write_run(root: Path, tensors: dict, config: dict, *, aux: str = " null", block: int = 16,
              target: str = "meta-llama/Llama-3.1-8B-Instruct") -> Path:
    """A run folder: one iteration of `tensors` under TorchSpec's keys, the
    draft config it names, and config.yaml as OmegaConf writes it."""
    model = root / "checkpoints" / "iter_0000003" / "model"
    dcp.save({"model_state": {"model": {"draft_model": tensors}}}, checkpoint_id=str(model), no_dist=True)
    (root / "checkpoints" / "latest_checkpointed_iteration.txt").write_text("3")
    draft_config = root / "draft_config.json"
    draft_config.write_text(json.dumps(config))
    (root / "config.yaml").write_text(RUN_YAML.format(draft_config=draft_config, aux=aux, block=block, target=target))
    return root


def eagle3_run(root: Path, *, aux: str, family_scale: str = "tiny-llama", tap_ids=None, **options) -> Path:
    config = eagle3_config(EAGLE3_SCALES[family_scale], tap_ids=tap_ids)
    return write_run(root, eagle3_tensors(config), config, aux=aux, **options)


def src007(report) -> list[str]:
    return [f.message for f in report.findings if f.code == "SRC007"]


def converted_config(tmp_path: Path, run: Path) -> dict:
    out = tmp_path / "served"
    result = dspark("convert", str(run), str(out))
    assert result.returncode == 0, result.stdout + result.stderr
    checked = dspark("check", str(out), "--deep", "--strict")
    assert checked.returncode == 0, checked.stdout
    return json.loads((out / "config.json").read_text())


# --------------------------------------------------------------------------
# The tap list the training data was captured from


@pytest.mark.parametrize("aux", ["\n  - 2\n  - 5\n  - 6", " [2, 5, 6]"], ids=["block-list", "flow-list"])
def test_the_runs_tap_list_is_the_one_convert_writes(tmp_path: Path, aux: str) -> None:
    run = eagle3_run(tmp_path / "run", aux=aux)
    report = check_checkpoint(run, verdict="contents")
    [note] = src007(report)
    assert "[2, 5, 6]" in note and "inference.aux_hidden_states_layers" in note
    config = converted_config(tmp_path, run)
    assert config["eagle_aux_hidden_state_layer_ids"] == [2, 5, 6]


def test_an_mla_run_writes_the_list_where_its_target_reads_it(tmp_path: Path) -> None:
    run = eagle3_run(tmp_path / "run", aux="\n  - 2\n  - 5\n  - 6", family_scale="tiny-mla", tap_ids=[1, 3, 4])
    before = json.loads((run / "draft_config.json").read_text())
    assert before["eagle_config"]["eagle_aux_hidden_state_layer_ids"] == [1, 3, 4]
    [note] = src007(check_checkpoint(run, verdict="contents"))
    assert "says [1, 3, 4]" in note
    config = converted_config(tmp_path, run)
    assert config["eagle_config"]["eagle_aux_hidden_state_layer_ids"] == [2, 5, 6]


def test_a_run_on_the_default_taps_keeps_a_draft_config_without_a_list(tmp_path: Path) -> None:
    run = eagle3_run(tmp_path / "run", aux=" null")
    assert src007(check_checkpoint(run, verdict="contents")) == []
    config = converted_config(tmp_path, run)
    assert "eagle_aux_hidden_state_layer_ids" not in config  # the engine's default, as trained


def test_a_tap_list_that_cannot_be_read_for_sure_is_said(tmp_path: Path) -> None:
    run = eagle3_run(tmp_path / "run", aux="\n  - two\n  - 5")
    [note] = src007(check_checkpoint(run, verdict="contents"))
    assert "'two'" in note and "draft config's value is used" in note
    assert note.count("aux_hidden_states_layers") == 1  # the key is said once
    [warning] = [f for f in check_checkpoint(run, verdict="contents").warnings if f.code == "SRC007"]
    assert warning.file == "config.yaml"


def test_a_block_size_that_is_not_an_integer_is_said(tmp_path: Path) -> None:
    run = write_run(tmp_path / "run", dflash_training_state(), dflash_config(), block="sixteen")
    [warning] = [f for f in check_checkpoint(run, verdict="contents").warnings if f.code == "SRC007"]
    assert "training.dflash_block_size is 'sixteen', not an integer" in warning.message


@pytest.mark.parametrize("text, value", [
    ("inference:\n  aux_hidden_states_layers:\n  - 1\n  - 7\n  engine: sgl\n", [1, 7]),
    ("inference:\n  aux_hidden_states_layers:\n    - 1\n    - 7\n", [1, 7]),
    ("inference:\n  aux_hidden_states_layers: [3, 19, 35]  # qwen\n", [3, 19, 35]),
    ("inference:\n  aux_hidden_states_layers: null\n", None),
    ("inference:\n  aux_hidden_states_layers:\n  other: 1\n", None),
    ("inference:\n  aux_hidden_states_layers: []\n", []),
])
def test_the_yaml_reader_reads_a_list_of_integers(text: str, value) -> None:
    assert read_yaml_int_list(text, "inference", "aux_hidden_states_layers") == value


@pytest.mark.parametrize("text", [
    "inference:\n  aux_hidden_states_layers: 3\n",
    "inference:\n  aux_hidden_states_layers:\n  - 1.5\n",
    "inference:\n  aux_hidden_states_layers: [1, [2]]\n",
    "inference:\n  aux_hidden_states_layers: *taps\n",
])
def test_the_yaml_reader_refuses_a_list_it_cannot_read_for_sure(text: str) -> None:
    with pytest.raises(ValueError):
        read_yaml_int_list(text, "inference", "aux_hidden_states_layers")


# --------------------------------------------------------------------------
# DFlash: the block size, and taps left to TorchSpec's default


def test_a_dflash_run_writes_its_block_size(tmp_path: Path) -> None:
    run = write_run(tmp_path / "run", dflash_training_state(), dflash_config(), block=8)
    [note] = src007(check_checkpoint(run, verdict="contents"))
    assert "block_size 8" in note and "training.dflash_block_size" in note
    assert converted_config(tmp_path, run)["block_size"] == 8


def test_a_dflash_config_without_taps_gets_torchspecs_default(tmp_path: Path) -> None:
    config = dflash_config()
    del config["target_layer_ids"]
    run = write_run(tmp_path / "run", dflash_training_state(), config, block=16)
    expected = build_target_layer_ids(config["num_target_layers"], config["target_num_hidden_layers"])
    notes = src007(check_checkpoint(run, verdict="contents"))
    assert any(str(expected) in n and "build_target_layer_ids" in n for n in notes), notes
    assert converted_config(tmp_path, run)["target_layer_ids"] == expected


@pytest.mark.parametrize("count, layers, expected", [
    (5, 36, [1, 9, 17, 25, 33]),  # TorchSpec's docstring example
    (3, 8, [1, 3, 5]),
    (1, 36, [18]),
])
def test_torchspecs_dflash_tap_spacing(count: int, layers: int, expected: list[int]) -> None:
    assert build_target_layer_ids(count, layers) == expected


# --------------------------------------------------------------------------
# An optimizer or scheduler folder is not a draft


@pytest.mark.parametrize("folder", ["optimizer", "lr_scheduler"])
def test_an_optimizer_folder_names_where_the_weights_are(tmp_path: Path, folder: str) -> None:
    make_run(tmp_path / "run", steps=(1001,), latest="1001")
    iteration = tmp_path / "run" / "checkpoints" / "iter_0001001"
    result = dspark("check", str(iteration / folder))
    assert result.returncode == 2, result.stdout + result.stderr
    assert "optimizer or scheduler state" in result.stderr and str(iteration / "model") in result.stderr
    assert "Traceback" not in result.stderr


def test_the_convert_command_for_a_folder_inside_a_run_writes_beside_the_run(tmp_path: Path) -> None:
    """TorchSpec's rotation deletes whole iterations: a converted draft
    inside one would go with it."""
    run = eagle3_run(tmp_path / "run", aux=" null")
    for named, destination in [
        (run / "checkpoints" / "iter_0000003" / "model", f"{run}-iter_0000003-served"),
        (run / "checkpoints" / "iter_0000003", f"{run}-iter_0000003-served"),
        (run, f"{run}-served"),
    ]:
        [served] = [f for f in check_checkpoint(named).findings if f.code == "SRV001"]
        assert served.detail["command"].split()[3] == destination, served.detail["command"]


def test_a_run_without_a_list_trained_on_torchspecs_default_not_the_configs(tmp_path: Path) -> None:
    """TorchSpec's inference engines never read the draft config's list: a
    run that sets none captured [1, N//2-1, N-4] of its target
    (sgl_engine.py@6f21829:172-177; utils/misc.py@6f21829:76-88)."""
    target = tmp_path / "target"
    target.mkdir()
    (target / "config.json").write_text(json.dumps({"model_type": "llama", "num_hidden_layers": 16,
                                                    "hidden_size": 32, "vocab_size": 96}))
    run = eagle3_run(tmp_path / "run", aux=" null", tap_ids=[2, 8, 13], target=str(target))
    [note] = src007(check_checkpoint(run, verdict="contents"))
    assert "[1, 7, 12]" in note and "16-layer target" in note and "says [2, 8, 13]" in note
    config = converted_config(tmp_path, run)
    assert config["eagle_aux_hidden_state_layer_ids"] == [1, 7, 12]


def test_a_run_whose_target_is_not_here_warns_about_a_declared_list(tmp_path: Path) -> None:
    run = eagle3_run(tmp_path / "run", aux=" null", tap_ids=[2, 8, 13])  # a Hub id as the target
    report = check_checkpoint(run, verdict="contents")
    [warning] = [f for f in report.warnings if f.code == "SRC007"]
    assert "cannot tell them apart" in warning.message and "[2, 8, 13]" in warning.message



def test_the_values_taken_from_the_run_are_listed_as_config_changes(tmp_path: Path) -> None:
    """What the reader took from the run (SRC007) is an edit convert writes:
    a reviewer reading the plan's change list sees it there, not only in a note."""
    from dspark.converters.convert_plan import plan_conversion

    taps = plan_conversion(eagle3_run(tmp_path / "e3", aux=" [2, 5, 6]"), tmp_path / "out-e3")
    assert any(c.startswith("eagle_aux_hidden_state_layer_ids: ") and c.split(" (")[0].endswith("-> [2, 5, 6]")
               for c in taps.config_changes), taps.config_changes
    block = plan_conversion(write_run(tmp_path / "dflash", dflash_training_state(), dflash_config(), block=8),
                            tmp_path / "out-dflash")
    assert any(c.startswith("block_size: ") and "-> 8 (SRC007" in c for c in block.config_changes), block.config_changes
    config = dflash_config()
    del config["target_layer_ids"]
    default = plan_conversion(write_run(tmp_path / "default", dflash_training_state(), config, block=16),
                              tmp_path / "out-default")
    expected = build_target_layer_ids(config["num_target_layers"], config["target_num_hidden_layers"])
    assert f"target_layer_ids: absent -> {expected!r} (SRC007: trainer default)" in default.config_changes
