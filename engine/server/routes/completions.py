"""``POST /v1/completions`` and ``POST /v1/chat/completions``: queue the request, then answer with one body or a
stream of server-sent events ending in ``data: [DONE]``. A client that goes away frees its slot in the batch."""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import AsyncIterator
from typing import Annotated

from fastapi import APIRouter, Header, Request
from fastapi.responses import JSONResponse, Response, StreamingResponse

from engine.engine import Request as EngineRequest
from engine.server.deps import State
from engine.server.errors import ApiError
from engine.server.openai_format import SSE_DONE, Envelope, prompt_ids, sampling_params, sse
from engine.server.scheduler import Delta, EngineUnavailable, Event, Failure, Final
from engine.server.schemas import ChatCompletionRequest, CompletionRequest, WorkloadName
from engine.server.state import ServerState

router = APIRouter(prefix="/v1", tags=["generation"])

WorkloadHeader = Annotated[WorkloadName | None, Header(alias="X-Spectune-Workload")]


@router.post("/completions")
async def completions(body: CompletionRequest, request: Request, state: State,
                      workload: WorkloadHeader = None) -> Response:
    return await _generate(state, request, body, "completion", workload)


@router.post("/chat/completions")
async def chat_completions(body: ChatCompletionRequest, request: Request, state: State,
                           workload: WorkloadHeader = None) -> Response:
    return await _generate(state, request, body, "chat", workload)


async def _generate(state: ServerState, request: Request, body: CompletionRequest | ChatCompletionRequest, kind: str,
                    header_workload: str | None) -> Response:
    if body.model is not None and body.model not in state.model_names:
        raise ApiError(404, f"model: {body.model!r} is not served here; this server serves {state.model_id!r}",
                       "model")
    workload = body.workload or header_workload or "default"
    ids = prompt_ids(state.tokenizer, body)
    params = sampling_params(body, kind, len(ids), state.engine.target.max_context)
    request_id = f"{'cmpl' if kind == 'completion' else 'chatcmpl'}-{uuid.uuid4().hex}"
    engine_request = EngineRequest(request_id, ids, params, state.table.lookup(workload), workload)
    queue = state.scheduler.submit(engine_request, tuple(body.stop))
    envelope = Envelope.of(request_id, kind, state.model_id, body)
    if body.stream:
        return StreamingResponse(_stream(state, envelope, queue, len(ids)), media_type="text/event-stream")
    return await _answer(state, request, envelope, queue, len(ids))


async def _answer(state: ServerState, request: Request, envelope: Envelope, queue: asyncio.Queue[Event],
                  prompt_len: int) -> Response:
    collect = asyncio.ensure_future(_collect(queue))
    gone = asyncio.ensure_future(_disconnected(request))
    try:
        await asyncio.wait({collect, gone}, return_when=asyncio.FIRST_COMPLETED)
    finally:
        gone.cancel()
        if not collect.done():  # the client went away (or the server is shutting down)
            collect.cancel()
            state.scheduler.abort(envelope.id)
    if not collect.done() or collect.cancelled():
        return Response(status_code=499)  # nobody reads it; nginx's "client closed request"
    text, token_ids, final = collect.result()
    return JSONResponse(envelope.body(text, token_ids, final, prompt_len))


async def _collect(queue: asyncio.Queue[Event]) -> tuple[str, list[int], Final]:
    parts: list[str] = []
    token_ids: list[int] = []
    while True:
        event = await queue.get()
        if isinstance(event, Failure):
            raise EngineUnavailable(event.message)
        parts.append(event.text)
        token_ids += event.token_ids
        if isinstance(event, Final):
            return "".join(parts), token_ids, event


async def _disconnected(request: Request) -> None:
    """Returns once the client has disconnected (the body is already read, so only that message can come)."""
    while (await request.receive())["type"] != "http.disconnect":
        pass


async def _stream(state: ServerState, envelope: Envelope, queue: asyncio.Queue[Event],
                  prompt_len: int) -> AsyncIterator[str]:
    done = False
    try:
        if envelope.kind == "chat":
            yield envelope.role_chunk()
        while not done:
            event = await queue.get()
            if isinstance(event, Failure):
                done = True
                yield sse({"error": {"message": f"engine unavailable: {event.message}", "type": "server_error",
                                     "param": None, "code": 503}})
            elif isinstance(event, Final):
                done = True
                yield envelope.chunk(event.text, event.token_ids, event, prompt_len)
            elif isinstance(event, Delta) and (event.text or envelope.return_token_ids):
                yield envelope.chunk(event.text, event.token_ids)
        yield SSE_DONE
    finally:
        if not done:  # cancelled: the client disconnected
            state.scheduler.abort(envelope.id)
