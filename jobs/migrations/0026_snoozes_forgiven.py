# A retried job gets its snoozes back: MAX_SNOOZES counts the snoozes after the last retry.

from django.db import migrations, models


class Migration(migrations.Migration):
    dependencies = [
        ("jobs", "0025_search_text_delete_planned_per_run"),
    ]

    operations = [
        migrations.AddField(
            model_name="job",
            name="snoozes_forgiven",
            field=models.PositiveIntegerField(db_default=0, default=0),
        ),
    ]
