"""The CI glue runs from the repository as its documentation says: the
example gate script, the pre-commit hook's entry, the GitHub Action."""

from __future__ import annotations

import os
import re
import shlex
import shutil
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
EXAMPLE = "examples/tiny-k3-dspark"


def environment(**extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k not in ("DSPARK_DEBUG", "FORCE_COLOR")}
    # the `dspark` and `python` of this install first on the PATH, as in an activated environment
    env["PATH"] = f"{Path(sys.executable).parent}{os.pathsep}{env.get('PATH', '')}"
    env.update(NO_COLOR="1", **extra)
    return env


def test_the_example_gate_script_passes_the_bundled_draft():
    done = subprocess.run(["bash", str(ROOT / "examples" / "predeploy_gate.sh")], capture_output=True, text=True,
                          cwd=ROOT, env=environment(), timeout=300)
    assert done.returncode == 0, done.stdout + done.stderr
    assert "PASS" in done.stdout and "predeploy gate: passed" in done.stdout


def test_the_example_gate_script_exits_with_the_gates_code(tmp_path):
    policy = tmp_path / "policy.toml"
    policy.write_text("fail_on_warnings = true\nsmoke = { required = true }\n")
    done = subprocess.run(["bash", str(ROOT / "examples" / "predeploy_gate.sh"), "--policy", str(policy), "-q"],
                          capture_output=True, text=True, cwd=tmp_path, env=environment(), timeout=300)
    if _gpu():
        assert done.returncode == 0, done.stdout + done.stderr
    else:  # the policy requires the smoke, and there is no GPU to run it on
        assert done.returncode == 1 and "failed step(s): smoke" in done.stdout, done.stdout + done.stderr
    policy.write_text("no_such_key = 1\n")
    done = subprocess.run(["bash", str(ROOT / "examples" / "predeploy_gate.sh"), "--policy", str(policy)],
                          capture_output=True, text=True, cwd=tmp_path, env=environment(), timeout=300)
    assert done.returncode == 2 and "no_such_key" in done.stderr


def _gpu() -> bool:
    try:
        import torch
    except ImportError:
        return False
    return torch.cuda.is_available()


def hook() -> dict[str, str]:
    text = (ROOT / ".pre-commit-hooks.yaml").read_text()
    return dict(re.findall(r"^  (\w+): (.+)$", text, flags=re.M)) | dict(re.findall(r"^- (id): (.+)$", text, flags=re.M))


def test_the_pre_commit_hook_checks_the_changed_draft_folders(tmp_path):
    spec = hook()
    assert spec["id"] == "dspark-check" and spec["language"] == "python"
    changed = [f"{EXAMPLE}/config.json", f"{EXAMPLE}/model.safetensors", "README.md"]
    files = re.compile(spec["files"])
    assert [f for f in changed if files.search(f)] == changed[:2]
    done = subprocess.run([*shlex.split(spec["entry"]), *changed[:2]], capture_output=True, text=True,
                          cwd=ROOT, env=environment(), timeout=300)
    assert done.returncode == 0, done.stdout + done.stderr
    assert done.stdout.count("PASS") == 1  # one folder, checked once

    broken = tmp_path / "broken"
    shutil.copytree(ROOT / EXAMPLE, broken)
    (broken / "config.json").write_text((broken / "config.json").read_text().replace('"fc_norm": true', '"fc_norm": false'))
    done = subprocess.run([*shlex.split(spec["entry"]), "-q", f"{EXAMPLE}/config.json", str(broken / "config.json")],
                          capture_output=True, text=True, cwd=ROOT, env=environment(), timeout=300)
    assert done.returncode == 1 and "FCN002" in done.stdout, done.stdout + done.stderr


def _action_step_script(step_id: str) -> str:
    """The bash `run: |` block of the action's step `step_id`, dedented."""
    lines = (ROOT / "action.yml").read_text().splitlines()
    start = lines.index(f"      id: {step_id}")
    run = next(i for i in range(start, len(lines)) if lines[i].strip() == "run: |")
    body = []
    for line in lines[run + 1:]:
        if line.strip() and not line.startswith(" " * 8):
            break
        body.append(line[8:])
    return "\n".join(body)


def _run_action_gate(tmp_path, draft: Path, **inputs: str):
    github_output = tmp_path / "github_output"
    github_output.write_text("")
    env = environment(DRAFT=str(draft), TARGET="", POLICY="", ENGINE="", SARIF="", GITHUB_OUTPUT=str(github_output))
    env.update(inputs)
    done = subprocess.run(["bash", "-c", _action_step_script("gate")], capture_output=True, text=True,
                          cwd=tmp_path, env=env, timeout=300)
    return done, github_output.read_text()


def test_the_action_annotates_and_writes_sarif_in_one_gate_run(tmp_path):
    import json

    text = (ROOT / "action.yml").read_text()
    assert "using: composite" in text and "github/codeql-action/upload-sarif" in text

    broken = tmp_path / "broken"
    shutil.copytree(ROOT / EXAMPLE, broken)
    (broken / "config.json").write_text((broken / "config.json").read_text().replace('"fc_norm": true', '"fc_norm": false'))
    done, outputs = _run_action_gate(tmp_path, broken, SARIF="dspark.sarif")
    assert done.returncode == 1, done.stdout + done.stderr
    assert "exit-code=1" in outputs
    assert any(line.startswith("::error") and "FCN002" in line for line in done.stdout.splitlines()), done.stdout
    sarif = json.loads((tmp_path / "dspark.sarif").read_text())
    assert sarif["version"] == "2.1.0"
    assert "FCN002" in {result["ruleId"] for result in sarif["runs"][0]["results"]}


def test_the_action_without_sarif_writes_no_file(tmp_path):
    done, outputs = _run_action_gate(tmp_path, ROOT / EXAMPLE)
    assert done.returncode == 0, done.stdout + done.stderr
    assert "exit-code=0" in outputs and "PASS" in done.stdout
    assert not list(tmp_path.glob("*.sarif"))
