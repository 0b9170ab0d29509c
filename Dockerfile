# gpubot image: `docker build -t gpubot .` (see deploy/README.md).
# BASE must be a Debian-like image with python3 >= 3.11 and its venv module; both stages use it, so
# the virtualenv's interpreter path is the same in each. Tests pass a locally built Debian base.
ARG BASE=python:3.11-slim-bookworm

FROM ${BASE} AS build
RUN python3 -m venv /opt/gpubot
WORKDIR /app
# Dependencies first (this layer is reused until pyproject.toml changes), then the code.
COPY pyproject.toml README.md alembic.ini ./
RUN python3 -c "import tomllib; print('\n'.join(tomllib.load(open('pyproject.toml', 'rb'))['project']['dependencies']))" > /tmp/requirements.txt \
 && /opt/gpubot/bin/pip install --no-cache-dir --disable-pip-version-check -r /tmp/requirements.txt
COPY bot ./bot
COPY migrations ./migrations
RUN /opt/gpubot/bin/pip install --no-cache-dir --disable-pip-version-check --no-deps -e . \
 && find /opt/gpubot /app -name __pycache__ -prune -exec rm -rf {} +

FROM ${BASE}
# libpq: psycopg (procrastinate's driver: the fleet_runs migration, the workers' queue) loads it at run time;
# without it `gpubot serve` cannot migrate PostgreSQL ("no pq wrapper available").
RUN apt-get update -qq \
 && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends libpq5 \
 && rm -rf /var/lib/apt/lists/*
RUN useradd --system --uid 10001 --user-group --home-dir /var/lib/gpubot --create-home --shell /usr/sbin/nologin gpubot \
 && install -d -o gpubot -g gpubot -m 0700 /var/lib/gpubot/ssh \
 && install -d -m 0755 /etc/gpubot
COPY --from=build /opt/gpubot /opt/gpubot
COPY --from=build /app /app
ENV PATH=/opt/gpubot/bin:$PATH \
    PYTHONUNBUFFERED=1 \
    PYTHONDONTWRITEBYTECODE=1 \
    GPUBOT_HTTP_PORT=3000 \
    GPUBOT_KNOWN_HOSTS=/var/lib/gpubot/ssh/known_hosts \
    GPUBOT_LOG_FORMAT=json
USER gpubot
WORKDIR /var/lib/gpubot
EXPOSE 3000
# Ready = database reachable, migrations current, Slack connected, not shutting down (GET /readyz).
HEALTHCHECK --interval=15s --timeout=5s --start-period=60s --retries=3 \
  CMD ["python3", "-c", "import os, urllib.request as u; u.urlopen('http://127.0.0.1:%s/readyz' % os.environ.get('GPUBOT_HTTP_PORT', '3000'), timeout=4)"]
# `gpubot serve` is PID 1 (exec form): SIGTERM drains in-flight probes for GPUBOT_SHUTDOWN_GRACE_S
# (20 s) and exits 0; give it a longer stop timeout (compose: stop_grace_period).
STOPSIGNAL SIGTERM
CMD ["gpubot", "serve"]
