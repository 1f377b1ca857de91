"""Training batches: the named builders the models declare (:mod:`.builders`) and the row and window
arithmetic under them (:mod:`.windows`)."""
