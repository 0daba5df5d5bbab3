"""The example's app: a page to upload a PDF and read its text, and the same as a JSON API."""
