#!/bin/sh
# The answer store the Quail workers share: a role and a database of its own on Airflow's
# PostgreSQL, made when the database volume is first initialised (docker-entrypoint-initdb.d).
set -eu
psql -v ON_ERROR_STOP=1 --username "$POSTGRES_USER" --dbname "$POSTGRES_DB" \
    -v password="$QUAIL_ANSWERS_PASSWORD" <<'SQL'
CREATE ROLE quail LOGIN PASSWORD :'password';
CREATE DATABASE quail_answers OWNER quail;
SQL
