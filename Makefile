# volshard: `make demo` and `make test` work on a fresh Debian 12 machine.
BUILD ?= build
JOBS ?= $(shell nproc)
CMAKE_ARGS ?=
# The pinned Python environment (torch 2.11, MONAI, nibabel) that `make deps` makes outside the clone.
PYTHON = $(shell scripts/pyenv.sh --path)/bin/python

.PHONY: all deps configure build python test test-wheel demo bench bench-hippocampus bench-hippocampus-monai clean

all: build

deps:
	@scripts/deps.sh

configure: deps
	@cmake -S . -B $(BUILD) -G Ninja -DVOLSHARD_WERROR=ON $(CMAKE_ARGS)

build: configure
	@cmake --build $(BUILD) -j $(JOBS)

# The Python module into $(BUILD)/python/volshard, for the pinned environment's torch:
#   PYTHONPATH=$(BUILD)/python $(scripts/pyenv.sh --path)/bin/python -c 'import volshard'
# (`pip install .` builds and installs it into any environment with torch 2.x.)
python: configure
	@cmake --build $(BUILD) -j $(JOBS) --target python

# Every test but the wheel's: `pip install .` compiles every library a second
# time (Release, in a build tree of its own), as long again as the build;
# `make test-wheel` runs it, and CI (.ci/run) runs both.
test: build
	@cd $(BUILD) && ctest -j $(JOBS) --output-on-failure --timeout 900 -LE wheel

test-wheel: build
	@cd $(BUILD) && ctest --output-on-failure -L wheel

# The main job, small and on CPU: how the sampler shards a dataset over 2 ranks,
# MONAI-style synthetic volumes and a picture of the augmented crops, then the
# tutorial UNet trained for 2 epochs on 2 ranks over Gloo (32^3 crops),
# validated, and a prediction written back as NIfTI.
# It builds only the two tools it runs (volshard pulls volshard-torch), not the tests,
# benchmarks and fuzzers that `make build` adds.
DEMO := $(BUILD)/demo
demo: configure
	@cmake --build $(BUILD) -j $(JOBS) --target volshard sampler-inspect
	@$(BUILD)/bin/sampler-inspect --size 12 --world-size 2 --epochs 0:1 --batch-size 2 --verify
	@echo
	@$(BUILD)/bin/volshard synth --out $(DEMO)/data --count 16 --size 64 --seed 0
	@$(BUILD)/bin/volshard preview --data $(DEMO)/data --out $(DEMO)/crops.png --count 8 --seed 0 --crop 32
	@rm -rf $(DEMO)/run
	@$(BUILD)/bin/volshard train --data $(DEMO)/data --out $(DEMO)/run --epochs 2 --nproc-per-node 2 \
	  --crop 32 --num-samples 4 --batch-size 2 --val-fraction 0.25 --seed 0
	@$(BUILD)/bin/volshard predict --model $(DEMO)/run/model.pt --config $(DEMO)/run/config.json \
	  --image $(DEMO)/data/img15.nii.gz --out $(DEMO)/pred15.nii.gz --roi 32
	@$(BUILD)/bin/volshard preview --image $(DEMO)/data/img15.nii.gz --label $(DEMO)/data/seg15.nii.gz \
	  --prediction $(DEMO)/pred15.nii.gz --out $(DEMO)/pred15.png
	@echo
	@echo "outputs: $(DEMO)/crops.png (augmented crops), $(DEMO)/run/ (model.pt, best_model.pt, checkpoint.pt,"
	@echo "metrics.jsonl, config.json, curves.png), $(DEMO)/pred15.nii.gz and pred15.png (prediction of a"
	@echo "validation volume beside its label)"

bench: build
	@$(BUILD)/bin/bench_sampler bench/torch_sampler_baseline.py
	@echo
	@$(BUILD)/bin/bench_nifti bench/nifti_bench_nibabel.py
	@echo
	@$(BUILD)/bin/bench_pipeline bench/pipeline_baseline.py
	@echo
	@$(BUILD)/bin/bench_pipeline --size 128 --crop 96
	@echo
	@$(BUILD)/bin/bench_pipeline --size 256 --crop 192
	@echo
	@$(BUILD)/bin/bench_pipeline --ct --crop 192 --volumes 6
	@echo
	@$(BUILD)/bin/bench_pipeline --pipeline spleen --crop 96
	@echo
	@$(BUILD)/bin/bench_pipeline --pipeline brats --crop 64
	@echo
	@cmake --build $(BUILD) --target python
	@PYTHONPATH=$(BUILD)/python $(PYTHON) bench/python_loader_bench.py --bin $(BUILD)/bin/volshard
	@echo
	@$(PYTHON) bench/validation_balance.py --bin $(BUILD)/bin/volshard --out $(BUILD)/bench_validation
	@echo
	@$(PYTHON) bench/invariant_overhead.py --bin $(BUILD)/bin/volshard --out $(BUILD)/bench_invariant

# Real scans: configs/hippocampus.json on the Decathlon's Hippocampus task
# (../shared/data/msd_hippocampus beside the clone), 2 ranks on CPU, about
# 15 minutes; the table goes to bench/README.md.
bench-hippocampus: build
	@$(PYTHON) bench/hippocampus.py --bin $(BUILD)/bin/volshard --out $(BUILD)/bench_hippocampus

# The same recipe in MONAI and PyTorch DDP beside volshard's run of it (issue 44),
# one seed a side, about an hour on 2 cores: --seeds N for seed intervals.
bench-hippocampus-monai: build
	@$(PYTHON) bench/hippocampus_monai.py --bin $(BUILD)/bin/volshard --out $(BUILD)/bench_hippocampus_monai

clean:
	rm -rf $(BUILD)
