"""The human page: root causes first, and lines that fit the terminal."""

from __future__ import annotations

import json


def _hidden_size_true(tiny_draft):
    draft = tiny_draft()
    config = json.loads((draft / "config.json").read_text())
    config["hidden_size"] = True
    (draft / "config.json").write_text(json.dumps(config))
    return draft


def _finding_codes(page: str) -> list[str]:
    return [line.split()[1] for line in page.splitlines() if line.split()[:1] in (["error"], ["warning"], ["info"])]


def test_the_engine_coercion_is_printed_before_the_shape_errors_it_causes(dspark, tiny_draft):
    run = dspark("check", _hidden_size_true(tiny_draft))
    assert run.exit_code == 1
    codes = _finding_codes(run.stdout)
    assert codes.count("INV003") == 19
    assert codes[0] == "ENG003"


def test_findings_wrap_to_the_terminal_width_without_breaking_names(dspark_tty, tiny_draft):
    run = dspark_tty("check", _hidden_size_true(tiny_draft), columns=80)
    assert run.exit_code == 1
    findings = [line for line in run.stdout.splitlines()
                if line.startswith(("error ", "warning ", "info ", " " * 15))]
    assert len(findings) > 25  # the messages took more than one line each
    assert all(len(line) <= 80 for line in findings), "\n".join(l for l in findings if len(l) > 80)
    # every tensor name is whole on one line
    assert "model.safetensors: layers.0.self_attn.kv_a_proj_with_mqa.weight" in run.stdout


def test_off_a_terminal_a_finding_stays_one_line(dspark, tiny_draft):
    run = dspark("check", _hidden_size_true(tiny_draft))
    eng = [line for line in run.stdout.splitlines() if "ENG003" in line]
    assert len(eng) == 1 and eng[0].endswith("so other loaders agree.")


def test_a_status_table_wraps_its_detail_under_its_column(dspark_tty):
    run = dspark_tty("doctor", columns=72)
    lines = run.stdout.splitlines()
    assert all(len(line) <= 72 for line in lines if " " in line.strip()), run.stdout
    column = lines[0].index("detail")
    # a continuation line starts at the detail column
    continued = [line for line in lines[1:] if line[:column].strip() == "" and line.strip()]
    assert continued and all(line[column] != " " for line in continued), run.stdout
