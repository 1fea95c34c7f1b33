"""The worker's threads pool: Celery's, on ElasticThreads."""

from agentos_project.core.elastic import ElasticThreads
from queueing.celery_pool import ElasticTaskPool


def test_celerys_threads_pool_runs_on_it_with_the_workers_concurrency():
    pool = ElasticTaskPool(limit=7)

    assert (type(pool.executor), pool.executor.max_workers) == (ElasticThreads, 7)
    assert pool.apply_async(lambda: None).wait(5) is None
    pool.on_stop()
