"""A Ctrl-C that lands after the report was written says the run had
finished and with what; under --format json it adds no error document
after the report the reader already has."""

from __future__ import annotations

import contextvars

from dspark.cli.errors import EXIT_CHECK_FAILED, EXIT_INTERRUPTED, decide, report_error
from dspark.cli.settings import OutputSettings, output_settings, report_written


def test_a_ctrl_c_after_the_report_says_the_run_had_finished(capsys):
    def winding_down() -> int:
        output_settings.set(OutputSettings("json", command="check"))
        decide(EXIT_CHECK_FAILED)
        report_written.set(True)
        return report_error(KeyboardInterrupt())

    capsys.readouterr()
    code = contextvars.Context().run(winding_down)
    out, err = capsys.readouterr()
    assert code == EXIT_INTERRUPTED
    assert out == ""  # the report already written stays the one document
    assert err == "interrupted (SIGINT) after the run had finished (exit 1); its report stands\n"


def test_a_ctrl_c_before_the_report_is_an_interruption(capsys):
    def mid_run() -> int:
        output_settings.set(OutputSettings("json", command="check"))
        return report_error(KeyboardInterrupt())

    capsys.readouterr()
    code = contextvars.Context().run(mid_run)
    out, err = capsys.readouterr()
    assert code == EXIT_INTERRUPTED and err.startswith("error: interrupted")
    assert '"Interrupted"' in out
