"""ModelInfo: model limits from litellm's bundled map, without importing litellm."""

from __future__ import annotations

import subprocess
import sys
import uuid

import pytest

from eventstore import Budget, ConfigurationError, ModelInfo, UnknownModelWarning
from eventstore.models import DEFAULT_WINDOW


def test_known_models_with_and_without_a_provider_prefix() -> None:
    bare = ModelInfo.lookup("gpt-4o")
    assert bare.known and bare.provider == "openai"
    assert bare.max_input_tokens == 128_000 and bare.max_output_tokens
    prefixed = ModelInfo.lookup("openai/gpt-4o")
    assert prefixed.max_input_tokens == bare.max_input_tokens
    assert prefixed.name == "openai/gpt-4o"
    assert ModelInfo.find("gpt-4o") == bare


def test_unknown_models_get_the_default_window_and_one_warning() -> None:
    name = f"acme/model-{uuid.uuid4().hex}"
    assert ModelInfo.find(name) is None
    with pytest.warns(UnknownModelWarning, match="4,096-token window"):
        info = ModelInfo.lookup(name)
    assert (info.max_input_tokens, info.known, info.provider) == (DEFAULT_WINDOW, False, "acme")
    import warnings

    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert ModelInfo.lookup(name) == info  # said once per model
        b = Budget.for_model(name)
    assert b.max_input_tokens == DEFAULT_WINDOW and b.available > 0


def test_overrides_win_and_bad_input_is_refused() -> None:
    name = f"local-{uuid.uuid4().hex[:8]}"
    info = ModelInfo.lookup(name, override={"max_input_tokens": 32_768, "max_output_tokens": 2_048})
    assert (info.max_input_tokens, info.max_output_tokens, info.known) == (32_768, 2_048, True)
    assert (
        ModelInfo.lookup("gpt-4o", override={"max_input_tokens": 1_000}).max_input_tokens == 1_000
    )
    with pytest.raises(ConfigurationError):
        ModelInfo.lookup("gpt-4o", override={"window": 5})
    with pytest.raises(ConfigurationError):
        ModelInfo.lookup("gpt-4o", override={"max_input_tokens": 0})
    with pytest.raises(ConfigurationError):
        ModelInfo.lookup("")


def test_models_registered_with_litellm_are_seen() -> None:
    from eventstore.llm import import_litellm

    litellm = import_litellm()
    name = f"registered-{uuid.uuid4().hex[:8]}"
    litellm.register_model({name: {"max_input_tokens": 9_000, "max_output_tokens": 900}})
    info = ModelInfo.lookup(name)
    assert (info.max_input_tokens, info.max_output_tokens, info.known) == (9_000, 900, True)


def test_lookup_does_not_import_litellm() -> None:
    code = (
        "import sys; from eventstore import ModelInfo, Budget;"
        "assert ModelInfo.lookup('gpt-4o').max_input_tokens == 128000;"
        "Budget.for_model('claude-sonnet-4-5');"
        "print('litellm' in sys.modules)"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "False"


def test_lookup_matches_names_the_way_litellm_does_without_importing_it() -> None:
    """A dated Anthropic name the map only holds as a hosted copy is still known: provider
    routes, region prefixes, hosted-copy prefixes and deployment versions aside."""
    import sys
    import warnings

    from eventstore.budget import Budget
    from eventstore.models import ModelInfo

    had_litellm = "litellm" in sys.modules
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # no UnknownModelWarning
        info = ModelInfo.lookup("anthropic/claude-sonnet-4-20250514")
        budget = Budget.for_model("anthropic/claude-sonnet-4-20250514")
        hosted = ModelInfo.lookup("bedrock/us.anthropic.claude-sonnet-4-20250514-v1:0")
    assert info.known and info.max_input_tokens == 200_000
    assert info.provider == "anthropic"
    assert budget.max_input_tokens == 200_000
    assert hosted.max_input_tokens == 200_000
    assert ("litellm" in sys.modules) == had_litellm  # read from the file, not imported
