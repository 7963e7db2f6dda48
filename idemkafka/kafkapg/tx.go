package kafkapg

import (
	"context"
	"errors"

	"github.com/jackc/pgx/v5"
)

// handlerTx is the transaction a handler gets: the consumer's, which the
// handler must not end (the outcome and the offset commit with it).
// Begin, a savepoint, is allowed.
type handlerTx struct{ pgx.Tx }

var errHandlerEndsTx = errors.New("kafkapg: the handler must not commit or roll back the consumer's transaction")

func (handlerTx) Commit(context.Context) error   { return errHandlerEndsTx }
func (handlerTx) Rollback(context.Context) error { return errHandlerEndsTx }
