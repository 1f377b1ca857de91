"""Model files; importing this package registers every model."""

from attnrec.models import sasrec  # noqa: F401
from attnrec.models import peter  # noqa: F401
from attnrec.models import pop  # noqa: F401
from attnrec.models import bprmf  # noqa: F401
from attnrec.models import ncf  # noqa: F401
from attnrec.models import fpmc  # noqa: F401
from attnrec.models import transrec  # noqa: F401
from attnrec.models import gru4rec  # noqa: F401
from attnrec.models import caser  # noqa: F401
from attnrec.models import bert4rec  # noqa: F401
