"""Run one engine release's own code over draft folders and compare each
outcome with `dspark check --engine ENGINE@VERSION`.

    python tests/conformance/run.py --engine vllm@0.33.0 [--drafts fabricated|trainers|all]
        [--case PATTERN] [--no-convert] [--workdir DIR] [--record]

It builds what it needs: the release's wheel from the package index into a
cache outside the repository (`$DSPARK_CONFORMANCE_CACHE`, else
~/.cache/dspark-conformance), a virtual environment for it, the drafts (the
fabricator's, and the trainers' written by their own released code), and
`dspark convert --engine` of each draft that convert accepts, judged again.
It prints every disagreement with both sides' reasons and ends with one
line:

    N/M cases agree (R by a recorded reason; false passes x, false fails y, no verdict z)

Exit 0 only when no case is a false pass, a false fail or without a verdict.
`--record` writes the results to tests/conformance/results/, from which
docs/contract.md's conformance table is generated (`python
tests/conformance/report.py --write`).
"""

from __future__ import annotations

import argparse
import importlib
import json
import sys
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from fnmatch import fnmatchcase
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from compare import (  # noqa: E402 - the suite's folder is put on the path first
    AGREE,
    AGREE_BY_REASON,
    FALSE_FAIL,
    FALSE_PASS,
    NO_VERDICT,
    DsparkVerdict,
    classify,
    dspark_check,
    dspark_convert,
)
from known import reason_for  # noqa: E402
from outcomes import Case, Outcome  # noqa: E402

RESULTS = Path(__file__).resolve().parent / "results"
DRAFT_SETS = ("fabricated", "trainers", "all")


def harness(engine_name: str):
    try:
        return importlib.import_module(f"engines.{engine_name}")
    except ModuleNotFoundError:
        raise SystemExit(f"no harness for engine {engine_name!r}; the harnesses are in tests/conformance/engines/")


def parse_release(spec: str) -> tuple[str, str]:
    name, at, version = spec.partition("@")
    if not at or not version:
        raise SystemExit(f"--engine {spec!r}: name a release, ENGINE@VERSION (vllm@0.33.0)")
    return name.strip().lower(), version.strip()


def build_cases(drafts: str, engine_spec: str, workdir: Path) -> list[Case]:
    cases: list[Case] = []
    if drafts in ("fabricated", "all"):
        from drafts import fabricated

        cases += fabricated.build(workdir, engine=engine_spec)
    if drafts in ("trainers", "all"):
        from drafts import trainers

        cases += trainers.build(workdir)
    return cases


def converted_cases(cases: list[Case], engine_spec: str, workdir: Path) -> list[Case]:
    """`dspark convert --engine` of every case convert accepts: its output
    must be served as the source was trained (the source's trained layers)."""
    made = []
    for case in cases:
        destination = workdir / "converted" / engine_spec.replace("@", "-") / case.id.replace("/", "__")
        if dspark_convert(case, engine_spec, destination, workdir):
            made.append(Case(id=f"convert/{case.id}", folder=str(destination), origin=f"dspark-convert:{engine_spec}",
                             family=case.family, target_config=case.target_config, launch=case.launch,
                             trained_layers=case.trained_layers, trained_norm=case.trained_norm,
                             expect=f"convert of {case.id}",
                             source_case=case.id))
    return made


def compare_all(engine_spec: str, cases: list[Case], outcomes: dict[str, Outcome], workdir: Path) -> list[dict]:
    # dspark runs as a process per case, as a user runs it; two at a time
    with ThreadPoolExecutor(max_workers=2) as pool:
        verdicts = list(pool.map(lambda case: dspark_check(case, engine_spec, workdir), cases))
    rows = []
    for case, verdict in zip(cases, verdicts):
        outcome = outcomes.get(case.id) or Outcome("no_run", reason="the harness returned nothing for this case")
        comparison = classify(outcome, verdict)
        known = reason_for(engine_spec, case.id) if comparison != AGREE else None
        if known is not None and known.judged_right == "dspark":
            comparison = AGREE_BY_REASON
        rows.append(_row(case, outcome, verdict, comparison, known, workdir))
    return rows


def _short(text: str, limit: int = 300) -> str:
    text = " ".join(str(text).split())
    return text if len(text) <= limit else text[: limit - 1] + "…"


def _row(case: Case, outcome: Outcome, verdict: DsparkVerdict, comparison: str, known, workdir: Path) -> dict:
    return {
        "case": case.id,
        "family": case.family,
        "origin": case.origin,
        "expect": case.expect,
        "trained_layers": case.trained_layers,
        "engine": {"status": outcome.status, "stage": outcome.stage,
                   "reason": _short(outcome.reason.replace(str(workdir), "WORKDIR")),
                   "captured_layers": outcome.captured_layers, "unwritten": outcome.unwritten[:8]},
        "dspark": {"exit": verdict.exit_code, "outcome": verdict.outcome, "codes": verdict.codes,
                   "reason": _short(verdict.message.replace(str(workdir), "WORKDIR")),
                   "tap_layers": verdict.tap_layers},
        "comparison": comparison,
        "known": None if known is None else {"judged_right": known.judged_right, "reason": known.reason,
                                             "citation": known.citation},
    }


def summary(rows: list[dict]) -> dict[str, int]:
    counts = {key: 0 for key in (AGREE, AGREE_BY_REASON, FALSE_PASS, FALSE_FAIL, NO_VERDICT)}
    for row in rows:
        counts[row["comparison"]] += 1
    counts["cases"] = len(rows)
    counts["with_reason"] = sum(1 for row in rows if row["known"] is not None
                                and row["comparison"] in (FALSE_PASS, FALSE_FAIL, NO_VERDICT))
    return counts


def summary_line(counts: dict[str, int]) -> str:
    agreeing = counts[AGREE] + counts[AGREE_BY_REASON]
    line = (f"{agreeing}/{counts['cases']} cases agree ({counts[AGREE_BY_REASON]} by a recorded reason; "
            f"false passes {counts[FALSE_PASS]}, false fails {counts[FALSE_FAIL]}, "
            f"no verdict {counts[NO_VERDICT]})")
    if counts["with_reason"]:
        line += f"; {counts['with_reason']} disagreements carry a recorded reason"
    return line


def print_disagreements(rows: list[dict], out=sys.stdout) -> None:
    for row in rows:
        if row["comparison"] in (AGREE, AGREE_BY_REASON):
            continue
        engine, dspark = row["engine"], row["dspark"]
        print(f"{row['comparison'].upper():11} {row['case']}  [{row['origin']}]", file=out)
        print(f"    engine: {engine['status']} {('at ' + engine['stage']) if engine['stage'] else ''}: "
              f"{engine['reason']}", file=out)
        if engine["captured_layers"] is not None or row["trained_layers"] is not None:
            print(f"            captures {engine['captured_layers']}, trained {row['trained_layers']}", file=out)
        print(f"    dspark: exit {dspark['exit']} {dspark['outcome']} {','.join(dspark['codes'])}: "
              f"{dspark['reason']}", file=out)
        if row["known"]:
            print(f"    known ({row['known']['judged_right']} judged right): {row['known']['reason']}", file=out)


def run(engine_spec: str, drafts: str = "all", *, workdir: Path, case_pattern: str | None = None,
        convert: bool = True, record: bool = False, out=sys.stdout) -> int:
    name, version = parse_release(engine_spec)
    module = harness(name)
    started = time.monotonic()
    cases = build_cases(drafts, engine_spec, workdir)
    if convert:
        cases += converted_cases(cases, engine_spec, workdir)
    if case_pattern:
        cases = [case for case in cases if fnmatchcase(case.id, case_pattern)]
    if not cases:
        print("no cases to run", file=sys.stderr)
        return 2
    print(f"{engine_spec}: {len(cases)} cases ({drafts}); running the release's own code", file=out, flush=True)
    outcomes = module.run(version, cases, workdir)
    rows = compare_all(engine_spec, cases, outcomes, workdir)
    counts = summary(rows)
    print_disagreements(rows, out)
    if record:
        RESULTS.mkdir(exist_ok=True)
        document = {"engine": engine_spec, "drafts": drafts, "summary": counts, "cases": rows}
        (RESULTS / f"{engine_spec}.json").write_text(json.dumps(document, indent=1, ensure_ascii=False) + "\n")
    print(f"({time.monotonic() - started:.0f} s)", file=out)
    print(summary_line(counts), file=out, flush=True)
    return 0 if counts[FALSE_PASS] == counts[FALSE_FAIL] == counts[NO_VERDICT] == 0 else 1


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--engine", required=True, metavar="ENGINE@VERSION")
    parser.add_argument("--drafts", choices=DRAFT_SETS, default="all")
    parser.add_argument("--case", metavar="PATTERN", help="only the cases whose id matches (fnmatch)")
    parser.add_argument("--no-convert", dest="convert", action="store_false",
                        help="leave out the `dspark convert --engine` outputs")
    parser.add_argument("--workdir", type=Path, help="where drafts are written (default: a new temporary folder)")
    parser.add_argument("--record", action="store_true", help="write the results to tests/conformance/results/")
    args = parser.parse_args(argv)
    if args.workdir:
        args.workdir.mkdir(parents=True, exist_ok=True)
        return run(args.engine, args.drafts, workdir=args.workdir.resolve(), case_pattern=args.case,
                   convert=args.convert, record=args.record)
    with tempfile.TemporaryDirectory(prefix="dspark-conformance-") as folder:
        return run(args.engine, args.drafts, workdir=Path(folder), case_pattern=args.case,
                   convert=args.convert, record=args.record)


if __name__ == "__main__":
    sys.exit(main())
