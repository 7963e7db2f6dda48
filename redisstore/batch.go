package redisstore

import (
	"cmp"
	"context"
	"slices"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/idemgo/idem/storage"
)

// maxScriptBatch is the most keys one batch script claims or completes: Redis
// runs nothing else while a script runs, so a large batch is split into
// scripts of this many keys (well under a millisecond each), sent in one
// pipeline. A complete batch script also ends before its values pass
// maxScriptBytes, so that large values do not make one long script.
const (
	maxScriptBatch = 128
	maxScriptBytes = 1 << 20
)

// ClaimBatch implements [storage.Store.ClaimBatch]. Each entry is first the
// plain command of a claim (see plainClaim), all of them in one
// pipeline: one round trip answers every new key (claimed), every
// duplicate, reused key and unknown value. The entries that find a key in
// progress, and any later entry for a key an earlier entry of the batch
// names, go to the claim script in a second round trip, in order, so that
// such an entry sees the ones before it. On a client of one server
// (*redis.Client: standalone or Sentinel), every maxScriptBatch of those
// are claimed by one script, the scripts in one pipeline; on any other
// client (Cluster) each one's claim script goes in the pipeline. On
// Cluster go-redis sends each pipeline as one pipeline to each primary
// concerned, in parallel.
//
// A Claim's Err holds storage.ErrKeyReused, ErrUnknownFormat or
// *storage.ValueTooLargeError for its key.
// The returned error is ErrInvalidArgs when an entry is out of range
// (nothing is sent), or wraps storage.ErrStoreUnavailable when no entry got an
// answer. When only some got one (a primary or a chunk failed, or the
// context ended before the second round trip's answer), the others carry
// that error in their Err: their claims may or may not have been made,
// and such a key answers Busy until its lease ends.
func (s *Store) ClaimBatch(ctx context.Context, args []storage.ClaimArgs) ([]storage.Claim, error) {
	for _, a := range args {
		if err := checkClaim("ClaimBatch", a); err != nil {
			return nil, err
		}
	}
	if len(args) == 0 {
		return []storage.Claim{}, nil
	}
	if err := s.policy.err(ctx, "ClaimBatch"); err != nil {
		return nil, err
	}
	b := s.newClaimBatch(ctx, args)
	sent0 := time.Now()
	if err := s.sendPlain(ctx, b.plains); err != nil {
		return nil, unavailable(ctx, "ClaimBatch", err)
	}
	r, again := s.plainReplies(ctx, b)
	sent := make([]time.Time, len(args))
	for i := range sent {
		sent[i] = sent0
	}
	if len(again) > 0 {
		s.claimAgain(ctx, args, b.tokens, again, r, sent)
	}
	return s.claimAnswers(ctx, b, r, sent)
}

// claimBatch is one ClaimBatch: each entry's token, the record its claim
// creates, and its plain command.
type claimBatch struct {
	args   []storage.ClaimArgs
	tokens []storage.Token
	nvs    [][]byte     // newRecord of each entry
	plains []plainClaim // zero for an entry left to the claim script
}

// newClaimBatch returns the batch of args: a token and a new record for
// each entry, and the plain command of each but a later entry for a key
// an earlier one names, which is left to the claim script.
func (s *Store) newClaimBatch(ctx context.Context, args []storage.ClaimArgs) claimBatch {
	b := claimBatch{
		args:   args,
		tokens: make([]storage.Token, len(args)),
		nvs:    make([][]byte, len(args)),
		plains: make([]plainClaim, len(args)),
	}
	seen := make(map[string]struct{}, len(args))
	cmdArgs := make([]any, len(args)*plainClaimArgs)
	var px any // boxed once while the entries' expiries are the same
	for i, a := range args {
		b.tokens[i] = newToken()
		b.nvs[i] = newRecord(a, b.tokens[i])
		if _, again := seen[a.Key]; again {
			continue
		}
		seen[a.Key] = struct{}{}
		if ms := claimExpiry(a); px == nil || px.(int64) != ms {
			px = ms
		}
		b.plains[i] = newPlainClaim(ctx, cmdArgs[i*plainClaimArgs:(i+1)*plainClaimArgs], s.RedisKey(a.Key), b.nvs[i], px)
	}
	return b
}

// sendPlain sends the plain commands in one pipeline; each command
// carries its own answer or error. The error returned is the context's,
// when it ended first.
func (s *Store) sendPlain(ctx context.Context, plains []plainClaim) error {
	_, err := await(ctx, func() struct{} {
		p := s.client.Pipeline()
		for _, pc := range plains {
			if pc.set != nil {
				_ = p.Process(ctx, pc.set)
			}
		}
		_, _ = p.Exec(ctx) // each command carries its own error
		return struct{}{}
	})
	return err
}

// plainReplies returns the replies the sent plain commands of b stand
// for, reading in one more round trip the keys they found taken (see
// plainClaim), and the entries the claim script is to decide, in order:
// those left to it, those whose key the plain commands cannot answer, and
// those a full Redis refused (the script peeks).
func (s *Store) plainReplies(ctx context.Context, b claimBatch) (r batchReplies, again []int) {
	r = batchReplies{replies: make([]any, len(b.args)), errs: make([]error, len(b.args))}
	var taken []int
	for i, pc := range b.plains {
		if pc.set == nil {
			again = append(again, i)
			continue
		}
		created, err := pc.created()
		switch {
		case redis.IsOOMError(err): // a full Redis's script peeks
			again = append(again, i)
		case err != nil:
			r.errs[i] = err
		case created:
			r.replies[i] = int64(replyCreated)
		default:
			b.plains[i] = pc.read(ctx, b.nvs[i], s.cfg.MaxValueSize)
			taken = append(taken, i)
		}
	}
	if len(taken) == 0 {
		return r, again
	}
	_, err := await(ctx, func() struct{} {
		p := s.client.Pipeline()
		for _, i := range taken {
			_ = p.Process(ctx, b.plains[i].get)
		}
		_, _ = p.Exec(ctx) // each command carries its own error
		return struct{}{}
	})
	for _, i := range taken {
		if err != nil {
			r.errs[i] = err
			continue
		}
		reply, needsScript, err := b.plains[i].reply(b.nvs[i], s.cfg.MaxValueSize)
		switch {
		case needsScript:
			again = append(again, i)
		case err != nil:
			r.errs[i] = err
		default:
			r.replies[i] = reply
		}
	}
	slices.Sort(again) // an entry that repeats a key is claimed after the one before it
	return r, again
}

// claimAnswers returns the Claims of b's replies r, sent at sent, and
// hands the records its claims created to CompleteBatch (on one server).
// With no answer at all, it returns the first entry's error instead.
func (s *Store) claimAnswers(ctx context.Context, b claimBatch, r batchReplies, sent []time.Time) ([]storage.Claim, error) {
	out := make([]storage.Claim, len(b.args))
	var failed int
	var first error
	var created []int // the entries whose records CompleteBatch will hold
	for i, err := range r.errs {
		if err != nil {
			failed++
			out[i].Err = unavailable(ctx, "ClaimBatch", err)
			if first == nil {
				first = out[i].Err
			}
			continue
		}
		c, err := s.claimReply("ClaimBatch", b.args[i], b.tokens[i], sent[i], r.replies[i])
		c.Err = err
		out[i] = c
		if err == nil && c.Outcome == storage.Acquired && c.Record.Attempt == 1 {
			// Created by this claim (or this claim resent): the record is
			// nvs[i]. A takeover's is another, and is not kept.
			created = append(created, i)
		}
	}
	if _, oneServer := s.client.(*redis.Client); oneServer { // else CompleteBatch pipelines outcomeScript
		s.held.put(b.tokens, b.nvs, created)
	}
	if failed == len(b.args) {
		return nil, first
	}
	return out, nil
}

// claimAgain claims the entries at of args, with their tokens, by the
// claim script in one round trip (see ClaimBatch), and puts each one's
// answer, or error, and the time its script was sent, in r and sent.
func (s *Store) claimAgain(ctx context.Context, args []storage.ClaimArgs, tokens []storage.Token, at []int, r batchReplies, sent []time.Time) {
	sub := make([]storage.ClaimArgs, len(at))
	subTokens := make([]storage.Token, len(at))
	for k, i := range at {
		sub[k], subTokens[k] = args[i], tokens[i]
	}
	_, oneServer := s.client.(*redis.Client)
	var cmds []*evalCmd
	if oneServer {
		cmds = s.chunkCmds(ctx, sub, subTokens)
	} else {
		cmds = s.eachCmds(ctx, sub, subTokens)
	}
	now := time.Now()
	got, err := await(ctx, func() batchReplies {
		s.pipeline(ctx, s.client, cmds)
		s.peekRefused(ctx, s.client, cmds) // a full Redis still answers duplicates
		if oneServer {
			return chunkReplies("ClaimBatch", cmds, len(sub))
		}
		return eachReplies(cmds)
	})
	for k, i := range at {
		sent[i] = now
		if err != nil {
			r.errs[i] = err
			continue
		}
		r.replies[i], r.errs[i] = got.replies[k], got.errs[k]
	}
}

// batchReplies are the answers to a batch: for each entry its reply, or
// nil where errs holds its error.
type batchReplies struct {
	replies []any
	errs    []error
}

// eachCmds returns one claim script per entry.
func (s *Store) eachCmds(ctx context.Context, args []storage.ClaimArgs, tokens []storage.Token) []*evalCmd {
	cmds := make([]*evalCmd, len(args))
	for i, a := range args {
		cmds[i] = s.eval(ctx, claimScript, resendable, a.Key, s.claimArgs(a, tokens[i])...)
	}
	return cmds
}

// eachReplies returns the answers of the sent eachCmds.
func eachReplies(cmds []*evalCmd) batchReplies {
	r := batchReplies{replies: make([]any, len(cmds)), errs: make([]error, len(cmds))}
	for i, cmd := range cmds {
		r.replies[i], r.errs[i] = cmd.Val(), cmd.Err()
	}
	return r
}

// chunkCmds returns one claim batch script per maxScriptBatch entries.
func (s *Store) chunkCmds(ctx context.Context, args []storage.ClaimArgs, tokens []storage.Token) []*evalCmd {
	head := []any{s.cfg.MaxValueSize}
	return s.batchCmds(ctx, claimBatchScript, resendable, len(args), func(i int) string { return args[i].Key }, func(int) []any { return head },
		func(a []any, i int) []any { return appendClaimArgs(a, args[i], tokens[i]) }, nil, nil, false)
}

// batchCmds returns the calls of sc, a batch script, over n entries in
// order, each call of up to maxScriptBatch of them and, when size is not
// nil, ending before their sizes pass maxScriptBytes (one entry at
// least), before an entry i that joins, when not nil, says cannot join the
// call that starts at entry lo, and, when distinct is set, before an
// entry whose key is already in the call: a call's keys are those of
// key(i) for its entries i, its arguments head(lo) then each entry's,
// appended by args. chunkReplies splits their answers.
func (s *Store) batchCmds(ctx context.Context, sc *script, d delivery, n int, key func(i int) string, head func(lo int) []any,
	args func(a []any, i int) []any, size func(i int) int, joins func(lo, i int) bool, distinct bool) []*evalCmd {
	var cmds []*evalCmd
	var in map[string]struct{} // with distinct: the keys of the call being built
	if distinct && n > 1 {
		in = make(map[string]struct{}, min(n, maxScriptBatch))
	}
	for lo := 0; lo < n; {
		hi, bytes := lo+1, 0
		if size != nil {
			bytes = size(lo)
		}
		if in != nil {
			clear(in)
			in[key(lo)] = struct{}{}
		}
		for hi < min(lo+maxScriptBatch, n) {
			if size != nil {
				if bytes += size(hi); bytes > maxScriptBytes {
					break
				}
			}
			if joins != nil && !joins(lo, hi) {
				break
			}
			if in != nil {
				k := key(hi)
				if _, ok := in[k]; ok {
					break
				}
				in[k] = struct{}{}
			}
			hi++
		}
		a := make([]any, 0, 4+(hi-lo)*5)
		a = append(a, sc.evalsha(), sc.sha, hi-lo)
		for i := lo; i < hi; i++ {
			a = append(a, s.RedisKey(key(i)))
		}
		a = append(a, head(lo)...)
		for i := lo; i < hi; i++ {
			a = args(a, i)
		}
		cmds = append(cmds, newEval(ctx, sc, d, a))
		lo = hi
	}
	return cmds
}

// chunkReplies returns the answers of the n entries of the sent batch
// scripts cmds of op (see batchCmds).
func chunkReplies(op string, cmds []*evalCmd, n int) batchReplies {
	r := batchReplies{replies: make([]any, n), errs: make([]error, n)}
	lo := 0
	for _, cmd := range cmds {
		size, _ := cmd.Args()[2].(int) // EVALSHA sha numkeys: the call's entries
		size = max(0, min(size, n-lo))
		list, _ := cmd.Val().([]any)
		err := cmd.Err()
		if err == nil && len(list) != size {
			err = badReply(op, cmd.Val())
		}
		for j := range size {
			if err != nil {
				r.errs[lo+j] = err
				continue
			}
			r.replies[lo+j] = list[j]
		}
		lo += size
	}
	return r
}

// exceptionReplies returns the answers of the n entries of the sent batch
// scripts cmds of op whose replies list only the entries that did not get
// the common answer: {i, answer, i, answer, …}, i counting the call's
// entries from 1, in increasing order. Every entry not listed gets
// common. Sending no answer for the common case spares the server a reply
// per entry.
func exceptionReplies(op string, cmds []*evalCmd, n int, common int64) batchReplies {
	r := batchReplies{replies: make([]any, n), errs: make([]error, n)}
	lo := 0
	for _, cmd := range cmds {
		size, _ := cmd.Args()[2].(int) // EVALSHA sha numkeys: the call's entries
		size = max(0, min(size, n-lo))
		err := cmd.Err()
		list, _ := cmd.Val().([]any)
		if err == nil {
			err = checkExceptions(op, cmd.Val(), list, size)
		}
		for j := range size {
			if err != nil {
				r.errs[lo+j] = err
				continue
			}
			r.replies[lo+j] = common
		}
		if err == nil {
			for k := 0; k < len(list); k += 2 {
				i, _ := list[k].(int64)
				r.replies[lo+int(i)-1] = list[k+1]
			}
		}
		lo += size
	}
	return r
}

// checkExceptions tells whether list, the reply val of a batch script of
// size entries, is a list of exceptions as exceptionReplies reads them.
func checkExceptions(op string, val any, list []any, size int) error {
	if list == nil && val != nil || len(list)%2 != 0 {
		return badReply(op, val)
	}
	prev := int64(0)
	for k := 0; k < len(list); k += 2 {
		i, ok := list[k].(int64)
		if !ok || i <= prev || i > int64(size) {
			return badReply(op, val)
		}
		prev = i
	}
	return nil
}

// CompleteBatch implements [storage.Store.CompleteBatch] in one round trip. On a
// client of one server (*redis.Client), every maxScriptBatch entries (or
// fewer: whose values pass a MiB, up to a key repeated or a change of
// retention) are completed by one script, in order, the scripts in one pipeline (with
// Config.WaitReplicas, followed by one WAIT). On any other client
// (Cluster), the Complete script of each entry goes in the pipeline, and
// go-redis sends one pipeline to each primary concerned (with
// Config.WaitReplicas, one pipeline and one WAIT per primary concerned).
// Each entry's error is nil, storage.ErrLeaseLost
// or ErrUnknownFormat, or ErrNotReplicated when its primary's WAIT fell
// short. The returned error is *storage.ValueTooLargeError or ErrInvalidArgs when
// an entry is out of range (nothing is written), or wraps
// storage.ErrStoreUnavailable when no entry got an answer; when only some got
// one, the others carry that error: their outcomes may or may not be
// stored. The client never resends the pipeline, as for Complete.
func (s *Store) CompleteBatch(ctx context.Context, cs []storage.Completion) ([]error, error) {
	for _, c := range cs {
		if err := s.checkOutcome("CompleteBatch", c.Value, c.Retention); err != nil {
			return nil, err
		}
	}
	errs := make([]error, len(cs))
	todo := make([]storage.Completion, 0, len(cs))
	idx := make([]int, 0, len(cs)) // todo[j] is cs[idx[j]]
	for i, c := range cs {
		if c.Token == 0 {
			errs[i] = storage.ErrLeaseLost
			continue
		}
		todo = append(todo, c)
		idx = append(idx, i)
	}
	if len(todo) == 0 {
		return errs, nil
	}
	r, err := await(ctx, func() completions {
		if one, ok := s.client.(*redis.Client); ok {
			return s.completeChunks(ctx, one, todo)
		}
		cmds := make([]*evalCmd, len(todo))
		keys := make([]string, len(todo))
		for j, c := range todo {
			cmds[j] = s.outcomeCmd(ctx, c.Key, c.Token, storage.StatusCompleted, c.Value, c.Retention)
			keys[j] = c.Key
		}
		return s.completeAll(ctx, cmds, keys)
	})
	if err != nil {
		return nil, unavailable(ctx, "CompleteBatch", err)
	}
	if r.unanswered == len(todo) {
		return nil, r.first
	}
	for j, verdict := range r.verdicts {
		errs[idx[j]] = verdict
	}
	return errs, nil
}

// completeChunks completes cs on c, the client of one server, with one
// complete batch script per maxScriptBatch entries (fewer when their
// values pass maxScriptBytes), the scripts in one
// pipeline (ending with WAIT when Config.WaitReplicas is set), and returns
// each entry's verdict as completeAll does.
func (s *Store) completeChunks(ctx context.Context, c *redis.Client, cs []storage.Completion) completions {
	status := []byte{formatVersion, byte(storage.StatusCompleted)}
	held := s.held.take(cs)
	var expiry []byte // the call's, set by head before args runs for its entries
	cmds := s.batchCmds(ctx, completeBatchScript, atMostOnce, len(cs), func(i int) string { return cs[i].Key },
		func(lo int) []any {
			expiry = finishedExpiry(cs[lo].Retention)
			return []any{status, millis(cs[lo].Retention), expiry}
		},
		func(a []any, i int) []any {
			if v := held[i]; v != nil {
				return append(a, v, completedRecord(v, expiry, cs[i].Value))
			}
			return append(a, holderPrefix(cs[i].Token), cs[i].Value)
		},
		func(i int) int { return len(cs[i].Value) + 2*len(held[i]) },
		func(lo, i int) bool { return cs[i].Retention == cs[lo].Retention }, true)
	var waited error // the WAIT's verdict, for every entry stored
	if s.cfg.WaitReplicas == 0 {
		s.pipeline(ctx, c, cmds)
	} else {
		acked, err := s.pipelineAndWait(ctx, c, cmds)
		waited = s.replicated(ctx, "CompleteBatch", acked, err)
	}
	replies := exceptionReplies("CompleteBatch", cmds, len(cs), replyDone)
	r := completions{verdicts: make([]error, len(cs))}
	for j, err := range replies.errs {
		if err != nil {
			r.verdicts[j] = unavailable(ctx, "CompleteBatch", err)
			r.unanswered++
			r.first = cmp.Or(r.first, r.verdicts[j])
			continue
		}
		r.verdicts[j] = holderReply("CompleteBatch", replies.replies[j])
		if r.verdicts[j] == nil {
			r.verdicts[j] = waited
		}
	}
	return r
}

// completions are the answers to the Complete scripts of a batch: each
// one's verdict, how many got no answer, and the first of those errors.
type completions struct {
	verdicts   []error
	unanswered int
	first      error
}

// completeAll sends cmds, the Complete scripts of the records of keys, and
// returns each one's verdict: nil, storage.ErrLeaseLost, ErrUnknownFormat,
// ErrNotReplicated, or, when it got no answer, its error wrapping
// storage.ErrStoreUnavailable.
func (s *Store) completeAll(ctx context.Context, cmds []*evalCmd, keys []string) completions {
	r := completions{verdicts: make([]error, len(cmds))}
	var waitErrs []error // per cmds[j]: the WAIT's verdict on its primary
	if s.cfg.WaitReplicas == 0 {
		s.pipeline(ctx, s.client, cmds)
	} else {
		var err error
		if waitErrs, err = s.completeAndWait(ctx, cmds, keys); err != nil {
			return completions{unanswered: len(cmds), first: err}
		}
	}
	for j, cmd := range cmds {
		if err := cmd.Err(); err != nil {
			r.verdicts[j] = unavailable(ctx, "CompleteBatch", err)
			r.unanswered++
			r.first = cmp.Or(r.first, r.verdicts[j])
			continue
		}
		r.verdicts[j] = holderReply("CompleteBatch", cmd.Val())
		if r.verdicts[j] == nil && waitErrs != nil {
			r.verdicts[j] = waitErrs[j]
		}
	}
	return r
}

// completeAndWait runs cmds, the writes of the records of keys, grouped by
// primary, each group in one pipeline that ends with WAIT, and returns the
// WAIT's verdict for each command.
func (s *Store) completeAndWait(ctx context.Context, cmds []*evalCmd, keys []string) ([]error, error) {
	type group struct {
		node *redis.Client
		js   []int
	}
	var groups []*group
	byNode := map[*redis.Client]*group{}
	for j := range cmds {
		node, err := s.primary(ctx, keys[j])
		if err != nil {
			return nil, unavailable(ctx, "CompleteBatch", err)
		}
		g := byNode[node]
		if g == nil {
			g = &group{node: node}
			byNode[node] = g
			groups = append(groups, g)
		}
		g.js = append(g.js, j)
	}
	verdicts := make([]error, len(cmds))
	for _, g := range groups {
		part := make([]*evalCmd, len(g.js))
		for k, j := range g.js {
			part[k] = cmds[j]
		}
		acked, err := s.pipelineAndWait(ctx, g.node, part)
		verdict := s.replicated(ctx, "CompleteBatch", acked, err)
		for k, j := range g.js {
			cmds[j] = part[k] // an EVAL re-run replaces its EVALSHA
			verdicts[j] = verdict
		}
	}
	return verdicts, nil
}
