"""The hooks the engine calls, for metrics and tracing."""
