"""The NATS side of evobus: connection, subjects, codecs, streams, publishing and consuming."""
