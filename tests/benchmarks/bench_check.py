"""Benchmark `dspark check` against baselines measured in the same run.

    python tests/benchmarks/bench_check.py [--workdir DIR] [--layers N] [--repeat R]
        [--python PYTHON] [--skip-deep] [--smoke] [--instructions]

Goals (docs/check.md records the figures):

1. Header-only `check` of a full-size K3 fc_norm draft (73 tensors, ~6.6 GiB,
   sparse file) takes at most 1.25x the import floor
   `python -c "import typer, rich, jsonschema, safetensors"`, both measured
   with `--python`: the interpreter of a venv where dspark is installed as a
   user installs it (`pip install .`, not editable: an editable install adds
   a path finder of its own to every import).
2. ... and at most 1.25x the same check of the tiny example: the cost must not
   grow with the checkpoint.
3. `check --deep` of the same K3 draft written with real random bf16 values
   (not sparse) runs at least 0.5x as fast as `cat` of its page-cached files
   to /dev/null, end to end (start-up included).

Every figure is the best of R runs of a fresh process (the median is shown
beside it), interleaved so that drift on the machine hits every command
alike. Measured processes cache bytecode, as an installed package does.
Not collected by pytest (tests/benchmarks/test_benchmarks_run.py runs it
with `--smoke`: one run of each command on the tiny example and a one-layer
sparse draft, no deep part, goals not judged). Exit status: 0 when every
goal passes, 1 otherwise.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import platform
import resource
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

GOAL_FLOOR = 1.25
GOAL_TINY = 1.25
GOAL_DEEP = 0.5

SHARD_BYTES = 3 * 2**30
CLI = "import sys; from dspark.cli.main import main; sys.argv[0] = 'dspark'; main()"
FLOOR = "import typer, rich, jsonschema, safetensors"
# A bare typer command with the parameter types of `dspark check`: what any
# typer CLI pays before it does anything (to read the figures against).
TYPER_FLOOR = """
import enum
from pathlib import Path
from typing import Annotated, Optional
import typer
class Format(str, enum.Enum):
    human = "human"
    json = "json"
app = typer.Typer(add_completion=False, pretty_exceptions_enable=False)
@app.command()
def check(
    ckpt: Annotated[Path, typer.Argument()],
    target: Annotated[Optional[Path], typer.Option()] = None,
    deep: bool = False,
    config: Annotated[Optional[Path], typer.Option()] = None,
    format: Annotated[Format, typer.Option("--format")] = Format.human,
) -> None:
    pass
@app.command()
def inspect() -> None:
    pass
app()
"""


def cpu_name() -> str:
    try:
        out = subprocess.run(["lscpu"], capture_output=True, text=True, check=True).stdout
    except (OSError, subprocess.CalledProcessError):
        return platform.processor() or "unknown CPU"
    fields = dict(line.split(":", 1) for line in out.splitlines() if ":" in line)
    return fields.get("Model name", "unknown CPU").strip()


@dataclasses.dataclass
class Timings:
    best: dict[str, float]
    median: dict[str, float]
    # The child's user + system CPU time, best of the runs: less moved by
    # other work on a shared machine than wall time (which waits for a core).
    cpu: dict[str, float] = dataclasses.field(default_factory=dict)


class Runner:
    """Runs the measured commands in fresh processes with one environment:
    bytecode cached (under the work folder, not in the source tree) even
    when the caller runs with PYTHONDONTWRITEBYTECODE, and none of the
    variables that change what dspark reports."""

    def __init__(self, workdir: Path) -> None:
        drop = ("PYTHONDONTWRITEBYTECODE", "DSPARK_DEBUG", "TOKENSPEED_DFLASH_AUX_STREAM")
        self.environment = {k: v for k, v in os.environ.items() if k not in drop}
        self.environment["PYTHONPYCACHEPREFIX"] = str(workdir / "pycache")

    def wall(self, command: list[str]) -> float:
        return self.run(command)[0]

    def run(self, command: list[str]) -> tuple[float, float]:
        """(wall seconds, the child's user + system CPU seconds)."""
        before = resource.getrusage(resource.RUSAGE_CHILDREN)
        start = time.perf_counter()
        done = subprocess.run(command, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, env=self.environment)
        elapsed = time.perf_counter() - start
        after = resource.getrusage(resource.RUSAGE_CHILDREN)
        if done.returncode != 0:
            raise SystemExit(f"{' '.join(command)} exited {done.returncode}:\n{done.stderr.decode()[-2000:]}")
        return elapsed, (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)

    def measure(self, commands: dict[str, list[str]], repeat: int) -> Timings:
        """Each command `repeat` times, interleaved. The best run is the cost
        of the work; slower ones add whatever else the machine was doing."""
        for command in commands.values():  # warm the OS caches and bytecode once
            self.wall(command)
        times: dict[str, list[float]] = {name: [] for name in commands}
        cpu: dict[str, list[float]] = {name: [] for name in commands}
        for _ in range(repeat):
            for name, command in commands.items():
                wall, used = self.run(command)
                times[name].append(wall)
                cpu[name].append(used)
        return Timings(
            best={name: min(values) for name, values in times.items()},
            median={name: statistics.median(values) for name, values in times.items()},
            cpu={name: min(values) for name, values in cpu.items()},
        )

    def instructions(self, command: list[str]) -> int:
        """Instructions the command executes, counted by valgrind's callgrind:
        the same on a loaded machine as on an idle one, where wall time is
        not (about 50 times slower to take)."""
        done = subprocess.run(["valgrind", "--tool=callgrind", "--callgrind-out-file=/dev/null", *command],
                              stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True, env=self.environment)
        counted = [line for line in done.stderr.splitlines() if "Collected :" in line]
        if done.returncode != 0 or not counted:
            raise SystemExit(f"valgrind {' '.join(command)} exited {done.returncode}:\n{done.stderr[-2000:]}")
        return int(counted[-1].split(":")[-1].strip())

    def import_times(self, command: list[str]) -> list[tuple[int, int, int, str]]:
        """(depth, self us, cumulative us, module) per import, in the order
        of -X importtime (a module after everything it imported)."""
        done = subprocess.run(
            [command[0], "-X", "importtime", *command[1:]], capture_output=True, text=True, env=self.environment
        )
        rows = []
        for line in done.stderr.splitlines():
            if not line.startswith("import time:") or "cumulative" in line:
                continue
            own, cumulative, name = line[len("import time:"):].split("|")
            depth = (len(name) - len(name.lstrip(" ")) - 1) // 2
            rows.append((depth, int(own), int(cumulative), name.strip()))
        return rows

    def start_up_beyond(self, floor_command: list[str], command: list[str], top: int = 6) -> list[tuple[str, int]]:
        """Where start-up time goes beyond the floor, in microseconds: the
        outermost third-party modules `command` imports and the floor does
        not (looking through dspark's own modules), the self time of
        dspark's modules, and each command module the CLI imports."""
        floor = {name for *_, name in self.import_times(floor_command)}
        rows = self.import_times(command)
        found: list[tuple[str, int]] = []
        stack: list[tuple[int, bool]] = []  # (depth, under a module already counted)
        for depth, _, cumulative, name in reversed(rows):
            while stack and stack[-1][0] >= depth:
                stack.pop()
            covered = bool(stack) and stack[-1][1]
            counted = name not in floor and not name.startswith("dspark")
            if counted and not covered:
                found.append((name, cumulative))
            stack.append((depth, covered or counted))
        found = sorted(found, key=lambda row: -row[1])[:top]
        found.append(("dspark's own modules (self time)", sum(own for _, own, _, n in rows if n.startswith("dspark"))))
        plumbing = {"dspark.cli.main", "dspark.cli.errors", "dspark.cli.options", "dspark.cli.terminal",
                    "dspark.cli.output", "dspark.cli.formats"}
        found += [
            (f"{name} (with what it imports)", cumulative)
            for _, _, cumulative, name in rows
            if name.startswith("dspark.cli.") and name.count(".") == 2 and name not in plumbing
        ]
        return found


def write_deep_draft(out: Path, layers: int) -> Path:
    """The K3 fc_norm draft (73 tensors, ~6.6 GiB at 5 layers) with real
    random bf16 values, written shard by shard by the safetensors library so
    that memory holds one shard at a time."""
    from safetensors.torch import save_file

    from dspark.examples import fabricate
    from dspark.schema.dtypes import nbytes_of

    spec = dataclasses.replace(fabricate.SCALES["k3"], num_hidden_layers=layers)
    groups: list[dict] = [{}]
    for name, shape in fabricate.tensor_shapes(spec, fc_norm=True).items():
        size = sum(nbytes_of("BF16", s) for s in groups[-1].values())
        if groups[-1] and size + nbytes_of("BF16", shape) > SHARD_BYTES:
            groups.append({})
        groups[-1][name] = shape
    out.mkdir(parents=True, exist_ok=True)
    weight_map: dict[str, str] = {}
    total = 0
    for index, group in enumerate(groups):
        shard = f"model-{index + 1:05d}-of-{len(groups):05d}.safetensors"
        tensors = fabricate.make_tensors(group, dtype="bfloat16", seed=index)
        save_file({"model." + n: t for n, t in tensors.items()}, str(out / shard), metadata={"format": "pt"})
        weight_map.update({"model." + n: shard for n in group})
        total += sum(t.numel() * t.element_size() for t in tensors.values())
        del tensors
    index_doc = {"metadata": {"total_size": total}, "weight_map": weight_map}
    (out / "model.safetensors.index.json").write_text(json.dumps(index_doc, indent=2) + "\n")
    (out / "config.json").write_text(json.dumps(fabricate.draft_config(spec, fc_norm=True), indent=2) + "\n")
    return out


def prepare(workdir: Path, layers: int, deep: bool = True) -> tuple[Path, Path, Path | None]:
    """(sparse K3 draft, tiny example, real K3 draft or None without
    `deep`), reusing what an earlier run left in `workdir`."""
    from dspark.examples import TINY_EXAMPLE
    from dspark.examples.fabricate import write_draft, write_sparse_draft

    sparse = workdir / "k3-sparse"
    if not (sparse / "model.safetensors").is_file():
        write_sparse_draft(sparse)
    tiny = TINY_EXAMPLE
    if not (tiny / "config.json").is_file():  # running from a tree without the bundled example
        tiny = workdir / "tiny"
        if not (tiny / "config.json").is_file():
            write_draft(tiny)
    if not deep:
        return sparse, tiny, None
    real = workdir / f"k3-real-{layers}L"
    if not (real / "config.json").is_file():
        print(f"writing a {layers}-layer K3 draft with real bf16 values to {real} ...", flush=True)
        write_deep_draft(real, layers)
    return sparse, tiny, real


def verdict(ok: bool) -> str:
    return "PASS" if ok else "FAIL"


def installed_as(python: str) -> str:
    """How `python` finds dspark: a path under site-packages (`pip install
    .`), or an editable install's finder, which taxes every import."""
    probe = "import dspark.cli.main as m, sys; print(m.__file__); print(any('editable' in str(f) for f in sys.meta_path))"
    done = subprocess.run([python, "-c", probe], capture_output=True, text=True)
    if done.returncode != 0:
        raise SystemExit(f"{python} cannot import dspark:\n{done.stderr[-2000:]}")
    location, editable = done.stdout.split()
    return f"{location} ({'EDITABLE: figures include the editable finder' if editable == 'True' else 'installed'})"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--workdir", type=Path, help="keep the drafts here between runs (default: a temp dir)")
    parser.add_argument("--layers", type=int, default=5, help="layers of the real K3 draft (5: the full 6.6 GiB)")
    parser.add_argument("--repeat", type=int, default=11, help="runs per header-only command (deep: half)")
    parser.add_argument("--python", default=sys.executable,
                        help="the interpreter that runs the measured commands and the floor (default: this "
                             "one); give a venv's where dspark is installed with `pip install .`")
    parser.add_argument("--skip-deep", action="store_true", help="only the header-only figures")
    parser.add_argument("--instructions", action="store_true",
                        help="also count the instructions of the floor and of check K3 (valgrind): a ratio that "
                             "other work on the machine does not move")
    parser.add_argument("--smoke", action="store_true",
                        help="the smallest run, to show the script works: one run each, --deep on the tiny "
                             "example only, goals printed but not judged")
    args = parser.parse_args(argv)
    if args.smoke:
        args.repeat = 1
    deep_repeat = 1 if args.smoke else max(3, args.repeat // 2)

    temporary = None if args.workdir else tempfile.mkdtemp(prefix="dspark-bench-")
    workdir = Path(temporary) if temporary else args.workdir
    workdir.mkdir(parents=True, exist_ok=True)
    runner = Runner(workdir)
    python = args.python
    where = installed_as(python)
    try:
        sparse, tiny, real = prepare(workdir, args.layers, deep=not (args.skip_deep or args.smoke))
        header = runner.measure(
            {
                "floor": [python, "-c", FLOOR],
                "typer_floor": [python, "-c", TYPER_FLOOR, "check", str(tiny)],
                "check_k3": [python, "-c", CLI, "check", str(sparse)],
                "check_tiny": [python, "-c", CLI, "check", str(tiny)],
            },
            args.repeat,
        )
        beyond = runner.start_up_beyond([python, "-c", FLOOR], [python, "-c", CLI, "check", str(sparse)])
        counted = None
        if args.instructions:
            counted = (runner.instructions([python, "-c", FLOOR]),
                       runner.instructions([python, "-c", CLI, "check", str(sparse)]))
        # Sized now: a temporary workdir is gone by the time the table prints.
        sparse_bytes = (sparse / "model.safetensors").stat().st_size
        deep_dir = tiny if args.smoke else real
        deep_times = None
        if deep_dir is not None:
            weights = sorted(str(p) for p in deep_dir.glob("*.safetensors"))
            deep_bytes = sum(os.path.getsize(p) for p in weights)
            deep_times = runner.measure(  # the warm-up run page-caches the files
                {
                    "cat": ["cat", *weights],
                    "check_deep": [python, "-c", CLI, "check", "--deep", str(deep_dir)],
                    "check_header": [python, "-c", CLI, "check", str(deep_dir)],
                },
                deep_repeat,
            )
    finally:
        if temporary is not None:
            shutil.rmtree(temporary, ignore_errors=True)

    best = header.best
    ratio_floor = best["check_k3"] / best["floor"]
    ratio_tiny = best["check_k3"] / best["check_tiny"]

    import typer

    def ms(name: str) -> str:
        return f"{best[name] * 1000:6.1f} ms (median {header.median[name] * 1000:6.1f})"

    print(f"machine: {cpu_name()}, {os.cpu_count()} CPUs; Python {platform.python_version()}, "
          f"typer {typer.__version__}")
    print(f"command: python {' '.join(sys.argv)}")
    print(f"measured with: {python}; dspark from {where}")
    print()
    print(f"header-only check (best of {args.repeat} fresh processes)")
    print(f"  import floor  {ms('floor')}   python -c \"{FLOOR}\"")
    print(f"  typer floor   {ms('typer_floor')}   a bare typer command with check's parameters")
    print(f"  check tiny    {ms('check_tiny')}   {tiny}")
    print(f"  check K3      {ms('check_k3')}   {sparse} (73 tensors, "
          f"{sparse_bytes / 2**30:.2f} GiB sparse)")
    print(f"  K3 / import floor  {ratio_floor:5.2f}x  goal <= {GOAL_FLOOR}x  {verdict(ratio_floor <= GOAL_FLOOR)}")
    print(f"  K3 / tiny          {ratio_tiny:5.2f}x  goal <= {GOAL_TINY}x  {verdict(ratio_tiny <= GOAL_TINY)}")
    print(f"  (K3 / typer floor  {best['check_k3'] / best['typer_floor']:5.2f}x)")
    cpu = header.cpu
    print(f"  CPU time, best: floor {cpu['floor'] * 1000:.1f} ms, check K3 {cpu['check_k3'] * 1000:.1f} ms: "
          f"{cpu['check_k3'] / cpu['floor']:.2f}x (for a loaded machine, where wall time waits for a core)")
    if counted is not None:
        print(f"  instructions: floor {counted[0] / 1e6:.1f} M, check K3 {counted[1] / 1e6:.1f} M: "
              f"{counted[1] / counted[0]:.3f}x (valgrind; the same whatever else runs)")
    print("  start-up beyond the import floor (import time, one run):")
    for name, micros in beyond:
        print(f"    {micros / 1000:6.1f} ms  {name}")
    passed = ratio_floor <= GOAL_FLOOR and ratio_tiny <= GOAL_TINY
    if deep_times is not None:
        cat_rate = deep_bytes / deep_times.best["cat"]
        deep_rate = deep_bytes / deep_times.best["check_deep"]
        scan_seconds = max(deep_times.best["check_deep"] - deep_times.best["check_header"], 1e-9)
        scan_rate = deep_bytes / scan_seconds
        ratio_deep = deep_rate / cat_rate

        def seconds(name: str) -> str:
            return f"{deep_times.best[name]:6.3f} s (median {deep_times.median[name]:6.3f})"

        print()
        print(f"check --deep of {deep_bytes / 2**30:.2f} GiB of real bf16 in {len(weights)} files, "
              f"page-cached (best of {deep_repeat})")
        print(f"  cat > /dev/null    {seconds('cat')}   {cat_rate / 1e9:6.2f} GB/s")
        print(f"  check --deep       {seconds('check_deep')}   {deep_rate / 1e9:6.2f} GB/s end to end")
        print(f"  check (headers)    {seconds('check_header')}   start-up and header work")
        print(f"  scan alone         {scan_seconds:6.3f} s                    {scan_rate / 1e9:6.2f} GB/s "
              f"({scan_rate / cat_rate:.2f}x cat)")
        print(f"  deep / cat         {ratio_deep:5.2f}x  goal >= {GOAL_DEEP}x  "
              f"{verdict(ratio_deep >= GOAL_DEEP)}  (end to end)")
        passed = passed and ratio_deep >= GOAL_DEEP
    print()
    if args.smoke:
        print("smoke run: every command ran; goals not judged at this size")
        return 0
    print("all goals PASS" if passed else "some goals FAIL")
    return 0 if passed else 1


if __name__ == "__main__":
    sys.exit(main())
