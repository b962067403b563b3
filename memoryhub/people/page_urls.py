"""Page URLs (the web UI); the API's are under api/.

Person ids are the bot's own strings and may hold `:` `+` `@` and even `/`, so they are taken
with the `path` converter. The routes with a suffix come first: an id that itself ends in one of
those suffixes (`…/erase`, `…/export`, `…/memories/new`, `…/memories/<key>/edit`…) has its detail
page shadowed by them; its other pages still work.

Names (namespace `people_pages`):
    list            GET  /people/?q=&page=
    detail          GET  /people/<user_id>/   ?sessions_page= memories_page= facts_page= notes_page=
    export          GET  /people/<user_id>/export/                    JSON attachment, audited
    erase           GET  /people/<user_id>/erase/  confirmation; POST erases (editors), audited
    memory-create   GET|POST /people/<user_id>/memories/new/          (editors)
    memory-edit     GET|POST /people/<user_id>/memories/<key>/edit/   (editors)
    memory-pin      POST /people/<user_id>/memories/<key>/pin/        pinned=true|false (editors)
    memory-delete   GET  /people/<user_id>/memories/<key>/delete/  confirmation; POST deletes
    tokens          GET  /people/<user_id>/tokens/                    credentials section (htmx)
    token-mint      POST /people/<user_id>/tokens/new/                shown once (editors)
    token-revoke    POST /people/<user_id>/tokens/<jti>/revoke/       (editors), audited
"""

from django.urls import URLPattern, path, register_converter

from memoryhub.credentials import views as credential_views
from memoryhub.people import views


class PersonIdConverter:
    """Like `path`, but any character at all: ids stored before control characters were
    refused (a newline, a tab) must still have their page."""

    regex = r"[\s\S]+"

    def to_python(self, value: str) -> str:
        return value

    def to_url(self, value: str) -> str:
        return value


register_converter(PersonIdConverter, "person")

app_name = "people_pages"

urlpatterns: list[URLPattern] = [
    path("", views.people_list, name="list"),
    path("<person:user_id>/export/", views.person_export, name="export"),
    path("<person:user_id>/erase/", views.person_erase, name="erase"),
    path("<person:user_id>/memories/new/", views.memory_create, name="memory-create"),
    path("<person:user_id>/memories/<str:key>/edit/", views.memory_edit, name="memory-edit"),
    path("<person:user_id>/memories/<str:key>/pin/", views.memory_pin, name="memory-pin"),
    path(
        "<person:user_id>/memories/<str:key>/delete/",
        views.memory_delete_view,
        name="memory-delete",
    ),
    # The credentials section (memoryhub.credentials): person-bound tokens.
    path("<person:user_id>/tokens/", credential_views.tokens_section, name="tokens"),
    path("<person:user_id>/tokens/new/", credential_views.token_mint, name="token-mint"),
    path(
        "<person:user_id>/tokens/<str:jti>/revoke/",
        credential_views.token_revoke,
        name="token-revoke",
    ),
    path("<person:user_id>/", views.person_detail, name="detail"),
]
