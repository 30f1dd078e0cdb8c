"""``python -m compactor_cli``: the same command as the ``compactor`` console script."""

import sys

from compactor_cli.main import main

sys.exit(main())
