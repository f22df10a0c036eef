# Holmes: the two commands of the README, and a few helpers.
#   make demo   set up, build, and run the main job: the example trainer on 8 local ranks
#               emulating two clusters, Holmes's plan against the naive placement
#   make test   set up, build, and run the test suite (make test-long: the long matrix)
BUILD      ?= build
BUILD_TYPE ?= RelWithDebInfo
CTEST_JOBS ?= 2

.PHONY: all setup configure build test test-long demo sim-sweep install format clean

all: build

setup:
	@scripts/setup-debian.sh

configure: setup
	@if [ ! -f $(BUILD)/build.ninja ]; then \
	  cmake -S . -B $(BUILD) -G Ninja -DCMAKE_BUILD_TYPE=$(BUILD_TYPE) >/dev/null; fi

build: configure
	@cmake --build $(BUILD)

test: build
	@cd $(BUILD) && ctest --output-on-failure --timeout 900 -j $(CTEST_JOBS) -LE long

# The long matrix (every algorithm x built transport x 3/4/8 ranks; about an hour here).
test-long: build
	@cd $(BUILD) && ctest --output-on-failure --timeout 1800 -j $(CTEST_JOBS) -L long

demo: build
	@examples/trainer/demo.sh $(BUILD)

# holmes-sim's bandwidth sweep on the paper's setup: table, CSV and plot in docs/sim/.
sim-sweep: build
	@mkdir -p docs/sim
	@$(BUILD)/bin/holmes-sim -t examples/topologies/paper-gpt-7.5b.yaml -m gpt-7.5b --tp 1 --pp 2 \
	  --sweep 400,200,100,50,25,10,5,2,1 --csv docs/sim/sweep-paper-gpt-7.5b.csv
	@/usr/bin/python3 tools/holmes-sim/plot_sweep.py docs/sim/sweep-paper-gpt-7.5b.csv \
	  docs/sim/sweep-paper-gpt-7.5b.png "GPT-7.5B on 4 IB + 4 RoCE nodes (paper-gpt-7.5b.yaml)"

install: build
	@cmake --install $(BUILD) --prefix $(or $(PREFIX),/usr/local)

format:
	@git ls-files '*.h' '*.hpp' '*.cpp' '*.c' | xargs clang-format -i

clean:
	@rm -rf $(BUILD)
