"""``PoolStatus``: no table and no rows (as django-rq does it), only so that the admin lists
"PDF pool -> Status" and staff can be granted ``django_pdfpool.view_pool_status``."""

from __future__ import annotations

from django.db import models

VIEW_STATUS = "django_pdfpool.view_pool_status"  # the status page's (HTML and JSON)


class _NoRows(models.Manager["PoolStatus"]):
    """Every query empty, never sent: ``dumpdata`` (``--all`` too) reads every model."""

    def get_queryset(self) -> models.QuerySet[PoolStatus]:
        return super().get_queryset().none()


class PoolStatus(models.Model):
    """The status page's admin entry and permission; never queried."""

    id = models.BigAutoField(primary_key=True)  # whatever DEFAULT_AUTO_FIELD: no migration
    objects = _NoRows()

    class Meta:
        managed = False
        base_manager_name = "objects"
        default_permissions = ()
        permissions = (("view_pool_status", "Can view the PDF pool status"),)
        verbose_name = verbose_name_plural = "status"
