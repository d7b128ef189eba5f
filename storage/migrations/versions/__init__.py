"""One module per schema revision, numbered 0001, 0002, ... (``spectune db revision`` picks the next number)."""
