"""Training batches: the named builders the models declare (:mod:`.builders`), the row and window
arithmetic under them (:mod:`.windows`) and the per-event columns they carry (:mod:`.events`)."""
