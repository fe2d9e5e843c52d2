# Two entry points a researcher needs on a fresh clone:
#   make run   - install into .venv, then run the main job on the offline default encoder
#   make test  - install into .venv, then run the whole test suite
# and one that regenerates the results of record (every method; about 100 min on 2 cores):
#   make results
# Everything else here is what those two need.

PYTHON ?= python3
VENV   ?= .venv
BIN    := $(VENV)/bin
# The main job: DeCLUTR from raw data to a trained, evaluated model and its
# leaderboard row (the data, the baseline its `vs base` is tested against, training,
# scoring, model card; a few minutes on 2 cores). A comma-separated list of methods in
# dvc.train runs them all before one leaderboard: make run MAIN_PIPELINES=simcse,declutr
MAIN_PIPELINES ?= declutr
PYTEST_ARGS ?=

# Kedro telemetry and DVC analytics would try to reach the network.
export KEDRO_DISABLE_TELEMETRY := 1
export DVC_NO_ANALYTICS := 1
export PIP_DISABLE_PIP_VERSION_CHECK := 1

.PHONY: install run results test viz viz-serve clean

# torch is installed first and pinned: 2.13.0 is a CPU build on this platform's
# local wheel store; an unpinned torch would pull a multi-GB CUDA build. Once it is
# there, the project's `torch>=2.4` requirement is satisfied and nothing else moves.
$(BIN)/.installed: pyproject.toml
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip
	$(BIN)/python -m pip install --quiet "torch==2.13.0"
	$(BIN)/python -m pip install --quiet -e ".[test]"
	touch $@

# `dvc plots show` without a network: vega, vega-lite and vega-embed (the versions DVC's
# own page loads from a CDN) from the npm registry, inlined into a page template that
# .dvc/config.local names (records/offline_plots.py). Without npm, DVC's own page stays, and
# renders only online; install goes on either way. It lives with the install (.venv),
# so that build/ is kedro-viz's alone.
PLOTS_PAGE := $(VENV)/share/dvc_plots_page.html

$(PLOTS_PAGE): $(BIN)/.installed src/contrastive_sentence_embeddings/records/offline_plots.py
	@if $(BIN)/python -m contrastive_sentence_embeddings.records.offline_plots $@; then \
	  $(BIN)/dvc config --local plots.html_template ../$@; \
	else \
	  $(BIN)/dvc config --local --unset plots.html_template 2>/dev/null || true; \
	fi

install: $(BIN)/.installed $(PLOTS_PAGE)

# The main job runs through DVC (its stages' `kedro run` commands), so that dvc.lock records
# what it produced: afterwards `dvc status` has nothing to say of those stages and a first
# `dvc exp run -S 'declutr....'` reruns only what that parameter reaches
# (docs/architecture.md, "One state for Kedro and DVC"). Each name in MAIN_PIPELINES must be
# in dvc.train (conf/base/parameters.yml); the leaderboard is refreshed last, on its own.
comma := ,
MAIN_STAGES = $(foreach name,$(subst $(comma), ,$(MAIN_PIPELINES)),train@$(name))
run: install
	PATH="$(abspath $(BIN)):$$PATH" $(BIN)/dvc repro $(MAIN_STAGES)
	PATH="$(abspath $(BIN)):$$PATH" $(BIN)/dvc repro --single-item leaderboard

# The results of record: every stage of dvc.yaml (every method and combination in
# dvc.train, SimCSE's and DeCLUTR's 3 seeds, the transfer tasks of dvc.transfer, the
# baselines, the leaderboard), so that dvc.lock records the code, parameters and results
# of the one commit they came from; data/08_reporting/results_of_record.json gets the
# wall time, each stage's time and the machine (docs/record/results.md).
results: install
	PATH="$(abspath $(BIN)):$$PATH" $(BIN)/python -m contrastive_sentence_embeddings.records.results_of_record dvc repro

test: install
	$(BIN)/python -m pytest $(PYTEST_ARGS)

# kedro-viz's static site in build/ (its hooks included, so every seed's parameters are
# in its catalog), then `make viz-serve`: the site reads its data over HTTP (opened as a
# file it is a blank page). The address opens on the main job's pipeline (pid) focused
# on its method's modular pipeline, expanded (fid, expandAllPipelines): each seed's
# train -> model -> evaluate -> metrics at about 50% zoom. The pipeline unfocused is
# illegible on first open (about 13%): its leaderboard node waits on every method's
# metrics, ~30 inputs in one row. The whole graph is a menu away.
VIZ_PORT ?= 4141
VIZ_PIPELINE := $(firstword $(subst $(comma), ,$(MAIN_PIPELINES)))
VIZ_URL := http://127.0.0.1:$(VIZ_PORT)/?pid=$(VIZ_PIPELINE)&fid=$(VIZ_PIPELINE)&expandAllPipelines=true
viz: install
	$(BIN)/kedro viz build --include-hooks
	@echo "kedro-viz site in build/: make viz-serve, then open $(VIZ_URL)"

viz-serve:
	@echo "serving build/ at $(VIZ_URL) (Ctrl-C stops it)"
	$(BIN)/python -m http.server $(VIZ_PORT) --bind 127.0.0.1 --directory build

clean:
	@test ! -x $(BIN)/dvc || $(BIN)/dvc config --local --unset plots.html_template 2>/dev/null || true
	rm -rf $(VENV) build .pytest_cache
