FROM python:3.11-slim
RUN apt-get update && apt-get install -y --no-install-recommends openssh-client && rm -rf /var/lib/apt/lists/*
WORKDIR /app
COPY pyproject.toml README.md alembic.ini ./
COPY bot ./bot
COPY migrations ./migrations
RUN pip install --no-cache-dir -e .
EXPOSE 3000
CMD ["gpubot", "serve"]
