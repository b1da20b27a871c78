"""`dspark inspect`."""

from __future__ import annotations

from dspark.cli.errors import output_format
from dspark.cli.options import CheckpointArg, ConfigOption, EngineOption, FormatOption, OutputFormat
from dspark.cli.render import print_json, render_inspect
from dspark.converters.check import inspect_checkpoint


def inspect(
    checkpoint: CheckpointArg,
    config: ConfigOption = None,
    engine: EngineOption = None,
    output: FormatOption = OutputFormat.human,
) -> None:
    """Show what a checkpoint holds: family, taps, fc_norm, stream, tensors, shards."""
    output_format.set(output.value)
    report = inspect_checkpoint(checkpoint, config_path=config, engine=engine)
    if output is OutputFormat.json:
        print_json(report.to_dict())
    else:
        render_inspect(report)
