"""Every benchmark script runs: the CPU ones at their smallest size
(`--smoke`: a tiny draft, one run of each command, goals not judged), the
GPU ones refuse a machine without a GPU with exit 2 naming what they need.
And every benchmark command the docs give names flags its script has.

A change that breaks a script (a renamed option, a verdict the script takes
for a crash) fails here, not the next time someone measures."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
BENCHMARKS = ROOT / "tests" / "benchmarks"

# script -> the arguments of its smallest run on a CPU
CPU_RUNS = {
    "bench_check.py": ["--smoke"],
    "bench_convert.py": ["--smoke"],
    "bench_dcp.py": ["--smoke"],
    "bench_remote.py": [],
    "k3_projection_draft.py": ["--smoke", "projection"],
}
GPU_SCRIPTS = ["bench_engine_kernel.py", "bench_launch_overhead.py", "bench_segmented_rmsnorm.py",
               "explore_kernel_variants.py", "sweep_launch_configs.py"]
NEEDS_TORCH = {"bench_dcp.py", "k3_projection_draft.py", *GPU_SCRIPTS}


def _run(script: str, args: list[str], tmp_path: Path) -> subprocess.CompletedProcess:
    environment = {k: v for k, v in os.environ.items() if k != "TRITON_INTERPRET"}
    return subprocess.run([sys.executable, str(BENCHMARKS / script), *args], capture_output=True, text=True,
                          timeout=300, cwd=tmp_path, env=environment)


def test_every_script_is_run_here():
    scripts = sorted(p.name for p in BENCHMARKS.glob("*.py") if not p.name.startswith(("test_", "__")))
    assert scripts == sorted([*CPU_RUNS, *GPU_SCRIPTS])


@pytest.mark.parametrize("script", sorted(CPU_RUNS))
def test_a_cpu_benchmark_runs_at_its_smallest_size(script, tmp_path):
    if script in NEEDS_TORCH:
        pytest.importorskip("torch")
    done = _run(script, CPU_RUNS[script], tmp_path)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    assert done.stdout.strip()


@pytest.mark.parametrize("script", GPU_SCRIPTS)
def test_a_gpu_benchmark_on_a_cpu_machine_exits_2_naming_the_gpu(script, tmp_path):
    pytest.importorskip("torch")
    from dspark.cli.gate import _no_gpu_reason

    if _no_gpu_reason() is None:
        pytest.skip("a GPU may be here: the script would run in full")
    done = _run(script, [], tmp_path)
    last = done.stderr.strip().splitlines()[-1:]
    assert done.returncode == 2 and last and last[0].startswith("needs ") and "GPU" in last[0], done.stderr[-3000:]


DOC_COMMAND = re.compile(r"python (?:\S*/)?tests/benchmarks/(\w+\.py)((?:[ \t]+(?:--[\w-]+|[^\s#`|\\]+)|[ \t]*\\\n)*)")


def _documented_commands() -> list[tuple[str, str, list[str]]]:
    found = []
    for doc in [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]:
        for match in DOC_COMMAND.finditer(doc.read_text(encoding="utf-8")):
            flags = re.findall(r"(?<!\S)(--[\w-]+)", match.group(2))
            found.append((doc.name, match.group(1), flags))
    return found


def test_the_docs_cite_benchmarks_that_exist_with_flags_they_take():
    commands = _documented_commands()
    assert len({script for _, script, _ in commands}) >= 5  # the pattern still finds them
    wrong = []
    for doc, script, flags in commands:
        path = BENCHMARKS / script
        if not path.is_file():
            wrong.append(f"{doc}: {script} does not exist")
            continue
        source = path.read_text(encoding="utf-8")
        wrong += [f"{doc}: {script} {flag}" for flag in flags if f'"{flag}"' not in source]
    assert wrong == []
