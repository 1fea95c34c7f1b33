"""Fair share and deadlines (CONTRACT 17): held tickets, their turn, a queued ticket's deadline, and their indexes."""

from django.db import migrations, models


class Migration(migrations.Migration):
    dependencies = [
        ("queueing", "0005_settled_leases_cleared"),
    ]

    operations = [
        migrations.AddField(
            model_name="ticket",
            name="expires_at",
            field=models.DateTimeField(blank=True, null=True),
        ),
        migrations.AddField(
            model_name="ticket",
            name="held",
            field=models.BooleanField(db_default=False, default=False),
        ),
        migrations.AddField(
            model_name="ticket",
            name="ttl_seconds",
            field=models.FloatField(blank=True, null=True),
        ),
        migrations.AddField(
            model_name="ticket",
            name="turn",
            field=models.GeneratedField(
                db_persist=True,
                expression=models.Case(
                    models.When(then=None, user_id__isnull=True),
                    models.When(status="running", then=models.Value("r")),
                    models.When(
                        models.Q(
                            ("status", "queued"), models.Q(("is_head", True), ("serialized", False), _connector="OR")
                        ),
                        then=models.Case(models.When(held=True, then=models.Value("h")), default=models.Value("w")),
                    ),
                    default=None,
                    output_field=models.CharField(max_length=1),
                ),
                output_field=models.CharField(max_length=1, null=True),
            ),
        ),
        migrations.AddIndex(
            model_name="ticket",
            index=models.Index(
                condition=models.Q(("turn__isnull", False)),
                fields=["user_id", "turn", "created_at"],
                name="ticket_user_turn",
            ),
        ),
        migrations.AddIndex(
            model_name="ticket",
            index=models.Index(
                condition=models.Q(("expires_at__isnull", False), ("status", "queued")),
                fields=["expires_at"],
                name="ticket_deadline",
            ),
        ),
    ]
