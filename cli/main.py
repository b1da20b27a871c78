"""The `dspark` application: one module per command, registered here."""

from __future__ import annotations

import sys
from typing import Annotated, Sequence

import typer

from dspark.cli.check import check
from dspark.cli.convert import convert
from dspark.cli.errors import EXIT_OK, output_format, report_error, requested_format
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


def dspark_version() -> str:
    from importlib.metadata import version as package_version

    return package_version("dspark")


def _print_version(value: bool) -> None:
    if value:
        typer.echo(dspark_version())
        raise typer.Exit(EXIT_OK)


@app.callback()
def _options(
    version: Annotated[
        bool,
        typer.Option("--version", callback=_print_version, is_eager=True, help="Print the dspark version and exit."),
    ] = False,
) -> None:
    # Options of `dspark` itself, before the command; --version acts in its callback.
    pass


@app.command()
def version() -> None:
    """Print the dspark version."""
    typer.echo(dspark_version())


def run(args: Sequence[str]) -> int:
    """Run one command line and return its exit code.

    typer parses; this function, not typer's own main loop, decides how the
    run ends. typer's loop turns Ctrl-C into a silent exit 130 (nothing on
    stderr, empty stdout under --format json), a closed stdout into exit 1
    (as if the checkpoint had failed), and prints a usage error itself,
    before the error could be answered in the format asked for. Here every
    exception goes to `report_error`, the one place errors are mapped.
    """
    output_format.set(requested_format(args))
    try:
        command = typer.main.get_command(app)
        try:
            with command.make_context("dspark", list(args)) as context:
                command.invoke(context)
            code = EXIT_OK
        except typer.Exit as done:
            code = done.exit_code
        # A reader that closed the pipe shows here at the latest, while it
        # can still be answered (Python's flush at exit would print noise).
        sys.stdout.flush()
        return code
    except SystemExit:
        raise
    except BaseException as error:  # noqa: BLE001 - the one place errors become exit codes
        return report_error(error)


def main() -> None:
    sys.exit(run(sys.argv[1:]))


if __name__ == "__main__":
    main()
