"""``python -m symgrad``: the ``symgrad`` command."""

import sys

from .cli import main

sys.exit(main())
