"""One execution of a unit (a chat turn or a coding run): load, decide, act, settle. No Celery here."""
