# syntax=docker/dockerfile:1
# A durable-turns worker: `docker build -t durable-turns:1.0.0 .`, then run it with
# TEMPORAL_ADDRESS and TURNS_STORE_URL set (see docker-compose.yml). Without
# TEMPORAL_ADDRESS it would start an embedded dev server inside the container instead.
FROM python:3.11-slim

ENV PYTHONDONTWRITEBYTECODE=1 \
    PYTHONUNBUFFERED=1 \
    PIP_NO_CACHE_DIR=1 \
    PIP_DISABLE_PIP_VERSION_CHECK=1

WORKDIR /app

# Only what the package is built from: never .venv, .git or .data.
COPY pyproject.toml README.md constraints.txt ./
COPY durable_turns/ durable_turns/
COPY activities/ activities/
COPY workflows/ workflows/
COPY hooks/ hooks/
COPY worker.py ./

# postgres: the PostgreSQL transcript store (asyncpg); encryption: the payload codec. The
# versions are the ones the test suite runs on (constraints.txt).
ARG EXTRAS=postgres,encryption
RUN pip install -c constraints.txt ".[${EXTRAS}]" \
    && rm -rf build ./*.egg-info

# An unprivileged user; /data is its writable directory (TURNS_DATA_DIR).
RUN groupadd --system --gid 10001 turns \
    && useradd --system --uid 10001 --gid turns --home-dir /home/turns --create-home \
       --shell /usr/sbin/nologin turns \
    && mkdir -p /data \
    && chown turns:turns /data
ENV TURNS_DATA_DIR=/data
USER turns

# The worker drains on SIGTERM (docker stop); exec form so it receives the signal.
STOPSIGNAL SIGTERM
CMD ["python", "worker.py"]
