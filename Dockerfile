# Axon in a container: axon serve on port 8000, serving /data (mount your files there).
#
#     docker build -t axon .
#     docker run --rm -p 8000:8000 -v "$PWD/files:/data:ro" axon
#
# compose.yaml puts nginx in front, as deploy/install.sh does on a host.

# -- build: a wheel of Axon and of its native server's speedups (httptools, uvloop) -------------
FROM python:3.11-slim AS build
WORKDIR /src
COPY pyproject.toml README.md ./
COPY src ./src
RUN pip wheel --no-cache-dir --wheel-dir /wheels ".[server]"

# -- run ----------------------------------------------------------------------------------------
FROM python:3.11-slim
RUN groupadd --system --gid 10001 axon \
    && useradd --system --uid 10001 --gid axon --no-create-home --home-dir /nonexistent \
        --shell /usr/sbin/nologin axon \
    && install -d -m 0755 /data
COPY --from=build /wheels /tmp/wheels
RUN pip install --no-cache-dir --no-index /tmp/wheels/*.whl && rm -rf /tmp/wheels

# Every flag of axon serve is also an AXON_* variable: docker run -e AXON_WORKERS=4 -e AXON_METRICS=1
ENV AXON_ROOT=/data \
    AXON_HOST=0.0.0.0 \
    AXON_PORT=8000 \
    PYTHONDONTWRITEBYTECODE=1 \
    PYTHONUNBUFFERED=1
# Numeric, so that Kubernetes can check runAsNonRoot: the user axon made above.
USER 10001:10001
WORKDIR /data
EXPOSE 8000

# The slim image has no curl: ask with the standard library.
HEALTHCHECK --interval=10s --timeout=3s --start-period=5s --retries=3 \
    CMD ["python", "-c", "import os, urllib.request; urllib.request.urlopen('http://127.0.0.1:%s/api/health' % os.environ.get('AXON_PORT', '8000'), timeout=2)"]

# axon serve is PID 1: it handles SIGTERM (docker stop) by draining its connections.
STOPSIGNAL SIGTERM
CMD ["axon", "serve", "/data", "--host", "0.0.0.0"]
