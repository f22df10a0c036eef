# Holmes: the two commands of the README, and a few helpers.
#   make demo   set up, build, and run the main job: the example trainer on 8 local ranks
#               emulating two clusters, Holmes's plan against the naive placement
#   make test   set up, build, and run the test suite (make test-long: the long matrix)
#   make test-asan / test-tsan   the suite under ASan+UBSan / ThreadSanitizer, own build trees
#   make fuzz   the libFuzzer targets (clang), FUZZ_SECONDS each
#   make soak   random collectives checked exactly, SOAK_SECONDS per transport
BUILD      ?= build
BUILD_TYPE ?= RelWithDebInfo
CTEST_JOBS ?= 2
ASAN_BUILD ?= build-asan
TSAN_BUILD ?= build-tsan
FUZZ_BUILD ?= build-fuzz
FUZZ_SECONDS ?= 60
SOAK_SECONDS ?= 600

.PHONY: all setup configure build test test-long test-faults demo demo-elastic sim-sweep install format clean \
        test-asan test-tsan fuzz soak

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

# Sanitizer builds: their own trees, without CUDA/UCX/verbs (their runtimes are not built with the
# sanitizers and drown the reports in noise). tests/sanitizers/ has the options and suppressions;
# SANITIZER_TESTS passes extra ctest arguments (e.g. SANITIZER_TESTS='-R unit');
# SANITIZER_SCOPE=ci runs what CI runs (.ci/run): all but the collective matrix's repetitions.
# -O1 -g1: what the sanitizers' authors recommend (fast enough, line numbers in reports) and
# quicker to compile than -O2 -g.
SANITIZER_CMAKE = -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo -DHOLMES_BUILD_BENCH=OFF \
  -DHOLMES_WITH_CUDA=OFF -DHOLMES_WITH_UCX=OFF -DHOLMES_WITH_VERBS=OFF -DHOLMES_WITH_TORCH=OFF \
  "-DCMAKE_CXX_FLAGS_RELWITHDEBINFO=-O1 -g1 -DNDEBUG" "-DCMAKE_C_FLAGS_RELWITHDEBINFO=-O1 -g1 -DNDEBUG"
SANITIZER_TESTS ?=
SANITIZER_SCOPE ?= full

test-asan: setup
	@if [ ! -f $(ASAN_BUILD)/build.ninja ]; then cmake -S . -B $(ASAN_BUILD) $(SANITIZER_CMAKE) \
	  -DHOLMES_SANITIZE=address,undefined >/dev/null; fi
	@cmake --build $(ASAN_BUILD) --parallel $(CTEST_JOBS)
	@SANITIZER_SCOPE=$(SANITIZER_SCOPE) tests/sanitizers/ctest.sh address $(ASAN_BUILD) $(CTEST_JOBS) \
	  $(SANITIZER_TESTS)

test-tsan: setup
	@if [ ! -f $(TSAN_BUILD)/build.ninja ]; then cmake -S . -B $(TSAN_BUILD) $(SANITIZER_CMAKE) \
	  -DHOLMES_SANITIZE=thread >/dev/null; fi
	@cmake --build $(TSAN_BUILD) --parallel $(CTEST_JOBS)
	@SANITIZER_SCOPE=$(SANITIZER_SCOPE) tests/sanitizers/ctest.sh thread $(TSAN_BUILD) $(CTEST_JOBS) \
	  $(SANITIZER_TESTS)

# libFuzzer needs clang: the fuzz targets get their own tree, the library instrumented for
# coverage and ASan+UBSan. tests/fuzz/README.md says how to replay and minimise a finding.
fuzz: setup
	@if [ ! -f $(FUZZ_BUILD)/build.ninja ]; then CC=clang CXX=clang++ cmake -S . -B $(FUZZ_BUILD) \
	  $(SANITIZER_CMAKE) -DHOLMES_FUZZ=ON -DHOLMES_SANITIZE=address,undefined \
	  -DCMAKE_CXX_FLAGS=-fsanitize=fuzzer-no-link >/dev/null; fi
	@cmake --build $(FUZZ_BUILD) --parallel $(CTEST_JOBS) --target holmes_fuzzers
	@tests/fuzz/run.sh $(FUZZ_BUILD) $(FUZZ_SECONDS)

# The soak: random collectives, dtypes, ops, sizes and algorithms, every result checked, for
# SOAK_SECONDS on each built transport (tests/soak/README.md).
soak: build
	@tests/soak/soak.sh $(BUILD) $(SOAK_SECONDS)

demo: build
	@examples/trainer/demo.sh $(BUILD)

# Fault injection 10 times in a row (make test runs each scenario twice), and recovery (shrink
# after a kill, a freeze, a revoke; the trainer's recovery run) 10 times in a row.
test-faults: build
	@tests/faults/faults_test.sh $(BUILD)/bin 10
	@tests/faults/shrink_test.sh $(BUILD)/bin 10
	@examples/trainer/demo_elastic.sh $(BUILD) 10

# The example trainer loses a rank mid-step on the emulated two islands and recovers.
demo-elastic: build
	@examples/trainer/demo_elastic.sh $(BUILD)

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
