"""Celery tasks: the message carries a ticket id; the task reloads the row and is idempotent."""

from celery import shared_task

from .router import EXECUTE_TASK
from .worker import worker_execute


@shared_task(name=EXECUTE_TASK, ignore_result=True, acks_late=True, Strategy="queueing.message_handler:lean")
def execute_ticket(ticket_id: str) -> None:
    worker_execute(ticket_id=ticket_id)
