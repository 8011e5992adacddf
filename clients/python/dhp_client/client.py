"""dhp_client.Client: jobs, events, logs and nodes over the controller's gRPC API."""

from __future__ import annotations

import json
import os
import time
from typing import Dict, Iterable, Iterator, List, Mapping, Optional, Sequence, Union

import grpc

from dhp_client.errors import DhpError, from_rpc_error
from dhp_client._gen.dhp.v1 import job_pb2, job_spec_pb2, node_pb2, service_pb2
from dhp_client._gen.dhp.v1 import service_pb2_grpc

JobState = job_pb2.JobState
_FINAL = {job_pb2.JOB_STATE_SUCCEEDED, job_pb2.JOB_STATE_FAILED, job_pb2.JOB_STATE_CANCELLED}

SpecLike = Union[str, "os.PathLike[str]", Mapping, job_spec_pb2.JobSpec]


def is_final(state: int) -> bool:
    """Whether a job state is final (SUCCEEDED, FAILED or CANCELLED)."""
    return state in _FINAL


def _state(value: Union[int, str]) -> int:
    """A JobState from its number, its full name or its short name ("running")."""
    if isinstance(value, int):
        return value
    name = value.upper()
    return job_pb2.JobState.Value(name if name.startswith("JOB_STATE_") else "JOB_STATE_" + name)


def _placement(value: Union[int, str]) -> int:
    """A Placement from its number, its full name or its short name ("separate")."""
    if isinstance(value, int):
        return value
    name = value.upper()
    return job_spec_pb2.Placement.Value(
        name if name.startswith("PLACEMENT_") else "PLACEMENT_" + name)


def _read(path: str) -> bytes:
    with open(path, "rb") as f:
        return f.read()


class Client:
    """A connection to one dhp controller (its gRPC address, as dhpctl's --server).

    Args:
      server: "host:port" of the controller's gRPC API; default $DHP_SERVER or 127.0.0.1:7070.
      token: the API token, when the controller requires one; default $DHP_TOKEN, or the
        content of ``token_file`` (dhpctl's --token-file).
      token_file: a file holding the token.
      ca_file: PEM file of the CA that signed the controller's certificate: connect with TLS
        (dhpctl's --ca-file; default $DHP_CA_FILE). Without it the channel is plain text
        (loopback, or a trusted network).
      cert_file, key_file: a PEM client certificate and its key, for a controller that
        verifies client certificates (dhpctl's --cert-file/--key-file; default
        $DHP_CERT_FILE, $DHP_KEY_FILE).
      timeout: seconds each unary call may take.

    Every method raises a :class:`dhp_client.DhpError` subclass when the controller answers
    with an error (InvalidArgument, NotFound, FailedPrecondition, Unauthenticated, ...).
    """

    def __init__(self, server: Optional[str] = None, *, token: Optional[str] = None,
                 token_file: Optional[str] = None, ca_file: Optional[str] = None,
                 cert_file: Optional[str] = None, key_file: Optional[str] = None,
                 timeout: float = 30.0) -> None:
        self.server = server or os.environ.get("DHP_SERVER") or "127.0.0.1:7070"
        if token is None and token_file:
            with open(token_file, encoding="utf-8") as f:
                token = f.read().strip()
        if token is None:
            token = os.environ.get("DHP_TOKEN") or None
        self._metadata = (("authorization", "Bearer " + token),) if token else ()
        ca_file = ca_file or os.environ.get("DHP_CA_FILE") or None
        cert_file = cert_file or os.environ.get("DHP_CERT_FILE") or None
        key_file = key_file or os.environ.get("DHP_KEY_FILE") or None
        if bool(cert_file) != bool(key_file):
            raise ValueError("cert_file and key_file go together: give both or neither")
        if cert_file and not ca_file:
            raise ValueError("a client certificate needs TLS: give ca_file as well")
        if ca_file:
            credentials = grpc.ssl_channel_credentials(
                root_certificates=_read(ca_file),
                private_key=_read(key_file) if key_file else None,
                certificate_chain=_read(cert_file) if cert_file else None)
            self._channel = grpc.secure_channel(self.server, credentials)
        else:
            self._channel = grpc.insecure_channel(self.server)
        self.timeout = timeout
        self._jobs = service_pb2_grpc.JobServiceStub(self._channel)
        self._nodes = service_pb2_grpc.NodeServiceStub(self._channel)

    def close(self) -> None:
        self._channel.close()

    def __enter__(self) -> "Client":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def _call(self, method, request, timeout: Optional[float] = None):
        try:
            return method(request, timeout=timeout or self.timeout, metadata=self._metadata)
        except grpc.RpcError as e:
            raise from_rpc_error(e) from None

    # ---- jobs -----------------------------------------------------------------------------

    def submit(self, spec: SpecLike, *, dry_run: bool = False) -> job_pb2.Job:
        """Validates and submits a job; returns it as stored (QUEUED), with its id.

        ``spec`` is a path to a YAML or JSON spec file, a dict (the spec's fields, as in the
        file), or a dhp.v1.JobSpec. ``dry_run`` validates and normalises only: nothing is
        stored, and the returned job shows every default filled in.
        """
        request = service_pb2.SubmitJobRequest(dry_run=dry_run)
        if isinstance(spec, job_spec_pb2.JobSpec):
            request.spec.CopyFrom(spec)
        elif isinstance(spec, Mapping):
            request.spec_text = json.dumps(spec)  # JSON is YAML: read by the same parser
        else:
            with open(os.fspath(spec), encoding="utf-8") as f:
                request.spec_text = f.read()
        return self._call(self._jobs.SubmitJob, request).job

    def get(self, job_id: str) -> service_pb2.GetJobResponse:
        """A job with its runs (attempts, placement), checkpoints and live rank progress."""
        return self._call(self._jobs.GetJob, service_pb2.GetJobRequest(job_id=job_id))

    def list(self, *, states: Sequence[Union[int, str]] = (),
             labels: Optional[Mapping[str, str]] = None,
             limit: Optional[int] = None) -> List[job_pb2.Job]:
        """Jobs, newest first: in any of ``states`` ("running", JobState.JOB_STATE_QUEUED...)
        and carrying every label of ``labels``; at most ``limit`` (all when None)."""
        jobs: List[job_pb2.Job] = []
        token = ""
        while limit is None or len(jobs) < limit:
            page = 1000 if limit is None else min(1000, limit - len(jobs))
            request = service_pb2.ListJobsRequest(states=[_state(s) for s in states],
                                                  labels=dict(labels or {}), page_size=page,
                                                  page_token=token)
            response = self._call(self._jobs.ListJobs, request)
            jobs.extend(response.jobs)
            token = response.next_page_token
            if not token:
                break
        return jobs

    def cancel(self, job_id: str, reason: str = "") -> job_pb2.Job:
        """Cancels a job from any live state; returns it (CANCELLING or CANCELLED)."""
        request = service_pb2.CancelJobRequest(job_id=job_id, reason=reason)
        return self._call(self._jobs.CancelJob, request).job

    def resume(self, job_id: str, *, vision_degree: Optional[int] = None,
               text_degree: Optional[int] = None, data_parallel_size: Optional[int] = None,
               placement: Optional[Union[int, str]] = None) -> service_pb2.ResumeJobResponse:
        """A new run of a CANCELLED or FAILED job from its newest complete checkpoint.

        The layout arguments, when given, change the job's layout for this run and later ones
        (the ranks reshard the checkpoint); None keeps the job's. ``placement`` is "collocate"
        or "separate" as in a spec (or a dhp.v1.Placement). A layout the job cannot take
        raises InvalidArgument naming the field; one the cluster can never fit,
        FailedPrecondition.
        """
        request = service_pb2.ResumeJobRequest(job_id=job_id)
        if vision_degree is not None:
            request.vision_degree = vision_degree
        if text_degree is not None:
            request.text_degree = text_degree
        if data_parallel_size is not None:
            request.data_parallel_size = data_parallel_size
        if placement is not None:
            request.placement = _placement(placement)
        return self._call(self._jobs.ResumeJob, request)

    def checkpoint(self, job_id: str) -> service_pb2.CheckpointJobResponse:
        """Asks a running job's ranks to checkpoint at their next step boundary; the response's
        ``at_step`` is the newest step reported when asked: the checkpoint is written there or
        at the first step boundary after it."""
        request = service_pb2.CheckpointJobRequest(job_id=job_id)
        return self._call(self._jobs.CheckpointJob, request)

    def export(self, job_id: str, *, checkpoint_id: int = 0,
               dtype: str = "") -> service_pb2.ExportCheckpointResponse:
        """Asks the controller to write a checkpoint (``checkpoint_id``, 0: the newest
        COMPLETE one) as a Hugging Face model directory into its export root, where the
        checkpoint lives. ``dtype`` is bf16 (the default), fp32, fp16 or keep. Returns at once:
        follow the response's ``export.id`` with get_export until SUCCEEDED or FAILED."""
        request = service_pb2.ExportCheckpointRequest(job_id=job_id, checkpoint_id=checkpoint_id,
                                                      dtype=dtype)
        return self._call(self._jobs.ExportCheckpoint, request)

    def get_export(self, export_id: str) -> job_pb2.Export:
        """An export made with export(): its state, out_dir and message."""
        request = service_pb2.GetExportRequest(id=export_id)
        return getattr(self._call(self._jobs.GetExport, request), "export")

    def list_exports(self, job_id: str) -> List[job_pb2.Export]:
        """A job's exports, newest first."""
        request = service_pb2.ListExportsRequest(job_id=job_id)
        return list(self._call(self._jobs.ListExports, request).exports)

    def watch(self, job_id: str = "", *, after: int = 0,
              follow: bool = True) -> Iterator[job_pb2.Event]:
        """Events of a job (of all jobs and nodes when ``job_id`` is empty) after event id
        ``after``. With ``follow`` the iterator waits for new events and ends when the job is
        final; without, it ends after the history."""
        request = service_pb2.WatchJobRequest(job_id=job_id, after_event_id=after, follow=follow)
        try:
            for event in self._jobs.WatchJob(request, metadata=self._metadata):
                yield event
        except grpc.RpcError as e:
            raise from_rpc_error(e) from None

    def wait(self, job_id: str, timeout: Optional[float] = None) -> job_pb2.Job:
        """Waits until the job is final and returns it. DeadlineExceeded after ``timeout``."""
        deadline = None if timeout is None else time.monotonic() + timeout
        while True:
            job = self.get(job_id).job
            if is_final(job.state):
                return job
            if deadline is not None and time.monotonic() > deadline:
                raise DhpError("job %s is still %s after %.0f s" % (
                    job_id, job_pb2.JobState.Name(job.state), timeout),
                    grpc.StatusCode.DEADLINE_EXCEEDED)
            time.sleep(0.2)

    def logs(self, job_id: str, *, ranks: Iterable[int] = (), attempt: int = 0,
             follow: bool = False, poll_interval: float = 0.5) -> Iterator[service_pb2.LogChunk]:
        """Rank output of an attempt (0: the current one), as chunks of bytes per rank.

        Without ``follow``: what is stored now. With it: also what comes later, until the
        attempt has ended and everything it wrote was read.
        """
        offsets: Dict[int, int] = {r: 0 for r in ranks}
        if not offsets:  # every rank of the attempt, also those that have written nothing yet
            runs = self.get(job_id).runs
            run = next((r for r in runs if r.attempt == attempt), runs[-1] if runs else None)
            if run is not None:
                attempt = run.attempt
                offsets = {r: 0 for r in range(run.world_size)}
        while True:
            request = service_pb2.GetLogsRequest(job_id=job_id, attempt=attempt,
                                                 ranks=list(offsets), offsets=list(offsets.values()))
            response = self._call(self._jobs.GetLogs, request)
            attempt = response.attempt  # stay on the attempt first read
            got = 0
            for chunk in response.chunks:
                if chunk.data:
                    got += len(chunk.data)
                    yield chunk
                offsets[chunk.world_rank] = chunk.offset + len(chunk.data)
            if got:
                continue  # more may be stored already
            if not follow or response.final:
                return
            time.sleep(poll_interval)

    # ---- nodes ----------------------------------------------------------------------------

    def nodes(self) -> List[node_pb2.Node]:
        """Registered worker nodes with their GPUs or CPU slots and state, by id (every page)."""
        nodes: List[node_pb2.Node] = []
        token = ""
        while True:
            response = self._call(self._nodes.ListNodes,
                                  service_pb2.ListNodesRequest(page_token=token))
            nodes.extend(response.nodes)
            token = response.next_page_token
            if not token:
                return nodes

    def drain_node(self, node_id: str, reason: str = "") -> service_pb2.DrainNodeResponse:
        """Cordons a node (no new ranks are placed there) and asks every running job with ranks
        on it to checkpoint at its next step boundary and stop; those jobs are queued again
        without spending a restart. ``job_ids`` of the response lists them. Admins only."""
        request = service_pb2.DrainNodeRequest(node_id=node_id, reason=reason)
        return self._call(self._nodes.DrainNode, request)

    def uncordon_node(self, node_id: str) -> node_pb2.Node:
        """Lets the scheduler place ranks on a drained node again. Admins only."""
        request = service_pb2.UncordonNodeRequest(node_id=node_id)
        return self._call(self._nodes.UncordonNode, request).node
