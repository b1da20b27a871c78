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


def named(value: str) -> str:
    """A path argument as given; an empty one is refused here, before
    `Path("")` would become the working directory and be judged instead."""
    if value == "":
        raise typer.BadParameter("an empty path names nothing (it is not the working directory); pass a path, "
                                 "`.` for the working directory.")
    return value


def named_path(value: str) -> Path:
    return Path(named(value))


def local_path(value: str) -> Path:
    """A local path argument; a URL is refused here, before `Path` would
    collapse its `//` (`s3://b/d` -> `s3:/b/d`) into a confusing
    "no such file"."""
    from dspark.converters.sources import is_url

    named(value)
    if is_url(value):
        raise typer.BadParameter(
            f"{value}: this command reads a local checkpoint; only `dspark check` and `dspark inspect` read "
            "remote ones. Download it first (e.g. `hf download ORG/REPO --local-dir DIR`)."
        )
    return Path(value)


CheckpointArg = Annotated[
    Path,
    typer.Argument(
        metavar="CKPT", help="Checkpoint folder, .safetensors file, DCP folder or .pt file.", show_default=False,
        parser=local_path,
    ),
]
# check and inspect: also a URL, kept as text (never a Path).
CheckpointOrUrlArg = Annotated[
    str,
    typer.Argument(
        metavar="CKPT",
        help="Checkpoint folder, .safetensors file, DCP folder or .pt file; or a remote safetensors folder: "
        "hf://ORG/REPO[@REV], https://…/folder/, s3://bucket/folder (any fsspec URL).",
        show_default=False,
        parser=named,
    ),
]
TargetOption = Annotated[
    Optional[str],
    typer.Option(
        "--target",
        metavar="PATH|URL",
        help="Target model folder or its config.json, local or remote (hf://ORG/REPO[@REV], https://…, "
        "s3://…): check what it can honour.",
        parser=named,
    ),
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
        "the terminal keeps the human one (with --format github: the annotations, and the file's "
        "format comes from its suffix).",
        parser=named_path,
    ),
]
QuietOption = Annotated[
    bool,
    typer.Option("--quiet", "-q", help="Print nothing on success and only the verdict line on failure."),
]
ConfigOption = Annotated[
    Optional[Path],
    typer.Option("--config", metavar="FILE", help="The draft's config.json, when it is not beside the weights.",
                 parser=named_path),
]
def engine_names(value: str) -> str:
    """`--engine` as given; one that names no engine (`,`, `tokenspeed,`,
    an empty string) is refused here, before it could read as no flag and
    judge for the default instead."""
    if any(not part.strip() for part in value.split(",")):
        raise typer.BadParameter(f"{value!r} has an empty engine name; name each engine (tokenspeed, "
                                 "tokenspeed@pr1031, vllm, ...), several with commas, or all.")
    return value


EngineOption = Annotated[
    Optional[str],
    typer.Option(
        "--engine",
        metavar="NAME[@REV][,...]|all",
        parser=engine_names,
        help="The serving engine(s) whose loader is the contract: tokenspeed (= tokenspeed@0.1.1, the newest "
        "release), vllm (= vllm@0.33.0), sglang (= sglang@0.5.23), the git snapshots tokenspeed@current, "
        "tokenspeed@pr1031, tokenspeed@pr1016, tokenspeed@main; several at once with commas (tokenspeed,vllm) "
        "or all: one verdict per engine, and any engine failing fails the run. See `dspark families`. Default: "
        "the `engine` of the project settings (dspark.toml, or [tool.dspark] in pyproject.toml, found from the "
        "working directory upward), else tokenspeed.",
    ),
]
EnginePathOption = Annotated[
    Optional[Path],
    typer.Option(
        "--engine-path",
        metavar="DIR",
        help="Where the serving engine is installed (a site-packages folder holding it, or its package "
        "folder), when it is not on this Python's path; default $DSPARK_ENGINE_PATH. Read, never imported.",
        parser=named_path,
    ),
]


LaunchOption = Annotated[
    Optional[str],
    typer.Option(
        "--launch",
        metavar="FLAGS",
        help="The server flags the draft is deployed with, in the engine's own spelling, as one quoted "
        "argument: --launch \"--speculative-num-steps 7 --pipeline-parallel-size 2\" (TokenSpeed), "
        "\"--speculative-config '{...}' --pipeline-parallel-size 2\" (vLLM), \"--pp-size 2 "
        "--speculative-num-draft-tokens 16\" (SGLang). Flags no verdict depends on are named as ignored. "
        "Default: the `launch` of the project settings, else the engine's defaults (a verdict another launch "
        "would change is a warning, LCH003).",
    ),
]


def chosen_launch(flag: str | None) -> tuple[str | None, str | None]:
    """The launch a command judges under (None: the engine's defaults) and
    where it came from (--launch wins over the settings file)."""
    from dspark.converters.policy import find_policy_file, settings_launch

    if flag is not None:
        return flag, "--launch"
    launch = settings_launch(None)
    return (launch, f"launch in {find_policy_file()}") if launch is not None else (None, None)


def chosen_engine(flag: str | None) -> tuple[str | None, str]:
    """The engine a command judges for (None: dspark's default) and where
    that choice came from, for the page to say: a settings file found
    upward changes the verdict without a word on the command line."""
    from dspark.converters.policy import find_policy_file, settings_engine

    if flag:
        return flag, "--engine"
    engine = settings_engine(None)  # a settings file that cannot be read stops here (exit 2)
    if engine is not None:
        return engine, f"engine in {find_policy_file()}"
    return None, "dspark's default"
