"""The status page's table-less model: its state and its one permission, no table."""

from django.db import migrations, models


class Migration(migrations.Migration):
    initial = True

    dependencies = ()

    operations = (
        migrations.CreateModel(
            name="PoolStatus",
            fields=[
                ("id", models.BigAutoField(primary_key=True, serialize=False)),
            ],
            options={
                "verbose_name": "status",
                "verbose_name_plural": "status",
                "permissions": (("view_pool_status", "Can view the PDF pool status"),),
                "managed": False,
                "base_manager_name": "objects",
                "default_permissions": (),
            },
        ),
    )
