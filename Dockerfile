# gpuyield: one image for every component (planner CLI now; worker and node agent later).
FROM python:3.11-slim
WORKDIR /app
COPY pyproject.toml README.md ./
COPY cli ./cli
COPY schemas ./schemas
COPY agents ./agents
COPY streams ./streams
COPY examples ./examples
RUN pip install --no-cache-dir . && useradd --uid 10001 gpuyield
USER 10001
ENTRYPOINT ["gpuyield"]
CMD ["--help"]
