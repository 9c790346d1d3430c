"""/api/runs: start a coding run, its status, transcript, live stream, retry and stop.

Every path with a run id first reads the run's status, so an unknown run is a 404 (the client's `retry`,
`stop` and `transcript` take "a chat or a run" and would otherwise fall back to a chat of that name).
"""

from __future__ import annotations

from typing import Any

from fastapi import APIRouter, Request
from sse_starlette import EventSourceResponse

from tasks.client import AsyncClient, core
from tasks.store import keys
from web import access, deps
from web.bodies import RunIn
from web.ids import check_id
from web.stream import stream_response

router = APIRouter(prefix="/api/runs")


@router.post("", status_code=202)
async def start_run(body: RunIn, request: Request, client: deps.ClientDep) -> dict[str, Any]:
    """Start a run in `workspace` (a directory on the workers' machine); `{"run_id", "task_id"}`. The new run's
    id (the body's, or one drawn here) is authorized before anything is written, so an app can refuse it or
    note whose it is."""
    run_id = check_id(body.run_id, "run_id") if body.run_id is not None else core.new_run_id()
    await access.authorize_or_hide(request, "run", run_id, core.no_run(run_id))
    ref = await client.start_run(
        body.goal, body.workspace, run_id=run_id, agent=body.agent, model=body.model,
        user=await access.who(request, None),
    )
    return {"run_id": ref.run_id, "task_id": ref.task_id}


@router.get("/{run_id}")
async def status(run_id: str, client: deps.ClientDep) -> dict[str, Any]:
    """As `baton status --json`."""
    return (await client.run_status(check_id(run_id, "run_id"))).model_dump(mode="json")


@router.get("/{run_id}/transcript")
async def transcript(run_id: str, client: deps.ClientDep) -> dict[str, Any]:
    await client.run_status(check_id(run_id, "run_id"))  # 404 for an unknown run
    messages = await client.transcript(run_id, kind="run")
    return {"id": run_id, "messages": [m.model_dump(mode="json") for m in messages]}


@router.post("/{run_id}/retry", status_code=202)
async def retry(run_id: str, client: deps.ClientDep) -> dict[str, Any]:
    """Re-run a failed run (422 when it has not failed); answers as `baton retry --json` for a run."""
    await client.run_status(check_id(run_id, "run_id"))
    ref = await client.retry(run_id, kind="run")
    return (await client.run_status(ref.run_id)).model_dump(mode="json")  # type: ignore[union-attr]


@router.post("/{run_id}/stop")
async def stop(run_id: str, client: deps.ClientDep) -> dict[str, Any]:
    await client.run_status(check_id(run_id, "run_id"))
    out = await client.stop(run_id, kind="run")
    return {"id": out["id"], "stopped": out["stopped"]}


@router.get("/{run_id}/stream")
async def stream(run_id: str, request: Request) -> EventSourceResponse:
    """The run's live stream (SSE). Unlike a chat's, a run exists only once POST /api/runs answered."""
    client: AsyncClient = request.app.state.client
    await client.run_status(check_id(run_id, "run_id"))  # 404 (or 422) before the stream starts
    return stream_response(request, keys.owner("run", run_id))
