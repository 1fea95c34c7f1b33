FROM python:3.11-slim
ENV PYTHONUNBUFFERED=1 DJANGO_SETTINGS_MODULE=agentos_project.settings.production
WORKDIR /app
COPY requirements.txt .
RUN pip install --no-cache-dir -r requirements.txt
COPY . .
RUN useradd --system agentos
USER agentos
EXPOSE 7777
CMD ["python", "-m", "uvicorn", "agentos_project.asgi:application", "--host", "0.0.0.0", "--port", "7777"]
