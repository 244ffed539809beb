# Thin wrapper over CMake. `make test` is the project's test command.
BUILD      ?= build
BUILD_SAN  ?= build-san
BUILD_FUZZ ?= build-fuzz
JOBS       ?= $(shell nproc)
CTEST_ARGS ?=
PREFIX     ?= /usr/local
DESTDIR    ?=

.PHONY: all deps configure build test test-unit test-sanitize fuzz fuzz-smoke bench demo clean \
        install deb test-deploy

all: build

deps:
	@./ci/install-deps.sh

configure: deps
	@cmake -S . -B $(BUILD) -DCMAKE_BUILD_TYPE=RelWithDebInfo >/dev/null

build: configure
	@cmake --build $(BUILD) -j $(JOBS)

test: build
	cd $(BUILD) && ctest --output-on-failure $(CTEST_ARGS)

test-unit: build
	cd $(BUILD) && ctest --output-on-failure -L unit $(CTEST_ARGS)

# ASan + UBSan build of everything, running the same tests.
test-sanitize: deps
	@cmake -S . -B $(BUILD_SAN) -DCMAKE_BUILD_TYPE=Debug -DTETHER_SANITIZE=ON >/dev/null
	@cmake --build $(BUILD_SAN) -j $(JOBS)
	cd $(BUILD_SAN) && ASAN_OPTIONS=detect_leaks=1:abort_on_error=1 \
	  UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1 \
	  ctest --output-on-failure $(CTEST_ARGS)

fuzz: deps
	@cmake -S . -B $(BUILD_FUZZ) -DCMAKE_C_COMPILER=clang -DTETHER_FUZZ=ON >/dev/null
	@cmake --build $(BUILD_FUZZ) -j $(JOBS)

# Each fuzz target for a bounded time over its committed corpus.
fuzz-smoke: fuzz
	./ci/fuzz-smoke.sh $(BUILD_FUZZ)

bench: build
	./bench/run.sh $(BUILD)

demo: build
	./examples/demo.sh $(BUILD)

# FHS install (binaries, docs, deploy files); DESTDIR stages it.
install: build
	DESTDIR="$(DESTDIR)" cmake --install $(BUILD) --prefix "$(PREFIX)"

# A Debian package of that install (prefix /usr): $(BUILD)/tether_*.deb.
deb: build
	cd $(BUILD) && cpack -G DEB
	@ls $(BUILD)/tether_*.deb

# The deployment tests (package, image, ssh gateway, systemd guest): they
# need podman, runc and mmdebstrap (ci/install-deps.sh --deploy).
# The last line fails the target if anything above removed the build tree
# (tests/deploy/test_makefile.sh checks that only `clean` removes it).
test-deploy: deb
	@./ci/install-deps.sh --deploy
	./tests/deploy/run.sh $(BUILD)
	@test -f $(BUILD)/CMakeCache.txt || { echo "test-deploy: the build tree $(BUILD) is gone" >&2; exit 1; }

clean:
	rm -rf $(BUILD) $(BUILD_SAN) $(BUILD_FUZZ)
