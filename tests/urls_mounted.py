"""A host project's URLs: its own sign-in page, no logout URL, the console under /ops/."""

from django.contrib.auth import views as auth_views
from django.urls import include, path

urlpatterns = [
    path("accounts/sign-in/", auth_views.LoginView.as_view(), name="sign_in"),
    path("ops/", include("dashboard.urls")),
]
