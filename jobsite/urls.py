from django.contrib import admin
from django.contrib.auth import views as auth_views
from django.urls import include, path

urlpatterns = [
    path("login/", auth_views.LoginView.as_view(redirect_authenticated_user=True), name="login"),
    path("logout/", auth_views.LogoutView.as_view(), name="logout"),
    path("admin/", admin.site.urls),
    path("", include("dashboard.urls")),
]

# Errors answer inside the console layout.
handler400 = "dashboard.errors.bad_request"
handler403 = "dashboard.errors.permission_denied"
handler404 = "dashboard.errors.page_not_found"
handler500 = "dashboard.errors.server_error"
