"""Settings (pydantic-settings, `BATON_*`) and the Celery configuration derived from them."""

from config.settings import Settings, SettingsError, load_settings

__all__ = ["Settings", "SettingsError", "load_settings"]
