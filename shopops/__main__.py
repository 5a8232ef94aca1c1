"""``python -m shopops`` is the ``shopops`` CLI."""

import sys

from shopops.cli import main

sys.exit(main())
