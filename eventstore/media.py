"""Media parts: what an image costs each provider, and which models accept which media.

Images are not a flat 765 tokens. Each provider bills them its own way, from the image's
pixel size (read from the PNG, JPEG, GIF or WebP header, never decoded):

* OpenAI (and the default): scaled to fit 2048×2048, then the short side to 768; 170 tokens
  per 512-pixel tile plus 85 (``detail="low"``: 85).
* Anthropic: about ``width × height / 750`` after scaling the long side to 1568 pixels.
* Google (Gemini, Vertex): 258 tokens for an image up to 384 pixels a side, else 258 per
  768-pixel tile.

:func:`accepts` says whether a model takes a media type, from litellm's model map
(``supports_vision``, ``supports_pdf_input``, ``supports_audio_input``), so a view can send
a text stand-in instead of an attachment the model would reject.
"""

from __future__ import annotations

import math
import struct
from fnmatch import fnmatch

from .events import FilePart

__all__ = [
    "image_size",
    "image_tokens",
    "file_tokens",
    "accepts",
    "accepted_types",
    "is_accepted",
    "FALLBACK_FILE_TOKENS",
]

#: Estimate for an attachment whose cost cannot be computed (unknown size or kind).
FALLBACK_FILE_TOKENS = 765


def image_size(data: bytes) -> tuple[int, int] | None:
    """``(width, height)`` from a PNG, GIF, WebP or JPEG header, or ``None``."""
    try:
        if data[:8] == b"\x89PNG\r\n\x1a\n" and data[12:16] == b"IHDR":
            w, h = struct.unpack(">II", data[16:24])
            return int(w), int(h)
        if data[:6] in (b"GIF87a", b"GIF89a"):
            w, h = struct.unpack("<HH", data[6:10])
            return int(w), int(h)
        if data[:4] == b"RIFF" and data[8:12] == b"WEBP":
            chunk = data[12:16]
            if chunk == b"VP8X":
                w = int.from_bytes(data[24:27], "little") + 1
                h = int.from_bytes(data[27:30], "little") + 1
                return w, h
            if chunk == b"VP8 ":
                w, h = struct.unpack("<HH", data[26:30])
                return w & 0x3FFF, h & 0x3FFF
            if chunk == b"VP8L":
                bits = int.from_bytes(data[21:25], "little")
                return (bits & 0x3FFF) + 1, ((bits >> 14) & 0x3FFF) + 1
        if data[:2] == b"\xff\xd8":
            return _jpeg_size(data)
    except (struct.error, IndexError):
        return None
    return None


def _jpeg_size(data: bytes) -> tuple[int, int] | None:
    i = 2
    while i + 9 < len(data):
        if data[i] != 0xFF:
            return None
        marker = data[i + 1]
        if marker in (0xD8, 0x01) or 0xD0 <= marker <= 0xD7:
            i += 2
            continue
        length = struct.unpack(">H", data[i + 2 : i + 4])[0]
        if 0xC0 <= marker <= 0xCF and marker not in (0xC4, 0xC8, 0xCC):
            h, w = struct.unpack(">HH", data[i + 5 : i + 9])
            return int(w), int(h)
        i += 2 + length
    return None


def image_tokens(
    width: int, height: int, provider: str | None = None, detail: str | None = None
) -> int:
    """What one ``width × height`` image costs as input tokens for ``provider``."""
    if width <= 0 or height <= 0:
        return FALLBACK_FILE_TOKENS
    p = (provider or "openai").lower()
    if p.startswith("anthropic") or p == "bedrock":
        scale = min(1.0, 1568 / max(width, height))
        return max(1, math.ceil(width * scale * height * scale / 750))
    if p.startswith(("gemini", "vertex")):
        if width <= 384 and height <= 384:
            return 258
        return 258 * math.ceil(width / 768) * math.ceil(height / 768)
    if detail == "low":
        return 85
    scale = min(1.0, 2048 / max(width, height))
    w, h = width * scale, height * scale
    scale = min(1.0, 768 / min(w, h))
    w, h = w * scale, h * scale
    return 85 + 170 * math.ceil(w / 512) * math.ceil(h / 512)


def file_tokens(part: FilePart, provider: str | None = None) -> int:
    """Input tokens of one attachment: images by their size and the provider's rule,
    anything else (or an image whose size cannot be read) the fallback estimate."""
    if part.media_type.startswith("image/") and part.data is not None:
        size = image_size(part.data)
        if size is not None:
            return image_tokens(size[0], size[1], provider, part.detail)
    return FALLBACK_FILE_TOKENS


_CAPABILITY = {
    "image/*": "supports_vision",
    "application/pdf": "supports_pdf_input",
    "audio/*": "supports_audio_input",
}


def accepts(model: str, media_type: str) -> bool:
    """Whether ``model`` takes ``media_type`` as input, per litellm's model map. Unknown
    models and media types the map has no flag for are assumed to be accepted."""
    from .models import model_entry

    found = model_entry(model)
    if found is None:
        return True
    for pattern, flag in _CAPABILITY.items():
        if fnmatch(media_type, pattern):
            return bool(found[1].get(flag, False))
    return True


def accepted_types(model: str) -> tuple[str, ...] | None:
    """The media patterns ``model`` accepts (for :attr:`ViewOptions.accepts`), or ``None``
    when the map does not describe the model (then nothing is filtered)."""
    from .models import model_entry

    found = model_entry(model)
    if found is None:
        return None
    return tuple(p for p, flag in _CAPABILITY.items() if found[1].get(flag, False))


def is_accepted(media_type: str, accepted: tuple[str, ...] | None) -> bool:
    """Whether a part of ``media_type`` goes out under ``accepted`` (see
    :attr:`ViewOptions.accepts`): ``None`` accepts everything; media of a kind the map has
    no flag for (text files, say) always goes out."""
    if accepted is None:
        return True
    if any(fnmatch(media_type, p) for p in accepted):
        return True
    return not any(fnmatch(media_type, p) for p in _CAPABILITY)
