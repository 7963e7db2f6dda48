package redisstore

import (
	"context"
	"fmt"

	"github.com/redis/go-redis/v9"
)

// How commands reach Redis: every script runs by EVALSHA, one command at a
// time (run) or several in one pipeline (pipeline, pipelineAndWait), and a
// NOSCRIPT reply is answered by sending the script itself with EVAL. Every
// exchange with the server runs under await, so that a call returns when
// its context ends, whatever the client's options.

// await runs send, which exchanges commands with the server, and returns
// what it returns; or, as soon as ctx ends, ctx's error. go-redis notices
// neither a cancelled context nor (unless ContextTimeoutEnabled is set) a
// deadline while it waits for a server that does not answer: so send runs
// on a goroutine of its own, and a send that ctx left behind goes on until
// the client's own timeouts (ReadTimeout, WriteTimeout, which New requires
// to be finite) or the server end it; what it returns then is dropped.
// send must not touch memory the caller uses once await has returned: it
// gets commands built beforehand, and returns its results.
func await[T any](ctx context.Context, send func() T) (T, error) {
	var zero T
	if ctx.Done() == nil { // never ends: nothing to return early for
		return send(), nil
	}
	if err := ctx.Err(); err != nil {
		return zero, err
	}
	done := make(chan T, 1)
	go func() { done <- send() }()
	select {
	case v := <-done:
		return v, nil
	case <-ctx.Done():
		select {
		case v := <-done: // it did finish: its answer is the truth
			return v, nil
		default:
			return zero, ctx.Err()
		}
	}
}

// delivery says whether go-redis may send a command again after a network
// error, when it cannot know whether the command ran.
type delivery uint8

const (
	// resendable: a second run does no harm. A claim resent finds its own
	// token and answers Acquired again; Extend and Get are idempotent.
	resendable delivery = iota
	// atMostOnce: a second run would answer ErrLeaseLost for the outcome
	// the first one stored (Complete, Fail, Release).
	atMostOnce
)

// evalCmd is the EVALSHA of one of the scripts. It carries its script, so
// that the EVAL answering NOSCRIPT needs no list of scripts to look the
// source up in, and its delivery, which go-redis reads through NoRetry.
type evalCmd struct {
	*redis.Cmd
	script   *script
	delivery delivery
}

// NoRetry tells go-redis whether it must not resend the command.
func (c *evalCmd) NoRetry() bool { return c.delivery == atMostOnce }

// eval returns the EVALSHA of sc on key's record with args.
func (s *Store) eval(ctx context.Context, sc *script, d delivery, key string, args ...any) *evalCmd {
	a := make([]any, 0, 4+len(args))
	a = append(a, sc.evalsha(), sc.sha, 1, s.RedisKey(key))
	return newEval(ctx, sc, d, append(a, args...))
}

// newEval returns the command of args, which are those of an EVALSHA or
// EVAL of sc: the command, the script, the number of keys, the keys, the
// arguments.
func newEval(ctx context.Context, sc *script, d delivery, args []any) *evalCmd {
	cmd := redis.NewCmd(ctx, args...)
	cmd.SetFirstKeyPos(3)
	return &evalCmd{Cmd: cmd, script: sc, delivery: d}
}

// asEval returns c, an EVALSHA that met NOSCRIPT (so did not run), as the
// EVAL of its script, which also loads the script into the server's cache
// for the next EVALSHA.
func (c *evalCmd) asEval(ctx context.Context) *evalCmd {
	a := append([]any{}, c.Args()...)
	a[0], a[1] = "eval", c.script.src
	if c.script.ro {
		a[0] = "eval_ro"
	}
	return newEval(ctx, c.script, c.delivery, a)
}

// evalsha returns the command that runs sc by its SHA-1.
func (sc *script) evalsha() string {
	if sc.ro {
		return "evalsha_ro"
	}
	return "evalsha"
}

// peekOf returns the peek script that reads what the claim script sc
// would, with its arguments, or nil when sc is not a claim script.
func peekOf(sc *script) *script {
	switch sc {
	case claimScript:
		return peekScript
	case claimBatchScript:
		return peekBatchScript
	}
	return nil
}

// asPeek returns c, a claim script that a full Redis refused (so did not
// run), as the EVALSHA_RO of its peek script with the same keys and
// arguments.
func (c *evalCmd) asPeek(ctx context.Context) *evalCmd {
	peek := peekOf(c.script)
	a := append([]any{}, c.Args()...)
	a[0], a[1] = peek.evalsha(), peek.sha
	return newEval(ctx, peek, resendable, a)
}

// peekRefused replaces the claim scripts of cmds that a full Redis
// refused with OOM (they did not run) by their peek scripts, sent in one
// pipeline on c (see pipeline): their answers answer a duplicate that
// needs no write. The caller runs it under await.
func (s *Store) peekRefused(ctx context.Context, c redis.Cmdable, cmds []*evalCmd) {
	var peeks []*evalCmd
	var at []int
	for i, cmd := range cmds {
		if redis.IsOOMError(cmd.Err()) && peekOf(cmd.script) != nil {
			peeks = append(peeks, cmd.asPeek(ctx))
			at = append(at, i)
		}
	}
	if len(peeks) == 0 {
		return
	}
	s.pipeline(ctx, c, peeks)
	for k, i := range at {
		cmds[i] = peeks[k]
	}
}

// run sends c, and its EVAL when the server answers NOSCRIPT, and returns
// the reply, under await.
func (s *Store) run(ctx context.Context, c *evalCmd) (any, error) {
	type answer struct {
		reply any
		err   error
	}
	a, err := await(ctx, func() answer {
		err := s.client.Process(ctx, c)
		if isNoScript(err) {
			c = c.asEval(ctx)
			err = s.client.Process(ctx, c)
		}
		return answer{c.Val(), err}
	})
	if err != nil {
		return nil, err
	}
	return a.reply, a.err
}

// pipeline sends cmds in one pipeline on c, then sends again as EVAL, in
// order, those that met NOSCRIPT (they did not run), replacing them in
// cmds. Each command keeps its own error. The caller runs it under await.
func (s *Store) pipeline(ctx context.Context, c redis.Cmdable, cmds []*evalCmd) {
	s.pipelineThen(ctx, c, cmds, nil)
}

// pipelineAndWait is pipeline with WAIT Config.WaitReplicas at the end of
// each pipeline it sends, on the connection that wrote: it returns WAIT's
// count of the replicas that acknowledged the writes, and its error. c is
// the client of one server: the primary that holds the records.
func (s *Store) pipelineAndWait(ctx context.Context, c *redis.Client, cmds []*evalCmd) (int64, error) {
	return s.pipelineThen(ctx, c, cmds, func() *redis.IntCmd {
		return redis.NewIntCmd(ctx, "wait", s.cfg.WaitReplicas, s.cfg.WaitTimeout.Milliseconds())
	}).Result()
}

// pipelineThen is pipeline, each pipeline ending with a command of then
// when then is not nil. It returns the last such command, or nil.
func (s *Store) pipelineThen(ctx context.Context, c redis.Cmdable, cmds []*evalCmd, then func() *redis.IntCmd) *redis.IntCmd {
	send := func(cmds []*evalCmd) *redis.IntCmd {
		p := c.Pipeline()
		for _, cmd := range cmds {
			_ = p.Process(ctx, cmd)
		}
		var last *redis.IntCmd
		if then != nil {
			last = then()
			_ = p.Process(ctx, last)
		}
		_, _ = p.Exec(ctx) // every command carries its own error
		return last
	}
	last := send(cmds)
	var again []int
	for i, cmd := range cmds {
		if isNoScript(cmd.Err()) {
			again = append(again, i)
		}
	}
	if len(again) > 0 {
		evals := make([]*evalCmd, len(again))
		for k, i := range again {
			evals[k] = cmds[i].asEval(ctx)
			cmds[i] = evals[k]
		}
		if l := send(evals); l != nil {
			last = l
		}
	}
	return last
}

// primary returns the client of the primary that holds key's record, for
// a WAIT on the connection that wrote it (under await: a Cluster client may
// ask a node). New admits only the two client
// types handled here when WaitReplicas is set.
func (s *Store) primary(ctx context.Context, key string) (*redis.Client, error) {
	switch c := s.client.(type) {
	case *redis.Client:
		return c, nil
	case *redis.ClusterClient:
		return c.MasterForKey(ctx, s.RedisKey(key))
	}
	return nil, fmt.Errorf("redisstore: WAIT needs a *redis.Client or *redis.ClusterClient, not %T", s.client)
}
