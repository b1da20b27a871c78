#!/usr/bin/env bash
# The pre-deploy gate on the bundled example draft, as a deploy pipeline
# runs it: one command, one exit code (0 deploy, 1 the draft fails, 2 bad
# input). Extra arguments go to `dspark gate` (--target, --policy, --engine,
# --format github, --output report.sarif, ...).
#
#   examples/predeploy_gate.sh [GATE OPTIONS]
#
# DSPARK names the command to run (default: dspark on the PATH).
set -uo pipefail
cd "$(dirname "$0")/.."

"${DSPARK:-dspark}" gate examples/tiny-k3-dspark "$@"
code=$?
if [ "$code" -eq 0 ]; then
  echo "predeploy gate: passed, deploy"
else
  echo "predeploy gate: exit $code, do not deploy" >&2
fi
exit "$code"
