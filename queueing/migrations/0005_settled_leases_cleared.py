"""A ticket that is not running holds no lease: clear what settles written before that rule kept of their last one."""

from django.db import migrations


class Migration(migrations.Migration):
    dependencies = [
        ("queueing", "0004_cancel_requested"),
    ]

    operations = [
        migrations.RunSQL(
            "UPDATE queueing_ticket SET locked_by = NULL, locked_at = NULL "
            "WHERE status <> 'running' AND (locked_by IS NOT NULL OR locked_at IS NOT NULL)",
            migrations.RunSQL.noop,
        ),
    ]
