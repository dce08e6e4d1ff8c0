# The agent worker. docker-compose.yml builds it as the `worker` service; on its own:
#   docker build -t durable-agents .
#   docker run --rm -e TEMPORAL_ADDRESS=host:7233 -e OPENAI_API_KEY -v agent-data:/data durable-agents
FROM python:3.11-slim-bookworm

ENV PYTHONDONTWRITEBYTECODE=1 \
    PYTHONUNBUFFERED=1 \
    PIP_NO_CACHE_DIR=1 \
    PIP_DISABLE_PIP_VERSION_CHECK=1

WORKDIR /app

# Dependencies first, so code changes reuse this layer.
COPY requirements.lock ./
RUN pip install -r requirements.lock

COPY . .
# The project itself, editable: `durable_agents` maps workflows/ and activities/ of this folder.
RUN pip install --no-deps -e .
# Bytecode at build for every package the app imports: it runs as a user who cannot write it.
RUN python -m compileall -q workflows activities durable_agents *.py

# Without AGENT_DATABASE_URL, the conversation, payload and idempotency stores and the tool workspaces
# live under /data (mount a volume there; a named volume starts with the ownership below), and worker
# and starter share the payload store. With it (as in docker-compose.yml) they all live in PostgreSQL,
# shared by workers on any host, and /data stays empty.
# data/ and workspace/ link there too, so a store whose variable is unset still lands on the volume.
RUN useradd --system --uid 10001 --home-dir /app --shell /usr/sbin/nologin agent \
    && mkdir -p /data/workspace \
    && chown -R agent:agent /data \
    && ln -s /data /app/data \
    && ln -s /data/workspace /app/workspace
ENV AGENT_DATA_DIR=/data \
    AGENT_STORE=/data/conversations.db \
    AGENT_PAYLOAD_STORE=/data/payloads.db \
    AGENT_IDEMPOTENCY_STORE=/data/idempotency.db \
    AGENT_WORKSPACE=/data/workspace

USER agent

# worker.py stops on SIGTERM (docker stop) after its graceful shutdown.
CMD ["python", "worker.py"]
