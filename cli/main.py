"""The `dspark` application: one module per command, registered here."""

# Without `from __future__ import annotations`: typer reads the parameters'
# annotations, which are then objects built at import, not strings it must
# compile one by one at each start (docs/check.md).

import gc

# The collector paused while this module's libraries import, as during the
# rest of start-up (`_start_up`): they make objects that live as long as
# the process and almost no garbage. Restored as the importer had it.
_collecting_before_import = gc.isenabled()
gc.disable()
try:
    import contextlib
    import copy
    import importlib
    import os
    import sys
    from typing import Annotated, Any, Callable, Iterator, Sequence

    import typer

    from dspark.cli.errors import EXIT_OK, finished_message, report_error
    from dspark.cli.settings import output_settings, report_written, requested_output
finally:
    if _collecting_before_import:
        gc.enable()

# Each command's module, in the order `dspark --help` lists them. A run
# imports the one it runs (a header-only check need not import convert's,
# smoke's or the gate's options and enums); help, a typo and shell
# completion import them all.
COMMAND_MODULES = {
    "check": "dspark.cli.check",
    "inspect": "dspark.cli.inspect_cmd",
    "convert": "dspark.cli.convert",
    "smoke": "dspark.cli.smoke",
    "families": "dspark.cli.families",
    "explain": "dspark.cli.explain",
    "gate": "dspark.cli.gate",
    "doctor": "dspark.cli.doctor",
    "version": __name__,
}
COMMANDS = tuple(COMMAND_MODULES)

# `dspark` itself: its options and callback; the commands are added by
# `app_for` (the whole group is `app`).
base_app = typer.Typer(
    name="dspark",
    help="Check, convert and smoke-test speculative-decoding draft checkpoints before deploy.",
    no_args_is_help=True,
    # --install-completion / --show-completion are typer's, added below so
    # that typer's completion machinery is imported only when they are used.
    add_completion=False,
    pretty_exceptions_enable=False,
    rich_markup_mode=None,
)


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


@base_app.callback()
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


def version() -> None:
    """Print the dspark version."""
    typer.echo(dspark_version())


COMPLETE_VARIABLE = "_DSPARK_COMPLETE"
_built: dict[tuple[str, ...], typer.Typer] = {}


def _command(name: str) -> Callable[..., Any]:
    return getattr(importlib.import_module(COMMAND_MODULES[name]), name)


def _group(names: tuple[str, ...]) -> typer.Typer:
    if names not in _built:
        group = copy.copy(base_app)
        group.registered_commands = []
        for name in names:
            group.command()(_command(name))
        _built[names] = group
    return _built[names]


def app_for(args: Sequence[str]) -> typer.Typer:
    """The application with only the command `args` names, when it names
    one first: only that command's module is imported, and typer reads the
    signature of every registered command when it builds the group (about
    10 ms for eight commands, most of what a header-only check costs beyond
    its libraries); the others cannot run in this process. `dspark --help`,
    an option before the command, a typo and shell completion get the whole
    group (`app`)."""
    if not args or args[0] not in COMMANDS or os.environ.get(COMPLETE_VARIABLE):
        return _group(COMMANDS)
    return _group((args[0],))


def __getattr__(name: str) -> Any:
    # `app`, the whole group, is built when it is first asked for.
    if name == "app":
        return _group(COMMANDS)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


@contextlib.contextmanager
def _start_up(freeze: bool) -> Iterator[None]:
    """Start-up (importing the command's modules, typer building it) makes
    a few hundred thousand objects and almost no garbage; the cyclic
    collector, which would walk them all again at each of its runs, is
    paused while it lasts (about 2 % of a header-only check, docs/check.md)
    and restored as it was. With `freeze`, what start-up built is then
    moved out of the collector's way for the rest of the process (another
    4 %): objects the command makes from there on are collected as usual."""
    collecting = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if collecting:
            gc.enable()
    if freeze:
        gc.freeze()


def run(args: Sequence[str], *, freeze_start_up: bool = False) -> int:
    """Run one command line and return its exit code.

    typer parses; this function, not typer's own main loop, decides how the
    run ends. typer's loop turns Ctrl-C into a silent exit 130 (nothing on
    stderr, empty stdout under --format json), a closed stdout into exit 1
    (as if the checkpoint had failed), and prints a usage error itself,
    before the error could be answered in the format asked for. Here every
    exception goes to `report_error`, the one place errors are mapped.
    `freeze_start_up` (the console entry point's) leaves what start-up
    built frozen (`gc.freeze`): the caller thaws it.
    """
    output_settings.set(requested_output(args, COMMANDS))
    report_written.set(False)  # a caller may run several command lines (the pre-commit hook)
    _escape_what_the_streams_cannot_encode()
    from dspark.cli.streams import guarded_stdout

    try:
        with guarded_stdout():
            return _run(args, freeze_start_up)
    except SystemExit:
        raise
    except BaseException as error:  # noqa: BLE001 - the one place errors become exit codes
        return report_error(error)


def _run(args: Sequence[str], freeze_start_up: bool) -> int:
    with _start_up(freeze_start_up):
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
    # long as the process, so it is frozen out of the collector's way
    # (`_start_up`). Here, not in `run`: a caller's process is its own; and
    # thawed after the command, for a caller (a test) that calls main() in
    # its own process and goes on.
    try:
        code = run(sys.argv[1:], freeze_start_up=True)
        _say_so_if_interrupted_now(code)
    finally:
        gc.unfreeze()
    sys.exit(code)


def _say_so_if_interrupted_now(code: int) -> None:
    """The run is over and its report written; what is left is Python's
    own exit (threads joined, buffers flushed, a GPU library torn down),
    where a Ctrl-C would end the process with no word, after a PASS. From
    here a terminating signal says that the run had finished and with what,
    and the process ends with the signal's code (128 + its number)."""
    import signal

    def finished(signum: int, frame: Any) -> None:
        message = finished_message(code, signal.Signals(signum).name) + "\n"
        try:
            os.write(2, message.encode("utf-8", "replace"))
        except OSError:
            pass  # no stderr: the exit code says it
        os._exit(128 + signum)

    from dspark.converters.writers.atomic import TERMINATING_SIGNALS

    for signum in TERMINATING_SIGNALS:
        try:
            if signal.getsignal(signum) is not signal.SIG_IGN:
                signal.signal(signum, finished)
        except (ValueError, OSError):
            return  # not the main thread: Python installs no handlers there


if __name__ == "__main__":
    main()
