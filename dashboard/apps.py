from contextlib import suppress
from importlib.util import find_spec

import django
from django.apps import AppConfig
from django.core import checks

PARTIALS_LOADER = "template_partials.loader.Loader"
PARTIALS_TAGS = "template_partials.templatetags.partials"
# What Django 6 has built in and Django 5.2 takes from packages: module -> package.
BACKPORTS = {"django_tasks": "django-tasks", "template_partials": "django-template-partials"}


class DashboardConfig(AppConfig):
    name = "dashboard"
    verbose_name = "Operations console"
    default_auto_field = "django.db.models.BigAutoField"

    def ready(self):
        checks.register(check_backports, checks.Tags.compatibility)
        if django.VERSION < (6, 0) and not missing_backports():
            _enable_template_partials()


def missing_backports(version=django.VERSION, find=find_spec) -> list[str]:
    """The backport packages this Django needs and does not have."""
    if version >= (6, 0):
        return []
    return [package for module, package in BACKPORTS.items() if find(module) is None]


def check_backports(app_configs=None, **kwargs):
    missing = missing_backports()
    if not missing:
        return []
    return [
        checks.Error(
            f"jobsite on Django {django.get_version()} needs {' and '.join(missing)} "
            "(Django 6 has them built in).",
            hint='pip install "jobsite[django52]" "Django>=5.2,<6.0" (the extra pins the '
            "backports, not Django)",
            id="dashboard.E001",
        )
    ]


def _enable_template_partials():
    """Make `{% partialdef %}` and "page.html#fragment" names work on Django 5.2.

    Django 6.0 has template partials built in; on 5.2 they come from django-template-partials.
    This does what that package's app config does when listed in INSTALLED_APPS (wrap the
    template loaders, keeping the project's own) and makes its tags built in, so the host
    project lists nothing more.
    """
    import django.template
    from django.conf import settings

    for config in settings.TEMPLATES:
        if config["BACKEND"] != "django.template.backends.django.DjangoTemplates":
            continue
        options = config.setdefault("OPTIONS", {})
        builtins = options.setdefault("builtins", [])
        if PARTIALS_TAGS not in builtins:
            builtins.append(PARTIALS_TAGS)
        loaders = options.get("loaders")
        if loaders and isinstance(loaders[0], tuple) and loaders[0][0] == PARTIALS_LOADER:
            continue
        if not loaders:
            loaders = ["django.template.loaders.filesystem.Loader"]
            if config.pop("APP_DIRS", False):
                loaders.append("django.template.loaders.app_directories.Loader")
            loaders = [("django.template.loaders.cached.Loader", loaders)]
        options["loaders"] = [(PARTIALS_LOADER, loaders)]
    # Engines built before this point (none, normally) would keep the old loaders.
    with suppress(AttributeError):
        del django.template.engines.templates
        django.template.engines._engines = {}
