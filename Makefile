# The README's two commands:  `make demo` (set up, build, train the demo model)  and  `make test` (every test).
# Each installs the Debian packages it needs first (scripts/deps.sh skips what is present).
JOBS ?= $(shell nproc)

.PHONY: all deps build demo demo-agent demo-vision demo-video bench-mnist test test-release test-sanitize test-tsan test-fuzz fuzz python interop-llama bench-peers cuda format clean

all: build

build:
	@bash scripts/deps.sh build
	@cmake --preset release >/dev/null
	@cmake --build --preset release -j $(JOBS)

# The main job: train configs/tiny.json on the built-in corpus (a few minutes on 2 cores), then the report and
# sample generations. Everything lands in runs/demo.
DEMO := runs/demo
demo: build
	@./build/release/myriad selfcheck > /dev/null && echo "kernel self-check: OK (myriad selfcheck)"
	./build/release/myriad train --config configs/tiny.json --out $(DEMO) --force
	./build/release/myriad report $(DEMO)
	@echo "--- the trained model on held-out prompts: accuracy per task, samples drawn at random, marked ---"
	@./build/release/myriad eval text --model $(DEMO) --per-task 64 --show 3 2>/dev/null
	@echo "--- free text (no answer to check) ---"
	@./build/release/myriad generate --model $(DEMO) --prompt "In the morning," --max-tokens 40
	@echo "--- done: $(DEMO)/report.html (open it in a browser), $(DEMO)/metrics.jsonl, $(DEMO)/checkpoints/ ---"

# Post-training on one laptop: the demo model -> SFT on tool-use demonstrations -> GRPO, evaluated on held-out
# multi-step tool tasks after each stage (scripts/demo_agent.sh; runs/agent).
demo-agent: build
	@bash scripts/demo_agent.sh runs/agent

# Vision: a small VLM trained on the built-in shape scenes, answering questions about held-out ones
# (scripts/demo_vision.sh; runs/vision).
demo-vision: build
	@bash scripts/demo_vision.sh runs/vision

# Video: the same on the built-in motion clips (which way a square moves, its colour; scripts/demo_video.sh;
# runs/video).
demo-video: build
	@bash scripts/demo_video.sh runs/video

# MNIST by generated answer (a benchmark: needs ../shared/data/mnist or IDX=DIR; scripts/bench_mnist.sh).
IDX ?= ../shared/data/mnist
bench-mnist: build
	@bash scripts/bench_mnist.sh $(IDX) runs/mnist

test-release:
	@bash scripts/deps.sh test
	@cmake --preset release >/dev/null
	@cmake --build --preset release -j $(JOBS)
	@ctest --preset release

test-sanitize:
	@bash scripts/deps.sh test
	@cmake --preset debug >/dev/null
	@cmake --build --preset debug -j $(JOBS)
	@ctest --preset debug

# The engine and the HTTP server's tests under ThreadSanitizer (clang-14; one compute thread, so that OpenMP's
# and OpenBLAS's uninstrumented pools stay out of it: the engine thread, the HTTP threads and the jobs between them
# are what is checked).
test-tsan:
	@bash scripts/deps.sh fuzz
	@cmake --preset tsan >/dev/null
	@cmake --build --preset tsan -j $(JOBS)
	@ctest --preset tsan

# Every fuzz target under libFuzzer (clang, ASan + UBSan) for FUZZ_SECONDS each (scripts/fuzz.sh; the corpus it
# grows is kept in build/fuzz/corpus). `make test` runs each for a short smoke.
FUZZ_SECONDS ?= 600
fuzz:
	@bash scripts/fuzz.sh $(FUZZ_SECONDS)

test-fuzz:
	@bash scripts/fuzz.sh 20

# Every test: the optimised build, the whole suite again under ASan + UBSan, and a fuzzing smoke of every parser.
# `make test-tsan` is apart: its build (~5 min on 2 cores) would take the CI run past its 40-minute budget.
test: test-release test-sanitize test-fuzz

# The Python module: build/release/python/myriad*.so (PYTHONPATH=build/release/python python3 -c "import myriad").
python:
	@bash scripts/deps.sh build
	@cmake --preset release >/dev/null
	@cmake --build --preset release --target myriad_python -j $(JOBS)
	@echo "built build/release/python/: PYTHONPATH=build/release/python python3 -c 'import myriad'"

# Optional: GGUF files from `myriad export gguf` run by llama.cpp itself (llama-cpp-python, compiled from PyPI's
# source into build/pyenv: ~10 minutes on 2 cores, so not part of `make test`), logits against myriad's.
interop-llama: build
	@bash scripts/deps.sh test
	@build/pyenv/bin/python -c "import llama_cpp" 2>/dev/null || \
	  { build/pyenv/bin/pip install -q diskcache jinja2 && \
	    CMAKE_BUILD_PARALLEL_LEVEL=$(JOBS) build/pyenv/bin/pip install -q --no-deps llama-cpp-python==0.3.36; }
	@build/pyenv/bin/python tests/interop/gguf_llama_cpp.py build/release/myriad . build/release/gguf-llama

# Optional: myriad beside its peers on this machine, same shapes and threads, interleaved rounds, printed as ratios
# beside `myriad bench ops`'s ceilings (scripts/bench_peers.py): a training step against PyTorch (the reference model
# in float32) on configs/small.json and configs/deepseek2-small.json; prefill and decode against llama.cpp on
# `myriad export gguf` files when llama-cpp-python is installed (`make interop-llama`), else that part is skipped.
# Several minutes on 2 cores, so not part of `make test`. PEERS_ARGS="--threads 4 --seconds 5 --json F" and so on.
PEERS_ARGS ?=
bench-peers: build
	@bash scripts/deps.sh test
	@build/pyenv/bin/python scripts/bench_peers.py $(PEERS_ARGS)

cuda:
	@cmake --preset cuda >/dev/null
	@cmake --build --preset cuda -j $(JOBS)

format:
	@clang-format -i $$(git ls-files '*.h' '*.cc' '*.cu' '*.cuh')

clean:
	rm -rf build
