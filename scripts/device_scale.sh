#!/usr/bin/env bash
# #22 item 2's CPU ratio needs cores: `infermon serve` at 1,000 ten-model targets beside the real
# Prometheus with the recording rules wants more than this 2-core VM has. The device machine has 16.
#
#   Here, once, in the repo root:   bash scripts/device_scale.sh prepare
#       (the wheels, scripts/device_wheels.sh, and Debian's prometheus package into ./.deb/)
#   There, through the device tool's `run`, carrying [".whl", ".deb"], timeout_s ~430:
#                                   bash scripts/device_scale.sh run
#       (T, S, W, WORKERS override targets, seconds, warm-up and the parse workers of each run)
#
# `run` makes bench.scale's runs side by side at once (one per WORKERS value, each with its own
# page farm and Prometheus: 16 cores hold both), then bench.service_scrape alone. Each run's
# output lands in $OUT. Wall time is about S + 90 s, plus 60 s for the scrape bench.
set -uo pipefail
cd "$(dirname "$0")/.."
case "${1:-}" in
prepare)
    bash scripts/device_wheels.sh || exit 1
    mkdir -p .deb && (cd .deb && rm -f prometheus_*.deb && apt-get download prometheus) || exit 1
    git check-ignore -q .deb/x || { echo "error: .deb/ is not ignored by git" >&2; exit 1; }
    ls -la .deb ;;
run)
    : "${OUT:?run on the device machine, through the device tool (it sets OUT)}"
    python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade \
        --target /tmp/site .whl/*.whl || exit 1
    export PYTHONPATH=/tmp/site PYTHONUNBUFFERED=1
    mkdir -p /tmp/prom && dpkg -x .deb/prometheus_*.deb /tmp/prom && export PATH=/tmp/prom/usr/bin:$PATH
    { nproc; uptime; python3 --version; prometheus --version 2>&1 | head -1; } | tee "$OUT/env.txt"
    pids=()
    for workers in ${WORKERS:-2 0}; do
        python3 -m bench.scale --targets "${T:-1000}" --models 10 --seconds "${S:-200}" --warmup "${W:-80}" \
            --parse-workers "$workers" >"$OUT/scale_w$workers.txt" 2>&1 &
        pids+=($!)
    done
    wait "${pids[@]}"
    python3 -m bench.service_scrape --seconds 40 >"$OUT/scrape.txt" 2>&1
    tail -n 40 "$OUT"/scale_w*.txt "$OUT/scrape.txt" ;;
*)
    echo "usage: $0 prepare|run" >&2; exit 2 ;;
esac
