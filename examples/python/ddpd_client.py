#!/usr/bin/env python3
"""Submit a DDP job to a ddpd coordinator, watch it to the end and print its result.

The API from Python, as a user would script it: stubs generated from proto/ddpd/v1/ddpd.proto
by generate_stubs.sh (grpcio-tools' protoc in the repo's .venv), grpcio from the same .venv to
call them (scripts/setup.sh installs both from requirements.txt).

    examples/python/generate_stubs.sh /tmp/ddpd-stubs
    DDPD_TOKEN=... .venv/bin/python examples/python/ddpd_client.py \
        --stubs /tmp/ddpd-stubs --coordinator 127.0.0.1:50051 --world-size 2 --steps 5

Progress goes to stderr; the result to stdout (a JSON document with --json).
Exit codes, as ddpctl's: 0 the job SUCCEEDED; 1 it did not, or an RPC failed (e.g.
UNAUTHENTICATED); 2 the coordinator refused the spec (INVALID_ARGUMENT).
"""

import argparse
import json
import os
import sys


def parse_args():
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--stubs", default=os.environ.get("DDPD_STUBS"),
                   help="directory generate_stubs.sh wrote ddpd/v1/*_pb2*.py into "
                        "(default: $DDPD_STUBS)")
    p.add_argument("--coordinator", default="127.0.0.1:50051", help="host:port")
    p.add_argument("--token", default=os.environ.get("DDPD_TOKEN", ""),
                   help="shared token (default: $DDPD_TOKEN; empty: send none)")
    p.add_argument("--tls-ca", help="PEM CA certificate: connect with TLS")
    p.add_argument("--world-size", type=int, default=2)
    p.add_argument("--model", default="tiny")
    p.add_argument("--strategy", default="bucketed")
    p.add_argument("--steps", type=int, default=5)
    p.add_argument("--batch-size", type=int, default=4, help="global batch (split over ranks)")
    p.add_argument("--context-length", type=int, default=16)
    p.add_argument("--threads", type=int, default=1, help="intra-op threads per rank")
    p.add_argument("--watch-timeout", type=float, default=600, help="seconds")
    p.add_argument("--json", action="store_true", help="print the result as one JSON document")
    args = p.parse_args()
    if not args.stubs:
        p.error("name the stubs directory with --stubs or $DDPD_STUBS (see generate_stubs.sh)")
    return args


def main():
    args = parse_args()
    sys.path.insert(0, args.stubs)
    import grpc  # grpcio, in .venv
    from ddpd.v1 import ddpd_pb2 as pb, ddpd_pb2_grpc as pb_grpc  # generated

    def log(*what):
        print(*what, file=sys.stderr, flush=True)

    if args.tls_ca:
        with open(args.tls_ca, "rb") as f:
            credentials = grpc.ssl_channel_credentials(root_certificates=f.read())
        channel = grpc.secure_channel(args.coordinator, credentials)
    else:
        channel = grpc.insecure_channel(args.coordinator)
    stub = pb_grpc.CoordinatorStub(channel)
    # Every RPC carries the token as metadata "authorization: Bearer <token>", as ddpctl does.
    metadata = [("authorization", "Bearer " + args.token)] if args.token else []

    spec = pb.JobSpec(
        world_size=args.world_size,
        ddp=pb.DdpSpec(model=args.model, strategy=args.strategy, steps=args.steps,
                       batch_size=args.batch_size, context_length=args.context_length,
                       threads=args.threads))
    try:
        job = stub.SubmitJob(pb.SubmitJobRequest(spec=spec), metadata=metadata, timeout=30)
        log(f"submitted {job.job_id} ({pb.JobState.Name(job.state)})")

        # The stream replays the job's events so far, follows it, and ends once it is terminal.
        state = job.state
        events = stub.WatchJob(pb.WatchJobRequest(job_id=job.job_id), metadata=metadata,
                               timeout=args.watch_timeout)
        for event in events:
            if event.HasField("transition"):
                t = event.transition
                state = t.state
                log(f"{pb.JobState.Name(t.state)}: {t.reason}")
            elif event.HasField("step"):
                s = event.step  # aggregated over ranks: slowest rank's times, mean loss
                log(f"step {s.step + 1}/{event.total_steps} loss {s.loss:.4f} "
                    f"{s.step_seconds * 1e3:.1f} ms, comm {100 * s.comm_fraction:.0f}%")

        reply = stub.GetJob(pb.GetJobRequest(job_id=job.job_id, with_steps=True),
                            metadata=metadata, timeout=30)
    except grpc.RpcError as e:
        log(f"{e.code().name}: {e.details()}")
        return 2 if e.code() == grpc.StatusCode.INVALID_ARGUMENT else 1

    job = reply.job
    result = json.loads(job.result_json) if job.result_json else None
    steps_by_rank = {}
    for s in reply.steps:  # every rank's own reports
        steps_by_rank.setdefault(s.rank, []).append(s.step)
    if args.json:
        print(json.dumps({
            "job_id": job.job_id,
            "state": pb.JobState.Name(job.state),
            "error": job.error,
            "world_size": job.spec.world_size,
            "worker_ids": list(job.worker_ids),
            "history": [{"state": pb.JobState.Name(t.state), "reason": t.reason}
                        for t in job.history],
            "rank_steps": {str(r): len(s) for r, s in sorted(steps_by_rank.items())},
            "result": result,
        }, indent=2))
    else:
        print(f"{job.job_id} {pb.JobState.Name(job.state)} on {', '.join(job.worker_ids)}")
        if job.error:
            print(f"error: {job.error}")
        if result and "final_loss" not in result.get("summary", {}):
            print("no step trained")  # final_loss is absent, not 0, when no step ran
        elif result and "summary" in result:
            summary = result["summary"]
            print(f"final loss {summary['final_loss']:.4f}, median step "
                  f"{summary['median_step_seconds'] * 1e3:.1f} ms, "
                  f"{summary['tokens_per_second']:.0f} tokens/s, "
                  f"{len(result['steps'])} steps")
    return 0 if job.state == pb.SUCCEEDED else 1


if __name__ == "__main__":
    sys.exit(main())
