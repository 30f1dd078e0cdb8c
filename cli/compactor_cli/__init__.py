"""The local ``compactor`` command: compact, serve and invoke. Not shipped in the Lambda layer."""
