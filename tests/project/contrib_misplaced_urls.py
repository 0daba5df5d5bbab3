"""Routes of DRF and django-ninja pooled by the plain decorator: they work, and
``manage.py check`` warns (django_pdfpool.W101) that the integration should be used."""

from django.urls import path
from django.utils.decorators import method_decorator
from ninja import NinjaAPI
from rest_framework.decorators import api_view
from rest_framework.response import Response
from rest_framework.views import APIView

from django_pdfpool import pdf_pooled
from tests.project.contrib_views import ExtractAPIView

api = NinjaAPI(urls_namespace="pdfpool-misplaced-urls")


@api.post("/plain")
@pdf_pooled
def plain_ninja(request):
    return {"text": request.pdf.text}


@api_view(["POST"])
@pdf_pooled
def plain_function(request):
    return Response({"text": request.pdf.text})


@method_decorator(pdf_pooled, name="post")
class PlainAPIView(APIView):
    def post(self, request):
        return Response({"text": request.pdf.text})


urlpatterns = [
    path("plain/function/", plain_function),
    path("plain/apiview/", PlainAPIView.as_view()),
    path("fine/apiview/", ExtractAPIView.as_view()),
    path("ninja/", api.urls),
]
