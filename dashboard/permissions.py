"""Who may see and who may act: the one set of rules for the console and the API."""

OPERATE_PERMISSION = "jobs.operate_job"


def can_view(user) -> bool:
    return bool(user and user.is_authenticated and user.is_active and user.is_staff)


def can_operate(user) -> bool:
    return can_view(user) and user.has_perm(OPERATE_PERMISSION)
