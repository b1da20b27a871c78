"""Benchmark DCP input against the same draft in safetensors, in one run.

    python tests/benchmarks/bench_dcp.py [--workdir DIR] [--repeats 5] [--layers 2] [--json OUT] [--smoke]

It fabricates one valid K3 DSpark draft in bfloat16 (what TorchSpec's
trainer saves), with the embedding and confidence head a training module
holds (441 MiB in 37 tensors with the default 2 layers; the largest, the
embedding, 128 MiB), and writes it twice, in a child process:

* safetensors - `model.safetensors` + `config.json`, written by the
                safetensors library: the baseline;
* dcp         - a TorchSpec training run: `config.yaml` naming the draft
                config, `checkpoints/latest_checkpointed_iteration.txt`,
                `checkpoints/iter_0000001/model/` written by
                `torch.distributed.checkpoint.save`, every key
                `model_state.model.draft_model.<name>`.

Then, each in a fresh process, interleaved, on a warm page cache:

* `dspark convert SRC DST --quiet` (no cast) and `dspark check SRC --deep
  --contents` for both inputs (`--contents`: the values and the layout
  inside; the served verdict of a training run is SRV001, "convert first",
  exit 1, which would say nothing about reading it);
* torch's own DCP load (`dcp.load` of every tensor, `no_dist=True`), for
  reference: what reading the folder through torch costs.

CPU time is the child's user + system time, and peak RSS its ru_maxrss
(wait4); figures are medians of `--repeats` runs. This script imports
nothing large and fabricates in children, so no child inherits a large
high-water mark. Goals: DCP input costs at most 1.25x the CPU time of the
safetensors input, and its peak RSS is within 16 MiB of it. Not collected
by pytest (bench_*.py); tests/benchmarks/test_benchmarks_run.py runs it
with `--smoke` (the tiny draft, one run each, goals not judged). Exit
status 0 when every goal passes.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

MB = 1024 * 1024
GOAL_CPU_RATIO = 1.25
GOAL_RSS_SLACK = 16 * MB

# bench_convert.py's draft dimensions.
BENCH_SPEC = dict(
    hidden_size=2048, intermediate_size=8192, num_hidden_layers=2, num_attention_heads=16,
    q_lora_rank=1024, kv_lora_rank=512, qk_nope_head_dim=128, qk_rope_head_dim=64, v_head_dim=128,
    vocab_size=32768, target_hidden_size=2048, target_num_hidden_layers=32,
    target_layer_ids=(3, 9, 15, 21, 27), markov_rank=256, confidence_hidden=2048,
)

CLI = "import sys; from dspark.cli.main import main; sys.argv[0] = 'dspark'; main()"

TORCH_DCP_LOAD = """
import sys, warnings
warnings.filterwarnings("ignore")
import torch
import torch.distributed.checkpoint as dcp
model = sys.argv[1]
metadata = dcp.FileSystemReader(model).read_metadata()
state = {k: torch.empty(tuple(m.size), dtype=m.properties.dtype) for k, m in metadata.state_dict_metadata.items()}
dcp.load(state, checkpoint_id=model, no_dist=True)
"""


def fabricate(root: Path, layers: int, smoke: bool = False) -> dict:
    """Write the draft both ways; return sizes."""
    import warnings

    import torch
    import torch.distributed.checkpoint as dcp
    from safetensors.torch import save_file

    from dspark.examples.fabricate import SCALES, DraftSpec, draft_config, tensor_shapes

    warnings.filterwarnings("ignore")
    spec = SCALES["tiny"] if smoke else DraftSpec(**{**BENCH_SPEC, "num_hidden_layers": layers})
    generator = torch.Generator().manual_seed(0)
    tensors = {}
    for name, shape in tensor_shapes(spec).items():
        values = torch.randn(shape, generator=generator) * 0.02
        if name.endswith("norm.weight") or "layernorm" in name or name.startswith("fc_norm."):
            values += 1.0
        tensors[name] = values.to(torch.bfloat16)
    config = draft_config(spec)

    safetensors_dir = root / "safetensors"
    safetensors_dir.mkdir(parents=True)
    save_file(tensors, str(safetensors_dir / "model.safetensors"), metadata={"format": "pt"})
    (safetensors_dir / "config.json").write_text(json.dumps(config, indent=2))

    run = root / "dcp-run"
    model = run / "checkpoints" / "iter_0000001" / "model"
    dcp.save({"model_state": {"model": {"draft_model": tensors}}}, checkpoint_id=str(model), no_dist=True)
    (run / "checkpoints" / "latest_checkpointed_iteration.txt").write_text("1")
    (run / "draft_config.json").write_text(json.dumps(config, indent=2))
    (run / "config.yaml").write_text("model:\n  draft_model_config: draft_config.json\n")
    return {
        "bytes": sum(t.numel() * t.element_size() for t in tensors.values()),
        "largest": max(t.numel() * t.element_size() for t in tensors.values()),
        "tensors": len(tensors),
        "dcp_files": sorted(p.name for p in model.iterdir()),
    }


def run_child(command: list[str]) -> tuple[float, float, int]:
    """Wall seconds, CPU seconds (user + system) and peak RSS of one child."""
    started = time.perf_counter()
    process = subprocess.Popen(command, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    _, status, usage = os.wait4(process.pid, 0)
    wall = time.perf_counter() - started
    stderr = process.stderr.read().decode()
    process.stderr.close()
    if os.waitstatus_to_exitcode(status) != 0:
        raise SystemExit(f"{' '.join(command)} failed:\n{stderr}")
    factor = 1 if sys.platform == "darwin" else 1024
    return wall, usage.ru_utime + usage.ru_stime, usage.ru_maxrss * factor


def cpu_name() -> str:
    try:
        for line in subprocess.run(["lscpu"], capture_output=True, text=True).stdout.splitlines():
            if line.startswith("Model name:"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or "unknown"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--workdir", type=Path, help="where to write (default: a temporary folder)")
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--layers", type=int, default=2)
    parser.add_argument("--json", type=Path, help="also write the results here")
    parser.add_argument("--smoke", action="store_true",
                        help="the smallest run, to show the script works: the tiny draft, one run each, "
                             "goals printed but not judged")
    parser.add_argument("--fabricate-into", type=Path, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.fabricate_into:
        print(json.dumps(fabricate(args.fabricate_into, args.layers, args.smoke)))
        return
    if args.smoke:
        args.repeats = 1

    workdir = Path(tempfile.mkdtemp(prefix="dspark-bench-dcp-", dir=args.workdir))
    load_before = os.getloadavg()
    try:
        made = subprocess.run([sys.executable, __file__, "--fabricate-into", str(workdir), "--layers", str(args.layers),
                               *(["--smoke"] if args.smoke else [])],
                              capture_output=True, text=True, check=True)
        sizes = json.loads(made.stdout)
        sources = {"safetensors": workdir / "safetensors", "dcp": workdir / "dcp-run"}
        for path in sources.values():  # warm the page cache
            subprocess.run(["find", str(path), "-type", "f", "-exec", "cat", "{}", "+"], stdout=subprocess.DEVNULL, check=True)
        out = workdir / "out"
        commands = {}
        for kind, source in sources.items():
            commands[f"convert {kind}"] = [sys.executable, "-c", CLI, "convert", str(source), str(out), "--quiet"]
            commands[f"check --deep {kind}"] = [sys.executable, "-c", CLI, "check", str(source), "--deep", "--contents"]
        if not args.smoke:  # the reference alone costs seconds: torch's import
            commands["torch dcp.load"] = [sys.executable, "-c", TORCH_DCP_LOAD,
                                          str(sources["dcp"] / "checkpoints" / "iter_0000001" / "model")]
        runs: dict[str, list[tuple[float, float, int]]] = {label: [] for label in commands}
        for _ in range(args.repeats):
            for label, command in commands.items():
                shutil.rmtree(out, ignore_errors=True)
                os.sync()
                runs[label].append(run_child(command))
        shutil.rmtree(out, ignore_errors=True)
    finally:
        shutil.rmtree(workdir, ignore_errors=True)

    def median(label: str, index: int) -> float:
        return statistics.median(r[index] for r in runs[label])

    results: dict = {
        "command": f"python tests/benchmarks/bench_dcp.py --repeats {args.repeats} --layers {args.layers}",
        "cpu": cpu_name(), "cores": os.cpu_count(), "python": platform.python_version(),
        "load_average_before": load_before, "load_average_after": os.getloadavg(),
        "draft_bytes": sizes["bytes"], "largest_tensor_bytes": sizes["largest"], "tensors": sizes["tensors"],
        "dcp_files": sizes["dcp_files"],
        "median": {label: {"wall_s": median(label, 0), "cpu_s": median(label, 1), "peak_rss_bytes": max(r[2] for r in runs[label])}
                   for label in commands},
        "cpu_runs_s": {label: [round(r[1], 3) for r in runs[label]] for label in commands},
    }
    verdicts = {}
    for command in ("convert", "check --deep"):
        base, dcp = results["median"][f"{command} safetensors"], results["median"][f"{command} dcp"]
        cpu_ratio = dcp["cpu_s"] / base["cpu_s"]
        rss_delta = dcp["peak_rss_bytes"] - base["peak_rss_bytes"]
        verdicts[command] = {"cpu_ratio": cpu_ratio, "rss_delta_bytes": rss_delta,
                             "cpu_pass": cpu_ratio <= GOAL_CPU_RATIO, "rss_pass": rss_delta <= GOAL_RSS_SLACK}
    results["verdicts"] = verdicts

    verdict = {True: "PASS", False: "FAIL"}
    print(f"draft: {sizes['bytes'] / MB:,.0f} MiB bf16, {sizes['tensors']} tensors, largest {sizes['largest'] / MB:,.0f} MiB; "
          f"DCP files {', '.join(sizes['dcp_files'])}")
    print(f"machine: {results['cpu']}, {results['cores']} cores, Python {results['python']}; median of {args.repeats} runs; "
          f"load average {load_before[0]:.2f} before, {results['load_average_after'][0]:.2f} after\n")
    print(f"{'':<28} {'wall s':>7} {'CPU s':>7} {'peak RSS':>10}")
    for label in commands:
        row = results["median"][label]
        print(f"{label:<28} {row['wall_s']:>7.2f} {row['cpu_s']:>7.2f} {row['peak_rss_bytes'] / MB:>6,.0f} MiB")
    print()
    for command, row in verdicts.items():
        print(f"{command:<13} DCP / safetensors: CPU {row['cpu_ratio']:.2f}x (goal <= {GOAL_CPU_RATIO})  "
              f"{verdict[row['cpu_pass']]};  peak RSS {row['rss_delta_bytes'] / MB:+,.1f} MiB (goal <= +16)  "
              f"{verdict[row['rss_pass']]}")
    if "torch dcp.load" in results["median"]:
        torch_load = results["median"]["torch dcp.load"]
        convert_dcp = results["median"]["convert dcp"]
        print(f"reference: torch's dcp.load of the same folder takes {torch_load['cpu_s']:.2f} CPU s at "
              f"{torch_load['peak_rss_bytes'] / MB:,.0f} MiB; dspark convert from it {convert_dcp['cpu_s']:.2f} CPU s "
              f"at {convert_dcp['peak_rss_bytes'] / MB:,.0f} MiB")
    if args.json:
        args.json.write_text(json.dumps(results, indent=2) + "\n")
    if args.smoke:
        print("smoke run: every command ran; goals not judged at this size")
        return
    if not all(row["cpu_pass"] and row["rss_pass"] for row in verdicts.values()):
        raise SystemExit(1)


if __name__ == "__main__":
    main()
