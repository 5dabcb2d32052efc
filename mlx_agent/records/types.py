"""The field types every record shares: strict objects, absolute paths, digests, counts and seconds."""

from __future__ import annotations

from typing import Annotated

from pydantic import ConfigDict, Field

STRICT = ConfigDict(extra="forbid", strict=True)
AbsPath = Annotated[str, Field(pattern=r"^/")]
Sha256 = Annotated[str, Field(pattern=r"^[0-9a-f]{64}$")]
Count = Annotated[int, Field(ge=0)]
Positive = Annotated[int, Field(ge=1)]
Seconds = Annotated[float, Field(ge=0, allow_inf_nan=False)]
