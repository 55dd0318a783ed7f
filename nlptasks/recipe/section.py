"""The base of every recipe table: unknown keys, infinities and NaN are refused; numbers given for
text become text."""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict

__all__ = ["Section"]


class Section(BaseModel):
    model_config = ConfigDict(extra="forbid", validate_assignment=True, coerce_numbers_to_str=True, allow_inf_nan=False)
