"""The demo project's login and logout pages, their `next` checked by the console's one rule."""

from django.contrib.auth import views as auth_views

from dashboard.redirects import safe_next


class SafeNext:
    """A RedirectURLMixin whose `next` goes through dashboard.redirects.safe_next."""

    def get_redirect_url(self, request=None):
        request = request or self.request
        field = self.redirect_field_name
        target = request.POST.get(field, request.GET.get(field))
        return safe_next(request, target) or ""


class LoginView(SafeNext, auth_views.LoginView):
    redirect_authenticated_user = True


class LogoutView(SafeNext, auth_views.LogoutView):
    pass
