"""The real openai client against the local fake server: round trip and error translation."""

import pytest

from memoryhub.llm import ChatMessage, LLMPermanentError, LLMTransientError
from memoryhub.llm.client import OpenAICompatibleClient, get_llm_client

HELLO = [ChatMessage(role="user", content="Hello there")]


@pytest.fixture
def client(fake_llm):
    return get_llm_client()


def test_it_round_trips_text_and_usage_through_the_real_openai_client(fake_llm, client):
    fake_llm.reply("Hi! How can I help?", prompt_tokens=12, completion_tokens=5)

    completion = client.complete(
        messages=[ChatMessage(role="system", content="Be brief."), *HELLO],
        max_tokens=50,
        temperature=0.2,
    )

    assert completion.text == "Hi! How can I help?"
    assert (completion.prompt_tokens, completion.completion_tokens) == (12, 5)
    assert completion.model == "fake-model"
    request = fake_llm.last_request
    assert request.path == "/v1/chat/completions"
    assert request.body["model"] == "fake-model"
    assert request.body["max_tokens"] == 50
    assert request.body["temperature"] == 0.2
    assert request.messages == [
        {"role": "system", "content": "Be brief."},
        {"role": "user", "content": "Hello there"},
    ]
    assert request.headers["authorization"] == "Bearer test-key"


def test_it_sends_a_placeholder_key_when_none_is_configured(fake_llm, settings):
    settings.LLM_API_KEY = ""

    get_llm_client().complete(messages=HELLO)

    assert fake_llm.last_request.headers["authorization"] == "Bearer not-needed"
    assert "max_tokens" not in fake_llm.last_request.body


def test_it_estimates_usage_when_the_server_reports_none(fake_llm, client):
    fake_llm.reply("A fairly short answer.", include_usage=False)

    completion = client.complete(messages=HELLO)

    assert completion.prompt_tokens > 0
    assert completion.completion_tokens > 0


@pytest.mark.parametrize("status", [500, 502, 503, 429, 408])
def test_server_errors_rate_limits_and_408_are_transient(fake_llm, client, status):
    fake_llm.fail(status)

    with pytest.raises(LLMTransientError):
        client.complete(messages=HELLO)


def test_a_429_passes_on_the_servers_retry_after(fake_llm, client):
    fake_llm.fail(429, message="slow down", headers={"Retry-After": "7"})

    with pytest.raises(LLMTransientError, match="429") as excinfo:
        client.complete(messages=HELLO)

    assert excinfo.value.retry_after_seconds == 7.0


def test_a_timeout_is_transient(fake_llm, settings):
    settings.LLM_TIMEOUT_SECONDS = 0.3
    fake_llm.stall(5)

    with pytest.raises(LLMTransientError, match=r"did not answer within 0\.3s"):
        get_llm_client().complete(messages=HELLO)


def test_an_unreachable_server_is_transient(fake_llm, settings):
    port = fake_llm.port
    fake_llm.stop()
    settings.LLM_BASE_URL = f"http://127.0.0.1:{port}/v1"

    with pytest.raises(LLMTransientError, match="Could not reach"):
        get_llm_client().complete(messages=HELLO)


@pytest.mark.parametrize("status", [400, 401, 403, 404, 409, 422])
def test_other_client_errors_are_permanent(fake_llm, client, status):
    fake_llm.fail(status, message="model not found")

    with pytest.raises(LLMPermanentError, match=f"HTTP {status}"):
        client.complete(messages=HELLO)


def test_nothing_is_retried_by_the_client_itself(fake_llm, client):
    fake_llm.fail(500)

    with pytest.raises(LLMTransientError):
        client.complete(messages=HELLO)

    assert len(fake_llm.requests) == 1, "retries belong to the Celery task, with backoff"


@pytest.mark.parametrize("script", ["malformed", "empty", "no_choices"])
def test_unusable_answers_are_permanent(fake_llm, client, script):
    getattr(fake_llm, script)()

    with pytest.raises(LLMPermanentError):
        client.complete(messages=HELLO)


def test_a_whitespace_only_answer_is_permanent(fake_llm, client):
    fake_llm.reply("  \n ")

    with pytest.raises(LLMPermanentError, match="empty content"):
        client.complete(messages=HELLO)


def test_there_is_no_client_in_offline_mode(settings):
    settings.LLM_BASE_URL = ""

    assert get_llm_client() is None


def test_the_client_follows_the_settings(fake_llm, settings):
    first = get_llm_client()
    assert get_llm_client() is first, "one client (and connection pool) per configuration"

    settings.LLM_MODEL = "other-model"

    assert get_llm_client().model == "other-model"


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"base_url": "127.0.0.1:11434/v1"}, "http"),
        ({"model": ""}, "LLM_MODEL"),
        ({"timeout_seconds": 0}, "positive"),
    ],
)
def test_bad_configuration_is_permanent(kwargs, message):
    config = {"base_url": "http://127.0.0.1:9/v1", "model": "m", **kwargs}

    with pytest.raises(LLMPermanentError, match=message):
        OpenAICompatibleClient(**config)


def test_its_repr_never_shows_the_key():
    client = OpenAICompatibleClient(
        base_url="http://127.0.0.1:9/v1", model="m", api_key="sk-secret"
    )

    assert "sk-secret" not in repr(client)


def test_chat_messages_only_take_known_roles():
    with pytest.raises(ValueError, match="role"):
        ChatMessage(role="narrator", content="Once upon a time")


def test_openai_is_imported_by_the_first_client_not_by_every_process():
    # openai's types take ~0.4 s to import: a command (an import, a migration) or the admin
    # that never calls an LLM does not pay for them; a client does (and the web process, at
    # start: memoryhub.wsgi).
    import subprocess
    import sys
    from pathlib import Path

    script = (
        "import sys, django; django.setup(); "
        "from django.contrib import admin; admin.autodiscover(); "
        "import memoryhub.transfer.management.commands.import_memory; "
        "print('openai' in sys.modules, end=' '); "
        "from memoryhub.llm.client import OpenAICompatibleClient; "
        "OpenAICompatibleClient(base_url='http://127.0.0.1:9', model='m'); "
        "print('openai' in sys.modules)"
    )
    result = subprocess.run(
        [sys.executable, "-c", script],
        cwd=Path(__file__).resolve().parents[2],
        capture_output=True,
        text=True,
        check=True,
        timeout=120,
    )

    assert result.stdout.split() == ["False", "True"], result.stderr
