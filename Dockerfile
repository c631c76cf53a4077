# syntax=docker/dockerfile:1
# gpuyield: one image for every component (worker, watch, node-agent, plan, status).
#
#   docker build -t ghcr.io/gpuyield/gpuyield:0.1.0 .                        # the controller
#   docker build --target trainer -t ghcr.io/gpuyield/gpuyield-trainer:0.1.0 .  # + torch
#
# The default (last) stage has no torch: the controller never imports it. The trainer
# stage adds the `trainer` extra for training images and the examples.

ARG PYTHON_IMAGE=python:3.11-slim-bookworm

# --- base: what every runtime stage shares ---------------------------------------------
FROM ${PYTHON_IMAGE} AS base
ENV PYTHONUNBUFFERED=1 \
    PYTHONDONTWRITEBYTECODE=1 \
    PATH=/opt/gpuyield/bin:$PATH \
    HOME=/var/lib/gpuyield \
    GPUYIELD_STATE_DIR=/var/lib/gpuyield
# A fixed numeric UID/GID, so Kubernetes can check runAsNonRoot against the image. The
# state directory is also group 0's, for containers run under another UID with group 0
# (OpenShift; `user: UID:0` in docker-compose.yml).
RUN groupadd --system --gid 10001 gpuyield \
 && useradd --system --uid 10001 --gid 10001 --home-dir /var/lib/gpuyield --no-create-home \
            --shell /usr/sbin/nologin gpuyield \
 && install -d -o 10001 -g 0 -m 0770 /var/lib/gpuyield

# --- build: the package and its dependencies in a virtual environment ---------------
FROM ${PYTHON_IMAGE} AS build
ENV PIP_NO_CACHE_DIR=1 PIP_DISABLE_PIP_VERSION_CHECK=1
# On amd64 every dependency is a wheel. faust-streaming has no aarch64 wheel: other
# architectures build it from source and need a compiler (in this stage only).
RUN if [ "$(dpkg --print-architecture)" != "amd64" ]; then \
      apt-get update && apt-get install -y --no-install-recommends gcc libc6-dev \
      && rm -rf /var/lib/apt/lists/*; \
    fi
RUN python -m venv /opt/gpuyield && /opt/gpuyield/bin/pip install --upgrade pip
WORKDIR /src
COPY pyproject.toml README.md ./
COPY cli ./cli
COPY schemas ./schemas
COPY agents ./agents
COPY streams ./streams
# A regular (not editable) install: the folders become the gpuyield.* packages.
RUN /opt/gpuyield/bin/pip install .

# --- build-trainer: the same, plus torch for the trainer SDK --------------------------
FROM build AS build-trainer
# torch==2.13.0 (pinned by the extra) is PyPI's default build: on Linux x86_64 that
# is the CUDA one, which GPU training wants.
RUN /opt/gpuyield/bin/pip install ".[trainer]"

# --- trainer: training image with the SDK and the example script --------------------
FROM base AS trainer
COPY --from=build-trainer /opt/gpuyield /opt/gpuyield
COPY examples /app/examples
WORKDIR /var/lib/gpuyield
USER 10001:10001
CMD ["python", "/app/examples/train_tiny.py", "--help"]

# --- controller (default): no torch ---------------------------------------------------
FROM base AS controller
COPY --from=build /opt/gpuyield /opt/gpuyield
# The shipped snapshots, for `gpuyield plan /app/examples/...`.
COPY examples /app/examples
# Writable: faust keeps its data directory under the working directory.
WORKDIR /var/lib/gpuyield
USER 10001:10001
ENTRYPOINT ["gpuyield"]
CMD ["--help"]
