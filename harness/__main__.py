"""``python -m harness`` is ``shopops-chaos``."""

import sys

from harness.cli.main import entry

sys.exit(entry())
