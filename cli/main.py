"""The `dspark` application: one module per command, registered here."""

from __future__ import annotations

import sys

import typer

from dspark.cli.check import check
from dspark.cli.convert import convert
from dspark.cli.errors import report_error
from dspark.cli.families import families
from dspark.cli.inspect_cmd import inspect
from dspark.cli.smoke import smoke

app = typer.Typer(
    name="dspark",
    help="Check, convert and smoke-test speculative-decoding draft checkpoints before deploy.",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
    rich_markup_mode=None,
)
app.command()(check)
app.command()(inspect)
app.command()(convert)
app.command()(smoke)
app.command()(families)


@app.command()
def version() -> None:
    """Print the dspark version."""
    from importlib.metadata import version as package_version

    typer.echo(package_version("dspark"))


def main() -> None:
    try:
        app()
    except SystemExit:
        raise
    except BaseException as error:  # noqa: BLE001 - the one place errors become exit codes
        sys.exit(report_error(error))


if __name__ == "__main__":
    main()
