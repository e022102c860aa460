import logging

import pytest
from django.test import override_settings
from django.utils.log import AdminEmailHandler, RequireDebugFalse, RequireDebugTrue

from jobs.compat import writes

ADMINS = [("Ops", "ops@example.com")]


@pytest.fixture
def loggers():
    """A parent and child logger of their own, shaped like Django's default logging: the
    parent holds the console handler (DEBUG only) and the mail to ADMINS (DEBUG off).

    The handlers are set when the test asks for them: pytest adds its capturing handler to
    every logger that does not propagate when the test begins."""
    parent = logging.getLogger("jobsite_compat_test")
    child = logging.getLogger("jobsite_compat_test.tasks")

    def shaped():
        console = logging.StreamHandler()
        console.addFilter(RequireDebugTrue())
        mail = AdminEmailHandler()
        mail.addFilter(RequireDebugFalse())
        mail.setLevel(logging.ERROR)
        parent.handlers = [console, mail]
        parent.propagate = False
        parent.setLevel(logging.INFO)
        child.setLevel(logging.WARNING)
        return parent, child

    yield shaped
    for logger in (parent, child):
        logger.handlers = []
        logger.filters = []
        logger.propagate = True
        logger.disabled = False
        logger.setLevel(logging.NOTSET)


@override_settings(DEBUG=False, ADMINS=[])
def test_an_error_that_django_s_default_handlers_would_drop_is_not_written(loggers):
    _, child = loggers()
    assert not writes(child, logging.ERROR)


@override_settings(DEBUG=True, ADMINS=[])
def test_an_error_is_written_to_the_console_with_debug_on(loggers):
    _, child = loggers()
    assert writes(child, logging.ERROR)


@override_settings(DEBUG=False, ADMINS=ADMINS)
def test_an_error_is_written_when_admins_would_be_mailed(loggers):
    _, child = loggers()
    assert writes(child, logging.ERROR)


@override_settings(DEBUG=False, ADMINS=ADMINS)
def test_a_record_below_a_handler_s_level_is_not_written(loggers):
    _, child = loggers()
    assert not writes(child, logging.WARNING)  # the mail takes ERROR and up


@override_settings(DEBUG=True)
def test_a_record_below_the_logger_s_level_or_from_a_disabled_logger_is_not_written(loggers):
    _, child = loggers()
    assert not writes(child, logging.INFO)
    child.disabled = True
    assert not writes(child, logging.ERROR)


@override_settings(DEBUG=False, ADMINS=[])
def test_a_filter_of_the_project_s_counts_as_writing(loggers):
    parent, child = loggers()
    parent.handlers[0].filters.insert(0, lambda record: True)
    assert writes(child, logging.ERROR)
    parent.handlers[0].filters.pop(0)
    child.addFilter(lambda record: False)
    assert writes(child, logging.ERROR)


@override_settings(DEBUG=False, ADMINS=[])
def test_a_handler_of_the_project_s_writes(loggers):
    parent, child = loggers()
    child.addHandler(logging.NullHandler())
    assert writes(child, logging.ERROR)


@override_settings(DEBUG=False, ADMINS=[])
def test_a_subclass_of_the_mail_handler_counts_as_writing(loggers):
    class Paging(AdminEmailHandler):
        pass

    parent, child = loggers()
    parent.handlers[1] = Paging()
    assert writes(child, logging.ERROR)


def test_with_no_handler_anywhere_python_s_last_resort_writes_warnings_and_up(loggers):
    parent, child = loggers()
    parent.handlers[:] = []
    assert writes(child, logging.ERROR)
    assert writes(child, logging.WARNING)
    parent.setLevel(logging.DEBUG)
    child.setLevel(logging.DEBUG)
    assert not writes(child, logging.INFO)


@override_settings(DEBUG=False, ADMINS=[])
def test_every_record_counts_as_written_where_a_library_replaced_the_handlers_walk(
    loggers, monkeypatch
):
    """sentry_sdk's logging integration wraps Logger.callHandlers and sends records from there."""
    _, child = loggers()
    walk = logging.Logger.callHandlers

    def sentry_patched_callhandlers(self, record):
        return walk(self, record)

    monkeypatch.setattr(logging.Logger, "callHandlers", sentry_patched_callhandlers)
    assert writes(child, logging.ERROR)


@override_settings(DEBUG=False, ADMINS=[])
def test_every_record_counts_as_written_where_the_logger_itself_has_its_walk_replaced(loggers):
    _, child = loggers()
    walk = child.callHandlers
    child.callHandlers = lambda record: walk(record)
    try:
        assert writes(child, logging.ERROR)
    finally:
        del child.callHandlers
    assert not writes(child, logging.ERROR)


@override_settings(DEBUG=False, ADMINS=[])
def test_every_record_counts_as_written_with_a_record_factory_of_the_project_s(loggers):
    _, child = loggers()
    made = logging.getLogRecordFactory()
    logging.setLogRecordFactory(lambda *args, **kwargs: made(*args, **kwargs))
    try:
        assert writes(child, logging.ERROR)
    finally:
        logging.setLogRecordFactory(made)


@override_settings(DEBUG=False, ADMINS=[])
def test_a_subclass_of_django_s_debug_filter_counts_as_a_filter_of_the_project_s(loggers):
    class Sampled(RequireDebugTrue):
        def filter(self, record):
            return True

    parent, child = loggers()
    parent.handlers[0].filters = [Sampled()]
    assert writes(child, logging.ERROR)
