"""The dhp.v1 message modules, generated from proto/dhp/v1 when the package was built.

    from dhp_client.pb import job_spec_pb2
    spec = job_spec_pb2.JobSpec(name="demo")
"""

from dhp_client._gen.dhp.v1 import (controller_config_pb2, job_pb2, job_spec_pb2,  # noqa: F401
                                    node_pb2, service_pb2)
