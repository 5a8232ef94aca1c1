"""The clock the story moves: wall time plus SHOPOPS_CLOCK_OFFSET_S."""

import datetime as _dt
import os
import time


def _offset() -> float:
    raw = os.environ.get("SHOPOPS_CLOCK_OFFSET_S", "").strip()
    try:
        return float(raw) if raw else 0.0
    except ValueError:
        return 0.0


def epoch() -> float:
    return time.time() + _offset()


def iso() -> str:
    moment = _dt.datetime.fromtimestamp(epoch(), tz=_dt.UTC)
    return moment.strftime("%Y-%m-%dT%H:%M:%S.%fZ")
