"""Django's management commands of the app: ``manage.py pdfpool``."""
