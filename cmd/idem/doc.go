// Command idem is the command-line tool of github.com/idemgo/idem: the
// demo, and an operator's verbs over a store.
//
//	idem <command> [flags]
//
// Commands:
//
//	demo        a payment stream with duplicates and crashes, handled by a
//	            naive consumer and by an idem-guarded one, side by side
//	inspect     show the record of one idempotency key
//	purge       delete the record of one key, or those of a namespace with
//	            a status (--status failed [--older-than 24h])
//	stats       count a store's records by namespace and status
//	outbox      stats: an outbox table's backlog
//	migrate     create or upgrade pgstore's records table (and outbox and
//	            kafkapg offsets tables), or create a DynamoDB table
//	reap        delete pgstore's expired records, for cron
//	version     the versions of the tool, Go and idem's modules
//
// Every command that uses a store takes its URL in --store, as
// storeurl.Open reads it (github.com/idemgo/idem/storeurl): mem:// (the
// default of the demo, in-process), redis://host:port/db (?prefix= for the
// key prefix), postgres://user@host:port/db (?table= for a
// [schema.]table), dynamodb://host:port/table or sqlite://file.db. No
// error or line the tool prints shows a password or secret parameter of
// a URL.
//
// Run "idem help" for the list and "idem <command> -h" for a command's
// flags, which the help writes --name, as here (Go's flag package takes
// -name too). The exit status is 0 on success, 1 when the command failed and 2
// on a usage error. The benchmarks are a tool of their own, idem-bench
// (github.com/idemgo/idem/cmd/idem-bench), so that this one links no load
// generator.
//
// # idem demo
//
// An in-process at-least-once broker delivers OrderCreated events to
// several concurrent consumers, which charge the customer in an in-memory
// payment ledger. The broker delivers extra copies of some messages
// (--dup-rate) and redelivers every message that is nacked or not acked
// within its visibility timeout. Consumers crash (--crash-rate) before the
// charge or after it, before the ack; a crashed consumer's process is gone
// with its unsent store writes and a fresh one takes its place.
//
// The same stream, duplicates and crash points (one --seed) go to a naive
// consumer, which charges for every delivery, and to one that charges inside
// [idem.Guard.Do] keyed by the order ID. The table shows what each charged.
// The command fails (status 1) if the idem consumer charged an order twice
// or left one uncharged.
//
// The idem consumer crashes inside Do before the charge, holding the key
// (another consumer takes it over once the lease ends), or after Do stored
// the outcome (the redelivery finds it): never between the charge and the
// stored outcome. A crash there, in the window a lease-based store leaves,
// charges again after the lease, unless the charge is fenced with the
// claim's token or written in the store's own transaction. The demo does
// not show that window; the fault suite does (FAULTS.md in the
// repository).
//
//	go run ./cmd/idem demo --messages 5000 --dup-rate 0.3 --crash-rate 0.05
//
// The broker is an in-process queue. The same demo through Kafka consumer
// groups, NATS JetStream or RabbitMQ is the examples module's brokerdemo,
// beside the brokers' clients, which this tool does not link:
//
//	cd examples && go run ./brokerdemo --broker kafka --brokers 127.0.0.1:9092
package main
