"""``python -m durably._cli``: the ``durably`` command."""

import sys

from .main import main

sys.exit(main())
