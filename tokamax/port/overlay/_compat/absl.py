"""Stand-in for absl: `logging` goes to Python's logging under the `tokamax` logger."""

from __future__ import annotations

import logging as _logging
import types
from typing import Any

_LOG = _logging.getLogger("tokamax")


def _vlog(level: int, msg: str, *args: Any, **kwargs: Any) -> None:
    _LOG.log(_logging.DEBUG - level, msg, *args, **kwargs)


logging = types.SimpleNamespace(
    debug=_LOG.debug, info=_LOG.info, warning=_LOG.warning, error=_LOG.error,
    exception=_LOG.exception, vlog=_vlog, log=_LOG.log,
)
