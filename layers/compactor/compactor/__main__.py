"""``python -m compactor``: the same command as the ``compactor`` console script."""

import sys

from .cli.main import main

sys.exit(main())
