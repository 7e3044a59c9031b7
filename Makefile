# Every target has a one-line help after '##'; `make help` lists them.
GO       ?= go
PKGS     ?= ./...
FUZZTIME ?= 30s
BENCH    ?= .

.DEFAULT_GOAL := help
.PHONY: help build run test ci chaos bench bench-compare fuzz lint databases chromium systemd prometheus iproute image

# Chaos runs (test/chaos_test.go): `make test` applies faults for 40 s, `make ci`
# for CHAOS_CI (long enough for every kind of fault), `make chaos` for DURATION,
# with SEED to replay a run (default: the clock).
CHAOS_CI ?= 8m
# The chaos run across hosts (test/chaos_hosts_test.go, network namespaces,
# root only): `make test` for 40 s, `make ci` for CHAOS_HOSTS_CI.
CHAOS_HOSTS_CI ?= 3m
DURATION ?= 30m
SEED     ?=
ONLY     ?=

help: ## list the targets
	@awk -F ':.*## ' '/^[a-z-]+:.*## /{printf "  %-14s %s\n", $$1, $$2}' $(MAKEFILE_LIST)

build: ## compile every package, and qmqd and qmqctl into bin/
	$(GO) build $(PKGS)
	$(GO) build -buildvcs=auto -o bin/ ./cli/qmqd ./cli/qmqctl

run: ## start a one-node queue on embedded defaults (qmqd dev; data in ./qmq-data)
	$(GO) run ./cli/qmqd dev

test: databases chromium systemd prometheus iproute ## run every test: unit, fuzz seed corpora, in-process and multi-process clusters, the outbox on real databases
	$(GO) test -count=1 $(PKGS)

ci: lint databases chromium systemd prometheus iproute ## what CI runs: lint, then every test with the race detector, the chaos run for CHAOS_CI (8m), the one across hosts for CHAOS_HOSTS_CI (3m)
	QMQ_CHAOS_DURATION=$(CHAOS_CI) QMQ_CHAOS_HOSTS_DURATION=$(CHAOS_HOSTS_CI) $(GO) test -count=1 -race -timeout 30m $(PKGS)

chaos: ## a chaos run for DURATION (30m); SEED=N replays one, ONLY=KIND,… aims it at kinds of fault; prints the seed, the faults and the findings
	QMQ_CHAOS_DURATION=$(DURATION) QMQ_CHAOS_SEED=$(SEED) QMQ_CHAOS_ONLY=$(ONLY) $(GO) test -count=1 -v -run '^TestChaos$$' -timeout 0 ./test/

bench: ## run the benchmarks (BENCH=regexp to pick), 5 rounds each for medians
	$(GO) test -run '^$$' -bench '$(BENCH)' -benchmem -count 5 $(PKGS)

# The comparison with NATS JetStream (test/benchcompare, a Go module of its
# own so that the NATS client never enters qmq's). COMPARE passes flags:
# --rounds N (3), --quick (a smoke check), --only WORKLOAD,…, --out FILE.
COMPARE ?=
bench-compare: ## compare qmq with NATS JetStream, 3 nodes each, fsync on (COMPARE='--quick' for a smoke check); writes docs/benchmarks.md and docs/bench-compare.png
	cd test/benchcompare && $(GO) run . $(COMPARE)

fuzz: ## run every fuzz target for FUZZTIME each (default 30s)
	@for pkg in $$($(GO) list $(PKGS)); do \
	  for target in $$($(GO) test -list '^Fuzz' $$pkg | grep '^Fuzz'); do \
	    echo "== $$pkg $$target"; \
	    $(GO) test -run '^$$' -fuzz "^$$target$$" -fuzztime $(FUZZTIME) $$pkg || exit 1; \
	  done; \
	done

# The outbox's tests start PostgreSQL and MariaDB servers of their own, on
# loopback ports in temporary directories, and stop them when they end
# (test/testdb); this only installs the programs, without starting
# the packages' own services.
DB_PACKAGES := postgresql mariadb-server
databases: ## install PostgreSQL and MariaDB (Debian's packages) if missing, for the outbox's tests
	@if ls /usr/lib/postgresql/*/bin/initdb >/dev/null 2>&1 && command -v mariadb-install-db >/dev/null; then exit 0; fi; \
	if [ "$$(id -u)" != 0 ] || ! command -v apt-get >/dev/null; then \
	  echo "make: the outbox's tests need PostgreSQL and MariaDB; install them (Debian: sudo apt-get install $(DB_PACKAGES)), or run make as root to let it"; \
	  exit 1; \
	fi; \
	echo "make: installing $(DB_PACKAGES) for the outbox's tests"; \
	noservice=; if [ ! -e /usr/sbin/policy-rc.d ]; then noservice=1; printf '#!/bin/sh\nexit 101\n' > /usr/sbin/policy-rc.d; chmod +x /usr/sbin/policy-rc.d; fi; \
	apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends $(DB_PACKAGES) >/dev/null; \
	rc=$$?; if [ -n "$$noservice" ]; then rm -f /usr/sbin/policy-rc.d; fi; exit $$rc

chromium: ## install Chromium (Debian's package) if missing, for the console's browser test
	@if command -v chromium >/dev/null; then exit 0; fi; \
	if [ "$$(id -u)" != 0 ] || ! command -v apt-get >/dev/null; then \
	  echo "make: the console's browser test needs Chromium; install it (Debian: sudo apt-get install chromium), or run make as root to let it"; \
	  exit 1; \
	fi; \
	echo "make: installing chromium for the console's browser test"; \
	apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq chromium >/dev/null

# deploy/systemd's test checks the units with systemd-analyze (verify, and
# security --offline) and runs their command lines under prlimit (util-linux).
systemd: ## install systemd (Debian's package, for systemd-analyze) if missing, for the units' test
	@if command -v systemd-analyze >/dev/null && command -v prlimit >/dev/null; then exit 0; fi; \
	if [ "$$(id -u)" != 0 ] || ! command -v apt-get >/dev/null; then \
	  echo "make: the systemd units' test needs systemd-analyze and prlimit; install them (Debian: sudo apt-get install systemd util-linux), or run make as root to let it"; \
	  exit 1; \
	fi; \
	echo "make: installing systemd for the units' test"; \
	noservice=; if [ ! -e /usr/sbin/policy-rc.d ]; then noservice=1; printf '#!/bin/sh\nexit 101\n' > /usr/sbin/policy-rc.d; chmod +x /usr/sbin/policy-rc.d; fi; \
	apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends systemd util-linux >/dev/null; \
	rc=$$?; if [ -n "$$noservice" ]; then rm -f /usr/sbin/policy-rc.d; fi; exit $$rc

# deploy/prometheus's test checks the alert rules with promtool and runs a
# Prometheus of its own (a temporary directory, a loopback port) scraping a
# cluster; this only installs the programs, without starting the package's
# service.
prometheus: ## install Prometheus (Debian's package, for prometheus and promtool) if missing, for the alert rules' test
	@if command -v prometheus >/dev/null && command -v promtool >/dev/null; then exit 0; fi; \
	if [ "$$(id -u)" != 0 ] || ! command -v apt-get >/dev/null; then \
	  echo "make: the alert rules' test needs prometheus and promtool; install them (Debian: sudo apt-get install prometheus), or run make as root to let it"; \
	  exit 1; \
	fi; \
	echo "make: installing prometheus for the alert rules' test"; \
	noservice=; if [ ! -e /usr/sbin/policy-rc.d ]; then noservice=1; printf '#!/bin/sh\nexit 101\n' > /usr/sbin/policy-rc.d; chmod +x /usr/sbin/policy-rc.d; fi; \
	apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends prometheus >/dev/null; \
	rc=$$?; if [ -n "$$noservice" ]; then rm -f /usr/sbin/policy-rc.d; fi; exit $$rc

# The tests across hosts (test/netns) make network namespaces with ip(8);
# as root they run, elsewhere they fail unless QMQ_HOSTS=off leaves them out.
iproute: ## install iproute2 (Debian's package, for ip) if missing, for the tests across hosts
	@if command -v ip >/dev/null; then exit 0; fi; \
	if [ "$$(id -u)" != 0 ] || ! command -v apt-get >/dev/null; then \
	  echo "make: the tests across hosts need ip; install it (Debian: sudo apt-get install iproute2), or run make as root to let it (or set QMQ_HOSTS=off to leave those tests out)"; \
	  if [ "$$QMQ_HOSTS" = off ]; then exit 0; fi; exit 1; \
	fi; \
	echo "make: installing iproute2 for the tests across hosts"; \
	apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends iproute2 >/dev/null

# The container image, assembled without a container engine (deploy/image);
# `docker build -f deploy/Dockerfile .` makes the same with one.
IMAGE_TAG     ?= qmq:devel
IMAGE_VERSION ?= devel
image: ## build the container image into bin/qmq-image.tar without a container engine (docker load -i it); IMAGE_TAG, IMAGE_VERSION
	$(GO) run ./deploy/image --out bin/qmq-image.tar --tag '$(IMAGE_TAG)' --version '$(IMAGE_VERSION)' \
	  --revision "$$(git rev-parse HEAD 2>/dev/null || echo unknown)"

lint: ## go vet (also of test/benchcompare, a module of its own), and fail if gofmt would change a file
	$(GO) vet $(PKGS)
	$(GO) vet -tags figures ./test
	cd test/benchcompare && $(GO) vet ./...
	@out=$$(gofmt -l $$(git ls-files '*.go' 2>/dev/null || find . -name '*.go')); \
	  if [ -n "$$out" ]; then echo "gofmt would change:"; echo "$$out"; exit 1; fi
