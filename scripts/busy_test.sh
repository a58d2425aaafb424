#!/usr/bin/env bash
# `make test` on a busy machine: the suite beside CPU hogs (default two) that this script starts
# and ends itself, by pid. The suite must pass so (#17 item 8): CI runs on shared machines.
#
#   scripts/busy_test.sh [pytest args...]     HOGS=3 scripts/busy_test.sh tests/alerting
#
# Runs `make test` itself (its set-up, its workers: TEST_WORKERS), with the arguments as
# PYTEST_ARGS; exits with its code.
set -uo pipefail
cd "$(dirname "$0")/.."
hogs=()
stop() { [ ${#hogs[@]} -gt 0 ] && kill "${hogs[@]}" 2>/dev/null; wait "${hogs[@]}" 2>/dev/null; }
trap stop EXIT
for _ in $(seq "${HOGS:-2}"); do
  python3 -c "while 1: pass" &
  hogs+=($!)
done
started=$(date +%s)
make test PYTEST_ARGS="$*"
rc=$?
echo "busy_test: make test exit $rc in $(( $(date +%s) - started )) s beside ${#hogs[@]} CPU hogs (pids ${hogs[*]})"
exit $rc
