"""Model files; importing this package registers every model."""

from attnrec.models import sasrec  # noqa: F401
