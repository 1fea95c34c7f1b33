import shutil

import pytest

from agentos_project.embedded import SHARED, EmbeddedPostgres

from ..conftest import free_port


@pytest.fixture
def throwaway_postgres(tmp_path):
    """A started embedded PostgreSQL of the test's own (its own port and data), stopped and removed afterwards."""
    postgres = EmbeddedPostgres(tmp_path / "run", f"postgresql://postgres@127.0.0.1:{free_port()}/agentos")
    postgres.start()
    yield postgres
    postgres.stop()
    # As root, the data may be under /var/lib/agentos-embedded/<digest>/postgres: the digest's folder goes too.
    shutil.rmtree(
        postgres.pgdata.parent if postgres.pgdata.is_relative_to(SHARED) else postgres.pgdata, ignore_errors=True
    )
