"""A response model serialized by the handler itself.

A sync handler that returns a pydantic model makes FastAPI validate it against `response_model` in a
worker thread of its own (one more thread hop per request) before it serializes it. A handler that
built the model from its own fields returns `model_response(...)` instead: the same JSON (pydantic's
serializer, by alias, as FastAPI writes it), made in the handler's thread. The route keeps its
`response_model=` for the OpenAPI document.
"""

from __future__ import annotations

from fastapi import Response
from pydantic import BaseModel


def model_response(model: BaseModel, status_code: int = 200) -> Response:
    return Response(model.__pydantic_serializer__.to_json(model, by_alias=True), status_code=status_code,
                    media_type="application/json")
