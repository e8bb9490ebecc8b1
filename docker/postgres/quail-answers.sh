#!/bin/sh
# The answer store the Quail workers share: a role and a database of its own on Airflow's
# PostgreSQL, made when the database volume is first initialised (docker-entrypoint-initdb.d). The
# role reaches its own database only, and no other role but the superuser reaches that one. What it
# holds is signed with QUAIL_ANSWER_STORE_KEY, which only the workers hold, so even the superuser
# (whose password every DAG's code can read) can delete answers but never plant one.
set -eu
psql -v ON_ERROR_STOP=1 --username "$POSTGRES_USER" --dbname "$POSTGRES_DB" \
    -v password="$QUAIL_ANSWERS_PASSWORD" <<'SQL'
CREATE ROLE quail LOGIN PASSWORD :'password';
CREATE DATABASE quail_answers OWNER quail;
REVOKE ALL ON DATABASE quail_answers FROM PUBLIC;
REVOKE CONNECT, TEMPORARY ON DATABASE airflow FROM PUBLIC;
SQL
