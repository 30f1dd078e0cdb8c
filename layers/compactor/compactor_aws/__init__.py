"""AWS adapters of the Compactor core, shipped in the same layer: S3 object store, Step Functions
fan-out runner, the bridge from flow traces to X-Ray, EMF metrics and billing records, and the
provider adapters (Bedrock transport, API keys from Secrets Manager).

``compactor`` itself never imports AWS libraries; the Lambda handlers wire these adapters in. Importing
this package plugs the provider adapters into the core (boto3 is only imported when they are used),
which loads asyncio and ``compactor.providers``: the authorizer, which calls no provider, imports
``compactor.caller`` instead (docs/deploy.md#the-authorizer).
"""

from compactor_aws import providers as _providers

_providers.install()
