# volshard: `make demo` and `make test` work on a fresh Debian 12 machine.
BUILD ?= build
JOBS ?= $(shell nproc)
CMAKE_ARGS ?=

.PHONY: all deps configure build test demo bench clean

all: build

deps:
	@scripts/deps.sh

configure: deps
	@cmake -S . -B $(BUILD) -G Ninja -DVOLSHARD_WERROR=ON $(CMAKE_ARGS)

build: configure
	@cmake --build $(BUILD) -j $(JOBS)

test: build
	@cd $(BUILD) && ctest -j $(JOBS) --output-on-failure --timeout 900

# The main job, small and on CPU. Until the trainer lands: how the sampler
# shards 21 samples over 2 ranks for 3 epochs with batch 5 (verified), then
# MONAI-style synthetic volumes, their summary, and a picture of the augmented
# crops the network would be fed.
DEMO := $(BUILD)/demo
demo: build
	@$(BUILD)/bin/sampler-inspect --size 21 --world-size 2 --epochs 0:2 --batch-size 5 --verify
	@echo
	@$(BUILD)/bin/volshard synth --out $(DEMO)/data --count 4 --size 128 --seed 0
	@$(BUILD)/bin/volshard info $(DEMO)/data/img0.nii.gz $(DEMO)/data/seg0.nii.gz
	@$(BUILD)/bin/volshard preview --data $(DEMO)/data --out $(DEMO)/crops.png --count 8 --seed 0

bench: build
	@$(BUILD)/bin/bench_sampler bench/torch_sampler_baseline.py
	@echo
	@$(BUILD)/bin/bench_nifti bench/nifti_bench_nibabel.py
	@echo
	@$(BUILD)/bin/bench_pipeline bench/pipeline_baseline.py

clean:
	rm -rf $(BUILD)
