"""Databases the suite's own cannot stand in for: empty, not there yet, or migrated only part of
the way. On the suite's PostgreSQL server, or as SQLite files, as the suite runs."""

import os
import subprocess
import sys
from pathlib import Path

from django.db import connection

ROOT = Path(__file__).resolve().parent.parent


class ScratchDatabases:
    def __init__(self, tmp_path: Path):
        self.tmp_path = tmp_path
        self.postgres = connection.vendor == "postgresql"
        self.created: list[str] = []

    def url(self, name: str) -> str:
        """The DATABASE_URL of scratch database `name` (it need not exist)."""
        if not self.postgres:
            return f"sqlite:///{self.tmp_path / name / 'db.sqlite3'}"
        s = connection.settings_dict
        user = s.get("USER") or "postgres"
        host = s.get("HOST") or "127.0.0.1"
        port = s.get("PORT") or 5432
        return f"postgres://{user}@{host}:{port}/{self._pg_name(name)}"

    def create(self, name: str, *, migrate_to: tuple[str, ...] | None = None, then=None) -> str:
        """Database `name`, empty, or migrated (`("jobs", "0024")`, or `()` for everything),
        and given to `then(url)` to fill; made elsewhere and moved into place at once, so
        nobody sees it half made."""
        building = f"{name}-building"
        if self.postgres:
            self._pg(f'CREATE DATABASE "{self._pg_name(building)}"')
            self.created.append(building)
        else:
            (self.tmp_path / building).mkdir(parents=True)
        if migrate_to is not None:
            env = {**os.environ, "DATABASE_URL": self.url(building)}
            env["DJANGO_SETTINGS_MODULE"] = "jobsite.settings"
            subprocess.run(
                [sys.executable, "manage.py", "migrate", *migrate_to, "-v0"],
                cwd=ROOT,
                env=env,
                check=True,
                timeout=300,
            )
        if then is not None:
            then(self.url(building))
        if self.postgres:
            self._pg(
                f'ALTER DATABASE "{self._pg_name(building)}" RENAME TO "{self._pg_name(name)}"'
            )
            self.created.remove(building)
            self.created.append(name)
        else:
            (self.tmp_path / building).rename(self.tmp_path / name)
        return self.url(name)

    def drop_all(self):
        for name in self.created:
            self._pg(f'DROP DATABASE IF EXISTS "{self._pg_name(name)}" WITH (FORCE)')
        self.created.clear()

    def _pg_name(self, name: str) -> str:
        return f"{connection.settings_dict['NAME']}_{name}".replace("-", "_")

    def _pg(self, sql: str):
        import psycopg

        from jobs.db.pooler import raw_params

        params = {**raw_params(connection), "dbname": "postgres"}
        with psycopg.connect(**params, autocommit=True) as admin:
            admin.execute(sql)
