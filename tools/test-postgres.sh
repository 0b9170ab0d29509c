#!/bin/sh
# The PostgreSQL the tests use (`make test` runs this as root): 127.0.0.1:5432, user postgres without a
# password, a database `test` (tests/conftest.py; GPUBOT_TEST_PG overrides it).
# - not installed: installs Debian's `postgresql` package, and lets local TCP connections in without a
#   password (`host all all 127.0.0.1/32 trust` at the top of that new cluster's pg_hba.conf);
# - stopped: starts its newest cluster (pg_ctlcluster, no systemd needed);
# - no `test` database: creates it.
# A PostgreSQL that was already installed and asks for a password is never reconfigured: this stops,
# saying so. Every wait is bounded.
set -eu
[ -z "${GPUBOT_TEST_PG:-}" ] || exit 0  # the tests use another server
fresh=0
if ! ls /etc/postgresql/*/main/postgresql.conf >/dev/null 2>&1; then
  echo "make test: installing PostgreSQL (Debian package postgresql)"
  apt-get update -qq
  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq postgresql >/dev/null
  fresh=1
fi
version=$(ls /etc/postgresql | sort -V | tail -n 1)
if ! pg_isready -q -h 127.0.0.1 -p 5432; then
  echo "make test: starting PostgreSQL $version (cluster main)"
  pg_ctlcluster --skip-systemctl-redirect "$version" main start
fi
n=0
until pg_isready -q -h 127.0.0.1 -p 5432; do
  n=$((n + 1)); [ "$n" -lt 60 ] || { echo "make test: PostgreSQL did not answer on 127.0.0.1:5432 within 30 s" >&2; exit 1; }
  sleep 0.5
done
q() { timeout 30 psql -w -X -h 127.0.0.1 -p 5432 -U postgres -d postgres -Atqc "$1"; }
if ! q 'select 1' >/dev/null 2>&1; then
  if [ "$fresh" = 1 ]; then
    hba=/etc/postgresql/$version/main/pg_hba.conf
    sed -i '1i host all all 127.0.0.1/32 trust  # added by gpubot make test (tools/test-postgres.sh)' "$hba"
    pg_ctlcluster --skip-systemctl-redirect "$version" main reload
    sleep 1
  fi
  q 'select 1' >/dev/null || {
    echo "make test: PostgreSQL at 127.0.0.1:5432 does not let user postgres in without a password;" \
         "allow it (pg_hba.conf: host all all 127.0.0.1/32 trust) or point GPUBOT_TEST_PG at one that does" >&2
    exit 1
  }
fi
[ "$(q "select 1 from pg_database where datname = 'test'")" = 1 ] || q 'create database test'
