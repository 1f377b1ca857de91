"""Model files; importing this package registers every model."""

from attnrec.models import (
    bert4rec,  # noqa: F401
    bprmf,  # noqa: F401
    caser,  # noqa: F401
    content,  # noqa: F401
    esasrec,  # noqa: F401
    fpmc,  # noqa: F401
    gru4rec,  # noqa: F401
    gsasrec,  # noqa: F401
    hstu,  # noqa: F401
    ncf,  # noqa: F401
    peter,  # noqa: F401
    pop,  # noqa: F401
    recent,  # noqa: F401
    sasrec,  # noqa: F401
    transrec,  # noqa: F401
)
