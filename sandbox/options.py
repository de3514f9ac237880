"""`option(default, help)`: a dataclass field with its one help line, in the style of
`xrpo_verl.config.option`.

The sandbox is standalone (it imports nothing of xrpo_verl), so it keeps this copy of the helper.
The help goes into the field's `metadata["help"]`, where `xrpo_verl.config.markdown_docs` reads
it for docs/config.md, as it does for the trainer's settings.
"""

from __future__ import annotations

import dataclasses
from typing import Any


def option(default: Any = dataclasses.MISSING, help: str = "", *, factory: Any = None) -> Any:
    """A dataclass field with its one help line; `factory` for a default computed per instance."""
    if not help:
        raise ValueError("every option needs its help line")
    if factory is not None:
        return dataclasses.field(default_factory=factory, metadata={"help": help})
    return dataclasses.field(default=default, metadata={"help": help})
