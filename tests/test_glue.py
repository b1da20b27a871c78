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


def test_the_action_runs_the_gate_with_github_annotations():
    text = (ROOT / "action.yml").read_text()
    assert "using: composite" in text
    assert re.search(r"args=\(\"\$DRAFT\" --format github\)", text) and 'dspark gate "${args[@]}"' in text
    assert "pip install" in text
