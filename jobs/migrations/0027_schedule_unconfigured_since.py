# A schedule removed from the settings and added again later starts over from its next fire
# time: the fire times that passed while workers ran without it were never missed.

from django.db import migrations, models


class Migration(migrations.Migration):
    dependencies = [
        ("jobs", "0026_snoozes_forgiven"),
    ]

    operations = [
        migrations.AddField(
            model_name="schedule",
            name="unconfigured_since",
            field=models.DateTimeField(blank=True, null=True),
        ),
    ]
