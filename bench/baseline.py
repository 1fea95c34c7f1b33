"""Starting and stopping the floor server (bench/floor.py) next to the agentos being measured."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

import requests
from django.conf import settings

REQUIREMENTS = Path(__file__).with_name("floor-requirements.txt")


def floor_python() -> str:
    """The floor's virtualenv under .run/, made (or brought up to date) from floor-requirements.txt."""
    venv = settings.BASE_DIR / ".run" / "floor-venv"
    python = venv / "bin" / "python"
    stamp = venv / ".installed"
    if not stamp.exists() or stamp.read_text() != REQUIREMENTS.read_text():
        subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True)
        pip = [str(python), "-m", "pip", "install", "--quiet", "--disable-pip-version-check"]
        subprocess.run([*pip, "-r", str(REQUIREMENTS)], check=True)
        stamp.write_text(REQUIREMENTS.read_text())
    return str(python)


class FloorServer:
    """The floor on 127.0.0.1:`port`, writing into the database of `database_url`."""

    def __init__(self, database_url: str, port: int = 7792):
        self.url = f"http://127.0.0.1:{port}"
        self.command = [
            floor_python(), "-m", "uvicorn", "bench.floor:application", "--host", "127.0.0.1", "--port", str(port),
            "--no-access-log", "--lifespan", "off",
        ]  # fmt: skip
        self.env = {**os.environ, "DATABASE_URL": database_url}
        self.process: subprocess.Popen | None = None

    def __enter__(self) -> FloorServer:
        self.process = subprocess.Popen(self.command, env=self.env, cwd=str(settings.BASE_DIR), start_new_session=True)
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            try:
                requests.post(f"{self.url}/agents/floor/runs", data={"message": "warm"}, timeout=1)
                return self
            except requests.ConnectionError:
                time.sleep(0.2)
        self.__exit__()
        raise RuntimeError("the floor server did not start")

    def __exit__(self, *_) -> None:
        if self.process is not None:
            self.process.terminate()
            self.process.wait(10)
