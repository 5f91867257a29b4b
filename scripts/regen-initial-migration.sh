#!/usr/bin/env bash
# Pre-release only: regenerate the single initial migration from core/models.py.
set -euo pipefail
cd "$(dirname "$0")/.."
db="keel_regen_$$"
psql -q -h 127.0.0.1 -U postgres -c "CREATE DATABASE $db" >/dev/null
trap 'psql -q -h 127.0.0.1 -U postgres -c "DROP DATABASE IF EXISTS $db" >/dev/null' EXIT
rm -f migrations/versions/*-0001_initial_schema.py
KEEL_DATABASE_URL="postgresql+psycopg://postgres@127.0.0.1:5432/$db" .venv/bin/alembic revision --autogenerate \
  --rev-id 0001 -m "initial schema" >/dev/null
f=$(ls migrations/versions/*-0001_initial_schema.py)
sed -i '/### commands auto generated/d; /### end Alembic commands/d' "$f"
echo "regenerated $f"
