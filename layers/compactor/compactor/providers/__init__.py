"""Model transports: one module per wire protocol, all behind :class:`providers.base.Transport`."""
