# moerun — the two commands of README.md, and the steps they are made of.
#   make demo   install what is missing, build, run the default layer (plan, verify, timing)
#   make test   install what is missing, build, run the whole test suite (+ sanitizers, fuzz, check)
JOBS ?= 2
BUILD ?= build
CMAKE_FLAGS ?=

.PHONY: all deps build demo test clean

all: build

deps:
	@bash scripts/install-deps.sh

$(BUILD)/CMakeCache.txt:
	cmake -S . -B $(BUILD) -DCMAKE_BUILD_TYPE=Release $(CMAKE_FLAGS)

build: deps $(BUILD)/CMakeCache.txt
	cmake --build $(BUILD) -j$(JOBS)

demo: build
	./$(BUILD)/moerun run --preset qwen3-30b-a3b --tokens 64 --verify

test: build
	bash scripts/run-tests.sh $(BUILD) $(JOBS)

clean:
	rm -rf $(BUILD) build-asan build-fuzz
