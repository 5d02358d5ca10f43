"""``python -m durably``: the ``durably`` command (the same as the console script)."""

import sys

from durably._cli.main import main

sys.exit(main())
