"""``python -m durably._cli``: the ``durably`` command (``python -m durably`` is the public spelling)."""

import sys

from durably._cli.main import main

sys.exit(main())
