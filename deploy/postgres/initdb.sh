#!/bin/sh
# Run once by the postgres image on an empty data volume (/docker-entrypoint-initdb.d): the
# application's own role — not a superuser, so row-level security applies to it (README:
# Row-level security) — its database, and pgvector, which only a superuser may create.
set -eu
psql -v ON_ERROR_STOP=1 --username "$POSTGRES_USER" --dbname "$POSTGRES_DB" \
  -v app_password="$MEMORYHUB_DB_PASSWORD" <<'SQL'
CREATE ROLE memoryhub LOGIN NOSUPERUSER NOBYPASSRLS PASSWORD :'app_password';
CREATE DATABASE memoryhub OWNER memoryhub;
\connect memoryhub
CREATE EXTENSION IF NOT EXISTS vector;
SQL
