"""``python -m harness`` is ``shopops-chaos``."""

import sys

from harness.cli import main

sys.exit(main())
