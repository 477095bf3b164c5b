# The two set-up commands of the README: `make test` and `make demo`. Both (re)build .venv from the pinned
# requirements when it is missing or older than requirements.txt / setup.py.
PY      := .venv/bin/python
STAMP   := .venv/.installed
export OMP_NUM_THREADS ?= 1
export MXNET_SUBGRAPH_BACKEND := NONE
export MXNET_SUBGRAPH_VERBOSE := 0
export PYTHONDONTWRITEBYTECODE := 1

.PHONY: test demo venv clean docs experiments

venv: $(STAMP)

$(STAMP): requirements.txt setup.py
	rm -rf .venv
	python3 -m venv .venv
	$(PY) -m pip install -q --disable-pip-version-check -r requirements.txt
	$(PY) -m pip install -q --disable-pip-version-check --no-build-isolation --no-deps -e .
	touch $(STAMP)

# Tests marked slow (the full algorithm x worker matrices, every paper configuration, hybrid ten-step runs) run
# only in CI (CI=true, set by .ci/run): about 6 minutes without them on 2 cores, about 40 with them.
test: $(STAMP)
	$(PY) -m pytest -q $(if $(filter true,$(CI)),,-m "not slow")

# The headline last: the paper's two largest models on a simulated 8 x K80 against every baseline (docs/experiments.md).
demo: $(STAMP)
	$(PY) -m tofu.demo
	@echo; echo "== simulated k80x8: throughput of every system, the paper's largest models (docs/experiments.md)"
	@$(PY) experiments/run_throughput.py --models wresnet-152-10,rnn-10-8k --tag demo --quiet --jobs 2 \
		--tofu-start docs/results/throughput/k80x8.csv
	@$(PY) experiments/plot_throughput.py results/throughput/demo.csv --out results/figures/demo-throughput.png

# The generated docs: docs/models.md from the models themselves, then every table of docs/experiments.md,
# docs/runtime.md and docs/search.md from the committed results in docs/results/ (tests/test_docs.py checks them).
docs: $(STAMP)
	$(PY) experiments/make_models_table.py --out docs/models.md
	$(PY) experiments/make_docs.py

# The simulated evaluation (docs/experiments.md) on the default profile, k80x8, every system on the event-driven
# engine: results/ and docs/figures/. JOBS cases at once (worker processes); scaling starts Tofu's search at the
# batch the throughput run found. The timelines: one iteration each, programs built with MXNet's default
# gradient sum cap, as tofu.sim.systems builds them (importing tofu raises it for tofu's own runtime).
# To refresh the committed results: make experiments OUT=docs/results, then make docs.
JOBS ?= 2
OUT  ?= results
experiments: $(STAMP)
	$(PY) experiments/run_throughput.py --tag k80x8 --jobs $(JOBS) --out-dir $(OUT)/throughput
	$(PY) experiments/run_partition_algorithms.py --tag k80x8 --jobs $(JOBS) --out-dir $(OUT)/partition_algorithms
	$(PY) experiments/run_scaling.py --tag k80x8 --throughput $(OUT)/throughput/k80x8.csv --out-dir $(OUT)/scaling
	$(PY) experiments/plot_throughput.py $(OUT)/throughput/k80x8.csv --out docs/figures/throughput.png
	$(PY) experiments/plot_partition_algorithms.py $(OUT)/partition_algorithms/k80x8.csv \
		--out docs/figures/partition_algorithms.png
	$(PY) experiments/plot_scaling.py $(OUT)/scaling/k80x8.csv --out docs/figures/scaling.png
	mkdir -p results/timelines
	MXNET_EXEC_INPLACE_GRAD_SUM_CAP=8 $(PY) -m tofu sim wresnet-152-10 --workers 8 --profile k80x8 --batch 8 \
		--figure docs/figures/timeline-wresnet-152-10.png --json > results/timelines/wresnet-152-10.json
	MXNET_EXEC_INPLACE_GRAD_SUM_CAP=8 $(PY) -m tofu sim rnn-10-8k --workers 8 --profile k80x8 --batch 128 \
		--figure docs/figures/timeline-rnn-10-8k.png --json > results/timelines/rnn-10-8k.json
	$(PY) experiments/run_search_time.py --workers 8 --tag experiments \
		--algos tofu,tofu-recursive,dp-flat,data-parallel,allrow-greedy,spartan,equalchop,icml18
	$(PY) experiments/plot_search.py results/search_time/experiments.csv --workers 8 --out docs/figures/search_time.png

clean:
	rm -rf .venv build *.egg-info
