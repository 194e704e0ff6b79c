"""Queue consumers that run each message as an oncelog run, acknowledged only once the run
has completed, so a message redelivered after its consumer died resumes the same run
instead of starting the task again.

- ``oncelog.queues.rabbitmq.RabbitMQConsumer`` (``pip install '.[rabbitmq]'``)
- ``oncelog.queues.jetstream.JetStreamConsumer`` (``pip install '.[nats]'``)

Each module imports its broker's client when it is imported, and raises
``ConfigurationError`` naming the extra when the client is missing. ``docs/queues.md``
says what is acknowledged when.
"""
