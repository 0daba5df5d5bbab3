"""The admin entry "PDF pool -> Status": a ModelAdmin whose only URL, the changelist, is the
status page and its JSON; who may see it is in docs/status.md."""

from __future__ import annotations

from typing import Any

from django.contrib import admin
from django.core.exceptions import PermissionDenied
from django.http import HttpRequest, HttpResponse, JsonResponse
from django.template.response import TemplateResponse
from django.urls import URLPattern, path

from .models import VIEW_STATUS, PoolStatus
from .status.page import status_context, status_data


@admin.register(PoolStatus)
class PoolStatusAdmin(admin.ModelAdmin):  # type: ignore[type-arg]
    """The status page, in the admin's frame, for staff with ``view_pool_status``."""

    change_list_template = "admin/django_pdfpool/status.html"

    def has_view_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return request.user.has_perm(VIEW_STATUS)

    def has_add_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False

    has_module_permission = has_view_permission
    has_change_permission = has_delete_permission = has_add_permission

    def get_urls(self) -> list[URLPattern]:
        name = f"{self.opts.app_label}_{self.opts.model_name}_changelist"
        return [path("", self.admin_site.admin_view(self.changelist_view), name=name)]

    def changelist_view(
        self, request: HttpRequest, extra_context: dict[str, Any] | None = None
    ) -> HttpResponse:
        """The status page, or with ``?format=json`` the data it shows."""
        if not self.has_view_permission(request):
            raise PermissionDenied
        data = status_data()
        if request.GET.get("format") == "json":
            return JsonResponse(data)
        context = {
            **self.admin_site.each_context(request),
            **status_context(data),
            "title": "PDF pool status",
            "opts": self.opts,
            "app_label": self.opts.app_label,
            **(extra_context or {}),
        }
        request.current_app = self.admin_site.name
        return TemplateResponse(request, self.change_list_template, context)
