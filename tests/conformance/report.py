"""docs/contract.md's conformance table, made from the recorded results
(tests/conformance/results/ENGINE@VERSION.json, written by `run.py
--record`): per engine release and family, the cases run, how many agree,
and each known disagreement with its reason.

    python tests/conformance/report.py [--write]

Without --write it prints the table; tests/conformance/test_report.py
fails when the committed page differs from it.
"""

from __future__ import annotations

import argparse
import json
import sys
from collections import defaultdict
from pathlib import Path

HERE = Path(__file__).resolve().parent
ROOT = HERE.parents[1]
RESULTS = HERE / "results"
PAGE = ROOT / "docs" / "contract.md"
BEGIN = "<!-- BEGIN CONFORMANCE: made by `python tests/conformance/report.py --write` from tests/conformance/results/ -->"
END = "<!-- END CONFORMANCE -->"
AGREEING = ("agree", "agree_by_reason")


def load_results(folder: Path = RESULTS) -> list[dict]:
    return [json.loads(path.read_text(encoding="utf-8")) for path in sorted(folder.glob("*.json"))]


def _family(row: dict) -> str:
    if row["origin"].startswith("dspark-convert"):
        return "convert output"
    return row["family"] or "other"


def _writer(row: dict) -> str:
    origin = row["origin"]
    return "trainers" if not origin.startswith("dspark") else "convert" if "convert" in origin else "fabricator"


def table(results: list[dict]) -> str:
    lines = [
        "Each engine release's own config, model, loader and startup code, run on CPU over draft folders "
        "(`tests/conformance/`), against `dspark check --engine` on the same folders. *Agree*: both pass, or "
        "both fail (refused or served wrong); *by reason*: the run and dspark differ, and a reading of the "
        "engine's code past what the run covers (cited) says dspark is right.",
        "",
        "| engine release | family | cases (fabricator / trainers / convert) | agree | by reason | "
        "false pass | false fail | no verdict |",
        "|---|---|---|---|---|---|---|---|",
    ]
    notes: list[str] = []
    for result in results:
        groups: dict[str, list[dict]] = defaultdict(list)
        for row in result["cases"]:
            groups[_family(row)].append(row)
        for family in sorted(groups):
            rows = groups[family]
            writers = {w: sum(1 for r in rows if _writer(r) == w) for w in ("fabricator", "trainers", "convert")}
            count = {c: sum(1 for r in rows if r["comparison"] == c)
                     for c in ("agree", "agree_by_reason", "false_pass", "false_fail", "no_verdict")}
            lines.append(f"| `{result['engine']}` | {family} | {len(rows)} ({writers['fabricator']} / "
                         f"{writers['trainers']} / {writers['convert']}) | {count['agree']} | "
                         f"{count['agree_by_reason']} | {count['false_pass']} | {count['false_fail']} | "
                         f"{count['no_verdict']} |")
        for row in result["cases"]:
            if row["comparison"] == "agree":
                continue
            known = row["known"]
            why = (f"{known['reason']}" + (f" ({known['citation']})" if known["citation"] else "")) if known \
                else "not yet explained: " + f"engine {row['engine']['status']}, dspark exit {row['dspark']['exit']}"
            notes.append(f"- `{result['engine']}` `{row['case']}` ({row['comparison'].replace('_', ' ')}): {why}")
    if notes:
        lines += ["", "Disagreements and their reasons:", "", *notes]
    return "\n".join(lines)


def page(current: str, results: list[dict]) -> str:
    block = f"{BEGIN}\n\n{table(results)}\n\n{END}"
    if BEGIN in current and END in current:
        head, _, rest = current.partition(BEGIN)
        _, _, tail = rest.partition(END)
        return head + block + tail
    heading = "\n## Conformance: the engines' own code\n\n"
    return current.rstrip("\n") + "\n" + heading + block + "\n"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--write", action="store_true", help=f"write the table into {PAGE.relative_to(ROOT)}")
    args = parser.parse_args(argv)
    results = load_results()
    if args.write:
        PAGE.write_text(page(PAGE.read_text(encoding="utf-8"), results), encoding="utf-8")
    else:
        print(table(results))
    return 0


if __name__ == "__main__":
    sys.exit(main())
