// Command idem is the command-line tool of github.com/idemgo/idem.
//
//	idem <command> [flags]
//
// Commands:
//
//	demo    a payment stream with duplicates and crashes, handled by a naive
//	        consumer and by an idem-guarded one, side by side
//
// Run "idem help" for the list and "idem <command> -h" for a command's
// flags. The exit status is 0 on success, 1 when the command failed and 2
// on a usage error.
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
//	go run ./cmd/idem demo --messages 5000 --dup-rate 0.3 --crash-rate 0.05
package main
