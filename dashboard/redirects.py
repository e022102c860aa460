"""Where a `next` field may send the browser: the one check every redirect taken from a request
goes through (the console's action forms, the login and logout pages)."""

from urllib.parse import urlsplit

from django.utils.http import url_has_allowed_host_and_scheme


def safe_next(request, target) -> str | None:
    """`target` when it is a path on this site other than the page asked for, else None.

    Only a path (`/jobs/?state=pending`) is taken: not a URL name (`abc`, which redirect()
    would try to reverse), not a fragment or a query alone (`#x` is this very page, a loop),
    not another host, and never the page itself (a signed-in user sent back to the login page
    would go round forever).
    """
    if not isinstance(target, str) or not target.startswith("/") or not target.isprintable():
        return None
    if not url_has_allowed_host_and_scheme(
        target, allowed_hosts={request.get_host()}, require_https=request.is_secure()
    ):
        return None
    if urlsplit(target).path == request.path:
        return None
    return target
