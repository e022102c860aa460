from django.db import migrations, models


class Migration(migrations.Migration):
    dependencies = [
        ("jobs", "0019_limit_start_job"),
    ]

    operations = [
        migrations.AddField(
            model_name="limitstart",
            name="starts",
            field=models.PositiveIntegerField(db_default=1, default=1),
        ),
    ]
