"""`python -m dspark.examples.fabricate` as a command: every family from the
command line, the defect list, and usage errors that exit 2 and write
nothing; the drafts it writes judged by the `dspark` command."""

from __future__ import annotations

import json
import re

import pytest

from dspark.cli.errors import EXIT_CHECK_FAILED, EXIT_OK, EXIT_USAGE
from dspark.examples.fabricate import FABRICATORS, main

pytest.importorskip("torch")


def fabricate(capsys, *args) -> tuple[int, str, str]:
    capsys.readouterr()
    try:
        main([str(a) for a in args])
        code = 0
    except SystemExit as exit:
        code = exit.code if isinstance(exit.code, int) else 1
    out, err = capsys.readouterr()
    return code, out, err


def test_list_defects_prints_family_defect_code_and_description(capsys):
    code, out, _ = fabricate(capsys, "--list-defects")
    assert code == EXIT_OK
    rows = [re.split(r"\s{2,}", line.strip(), maxsplit=3) for line in out.splitlines()[1:]]
    listed = {(family, name, finding) for family, name, finding, _ in rows}
    assert listed == {(family, name, defect.code)
                      for family, fab in FABRICATORS.items() for name, defect in fab.defects.items()}
    assert out.splitlines()[0].split() == ["family", "defect", "code", "description"]
    code, out, _ = fabricate(capsys, "--list-defects", "--family", "eagle3_mla")
    assert {line.split()[0] for line in out.splitlines()[1:]} == {"eagle3_mla"}
    assert "needs --deep" in out


def test_the_default_family_is_still_k3(capsys, tmp_path, dspark):
    code, out, _ = fabricate(capsys, tmp_path / "draft")
    assert (code, out.strip()) == (EXIT_OK, str(tmp_path / "draft"))
    assert json.loads((tmp_path / "draft" / "config.json").read_text())["model_type"] == "k3_dspark"
    assert dspark("check", tmp_path / "draft", "--deep", "--strict").exit_code == EXIT_OK


def engine_args(family: str) -> list[str]:
    """`--engine` for a family the default engine does not serve (the Qwen3-layer EAGLE-3: vLLM)."""
    engine = FABRICATORS[family].engine
    return ["--engine", engine] if engine else []


@pytest.mark.parametrize("family", list(FABRICATORS))
def test_every_family_from_the_command_line_good_and_broken(capsys, tmp_path, dspark, family):
    good, bad = tmp_path / "good", tmp_path / "bad"
    assert fabricate(capsys, good, "--family", family)[0] == EXIT_OK
    assert dspark("check", good, "--deep", "--strict", *engine_args(family)).exit_code == EXIT_OK
    defect = next(name for name, d in FABRICATORS[family].defects.items() if not d.target and not d.deep)
    assert fabricate(capsys, bad, "--family", family, "--defect", defect)[0] == EXIT_OK
    run = dspark("check", bad, "--format", "json", *engine_args(family))
    assert run.exit_code == EXIT_CHECK_FAILED
    assert FABRICATORS[family].defects[defect].code in {f["code"] for f in run.json()["findings"]}


def test_a_gqa_dspark_defect_checked_against_its_target(capsys, tmp_path, dspark):
    target = tmp_path / "target" / "config.json"
    code, _, err = fabricate(capsys, tmp_path / "draft", "--family", "dflash_gqa", "--variant", "dspark",
                             "--defect", "tap-last-layer", "--target-config", target)
    assert code == EXIT_OK, err
    without = dspark("check", tmp_path / "draft", "--format", "json")
    run = dspark("check", tmp_path / "draft", "--target", target, "--format", "json")
    # without --target, the layer count the config states bounds the taps (TGT009)
    assert without.exit_code == EXIT_CHECK_FAILED and "TGT009" in {f["code"] for f in without.json()["findings"]}
    assert run.exit_code == EXIT_CHECK_FAILED and "TGT005" in {f["code"] for f in run.json()["findings"]}
    assert "TGT009" not in {f["code"] for f in run.json()["findings"]}


@pytest.mark.parametrize("family", list(FABRICATORS))
def test_full_size_sparse_from_the_command_line(capsys, tmp_path, dspark, family):
    assert fabricate(capsys, tmp_path / "draft", "--family", family, "--scale", "full", "--sparse")[0] == EXIT_OK
    run = dspark("check", tmp_path / "draft", "--format", "json", *engine_args(family))
    assert run.exit_code == EXIT_OK
    assert {f["code"] for f in run.json()["findings"] if f["severity"] != "info"} <= {"PAY006"}


@pytest.mark.parametrize(
    ("args", "message"),
    [
        pytest.param(["--family", "dflash_gqa", "--defect", "d2t-short"], "dflash_gqa has no defect 'd2t-short'",
                     id="defect-of-another-family"),
        pytest.param(["--family", "k3_dspark", "--defect", "no-such-defect"], "--list-defects", id="unknown-defect"),
        pytest.param(["--family", "eagle3_llama", "--scale", "k3"], "use --scale full", id="k3-scale"),
        pytest.param(["--variant", "dspark"], "--variant does not apply to k3_dspark", id="variant-on-k3"),
        pytest.param(["--family", "eagle3_mla", "--stream", "attn_res"], "--stream does not apply", id="stream"),
        pytest.param(["--family", "eagle3_mla", "--defect", "nan", "--sparse"], "drop --sparse", id="deep-sparse"),
        pytest.param(["--family", "eagle3_mla", "--scale", "full", "--defect", "d2t-short"], "no d2t",
                     id="nothing-to-break-at-full-size"),
        pytest.param(["--no-fc-norm", "--defect", "fc-norm-count"], "needs --fc-norm", id="defect-needs-fc_norm"),
        pytest.param(["--shards", "0"], "at least one file", id="no-shards"),
        pytest.param(["--sparse", "--target-config", "."], "is a folder; name the file", id="target-config-folder"),
    ],
)
def test_what_cannot_be_made_exits_2_and_writes_nothing(capsys, tmp_path, args, message):
    code, _, err = fabricate(capsys, tmp_path / "draft", *args)
    assert code == EXIT_USAGE
    assert message in err and "Traceback" not in err
    assert not (tmp_path / "draft").exists()


def test_a_missing_out_is_a_usage_error(capsys):
    code, _, err = fabricate(capsys, "--family", "dflash_gqa")
    assert code == EXIT_USAGE and "OUT" in err
