package idemsqs

import (
	"github.com/idemgo/idem"
	"github.com/idemgo/idem/internal/chassis"
)

// written settles the messages whose handlers' values the writer stored
// (errs: what storing each answered): a delete queued at once, any other
// verdict (the lease lost meanwhile, the store down) carried out aside,
// as it may wait.
func (r *runner) written(jobs []*job, errs []error) {
	for k, j := range jobs {
		v := r.c.o.Decide(idem.Result{}, errs[k], r.c.tries.Count(j.id))
		if v.Settle == chassis.Ack {
			r.finish(j, v)
			continue
		}
		r.settling.Go(func() { r.finish(j, v) })
	}
}
