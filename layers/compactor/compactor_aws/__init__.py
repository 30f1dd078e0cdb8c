"""AWS adapters of the Compactor core, shipped in the same layer: S3 object store, Step Functions
fan-out runner, and the bridge from flow traces to X-Ray, EMF metrics and billing records.

``compactor`` itself never imports AWS libraries; the Lambda handlers wire these adapters in.
"""
