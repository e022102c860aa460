"""The console's one-line results of an action ("3 jobs retried"), through Django's messages.

A project without the messages framework still gets every action done: the message is
dropped (the page shows the new state) instead of a server error after the action took place.
"""

from django.contrib import messages


def _add(level):
    def add(request, text, extra_tags=""):
        messages.add_message(request, level, text, extra_tags=extra_tags, fail_silently=True)

    return add


success = _add(messages.SUCCESS)
info = _add(messages.INFO)
warning = _add(messages.WARNING)
error = _add(messages.ERROR)
