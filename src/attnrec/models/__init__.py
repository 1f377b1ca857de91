"""Model files; importing this package registers every model."""

from attnrec.models import sasrec  # noqa: F401
from attnrec.models import peter  # noqa: F401
