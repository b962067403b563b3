import pytest

from memoryhub.celery import app as celery_app


def test_healthz_answers_without_auth(client):
    response = client.get("/healthz")

    assert response.status_code == 200
    assert response.json() == {"status": "ok"}


@pytest.mark.django_db
def test_readyz_checks_the_database_and_the_broker(client):
    response = client.get("/readyz")

    assert response.status_code == 200
    assert response.json()["checks"] == {"database": True, "broker": True}


@pytest.mark.django_db
def test_readyz_is_503_when_the_broker_is_unreachable(client):
    original = celery_app.conf.broker_url
    # Nothing listens on port 1: a real connection failure, not a mock.
    celery_app.conf.broker_url = "redis://127.0.0.1:1/0"
    try:
        response = client.get("/readyz")
    finally:
        celery_app.conf.broker_url = original

    assert response.status_code == 503
    assert response.json()["checks"]["broker"] is False


def test_an_unknown_api_url_is_a_json_404(client):
    response = client.get("/api/v1/no-such-thing/")

    assert response.status_code == 404
    assert response.json()["error"]["code"] == "not_found"


@pytest.mark.django_db
def test_the_home_page_asks_to_log_in_and_links_to_the_docs(client):
    response = client.get("/", follow=True)

    assert response.redirect_chain == [("/login/?next=/", 302)]
    assert response.status_code == 200
    assert b"/api/docs/" in response.content
