"""Benchmark `dspark convert` (fp32 -> bfloat16) on a draft of >= 500 MB.

    python tests/benchmarks/bench_convert.py [--workdir DIR] [--repeats 3] [--layers 2] [--json OUT] [--smoke]

In one run it fabricates a valid K3 DSpark draft in fp32 (one
model.safetensors, written by the safetensors library; 625 MiB with the
default 2 layers, 2,068 MiB with `--layers 8`, the largest tensor 80 MiB
either way) and measures, each in a fresh process:

* floor    - an interpreter that imports exactly the modules `dspark convert`
             ended up importing, and does nothing: the interpreter-and-imports floor;
* convert  - `dspark convert SRC DST --dtype bfloat16 --quiet`;
* cp -r    - a plain copy of the same files;
* load-all - `safetensors.torch.load_file`, `.to(bfloat16)`, `save_file`.

Peak RSS is each child's ru_maxrss (wait4). A child inherits its parent's
high-water mark across fork and exec, so this script imports nothing large
and fabricates the draft in a child of its own. Times are the median of
`--repeats` runs, interleaved, on a warm page cache; where the page cache
can be dropped (root on Linux) a cold round follows, dropping it before
every command. Before every command the dirty pages of the previous ones
are synced (`os.sync`), so that no command pays for another's writeback
(cp and load-all leave theirs in the page cache; convert fsyncs its own).
Every run's seconds are printed to stderr. Goals (from the convert issue): peak RSS <= floor + 2 x
largest tensor + 64 MB; time <= 2.0 x cp -r (judged on the warm round).
Not collected by pytest (bench_*.py); tests/benchmarks/test_benchmarks_run.py
runs it with `--smoke`: the tiny draft, one warm round, goals not judged.
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

# ~630 MB of served fp32 weights; the largest tensor (context_proj) is 80 MiB.
BENCH_SPEC = dict(
    hidden_size=2048, intermediate_size=8192, num_hidden_layers=2, num_attention_heads=16,
    q_lora_rank=1024, kv_lora_rank=512, qk_nope_head_dim=128, qk_rope_head_dim=64, v_head_dim=128,
    vocab_size=32768, target_hidden_size=2048, target_num_hidden_layers=32,
    target_layer_ids=(3, 9, 15, 21, 27), markov_rank=256, confidence_hidden=2048,
)


def fabricate(folder: Path, layers: int, smoke: bool = False) -> tuple[int, int]:
    """Write the draft with numpy + safetensors; return (bytes, largest
    tensor bytes). `smoke`: the fabricator's tiny draft instead."""
    import numpy as np
    from safetensors.numpy import save_file

    from dspark.examples.fabricate import SCALES, DraftSpec, draft_config, tensor_shapes

    spec = SCALES["tiny"] if smoke else DraftSpec(**{**BENCH_SPEC, "num_hidden_layers": layers})
    rng = np.random.default_rng(0)
    tensors = {}
    for name, shape in tensor_shapes(spec, skipped=False).items():
        values = rng.standard_normal(shape, dtype=np.float32)
        if name.endswith("norm.weight") or "layernorm" in name or name.startswith("fc_norm."):
            values = 1.0 + 0.05 * values
        else:
            values *= 0.02
        tensors["model." + name] = values
    folder.mkdir(parents=True)
    save_file(tensors, str(folder / "model.safetensors"), metadata={"format": "pt"})
    config = draft_config(spec)
    config["torch_dtype"] = "float32"
    (folder / "config.json").write_text(json.dumps(config, indent=2))
    return sum(t.nbytes for t in tensors.values()), max(t.nbytes for t in tensors.values())


def run_child(command: list[str]) -> tuple[float, int]:
    """Wall seconds and peak RSS (bytes) of one child process."""
    started = time.perf_counter()
    process = subprocess.Popen(command, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    _, status, usage = os.wait4(process.pid, 0)
    elapsed = time.perf_counter() - started
    process.returncode = os.waitstatus_to_exitcode(status)
    stderr = process.stderr.read().decode()
    process.stderr.close()
    if process.returncode != 0:
        raise SystemExit(f"{' '.join(command)} failed ({process.returncode}):\n{stderr}")
    factor = 1 if sys.platform == "darwin" else 1024  # ru_maxrss is KiB on Linux
    return elapsed, usage.ru_maxrss * factor


CONVERT = """
import atexit, json, sys
modules_file = sys.argv.pop(1)
atexit.register(lambda: open(modules_file, "w").write(json.dumps(sorted(sys.modules))))
from dspark.cli.main import main
main()
"""

FLOOR = """
import importlib, json, sys
for name in json.load(open(sys.argv[1])):
    try:
        importlib.import_module(name)
    except Exception:
        pass
"""

LOAD_ALL = """
import sys, torch
from safetensors.torch import load_file, save_file
src, dst = sys.argv[1], sys.argv[2]
tensors = load_file(src + "/model.safetensors")
served = {k.removeprefix("model."): v.to(torch.bfloat16) for k, v in tensors.items()}
del tensors
save_file(served, dst + "/model.safetensors", metadata={"format": "pt"})
"""


DROP_CACHES = Path("/proc/sys/vm/drop_caches")


def can_drop_caches() -> bool:
    return DROP_CACHES.exists() and os.access(DROP_CACHES, os.W_OK)


def drop_caches() -> None:
    os.sync()
    DROP_CACHES.write_text("3\n")


def cpu_name() -> str:
    try:
        for line in subprocess.run(["lscpu"], capture_output=True, text=True).stdout.splitlines():
            if line.startswith("Model name:"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or "unknown"


def measure_round(source: Path, workdir: Path, repeats: int, cold: bool) -> tuple[dict, dict]:
    """Median seconds and peak RSS per command, runs interleaved.

    Before each command the previous one's dirty pages are synced (cp and
    load-all leave theirs behind; convert fsyncs its own), and only then
    are the previous outputs deleted, right before the command starts: on
    the benchmark VM, page-cache memory left free for a few seconds was
    slow to touch again (a copy into it took up to 10x as long), and
    keeping every run's output instead slowed the later runs the same way."""
    modules_file = workdir / "modules.json"
    outputs = {name: workdir / name for name in ("converted", "copied", "loaded")}
    commands = {
        "cp -r": ["cp", "-r", str(source), str(outputs["copied"])],
        "convert": [sys.executable, "-c", CONVERT, str(modules_file), "convert", str(source),
                    str(outputs["converted"]), "--dtype", "bfloat16", "--quiet"],
        "load-all": [sys.executable, "-c", LOAD_ALL, str(source), str(outputs["loaded"])],
    }
    times: dict[str, list[float]] = {label: [] for label in commands}
    peaks: dict[str, int] = {label: 0 for label in commands}
    for _ in range(repeats):
        for label, command in commands.items():
            if cold:
                drop_caches()
            else:
                os.sync()
            for out in outputs.values():
                shutil.rmtree(out, ignore_errors=True)
            outputs["loaded"].mkdir()
            elapsed, peak = run_child(command)
            times[label].append(elapsed)
            peaks[label] = max(peaks[label], peak)
    for out in outputs.values():
        shutil.rmtree(out, ignore_errors=True)
    print(f"{'cold' if cold else 'warm'} runs, seconds: "
          + "; ".join(f"{label} {' '.join(f'{t:.2f}' for t in values)}" for label, values in times.items()),
          file=sys.stderr)
    return {label: statistics.median(values) for label, values in times.items()}, peaks


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--workdir", type=Path, help="where to write (default: a temporary folder)")
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--layers", type=int, default=2,
                        help="draft layers: 2 gives 625 MiB of fp32, 8 gives 2,068 MiB (default 2)")
    parser.add_argument("--json", type=Path, help="also write the results here")
    parser.add_argument("--smoke", action="store_true",
                        help="the smallest run, to show the script works: the tiny draft, one warm round, "
                             "goals printed but not judged")
    parser.add_argument("--fabricate-into", type=Path, help=argparse.SUPPRESS)  # the child that writes the draft
    args = parser.parse_args()
    if args.fabricate_into:
        print(json.dumps(fabricate(args.fabricate_into, args.layers, args.smoke)))
        return
    if args.smoke:
        args.repeats = 1

    load_before = os.getloadavg()
    workdir = Path(tempfile.mkdtemp(prefix="dspark-bench-", dir=args.workdir))
    try:
        source = workdir / "src"
        made = subprocess.run([sys.executable, __file__, "--fabricate-into", str(source), "--layers", str(args.layers),
                               *(["--smoke"] if args.smoke else [])],
                              capture_output=True, text=True, check=True)
        total, largest = json.loads(made.stdout)
        subprocess.run(["cat", str(source / "model.safetensors")], stdout=subprocess.DEVNULL, check=True)
        warm, peaks = measure_round(source, workdir, args.repeats, cold=False)
        _, floor = run_child([sys.executable, "-c", FLOOR, str(workdir / "modules.json")])
        cold = measure_round(source, workdir, args.repeats, cold=True)[0] if can_drop_caches() and not args.smoke else None
    finally:
        shutil.rmtree(workdir, ignore_errors=True)

    memory_goal = floor + 2 * largest + 64 * MB
    time_ratio = warm["convert"] / warm["cp -r"]
    results = {
        "command": f"python tests/benchmarks/bench_convert.py --repeats {args.repeats} --layers {args.layers}",
        "load_average_before": load_before,
        "load_average_after": os.getloadavg(),
        "cpu": cpu_name(),
        "cores": os.cpu_count(),
        "python": platform.python_version(),
        "source_bytes": total,
        "largest_tensor_bytes": largest,
        "floor_rss_bytes": floor,
        "memory_goal_bytes": memory_goal,
        "peak_rss_bytes": peaks,
        "median_seconds_warm": warm,
        "median_seconds_cold": cold,
        "convert_vs_cp_warm": time_ratio,
        "convert_vs_cp_cold": cold["convert"] / cold["cp -r"] if cold else None,
        "convert_vs_load_all_warm": warm["convert"] / warm["load-all"],
        "memory_pass": peaks["convert"] <= memory_goal,
        "time_pass": time_ratio <= 2.0,
    }

    verdict = {True: "PASS", False: "FAIL"}
    print(f"draft: {total / MB:,.0f} MiB fp32 in one model.safetensors; largest tensor {largest / MB:,.0f} MiB")
    print(f"machine: {results['cpu']}, {results['cores']} cores, Python {results['python']}; "
          f"median of {args.repeats} runs; load average {load_before[0]:.2f} before, "
          f"{results['load_average_after'][0]:.2f} after\n")
    header = f"{'':<10} {'warm s':>7} {'cold s':>7} {'peak RSS':>10}  convert is"
    print(header)
    for label in ("convert", "cp -r", "load-all"):
        cold_text = f"{cold[label]:>7.2f}" if cold else f"{'-':>7}"
        ratio = warm["convert"] / warm[label]
        print(f"{label:<10} {warm[label]:>7.2f} {cold_text} {peaks[label] / MB:>6,.0f} MiB  {ratio:>5.2f}x")
    print(f"{'floor':<10} {'':>7} {'':>7} {floor / MB:>6,.0f} MiB")
    print(f"\nmemory: convert peak {peaks['convert'] / MB:,.0f} MiB <= floor {floor / MB:,.0f} + 2 x {largest / MB:,.0f} "
          f"+ 64 = {memory_goal / MB:,.0f} MiB  {verdict[results['memory_pass']]}")
    print(f"time:   convert {warm['convert']:.2f} s = {time_ratio:.2f} x cp -r, warm cache (goal <= 2.0)  "
          f"{verdict[results['time_pass']]}")
    if cold:
        print(f"        cold cache: {results['convert_vs_cp_cold']:.2f} x cp -r")
    print(f"        load-all baseline: convert takes {results['convert_vs_load_all_warm']:.2f} x its time, "
          f"at {peaks['convert'] / peaks['load-all']:.2f} x its peak memory")
    if args.json:
        args.json.write_text(json.dumps(results, indent=2) + "\n")
    if args.smoke:
        print("smoke run: every command ran; goals not judged at this size")
        return
    if not (results["memory_pass"] and results["time_pass"]):
        raise SystemExit(1)


if __name__ == "__main__":
    main()
