"""Compactor core: transcript compaction on a generic typed flow runtime.

The package has no AWS imports; the Lambda handlers in ``functions/`` are thin adapters over it.
"""

__version__ = "0.1.0"
