# The two commands a newcomer needs (see README.md):
#   make run    set up a virtualenv and probe this machine (`gpubot status localhost`)
#   make test   install what the tests need (OpenSSH server, Python packages) and run them
PY ?= python3
VENV ?= .venv
BIN = $(VENV)/bin

.PHONY: setup run test deps-system

$(BIN)/gpubot: pyproject.toml
	$(PY) -m venv $(VENV)
	$(BIN)/pip install -q --upgrade pip
	$(BIN)/pip install -q -e '.[test]'
	touch $@

setup: $(BIN)/gpubot

run: setup
	$(BIN)/gpubot db upgrade
	-$(BIN)/gpubot status localhost

deps-system:
	@command -v /usr/sbin/sshd >/dev/null || { apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq openssh-server openssh-client; }
	@pg_isready -q -h 127.0.0.1 -p 5432 || pg_ctlcluster --skip-systemctl-redirect $$(ls /etc/postgresql) main start

test: deps-system setup
	$(BIN)/python -m pytest -q
