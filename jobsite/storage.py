from django.contrib.staticfiles.storage import StaticFilesStorage
from whitenoise.storage import CompressedManifestStaticFilesStorage


class StaticStorage(CompressedManifestStaticFilesStorage):
    """Hashed, compressed names once collectstatic has run; plain names before it.

    A fresh checkout (or a test run) has no manifest: its pages still render, served from the
    app folders by whitenoise's finders, instead of failing on every {% static %}.
    """

    def url(self, name, force=False):
        try:
            return super().url(name, force)
        except ValueError:
            return StaticFilesStorage.url(self, name)
