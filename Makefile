# The two commands a newcomer needs (see README.md):
#   make run    a virtualenv with gpubot and its runtime dependencies only, probe this machine, then serve
#               Slack (tokens set) or open the console
#   make test   install what the tests need (system packages, PostgreSQL; see deps-system), the test and docs
#               tools in the virtualenv, lint, type-check, build the manual (docs/, mkdocs build --strict: a broken
#               link or anchor fails), run the tests
# While changing code: make test-fast (every test that needs neither sshd nor PostgreSQL, starts no programs and is
# not marked slow; CI runs make test, every test). make setup: the virtualenv with the test and docs tools (what make
# test uses). make image: the Docker image, also without a registry (docs/deployment.md).
PY ?= python3
VENV ?= .venv
BIN = $(VENV)/bin

.PHONY: setup run test test-fast docs deps-system image

# pip, not python, marks a made venv: a first make run/setup stopped while the venv was made leaves python without
# pip, and `python -m venv` over it adds pip (else every later run ends in ".venv/bin/pip: No such file").
$(BIN)/pip:
	$(PY) -m venv $(VENV)
	$(BIN)/pip install -q --upgrade pip

# gpubot and what it needs to run (pyproject.toml's dependencies), no extras
$(VENV)/.installed-runtime: pyproject.toml | $(BIN)/pip
	$(BIN)/pip install -q -e .
	touch $@

# the same plus the test and docs tools (extras test, docs)
$(VENV)/.installed-dev: pyproject.toml | $(BIN)/pip
	$(BIN)/pip install -q -e '.[test,docs]'
	touch $@ $(VENV)/.installed-runtime

setup: $(VENV)/.installed-dev

run: $(VENV)/.installed-runtime
	$(BIN)/gpubot db upgrade
	@$(BIN)/gpubot status localhost; echo "(gpubot status exit $$?: 0 ready, 3 serving, 1 not ready, 2 unknown or unreachable)"
	@echo "gpubot is $(BIN)/gpubot, not on your PATH: run \`. $(BIN)/activate\` in your shell to type \`gpubot hosts list\`"
	@if $(SLACK_TOKEN_SET); then $(BIN)/gpubot serve; else $(BIN)/gpubot console; fi

# Whether gpubot would find a Slack bot token: the settings as gpubot reads them (bot.foundation.config's loader:
# the environment, ./.env, a gpubot.toml; SLACK_BOT_TOKEN or GPUBOT_SLACK_BOT_TOKEN). Settings that do not load
# count as no token: the console then says what is wrong with them; so does .env.example's placeholder
# (xoxb-replace-me), copied but not yet filled in.
SLACK_TOKEN_SET = $(BIN)/python -c 'import sys; from bot.foundation.config import load_settings; \
  t = load_settings().slack.slack_bot_token; v = t.get_secret_value() if t else ""; \
  sys.exit(not v or v.endswith("replace-me"))' 2>/dev/null

# What make test changes on this machine (as root; each only when missing): Debian packages openssh-server,
# zsh, fish, tcsh, sudo, faketime, docker.io, docker-compose, debootstrap, postgresql; PostgreSQL started, and on a
# PostgreSQL installed here its 127.0.0.1 connections trusted and a `test` database (tools/test-postgres.sh).
# tests/e2e/test_docker.py starts dockerd when none runs and stops it after, removing the bridges and iptables
# chains it made, and removes the images it built.
deps-system:
	@command -v /usr/sbin/sshd >/dev/null || { apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq openssh-server openssh-client; }
	@command -v zsh >/dev/null && command -v fish >/dev/null && command -v tcsh >/dev/null || { apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq zsh fish tcsh; }
	@command -v sudo >/dev/null && command -v visudo >/dev/null || { apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq sudo; }
	@# tests/e2e/test_clock_ahead_replica.py: libfaketime moves one replica's wall clock
	@test -e /usr/lib/x86_64-linux-gnu/faketime/libfaketime.so.1 || { apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq faketime; }
	@tools/test-postgres.sh
	@# tests/e2e/test_docker.py: a Docker engine (started by the test itself), Compose 1.29, debootstrap for its base image
	@command -v dockerd >/dev/null && command -v docker-compose >/dev/null && command -v debootstrap >/dev/null || \
	  { apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq docker.io docker-compose debootstrap; }

# The tests run on TEST_WORKERS pytest-xdist workers (most wait on sshd, PostgreSQL and programs, so more workers
# than cores pay), --dist loadgroup: the Docker tests on one worker, in order (tests/support/scheduling.py). Each
# worker has its own sshd, PostgreSQL database and temporary folders. TEST_WORKERS=0: one process. The coverage of
# bot/ (coverage.py through pytest-cov; pyproject.toml's [tool.coverage]) is printed as one line; below its
# fail_under the run fails (CI runs make test). Tests marked `alone` (processes racing a database restart or a
# killed worker) run after, in one process, on a machine the parallel pass no longer loads.
TEST_WORKERS ?= 4
test: deps-system setup
	$(BIN)/ruff check bot tests bench tools
	$(BIN)/ruff format --check bot tests bench tools
	$(BIN)/mypy
	NO_MKDOCS_2_WARNING=1 $(BIN)/mkdocs build --strict --quiet
	$(BIN)/python -m pytest -q -n $(TEST_WORKERS) --dist loadgroup --durations=20 --cov --cov-report= -m "not alone"
	$(BIN)/python -m pytest -q --durations=5 -m alone

# test-fast leaves out four markers (pyproject.toml, tests/conftest.py): sshd, postgres, process (starts gpubot as a
# program, Docker, make, multiprocessing workers or dozens of programs) and slow (seconds of CPU each);
# tests/support/markers.py checks sshd and process as tests run. It runs on three workers (pytest-xdist: its tests wait
# about twice as long as they compute, so a third worker beats two on two cores), keeps compiled
# bytecode between runs even where the environment sets PYTHONDONTWRITEBYTECODE, and prints its five slowest tests.
# Its fish-completion test runs fish: make deps-system installs it.
test-fast: setup
	@command -v fish >/dev/null || { echo "make test-fast needs fish (its completion test): run make deps-system (as root)" >&2; exit 2; }
	PYTHONDONTWRITEBYTECODE= $(BIN)/python -m pytest -q -n 3 --durations=5 -m "not sshd and not postgres and not process and not slow"

# The Docker image (docs/deployment.md), IMAGE built on BASE: any Debian-like image with python3 >= 3.11 and venv.
# Without a registry, BASE is one the engine already has (loaded or built locally); then `docker-compose up -d`
# (or `docker compose up -d`) without --build. DOCKER_BUILD_ARGS: more `docker build` options.
IMAGE ?= gpubot:latest
BASE ?= python:3.11-slim-bookworm
image:
	docker build --build-arg BASE=$(BASE) $(DOCKER_BUILD_ARGS) -t $(IMAGE) .

# The manual in docs/ (mkdocs.yml), built into .site/; make test builds it too.
docs: setup
	NO_MKDOCS_2_WARNING=1 $(BIN)/mkdocs build --strict
