from django.db import migrations, models


class Migration(migrations.Migration):
    dependencies = [
        ("jobs", "0013_workflows"),
    ]

    operations = [
        migrations.AddField(
            model_name="workernode",
            name="async_concurrency",
            field=models.PositiveIntegerField(default=1),
        ),
        migrations.AddField(
            model_name="workernode",
            name="free_async_slots",
            field=models.PositiveIntegerField(blank=True, null=True),
        ),
        migrations.AddField(
            model_name="workernode",
            name="free_sync_slots",
            field=models.PositiveIntegerField(blank=True, null=True),
        ),
    ]
