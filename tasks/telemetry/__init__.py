"""OpenTelemetry for Baton: SDK set-up from the `OTEL_*` variables, the spans of executions, attempts and tools,
the Celery message's `traceparent`, the metrics. Nothing of OpenTelemetry is imported unless the variables ask."""
