package ahead

import "sync"

// Writer stores the values of the held ops that ran, behind a consumer's
// workers: what the workers leave to it while a [Claimer.Complete] is
// under way goes in the next one, whole, in one store round trip. Each
// item is settled once its op is decided: settle gets a Complete's items
// and errors, in the order they were added.
type Writer[T any] struct {
	c      Claimer
	settle func(items []T, errs []error)

	mu    sync.Mutex
	items []T    // guarded by mu
	held  []Held // guarded by mu

	wake chan struct{}
	quit chan struct{}
	done chan struct{}
}

// NewWriter starts a Writer for c's held ops that calls settle with each
// batch it stored. Close it.
func NewWriter[T any](c Claimer, settle func(items []T, errs []error)) *Writer[T] {
	w := &Writer[T]{c: c, settle: settle, wake: make(chan struct{}, 1), quit: make(chan struct{}), done: make(chan struct{})}
	go w.loop()
	return w
}

// Add leaves item, whose op's Held.Run returned h's value, to the writer.
// It must not be called after Close.
func (w *Writer[T]) Add(item T, h Held) {
	w.mu.Lock()
	w.items = append(w.items, item)
	w.held = append(w.held, h)
	w.mu.Unlock()
	select {
	case w.wake <- struct{}{}:
	default:
	}
}

// Close stores what the writer was left, and returns once it is settled.
func (w *Writer[T]) Close() {
	close(w.quit)
	<-w.done
}

func (w *Writer[T]) loop() {
	defer close(w.done)
	for quit := false; ; {
		select {
		case <-w.wake:
		case <-w.quit:
			quit = true
		}
		w.mu.Lock()
		items, held := w.items, w.held
		w.items, w.held = nil, nil
		w.mu.Unlock()
		if len(items) > 0 {
			errs := make([]error, len(items))
			w.c.Complete(held, errs)
			w.settle(items, errs)
		}
		if quit {
			return
		}
	}
}
