"""Request bodies, one pydantic model per POST route (FastAPI validates them; ``handlers`` words the errors).

Fields a client may send and this server does not use are accepted (``extra="allow"``), as the APIs
these copy accept them; ``input`` / ``inputs`` are ``Any`` because their many shapes are checked by
``inputs`` with messages naming the item.
"""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, StrictBool, StrictInt, StrictStr


class EmbeddingsRequest(BaseModel):
    """OpenAI's POST /v1/embeddings body (``model`` and ``user`` are accepted and not used)."""
    model_config = ConfigDict(extra="allow")
    input: Any
    model: StrictStr | None = None
    encoding_format: Literal["float", "base64"] | None = None
    dimensions: StrictInt | None = None
    user: StrictStr | None = None
    output_dtype: Any = None  # Voyage AI's field (checked by Service.output_precision: a 422 naming it)


class EmbedRequest(BaseModel):
    """TEI's POST /embed body."""
    model_config = ConfigDict(extra="allow")
    inputs: Any
    normalize: StrictBool = True
    truncate: StrictBool | None = None
    truncation_direction: Literal["right", "Right", "left", "Left"] = "right"
    prompt_name: StrictStr | None = None
    dimensions: StrictInt | None = None
    output_dtype: Any = None  # as on /v1/embeddings (TEI has no such field)
