"""Options shared by several commands, as Annotated aliases."""

from __future__ import annotations

import enum
from pathlib import Path
from typing import Annotated, Optional

import typer


class OutputFormat(str, enum.Enum):
    human = "human"
    json = "json"
    sarif = "sarif"
    junit = "junit"
    github = "github"


class DataFormat(str, enum.Enum):
    """For what is not a report (`dspark families`): a page or data."""

    human = "human"
    json = "json"


CheckpointArg = Annotated[
    Path,
    typer.Argument(metavar="CKPT", help="Checkpoint folder, .safetensors file, DCP folder or .pt file.", show_default=False),
]
FormatOption = Annotated[
    OutputFormat,
    typer.Option(
        "--format",
        help="human: a report to read; json: the same report as data (schema/report.schema.json); "
        "sarif: SARIF 2.1.0; junit: JUnit XML; github: GitHub Actions annotations.",
    ),
]
OutputFileOption = Annotated[
    Optional[Path],
    typer.Option(
        "--output",
        metavar="FILE",
        help="Write the machine report (--format, or by suffix: .json, .sarif, .xml) to FILE; "
        "the terminal keeps the human one.",
    ),
]
QuietOption = Annotated[
    bool,
    typer.Option("--quiet", "-q", help="Print nothing on success and only the verdict line on failure."),
]
ConfigOption = Annotated[
    Optional[Path],
    typer.Option("--config", help="The draft's config.json, when it is not beside the weights."),
]
EngineOption = Annotated[
    Optional[str],
    typer.Option(
        "--engine",
        metavar="NAME[@REV]",
        help="The serving engine whose loader is the contract: tokenspeed (= tokenspeed@current), "
        "tokenspeed@pr1031, tokenspeed@main. See `dspark families`.",
    ),
]
