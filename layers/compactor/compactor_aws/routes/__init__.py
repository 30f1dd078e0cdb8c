"""The HTTP API's routes, one Powertools ``APIGatewayRouter`` per topic (see docs/architecture.md).

``functions/compact/compact.py`` includes each module's ``router``; a new route is a new module here
plus one ``app.include_router(...)`` line there, each route declared with
:func:`compactor_aws.routes.common.route` (the table ``Allow`` is read from). Route functions parse nothing
by hand (the request models validate the body) and make one call into the core;
:mod:`compactor_aws.routes.common` holds the Powertools logger, metrics and tracer they share and turns a core
result into the response.
"""
