# The README's two commands:  `make demo` (set up, build, run the main job)  and  `make test` (every test).
# Each installs the Debian packages it needs first (scripts/deps.sh skips what is present).
JOBS ?= $(shell nproc)

.PHONY: all deps build demo test test-release test-sanitize cuda format clean

all: build

build:
	@bash scripts/deps.sh build
	@cmake --preset release >/dev/null
	@cmake --build --preset release -j $(JOBS)

demo: build
	./build/release/myriad selfcheck
	./build/release/myriad bench ops

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

# Every test: the optimised build, then the whole suite again under ASan + UBSan.
test: test-release test-sanitize

cuda:
	@cmake --preset cuda >/dev/null
	@cmake --build --preset cuda -j $(JOBS)

format:
	@clang-format -i $$(git ls-files '*.h' '*.cc' '*.cu' '*.cuh')

clean:
	rm -rf build
