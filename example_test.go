package idem_test

import (
	"context"
	"errors"
	"fmt"
	"log"

	"github.com/idemgo/idem"
	"github.com/idemgo/idem/memstore"
)

// The README's Quick start: a payment consumer charges once per order,
// however often the broker delivers the message. README_test.go keeps the
// README's code identical to this function's body.
func Example() {
	ctx := context.Background()
	store, err := memstore.New(memstore.Config{}) // or redisstore.New, pgstore.New: modules of their own
	if err != nil {
		log.Fatal(err)
	}
	defer store.Close()

	g, err := idem.New(store, idem.Config{Namespace: "payments"})
	if err != nil {
		log.Fatal(err)
	}
	defer g.Close()

	msg := Message{OrderID: "order-7", Body: []byte(`{"amount_cents":1200}`)}
	for range 3 { // the broker delivers the same message three times
		res, err := g.Do(ctx, msg.OrderID, msg.Body, func(ctx context.Context) ([]byte, error) {
			receipt, err := charge(ctx, msg)
			if errors.Is(err, errDeclined) {
				return nil, idem.Permanent(err) // stored: duplicates get the same answer
			}
			return receipt, err // any other error releases the key: a retry runs again
		})
		if err != nil {
			log.Fatal(err)
		}
		fmt.Printf("%s replayed=%v\n", res.Value, res.Replayed)
	}
	fmt.Println("charges:", charges)
	// Output:
	// receipt-order-7 replayed=false
	// receipt-order-7 replayed=true
	// receipt-order-7 replayed=true
	// charges: 1
}

// Message is the Quick start's delivery from a broker.
type Message struct {
	OrderID string
	Body    []byte
}

var (
	charges     int
	errDeclined = errors.New("card declined")
)

// charge stands for the side effect: a call to the payment provider.
func charge(_ context.Context, msg Message) ([]byte, error) {
	charges++
	return []byte("receipt-" + msg.OrderID), nil
}

// A permanent error is stored like a value: every duplicate gets it back
// and the operation does not run again.
func ExamplePermanent() {
	store, _ := memstore.New(memstore.Config{})
	defer store.Close()
	g, _ := idem.New(store, idem.Config{})
	defer g.Close()

	declined := func(ctx context.Context) ([]byte, error) {
		return nil, idem.Permanent(errors.New("card declined"))
	}
	for range 2 {
		_, err := g.Do(context.Background(), "order-8", nil, declined)
		var pe *idem.PermanentError
		if errors.As(err, &pe) {
			fmt.Printf("%v (replayed=%v)\n", err, pe.Replayed)
		}
	}
	// Output:
	// card declined (replayed=false)
	// card declined (replayed=true)
}

// The same key with another payload is refused: a client bug, not a retry.
func ExampleGuard_Do_keyReused() {
	store, _ := memstore.New(memstore.Config{})
	defer store.Close()
	g, _ := idem.New(store, idem.Config{})
	defer g.Close()

	ok := func(ctx context.Context) ([]byte, error) { return []byte("ok"), nil }
	g.Do(context.Background(), "order-9", []byte("amount=10"), ok)
	_, err := g.Do(context.Background(), "order-9", []byte("amount=99"), ok)
	fmt.Println(errors.Is(err, idem.ErrKeyReused))
	// Output: true
}

// fn's context carries the lease token, to fence business writes: a write
// that records the token can be refused when a newer holder wrote first.
func ExampleTokenFrom() {
	store, _ := memstore.New(memstore.Config{})
	defer store.Close()
	g, _ := idem.New(store, idem.Config{})
	defer g.Close()

	g.Do(context.Background(), "order-10", nil, func(ctx context.Context) ([]byte, error) {
		t, ok := idem.TokenFrom(ctx)
		fmt.Println(ok, t != 0)
		// UPDATE accounts SET balance = balance - 12, fence = $token
		//   WHERE id = $account AND fence < $token
		return nil, nil
	})
	// Output: true true
}
