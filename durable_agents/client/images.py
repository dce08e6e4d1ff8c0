"""Images to send with a message: from a file, an http(s) URL or a ``data:`` URL, as the neutral
``Image`` both providers' adapters take (the starter's ``--image``, serve's file parts, your code)."""

from __future__ import annotations

import base64
import mimetypes
from pathlib import Path

from pydantic import ValidationError

from durable_agents.workflows.inputs import first_error
from durable_agents.workflows.messages import IMAGE_TYPES, Image


def image(path_or_url: str) -> Image:
    """An http(s) URL as it is (the provider fetches it), a ``data:`` URL decoded, a file read whole
    (its type from its name); ``ValueError`` in one line when it is none of these."""
    try:
        if path_or_url.startswith(("https://", "http://")):
            return Image(url=path_or_url)
        if path_or_url.startswith("data:"):
            head, _, data = path_or_url.removeprefix("data:").partition(",")
            media_type, _, encoding = head.partition(";")
            if encoding != "base64":
                raise ValueError("a data: URL of an image must be base64 (data:image/png;base64,...)")
            return Image(data=data, media_type=media_type)
        return _file(Path(path_or_url))
    except ValidationError as e:
        raise ValueError(first_error(e)) from None


def _file(path: Path) -> Image:
    media_type = mimetypes.guess_type(path.name)[0]
    if media_type not in IMAGE_TYPES:
        kinds = ", ".join(kind.removeprefix("image/") for kind in IMAGE_TYPES)
        raise ValueError(f"{path}: not an image file by its name (one of {kinds}), nor an http(s) URL")
    try:
        data = path.read_bytes()
    except OSError as e:
        raise ValueError(f"{path}: cannot read it: {e.strerror}") from None
    return Image(data=base64.b64encode(data).decode(), media_type=media_type)
