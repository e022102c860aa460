"""Users and tokens for the API, token, metrics and prune tests (this module holds no tests).

Job rows come from tests.factories.
"""

from django.contrib.auth.models import Permission, User

from dashboard.models import ApiToken


def make_user(username, *, staff=True, operate=False) -> User:
    user = User.objects.create_user(username, is_staff=staff)
    if operate:
        user.user_permissions.add(Permission.objects.get(codename="operate_job"))
    return user


def token_for(user) -> str:
    return ApiToken.issue(user, name="tests")[1]


def bearer(key) -> dict:
    return {"Authorization": f"Bearer {key}"}
