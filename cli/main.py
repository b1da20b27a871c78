"""The `dspark` application: one module per command, registered here."""

# Without `from __future__ import annotations`: typer reads the parameters'
# annotations, which are then objects built at import, not strings it must
# compile one by one at each start (docs/check.md).

import copy
import gc
import os
import sys
from typing import Annotated, Sequence

import typer

from dspark.cli.check import check
from dspark.cli.convert import convert
from dspark.cli.doctor import doctor
from dspark.cli.errors import EXIT_OK, report_error
from dspark.cli.settings import output_settings, requested_output
from dspark.cli.explain import explain
from dspark.cli.families import families
from dspark.cli.gate import gate
from dspark.cli.inspect_cmd import inspect
from dspark.cli.smoke import smoke

app = typer.Typer(
    name="dspark",
    help="Check, convert and smoke-test speculative-decoding draft checkpoints before deploy.",
    no_args_is_help=True,
    # --install-completion / --show-completion are typer's, added below so
    # that typer's completion machinery is imported only when they are used.
    add_completion=False,
    pretty_exceptions_enable=False,
    rich_markup_mode=None,
)
app.command()(check)
app.command()(inspect)
app.command()(convert)
app.command()(smoke)
app.command()(families)
app.command()(explain)
app.command()(gate)
app.command()(doctor)


def dspark_version() -> str:
    from dspark.cli.formats import dspark_version as installed_version

    return installed_version()


def _print_version(value: bool) -> None:
    if value:
        typer.echo(dspark_version())
        raise typer.Exit(EXIT_OK)


def _completion(context: typer.Context, parameter: typer.CallbackParam, value: bool) -> None:
    if not value or context.resilient_parsing:
        return
    from typer.completion import completion_init, install_callback, show_callback

    completion_init()
    (install_callback if parameter.name == "install_completion" else show_callback)(context, parameter, value)


@app.callback()
def _options(
    version: Annotated[
        bool,
        typer.Option("--version", callback=_print_version, is_eager=True, help="Print the dspark version and exit."),
    ] = False,
    install_completion: Annotated[
        bool,
        typer.Option("--install-completion", callback=_completion, is_eager=True, expose_value=False,
                     help="Install tab completion for the current shell (bash, zsh, fish, PowerShell)."),
    ] = False,
    show_completion: Annotated[
        bool,
        typer.Option("--show-completion", callback=_completion, is_eager=True, expose_value=False,
                     help="Print the completion script for the current shell, to install it by hand."),
    ] = False,
) -> None:
    # Options of `dspark` itself, before the command; --version acts in its callback.
    pass


@app.command()
def version() -> None:
    """Print the dspark version."""
    typer.echo(dspark_version())


COMPLETE_VARIABLE = "_DSPARK_COMPLETE"
COMMANDS = ("check", "inspect", "convert", "smoke", "families", "explain", "gate", "doctor", "version")


def app_for(args: Sequence[str]) -> typer.Typer:
    """The application with only the command `args` names, when it names
    one first: typer reads the signature of every registered command when it
    builds the group (about 10 ms for eight commands, most of what a
    header-only check costs beyond its libraries); the others cannot run in
    this process. `dspark --help`, an option before the command, a typo and
    shell completion get the whole group."""
    if not args or args[0] not in COMMANDS or os.environ.get(COMPLETE_VARIABLE):
        return app
    single = copy.copy(app)
    single.registered_commands = [c for c in app.registered_commands if (c.name or c.callback.__name__) == args[0]]
    return single


def run(args: Sequence[str]) -> int:
    """Run one command line and return its exit code.

    typer parses; this function, not typer's own main loop, decides how the
    run ends. typer's loop turns Ctrl-C into a silent exit 130 (nothing on
    stderr, empty stdout under --format json), a closed stdout into exit 1
    (as if the checkpoint had failed), and prints a usage error itself,
    before the error could be answered in the format asked for. Here every
    exception goes to `report_error`, the one place errors are mapped.
    """
    output_settings.set(requested_output(args, COMMANDS))
    _escape_what_the_streams_cannot_encode()
    try:
        command = typer.main.get_command(app_for(args))
        if os.environ.get(COMPLETE_VARIABLE):
            # A shell asking for completions, through the script that
            # --install-completion wrote: typer's own main loop, which would
            # answer it, is not used (see above).
            from typer.completion import completion_init

            completion_init()
            command._main_shell_completion({}, "dspark", COMPLETE_VARIABLE)
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


def _escape_what_the_streams_cannot_encode() -> None:
    """A path in Japanese on a cp1252 console (`PYTHONIOENCODING=cp1252`,
    a Windows CI runner) must not end a finished check as an internal
    error: what the stream's encoding cannot hold is written escaped
    (`\\u30c9`), the rest as it is."""
    for stream in (sys.stdout, sys.stderr):
        reconfigure = getattr(stream, "reconfigure", None)
        if reconfigure is not None and getattr(stream, "errors", None) == "strict":
            try:
                reconfigure(errors="backslashreplace")
            except (ValueError, OSError):
                pass


def main() -> None:
    # What start-up built (modules, classes, the engine profiles) lives as
    # long as the process: the cyclic collector need not walk it again each
    # time a command's own objects trigger a collection (about 5 % of a
    # header-only check, docs/check.md). Objects made from here on are
    # collected as usual. Here, not in `run`: a caller's process is its own;
    # and thawed after the command, for a caller (a test) that calls main()
    # in its own process and goes on.
    gc.freeze()
    try:
        code = run(sys.argv[1:])
    finally:
        gc.unfreeze()
    sys.exit(code)


if __name__ == "__main__":
    main()
