"""Install the built wheel into a new project, as a user would, and use it end to end.

    python .ci/install_check.py --wheel dist/jobsite-*.whl --django 6.1|5.2

In a fresh virtualenv: pip install the wheel (with the `django52` extra on 5.2), make a project
with `django-admin startproject`, add the README's lines (apps, TASKS, the /ops/ include) and
nothing else but the project's own login URL, migrate, enqueue a job with `manage.py enqueue`,
run it with a real `manage.py worker --burst`, then serve the project and fetch the console
under /ops/ (logged in through the project's admin login), a fragment, a static file, the API
with a token and the metrics. Any failure raises; stdlib only, so any Python >= 3.12 runs it.
"""

import argparse
import http.cookiejar
import json
import os
import re
import shutil
import socket
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.parse
import urllib.request
from pathlib import Path

DJANGO = {"6.1": "Django==6.1.3", "5.2": "Django==5.2.19"}
TASK_IMPORT = {"6.1": "from django.tasks import task", "5.2": "from django_tasks import task"}

SETTINGS = """

# --- jobsite (README: "Add jobsite to an existing project") ---
INSTALLED_APPS += ["django_htmx", "jobs", "dashboard"]
TASKS = {
    "default": {
        "BACKEND": "jobs.backend.JobsBackend",
        "QUEUES": [],
        "OPTIONS": {"MAX_ATTEMPTS": 3},
    }
}
# The project's own login page (here the admin's); the console sends anonymous users to it.
LOGIN_URL = "/admin/login/"
"""

TASKS_MODULE = """{task_import}


@task()
def add(a, b):
    return a + b
"""


def run(*command, cwd=None, env=None, capture=False):
    print("$", " ".join(str(part) for part in command), flush=True)
    result = subprocess.run(
        [str(part) for part in command],
        cwd=cwd,
        env=env,
        check=False,
        text=True,
        capture_output=capture,
    )
    if result.returncode != 0:
        if capture:
            print(result.stdout, result.stderr, sep="\n", file=sys.stderr)
        raise SystemExit(f"FAILED ({result.returncode}): {' '.join(map(str, command))}")
    return result.stdout if capture else None


def check(condition, what):
    if not condition:
        raise SystemExit(f"FAILED: {what}")
    print(f"ok: {what}", flush=True)


def free_port():
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


class Browser:
    """Just enough of a browser: cookies, forms with CSRF, no redirects followed."""

    def __init__(self, base):
        self.base = base
        self.cookies = http.cookiejar.CookieJar()

        class NoRedirect(urllib.request.HTTPRedirectHandler):
            def redirect_request(self, *args, **kwargs):
                return None

        self.opener = urllib.request.build_opener(
            urllib.request.HTTPCookieProcessor(self.cookies), NoRedirect
        )

    def request(self, path, data=None, headers=None):
        body = urllib.parse.urlencode(data).encode() if data is not None else None
        request = urllib.request.Request(self.base + path, data=body, headers=headers or {})
        try:
            with self.opener.open(request, timeout=30) as response:
                return response.status, dict(response.headers), response.read().decode()
        except urllib.error.HTTPError as error:
            return error.code, dict(error.headers), error.read().decode()

    def cookie(self, name):
        return next((c.value for c in self.cookies if c.name == name), None)


def wait_until_serving(browser, server):
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        if server.poll() is not None:
            raise SystemExit(f"FAILED: runserver exited with {server.returncode}")
        try:
            browser.request("/admin/login/")
            return
        except OSError:
            time.sleep(0.2)  # polling for the port to open
    raise SystemExit("FAILED: the project's server did not answer within 60 s")


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--wheel", required=True, type=Path)
    parser.add_argument("--django", choices=sorted(DJANGO), default="6.1")
    parser.add_argument("--keep", action="store_true", help="keep the temporary directory")
    options = parser.parse_args()
    wheel = options.wheel.resolve()
    work = Path(tempfile.mkdtemp(prefix=f"jobsite-install-{options.django}-"))
    server = None
    # Away from the checkout, so nothing is imported from it instead of the installed wheel.
    os.chdir(work)
    try:
        venv = work / "venv"
        python = venv / "bin" / "python"
        run(sys.executable, "-m", "venv", venv)
        requirement = f"{wheel}[django52]" if options.django == "5.2" else str(wheel)
        run(
            python,
            "-m",
            "pip",
            "install",
            "-q",
            "--disable-pip-version-check",
            requirement,
            DJANGO[options.django],
        )
        installed = run(python, "-m", "pip", "list", "--format=freeze", capture=True)
        check("jobsite==" in installed, "the wheel installed")
        run(python, "-c", "import jobs, dashboard")
        site = Path(
            run(
                python,
                "-c",
                "import jobs, os; print(os.path.dirname(os.path.dirname(jobs.__file__)))",
                capture=True,
            ).strip()
        )
        for package in ["jobsite", "tests", "bench"]:
            check(not (site / package).exists(), f"the wheel brings no {package}/ package")

        project = work / "hostsite"
        project.mkdir()
        run(venv / "bin" / "django-admin", "startproject", "hostsite", project)
        settings_file = project / "hostsite" / "settings.py"
        settings_file.write_text(settings_file.read_text() + SETTINGS)
        urls_file = project / "hostsite" / "urls.py"
        urls = urls_file.read_text()
        urls = urls.replace("from django.urls import path", "from django.urls import include, path")
        urls = urls.replace(
            "path('admin/', admin.site.urls),",
            'path(\'admin/\', admin.site.urls),\n    path("ops/", include("dashboard.urls")),',
        ).replace(
            'path("admin/", admin.site.urls),',
            'path("admin/", admin.site.urls),\n    path("ops/", include("dashboard.urls")),',
        )
        check('include("dashboard.urls")' in urls, "urls.py mounts the console under /ops/")
        urls_file.write_text(urls)
        (project / "hostsite" / "tasks.py").write_text(
            TASKS_MODULE.format(task_import=TASK_IMPORT[options.django])
        )

        env = {**os.environ, "PYTHONUNBUFFERED": "1"}
        env.pop("DJANGO_SETTINGS_MODULE", None)
        env.pop("DATABASE_URL", None)
        manage = [python, project / "manage.py"]
        version = run(*manage, "version", cwd=project, env=env, capture=True).strip()
        check(version.startswith(options.django), f"the project runs Django {version}")
        run(*manage, "check", cwd=project, env=env)
        run(*manage, "migrate", "--no-input", "-v", "0", cwd=project, env=env)
        run(
            *manage,
            "makemigrations",
            "--check",
            "--dry-run",
            "jobs",
            "dashboard",
            cwd=project,
            env=env,
        )

        out = run(
            *manage, "enqueue", "hostsite.tasks.add", "2", "3", cwd=project, env=env, capture=True
        )
        job_id = out.splitlines()[-1].strip()
        check(re.fullmatch(r"[0-9a-f-]{36}", job_id) is not None, f"enqueue printed job {job_id}")
        run(*manage, "worker", "--burst", cwd=project, env=env)

        create_user = (
            "from django.contrib.auth.models import Permission, User; "
            "u = User.objects.create_superuser('ops', 'ops@example.com', 'correct-horse-42'); "
        )
        run(*manage, "shell", "-c", create_user, cwd=project, env=env)
        token = (
            run(*manage, "create_api_token", "ops", cwd=project, env=env, capture=True)
            .splitlines()[-1]
            .strip()
        )

        port = free_port()
        server = subprocess.Popen(
            [*map(str, manage), "runserver", f"127.0.0.1:{port}", "--noreload"],
            cwd=project,
            env=env,
        )
        browser = Browser(f"http://127.0.0.1:{port}")
        wait_until_serving(browser, server)

        status, headers, _ = browser.request("/ops/")
        check(
            status == 302 and headers["Location"].startswith("/admin/login/?next=/ops/"),
            f"anonymous /ops/ goes to the project's login ({status} {headers.get('Location')})",
        )
        status, _, page = browser.request("/admin/login/?next=/ops/")
        csrf = re.search(r'name="csrfmiddlewaretoken" value="([^"]+)"', page).group(1)
        status, headers, _ = browser.request(
            "/admin/login/?next=/ops/",
            {
                "csrfmiddlewaretoken": csrf,
                "username": "ops",
                "password": "correct-horse-42",
                "next": "/ops/",
            },
            headers={"Referer": f"http://127.0.0.1:{port}/admin/login/"},
        )
        check(status == 302 and headers["Location"] == "/ops/", "logged in through the admin")
        status, _, page = browser.request("/ops/")
        check(status == 200 and 'href="/ops/jobs/"' in page, "the console's overview at /ops/")
        status, _, page = browser.request(f"/ops/jobs/{job_id}/")
        check(status == 200 and "hostsite.tasks.add" in page, "the job's page under /ops/")
        status, _, fragment = browser.request("/ops/jobs/", headers={"HX-Request": "true"})
        check(
            status == 200 and "<html" not in fragment and job_id in fragment,
            "an HTMX request gets the fragment (no middleware in the project)",
        )
        status, _, script = browser.request("/static/dashboard/htmx.min.js")
        check(status == 200 and "htmx" in script[:300], "the console's static files are served")

        auth = {"Authorization": f"Bearer {token}"}
        status, _, body = browser.request(f"/ops/api/v1/jobs/{job_id}", headers=auth)
        job = json.loads(body)
        check(
            status == 200 and job["state"] == "succeeded" and job["return_value"] == 5,
            f"the worker ran the job: {job.get('state')} -> {job.get('return_value')}",
        )
        status, _, body = browser.request("/ops/api/v1/jobs", headers=auth)
        check(
            status == 200 and json.loads(body)["results"][0]["id"] == job_id,
            "GET /ops/api/v1/jobs with a token",
        )
        status, _, body = browser.request("/ops/metrics", headers=auth)
        check(status == 200 and "jobs_succeeded" in body, "GET /ops/metrics with a token")
        print(f"install check passed on Django {version}", flush=True)
    finally:
        if server is not None and server.poll() is None:
            server.terminate()
            server.wait(timeout=30)
        if options.keep:
            print(f"kept {work}")
        else:
            shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
