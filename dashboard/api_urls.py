from django.urls import path

app_name = "api"
urlpatterns: list = [
    # The JSON API (/api/v1/...) lives here.
]
