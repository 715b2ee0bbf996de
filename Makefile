# kvtools: plain GNU Make, non-recursive.
#
#   make                 build libkv and every program into $(BUILD)
#   make check           C unit tests + bats suites, ends "N passed, N failed"
#   make check-asan      the same under AddressSanitizer + UBSan
#   make install         PREFIX=/usr/local DESTDIR= (PYTHON or PYTHONDIR: kvtools)
#   make CUDA=1|0        force the CUDA build on or off (default: detect nvcc)
#   make MPI=1|0         force kvbench's MPI ranks on or off (default: detect mpicc)
#
# Sources are found by glob: lib/*.c is libkv, cmd/<prog>/*.c is one
# program (plus the shared front-end glue cmd/tool*.c), tests/unit/*.c is
# one unit test each.

VERSION     := 0.1.0
SOVERSION   := 0
PREFIX      ?= /usr/local
BINDIR      ?= $(PREFIX)/bin
LIBDIR      ?= $(PREFIX)/lib
INCLUDEDIR  ?= $(PREFIX)/include
MANDIR      ?= $(PREFIX)/share/man
BASHCOMPDIR ?= $(PREFIX)/share/bash-completion/completions
# Where zsh finds completions: Debian's zsh looks in vendor-completions
# under /usr (its packages') and in site-functions under /usr/local.
ZSHCOMPDIR  ?= $(PREFIX)/share/zsh/$(if $(filter /usr,$(PREFIX)),vendor-completions,site-functions)
PKGCONFIGDIR ?= $(LIBDIR)/pkgconfig
SYSTEMDUNITDIR ?= $(PREFIX)/lib/systemd/system
SYSUSERSDIR ?= $(PREFIX)/lib/sysusers.d
TMPFILESDIR ?= $(PREFIX)/lib/tmpfiles.d
# Where this prefix's Python packages go so that Debian's python3 finds
# them: /usr/lib/python3/dist-packages for /usr, else (/usr/local)
# lib/pythonX.Y/dist-packages, X.Y being $(PYTHON)'s version.
PYTHON      ?= python3
PYTHONDIR   ?= $(if $(filter /usr,$(PREFIX)),$(PREFIX)/lib/python3/dist-packages,$(PREFIX)/lib/python$(or $(shell $(PYTHON) -c 'import sys; print("%d.%d" % sys.version_info[:2])' 2>/dev/null),3)/dist-packages)
PY_SRCS     := $(wildcard python/kvtools/*.py)
UNITS       := $(wildcard contrib/systemd/*.service contrib/systemd/*.timer)
BUILD       ?= build

CC      ?= cc
CFLAGS  ?= -O2 -g
override CFLAGS += -std=gnu11 -Wall -Wextra -Werror -fPIC -pthread \
	-D_GNU_SOURCE -DKV_VERSION_STRING='"$(VERSION)"' -Ilib/include -Ilib -MMD -MP \
	$(shell pkg-config --cflags libxml-2.0 2>/dev/null || echo -I/usr/include/libxml2)
LDLIBS  := -luring -lhwloc -lzstd -lxxhash -lisal -ljansson -lcrypto -lzmq -lmsgpackc -lcurl -lxml2 -lpthread -lm

ifeq ($(V),1)
Q :=
else
Q := @
endif

# CUDA: detected from nvcc on PATH or $(CUDA_HOME); CUDA=1 / CUDA=0 forces.
# nvcc on PATH may be a wrapper script (e.g. /usr/local/bin/nvcc) whose
# directory holds no headers, so the toolkit root is the first candidate
# that has include/cuda_runtime_api.h: $(CUDA_HOME), nvcc's ../, and the
# TOP nvcc itself reports.
CUDA_HOME ?= /usr/local/cuda
NVCC ?= $(shell command -v nvcc 2>/dev/null || { test -x $(CUDA_HOME)/bin/nvcc && echo $(CUDA_HOME)/bin/nvcc; })
ifneq ($(NVCC),)
CUDA_ROOT_CANDIDATES := $(CUDA_HOME) $(patsubst %/bin/nvcc,%,$(NVCC)) \
	$(shell $(NVCC) -v --dryrun -c -x cu /dev/null -o /dev/null 2>&1 | sed -n 's/^\#\$$ TOP=//p')
CUDA_HOME_REAL := $(firstword $(foreach d,$(CUDA_ROOT_CANDIDATES),$(if $(wildcard $(d)/include/cuda_runtime_api.h),$(realpath $(d)))))
endif
ifeq ($(origin CUDA),undefined)
CUDA := $(if $(CUDA_HOME_REAL),1,0)
endif
ifeq ($(CUDA),1)
ifeq ($(NVCC),)
$(error CUDA=1 but no nvcc found on PATH or in CUDA_HOME=$(CUDA_HOME))
endif
ifeq ($(CUDA_HOME_REAL),)
$(error CUDA=1 but no cuda_runtime_api.h under $(CUDA_ROOT_CANDIDATES); set CUDA_HOME)
endif
override CFLAGS += -DKV_HAVE_CUDA=1 -I$(CUDA_HOME_REAL)/include
NVCCFLAGS ?= -O2
override NVCCFLAGS += -Xcompiler -fPIC,-Wall,-Werror -Ilib/include -Ilib -DKV_HAVE_CUDA=1
# nvcc's kernel launch stubs need the C++ runtime (guards, personality).
LDLIBS += -L$(CUDA_HOME_REAL)/lib64 -Wl,-rpath,$(CUDA_HOME_REAL)/lib64 -lcudart -ldl -lstdc++
CU_SRCS := $(wildcard lib/*/*.cu)
endif

# MPI: only kvbench uses it (ranks under mpirun), so only its objects
# see <mpi.h> and only it links libmpi.  Detected from mpicc's own
# flags (OpenMPI's --showme) and the header they point at; MPI=1 / MPI=0
# forces.
MPICC ?= $(shell command -v mpicc 2>/dev/null)
ifneq ($(MPICC),)
MPI_CFLAGS := $(shell $(MPICC) --showme:compile 2>/dev/null)
MPI_LIBS   := $(shell $(MPICC) --showme:link 2>/dev/null)
MPI_HEADER := $(firstword $(foreach d,$(patsubst -I%,%,$(filter -I%,$(MPI_CFLAGS))),$(wildcard $(d)/mpi.h)))
endif
ifeq ($(origin MPI),undefined)
MPI := $(if $(and $(MPI_HEADER),$(MPI_LIBS)),1,0)
endif
ifeq ($(MPI),1)
ifeq ($(MPI_HEADER),)
$(error MPI=1 but no mpicc with an mpi.h found (apt-get install libopenmpi-dev))
endif
$(BUILD)/cmd/kvbench/%.o: TARGET_CFLAGS := -DKV_HAVE_MPI=1 $(MPI_CFLAGS)
$(BUILD)/bin/kvbench: TARGET_LDLIBS := $(MPI_LIBS)
endif

LIB_SRCS   := $(wildcard lib/*/*.c)
LIB_OBJS   := $(LIB_SRCS:%.c=$(BUILD)/%.o) $(CU_SRCS:%.cu=$(BUILD)/%.cu.o)
COMMON_OBJS := $(patsubst %.c,$(BUILD)/%.o,$(wildcard cmd/tool*.c))
PROGS      := $(notdir $(patsubst %/,%,$(wildcard cmd/*/)))
BINS       := $(PROGS:%=$(BUILD)/bin/%)
UNIT_SRCS  := $(wildcard tests/unit/*.c)
UNIT_BINS  := $(UNIT_SRCS:tests/unit/%.c=$(BUILD)/tests/%)
HEADERS    := $(wildcard lib/include/kv/*.h)

# The Python package's one C module, kvtools._exports (the buffer exports
# of a batch): built against the limited API of 3.11, so any CPython from
# 3.11 on loads it, where $(PYTHON) is 3.11 or later and has Python.h
# (python3-dev); else not built, and the package exports through ctypes.
PY_INCLUDE  := $(shell $(PYTHON) -c 'import sys, sysconfig; sys.version_info >= (3, 11) and print(sysconfig.get_paths()["include"])' 2>/dev/null)
PY_EXT      := $(if $(wildcard $(PY_INCLUDE)/Python.h),$(BUILD)/python/kvtools/_exports.abi3.so)
ifeq ($(PY_EXT),)
$(info kvtools._exports not built: $(PYTHON) is older than 3.11 or lacks Python.h (apt-get install python3-dev))
endif

all: $(BUILD)/libkv.a $(BUILD)/libkv.so $(BINS) $(UNIT_BINS) $(BUILD)/libkv.pc $(PY_EXT)

$(BUILD)/python/kvtools/_exports.abi3.so: python/kvtools/_exports.c
	@mkdir -p $(@D)
	@$(if $(Q),echo "  CC      $<")
	$(Q)$(CC) $(CFLAGS) -I$(PY_INCLUDE) -shared -o $@ $< $(LDFLAGS)

$(BUILD)/%.o: %.c
	@mkdir -p $(@D)
	@$(if $(Q),echo "  CC      $<")
	$(Q)$(CC) $(CFLAGS) $(TARGET_CFLAGS) -c -o $@ $<

$(BUILD)/%.cu.o: %.cu
	@mkdir -p $(@D)
	@$(if $(Q),echo "  NVCC    $<")
	$(Q)$(NVCC) $(NVCCFLAGS) -c -o $@ $<

$(BUILD)/libkv.a: $(LIB_OBJS)
	@$(if $(Q),echo "  AR      $@")
	$(Q)rm -f $@ && $(AR) rcs $@ $^

$(BUILD)/libkv.so: $(LIB_OBJS) lib/libkv.map
	@$(if $(Q),echo "  LD      $@")
	$(Q)$(CC) $(CFLAGS) -shared -Wl,-soname,libkv.so.$(SOVERSION) \
		-Wl,--version-script=lib/libkv.map -o $@ $(LIB_OBJS) $(LDFLAGS) $(LDLIBS)

$(BUILD)/libkv.pc: lib/libkv.pc.in Makefile
	$(Q)sed -e 's|@PREFIX@|$(PREFIX)|' -e 's|@LIBDIR@|$(LIBDIR)|' \
		-e 's|@INCLUDEDIR@|$(INCLUDEDIR)|' -e 's|@VERSION@|$(VERSION)|' $< > $@

# Programs link libkv statically so the in-tree binaries run without
# LD_LIBRARY_PATH; the shared library is for connectors.
.SECONDEXPANSION:
$(BUILD)/bin/%: $$(addprefix $(BUILD)/,$$(addsuffix .o,$$(basename $$(wildcard cmd/$$*/*.c)))) $(COMMON_OBJS) $(BUILD)/libkv.a
	@mkdir -p $(@D)
	@$(if $(Q),echo "  LD      $@")
	$(Q)$(CC) $(CFLAGS) -o $@ $(filter %.o,$^) $(BUILD)/libkv.a $(LDFLAGS) $(LDLIBS) $(TARGET_LDLIBS)

$(BUILD)/tests/%: $(BUILD)/tests/unit/%.o $(BUILD)/libkv.a
	@mkdir -p $(@D)
	$(Q)$(CC) $(CFLAGS) -o $@ $< $(BUILD)/libkv.a $(LDFLAGS) $(LDLIBS)

# The kvoffd client that bench/offd.sh, the stress runs and the daemon
# tests drive: libkv linked in, so a copy runs anywhere on this machine.
$(BUILD)/bench/offd_client: $(BUILD)/bench/offd_client.o $(BUILD)/libkv.a
	@mkdir -p $(@D)
	@$(if $(Q),echo "  LD      $@")
	$(Q)$(CC) $(CFLAGS) -o $@ $< $(BUILD)/libkv.a $(LDFLAGS) $(LDLIBS)
all: $(BUILD)/bench/offd_client

# The benchmarks' tree builder (bench/kvtree.c): millions of blocks in
# the layout, with real config.json, in seconds.
$(BUILD)/bench/kvtree: $(BUILD)/bench/kvtree.o $(BUILD)/libkv.a
	@mkdir -p $(@D)
	@$(if $(Q),echo "  LD      $@")
	$(Q)$(CC) $(CFLAGS) -o $@ $< $(BUILD)/libkv.a $(LDFLAGS) $(LDLIBS)
all: $(BUILD)/bench/kvtree

# bench/gpu.sh's GDS measurement (bench/gds_bw.c): block files <-> GPU
# by cuFile against the pinned bounce buffer.
$(BUILD)/bench/gds_bw: $(BUILD)/bench/gds_bw.o $(BUILD)/libkv.a
	@mkdir -p $(@D)
	@$(if $(Q),echo "  LD      $@")
	$(Q)$(CC) $(CFLAGS) -o $@ $< $(BUILD)/libkv.a $(LDFLAGS) $(LDLIBS)
all: $(BUILD)/bench/gds_bw

# s3.bats' driver of one object-store tier from several threads at once.
$(BUILD)/tests/s3/tier_threads: $(BUILD)/tests/s3/tier_threads.o $(BUILD)/libkv.a
	@mkdir -p $(@D)
	@$(if $(Q),echo "  LD      $@")
	$(Q)$(CC) $(CFLAGS) -o $@ $< $(BUILD)/libkv.a $(LDFLAGS) $(LDLIBS)
all: $(BUILD)/tests/s3/tier_threads

# The block reader of bench/kvwatch.sh: opens and reads as a model server.
$(BUILD)/bench/readblocks: bench/readblocks.c
	@mkdir -p $(@D)
	@$(if $(Q),echo "  CC      $@")
	$(Q)$(CC) $(CFLAGS) -o $@ $<
all: $(BUILD)/bench/readblocks

# latfs (tests/latfs/): a FUSE passthrough that delays every operation,
# the tests' and benchmarks' high-latency filesystem; built where
# libfuse3 is, outside tests/ so tests/run.sh does not take it for a
# unit test, and without sanitizers (FUSE forks and daemonizes).
ifneq ($(shell pkg-config --exists fuse3 2>/dev/null && echo yes),)
$(BUILD)/latfs/latfs: tests/latfs/latfs.c
	@mkdir -p $(@D)
	@$(if $(Q),echo "  CC      $@")
	$(Q)$(CC) $(filter-out -fsanitize=%,$(CFLAGS)) $$(pkg-config --cflags fuse3) -o $@ $< \
		$$(pkg-config --libs fuse3)
all: $(BUILD)/latfs/latfs
endif

# The reliability suite's LD_PRELOAD fault injector (tests/fault/): built
# without sanitizers so it preloads into sanitized programs too, and not
# executable so tests/run.sh does not take it for a unit test.
$(BUILD)/tests/libfaultinj.so: tests/fault/faultinj.c
	@mkdir -p $(@D)
	@$(if $(Q),echo "  CC      $@")
	$(Q)$(CC) $(filter-out -fsanitize=%,$(CFLAGS)) -shared -o $@ $< -ldl -luring
	$(Q)chmod a-x $@
all: $(BUILD)/tests/libfaultinj.so

# A simulated CUDA device and cuFile (tests/cudamock/): dma.bats preloads
# the first over libcudart and points kv_gds at the second, so the CUDA
# paths run where no GPU is; built like the injector above.
ifeq ($(CUDA),1)
$(BUILD)/tests/lib%_mock.so: tests/cudamock/%_mock.c
	@mkdir -p $(@D)
	@$(if $(Q),echo "  CC      $@")
	$(Q)$(CC) $(filter-out -fsanitize=%,$(CFLAGS)) -shared -o $@ $< -lpthread
	$(Q)chmod a-x $@
all: $(BUILD)/tests/libcudart_mock.so $(BUILD)/tests/libcufile_mock.so
endif

# The long crash and concurrency runs behind tests/RELIABILITY.md.
stress: all
	BUILD=$(BUILD) tests/stress/crash.sh 1000
	DIR_GRACE=0 BUILD=$(BUILD) tests/stress/concurrency.sh 500

check: all
	BUILD=$(BUILD) tests/run.sh

# verify_asan_link_order=0: the fault tests LD_PRELOAD libfaultinj.so
# ahead of the sanitizer runtime.
check-asan:
	KV_SANITIZED=1 ASAN_OPTIONS=$${ASAN_OPTIONS:+$$ASAN_OPTIONS:}verify_asan_link_order=0 $(MAKE) BUILD=build-asan CFLAGS='-O1 -g -fsanitize=address,undefined -fno-omit-frame-pointer -fno-sanitize-recover=undefined' \
		LDFLAGS='-fsanitize=address,undefined' check

# libFuzzer harnesses tests/fuzz/fuzz_<name>.c, linked with a clang
# ASan+UBSan libkv, each run FUZZ_SECONDS from its seeds in
# tests/fuzz/corpus/<name>/ (new inputs go under $(FUZZ_BUILD), not the tree);
# -Ilib lets a harness reach an internal parser (evict/shard_state.h).
FUZZ_SECONDS ?= 60
FUZZ_BUILD   ?= build-fuzz
FUZZERS      ?= $(patsubst tests/fuzz/fuzz_%.c,%,$(wildcard tests/fuzz/fuzz_*.c))
FUZZ_CFLAGS  := -O1 -g -fsanitize=address,undefined -fno-sanitize-recover=undefined \
	-fno-omit-frame-pointer
fuzz:
	$(MAKE) CC=clang CUDA=0 BUILD=$(FUZZ_BUILD) \
		CFLAGS='$(FUZZ_CFLAGS) -fsanitize=fuzzer-no-link' $(FUZZ_BUILD)/libkv.a
	@mkdir -p $(FUZZ_BUILD)/fuzz
	set -e; for f in $(FUZZERS); do \
		clang $(FUZZ_CFLAGS) -fsanitize=fuzzer -std=gnu11 -D_GNU_SOURCE -Ilib/include -Ilib \
			-o $(FUZZ_BUILD)/fuzz/fuzz_$$f tests/fuzz/fuzz_$$f.c \
			$(FUZZ_BUILD)/libkv.a $(filter-out -lcudart,$(LDLIBS)); \
		mkdir -p $(FUZZ_BUILD)/fuzz/corpus-$$f; \
		$(FUZZ_BUILD)/fuzz/fuzz_$$f -max_total_time=$(FUZZ_SECONDS) \
			-artifact_prefix=$(FUZZ_BUILD)/fuzz/$$f- \
			$(FUZZ_BUILD)/fuzz/corpus-$$f $$(ls -d tests/fuzz/corpus/$$f 2>/dev/null); \
	done

lint-man:
	mandoc -Tlint -Wwarning man/*.[1-8]

# On this machine (no DESTDIR), as a package's triggers would: the
# loader's cache learns libkv.so.0, so programs linking it run, and
# apropos's index the pages (every hierarchy, as man's daily run does:
# apropos finds /usr/local's pages by another name).  Not being root to
# do so is said, and does not fail the install.
define refresh_caches
	@if [ -z "$(DESTDIR)" ]; then PATH=$$PATH:/usr/sbin:/sbin; \
		if command -v ldconfig >/dev/null; then ldconfig || \
			echo "$@: ldconfig failed: run it as root" >&2; fi; \
		if command -v mandb >/dev/null; then mandb -q || \
			echo "$@: mandb failed: run 'mandb' as root" >&2; fi; \
	fi
endef

install: all
	install -d $(DESTDIR)$(BINDIR) $(DESTDIR)$(LIBDIR) $(DESTDIR)$(INCLUDEDIR)/kv \
		$(DESTDIR)$(PKGCONFIGDIR) $(DESTDIR)$(BASHCOMPDIR) $(DESTDIR)$(ZSHCOMPDIR) \
		$(DESTDIR)$(SYSTEMDUNITDIR) $(DESTDIR)$(SYSUSERSDIR) $(DESTDIR)$(TMPFILESDIR)
	install -m 0755 $(BINS) $(DESTDIR)$(BINDIR)/
	install -m 0644 $(BUILD)/libkv.a $(DESTDIR)$(LIBDIR)/
	install -m 0755 $(BUILD)/libkv.so $(DESTDIR)$(LIBDIR)/libkv.so.$(VERSION)
	ln -sf libkv.so.$(VERSION) $(DESTDIR)$(LIBDIR)/libkv.so.$(SOVERSION)
	ln -sf libkv.so.$(SOVERSION) $(DESTDIR)$(LIBDIR)/libkv.so
	install -m 0644 $(HEADERS) $(DESTDIR)$(INCLUDEDIR)/kv/
	install -m 0644 $(BUILD)/libkv.pc $(DESTDIR)$(PKGCONFIGDIR)/
	for m in man/*.[1-8]; do s=$${m##*.}; install -d $(DESTDIR)$(MANDIR)/man$$s; \
		install -m 0644 $$m $(DESTDIR)$(MANDIR)/man$$s/; done
	install -m 0644 completions/bash/* $(DESTDIR)$(BASHCOMPDIR)/
	install -m 0644 completions/zsh/_* $(DESTDIR)$(ZSHCOMPDIR)/
	# The Python package loads the libkv.so this install puts in LIBDIR.
	install -d $(DESTDIR)$(PYTHONDIR)/kvtools
	install -m 0644 $(PY_SRCS) $(DESTDIR)$(PYTHONDIR)/kvtools/
	$(if $(PY_EXT),install -m 0644 $(PY_EXT) $(DESTDIR)$(PYTHONDIR)/kvtools/)
	echo 'LIBKV = "$(LIBDIR)/libkv.so.$(SOVERSION)"' > $(DESTDIR)$(PYTHONDIR)/kvtools/_installed.py
	# The units run the programs, and read the users and dirs they need,
	# from where this install puts them.
	for u in $(UNITS); do sed -e 's|/usr/bin/kv|$(BINDIR)/kv|g' \
		-e 's|/usr/lib/sysusers.d/|$(SYSUSERSDIR)/|g' -e 's|/usr/lib/tmpfiles.d/|$(TMPFILESDIR)/|g' \
		$$u > $(DESTDIR)$(SYSTEMDUNITDIR)/$${u##*/} && \
		chmod 0644 $(DESTDIR)$(SYSTEMDUNITDIR)/$${u##*/}; done
	install -m 0644 contrib/systemd/kvtools.sysusers $(DESTDIR)$(SYSUSERSDIR)/kvtools.conf
	install -m 0644 contrib/systemd/kvtools.tmpfiles $(DESTDIR)$(TMPFILESDIR)/kvtools.conf
	$(refresh_caches)

uninstall:
	rm -f $(PROGS:%=$(DESTDIR)$(BINDIR)/%) $(DESTDIR)$(LIBDIR)/libkv.a \
		$(DESTDIR)$(LIBDIR)/libkv.so $(DESTDIR)$(LIBDIR)/libkv.so.$(SOVERSION) \
		$(DESTDIR)$(LIBDIR)/libkv.so.$(VERSION) $(DESTDIR)$(PKGCONFIGDIR)/libkv.pc
	rm -rf $(DESTDIR)$(INCLUDEDIR)/kv
	for m in man/*.[1-8]; do s=$${m##*.}; rm -f $(DESTDIR)$(MANDIR)/man$$s/$${m##*/}; done
	for c in completions/bash/*; do rm -f $(DESTDIR)$(BASHCOMPDIR)/$${c##*/}; done
	for c in completions/zsh/_*; do rm -f $(DESTDIR)$(ZSHCOMPDIR)/$${c##*/}; done
	for u in $(UNITS); do rm -f $(DESTDIR)$(SYSTEMDUNITDIR)/$${u##*/}; done
	rm -f $(DESTDIR)$(SYSUSERSDIR)/kvtools.conf $(DESTDIR)$(TMPFILESDIR)/kvtools.conf
	rm -rf $(DESTDIR)$(PYTHONDIR)/kvtools
	$(refresh_caches)

# Debian packages from the committed tree (needs debhelper, dpkg-dev).
deb:
	rm -rf $(BUILD)/deb && mkdir -p $(BUILD)/deb
	git archive --prefix=kvtools/ HEAD | tar -x -C $(BUILD)/deb
	cd $(BUILD)/deb/kvtools && dpkg-buildpackage -us -uc -b
	@ls $(BUILD)/deb/*.deb

clean:
	rm -rf build build-*

.SECONDARY:
.PHONY: all check check-asan fuzz stress lint-man install uninstall clean
-include $(shell find $(BUILD) -name '*.d' 2>/dev/null)
