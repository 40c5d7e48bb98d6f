# The front door: `make` builds, `make run` runs the main job, `make test`
# runs the whole suite. Each installs missing dependencies first.
BUILD_DIR ?= build
# Narrow for fast local builds, e.g. `make VPOD_CUDA_ARCHS=90a`.
VPOD_CUDA_ARCHS ?= 80;90a
JOBS ?= $(shell nproc)
CMAKE_FLAGS ?=
export PATH := /usr/local/cuda/bin:$(PATH)

.PHONY: all deps configure build run test gpu-test format format-check clean

all: build

deps:
	@bash scripts/install-deps.sh

$(BUILD_DIR)/build.ninja:
	@$(MAKE) --no-print-directory deps
	cmake -S . -B $(BUILD_DIR) -G Ninja -DVPOD_CUDA_ARCHS="$(VPOD_CUDA_ARCHS)" $(CMAKE_FLAGS)

configure: $(BUILD_DIR)/build.ninja

build: deps configure
	cmake --build $(BUILD_DIR) -j $(JOBS)

# `make run`: serve MODEL=DIR (a Hugging Face folder), or a demo model made
# once in models/$(DEMO_PRESET); vpod serve prints a working curl line.
MODEL ?=
DEMO_PRESET ?= tiny
PORT ?= 8000
SERVE_ARGS ?=
run: build
	@$(BUILD_DIR)/vpod info
	@model="$(MODEL)"; \
	if [ -z "$$model" ]; then \
	  model=models/$(DEMO_PRESET); \
	  [ -f $$model/config.json ] || $(BUILD_DIR)/vpod make-model --out $$model --preset $(DEMO_PRESET); \
	fi; \
	exec $(BUILD_DIR)/vpod serve --model $$model --port $(PORT) $(SERVE_ARGS)

test: build
	@bash scripts/run-tests.sh $(BUILD_DIR)

# On a GPU machine: only the tests labelled gpu.
gpu-test: build
	cd $(BUILD_DIR) && ctest -L gpu --output-on-failure

FORMAT_FILES = $(shell git ls-files '*.h' '*.cpp' '*.cu' '*.cuh')

format:
	clang-format -i $(FORMAT_FILES)

format-check:
	@clang-format --dry-run --Werror $(FORMAT_FILES) && echo "format-check: $(words $(FORMAT_FILES)) files clean"

clean:
	rm -rf $(BUILD_DIR)
