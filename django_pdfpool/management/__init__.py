"""The ``pdfpool`` management command and its helpers (docs/command.md)."""
