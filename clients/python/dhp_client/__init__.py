"""dhp_client: a Python client for the dhp controller.

    from dhp_client import Client
    client = Client("127.0.0.1:7070")               # or DHP_SERVER, DHP_TOKEN
    job = client.submit("configs/tiny-cpu.yaml")
    for event in client.watch(job.id):
        print(event.type, event.to_state)
    print(client.get(job.id).job.state)

Results are the dhp.v1 protobuf messages (``dhp_client.pb`` holds their modules); errors are
:class:`DhpError` subclasses carrying the controller's code and message.
"""

from dhp_client.client import Client, JobState, is_final
from dhp_client.errors import (AlreadyExists, DeadlineExceeded, DhpError, FailedPrecondition,
                               InvalidArgument, NotFound, PermissionDenied, ResourceExhausted,
                               Unauthenticated, Unavailable)

__all__ = [
    "Client", "JobState", "is_final", "DhpError", "InvalidArgument", "NotFound",
    "AlreadyExists", "FailedPrecondition", "Unauthenticated", "PermissionDenied",
    "ResourceExhausted", "DeadlineExceeded", "Unavailable",
]
__version__ = "0.1.0"
