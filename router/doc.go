// Package router wires the Watermill routers of the pipeline, with their publishers,
// subscribers and middleware: the relay (SQL outbox to Kafka in batches, reading the
// outbox through the Outbox interface that storage implements), the projector (Kafka to
// PostgreSQL and Redis, with the poison queue and retries) and the notifier (Kafka to each
// API process's realtime hub); and the Kafka topics and embedded broker they run on. It
// holds no business rules.
package router
