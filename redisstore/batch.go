package redisstore

import (
	"context"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/idemgo/idem"
)

// maxScriptBatch is the most keys one claim batch script claims: Redis
// runs nothing else while a script runs, so a large batch is split into
// scripts of this many keys (well under a millisecond each), sent in one
// pipeline.
const maxScriptBatch = 128

// ClaimBatch implements [idem.BatchClaimer] in one round trip. On a client
// of one server (*redis.Client: standalone or Sentinel), every
// maxScriptBatch keys are claimed by one script, in order, the scripts in
// one pipeline; Redis then pays one script call per chunk instead of one
// per key. On any other client
// (Cluster) each key's claim script goes in the pipeline, and go-redis
// sends one pipeline to each primary concerned, in parallel. Either way,
// entries for the same key run in order, the second seeing the first.
//
// A Claim's Err holds idem.ErrKeyReused, ErrUnknownFormat or
// *ValueTooLargeError for its key.
// The returned error is ErrInvalidArgs when an entry is out of range
// (nothing is sent), or wraps idem.ErrStoreUnavailable when no entry got an
// answer. When only some got one (a primary or a chunk failed), the others
// carry that error in their Err: their claims may or may not have been
// made, and such a key answers Busy until its lease ends.
func (s *Store) ClaimBatch(ctx context.Context, args []idem.ClaimArgs) ([]idem.Claim, error) {
	for _, a := range args {
		if err := checkClaim("ClaimBatch", a); err != nil {
			return nil, err
		}
	}
	out := make([]idem.Claim, len(args))
	if len(args) == 0 {
		return out, nil
	}
	var replies []any // one claim reply per entry, or nil where errs has the error
	errs := make([]error, len(args))
	tokens := make([]idem.Token, len(args))
	for i := range tokens {
		tokens[i] = newToken()
	}
	sent := time.Now()
	if c, ok := s.client.(*redis.Client); ok {
		replies = s.claimChunks(ctx, c, args, tokens, errs)
	} else {
		replies = s.claimEach(ctx, args, tokens, errs)
	}
	var failed int
	var first error
	for i, err := range errs {
		if err != nil {
			failed++
			out[i].Err = unavailable("ClaimBatch", err)
			if first == nil {
				first = out[i].Err
			}
			continue
		}
		c, err := s.claimReply(args[i], tokens[i], sent, replies[i])
		c.Err = err
		out[i] = c
	}
	if failed == len(args) {
		return nil, first
	}
	return out, nil
}

// claimEach pipelines one claim script per entry.
func (s *Store) claimEach(ctx context.Context, args []idem.ClaimArgs, tokens []idem.Token, errs []error) []any {
	cmds := make([]*evalCmd, len(args))
	for i, a := range args {
		cmds[i] = s.eval(ctx, claimScript, resendable, a.Key, s.claimArgs(a, tokens[i])...)
	}
	s.pipeline(ctx, s.client, cmds)
	replies := make([]any, len(args))
	for i, cmd := range cmds {
		replies[i], errs[i] = cmd.Val(), cmd.Err()
	}
	return replies
}

// claimChunks pipelines one claim batch script per maxScriptBatch entries.
func (s *Store) claimChunks(ctx context.Context, c *redis.Client, args []idem.ClaimArgs, tokens []idem.Token, errs []error) []any {
	var cmds []*evalCmd
	for lo := 0; lo < len(args); lo += maxScriptBatch {
		chunk := args[lo:min(lo+maxScriptBatch, len(args))]
		a := make([]any, 0, 4+len(chunk)*4)
		a = append(a, "evalsha", claimBatchScript.sha, len(chunk))
		for _, ca := range chunk {
			a = append(a, s.RedisKey(ca.Key))
		}
		a = append(a, s.cfg.MaxValueSize)
		for j, ca := range chunk {
			a = appendClaimArgs(a, ca, tokens[lo+j])
		}
		cmds = append(cmds, newEval(ctx, claimBatchScript, resendable, a))
	}
	s.pipeline(ctx, c, cmds)
	replies := make([]any, len(args))
	for k, cmd := range cmds {
		lo := k * maxScriptBatch
		n := min(maxScriptBatch, len(args)-lo)
		r, _ := cmd.Val().([]any)
		err := cmd.Err()
		if err == nil && len(r) != n {
			err = badReply("ClaimBatch", cmd.Val())
		}
		for j := range n {
			if err != nil {
				errs[lo+j] = err
				continue
			}
			replies[lo+j] = r[j]
		}
	}
	return replies
}

// CompleteBatch implements [idem.BatchCompleter]: the Complete scripts of
// all cs in one pipeline (with Config.WaitReplicas, one pipeline and one
// WAIT per primary concerned). Each entry's error is nil, idem.ErrLeaseLost
// or ErrUnknownFormat, or ErrNotReplicated when its primary's WAIT fell
// short. The returned error is *ValueTooLargeError or ErrInvalidArgs when
// an entry is out of range (nothing is written), or wraps
// idem.ErrStoreUnavailable when no entry got an answer; when only some got
// one, the others carry that error: their outcomes may or may not be
// stored. The client never resends the pipeline, as for Complete.
func (s *Store) CompleteBatch(ctx context.Context, cs []idem.Completion) ([]error, error) {
	for _, c := range cs {
		if err := s.checkOutcome("CompleteBatch", c.Value, c.Retention); err != nil {
			return nil, err
		}
	}
	errs := make([]error, len(cs))
	cmds := make([]*evalCmd, 0, len(cs))
	idx := make([]int, 0, len(cs)) // cmds[j] completes cs[idx[j]]
	for i, c := range cs {
		if c.Token == 0 {
			errs[i] = idem.ErrLeaseLost
			continue
		}
		cmds = append(cmds, s.outcomeCmd(ctx, c.Key, c.Token, idem.StatusCompleted, c.Value, c.Retention))
		idx = append(idx, i)
	}
	if len(cmds) == 0 {
		return errs, nil
	}
	var waitErrs []error // per cmds[j]: the WAIT's verdict on its primary
	if s.cfg.WaitReplicas == 0 {
		s.pipeline(ctx, s.client, cmds)
	} else {
		var err error
		if waitErrs, err = s.completeAndWait(ctx, cmds, idx, cs); err != nil {
			return nil, err
		}
	}
	var failed int
	var first error
	for j, cmd := range cmds {
		i := idx[j]
		if err := cmd.Err(); err != nil {
			failed++
			errs[i] = unavailable("CompleteBatch", err)
			if first == nil {
				first = errs[i]
			}
			continue
		}
		errs[i] = holderReply("CompleteBatch", cmd.Val())
		if errs[i] == nil && waitErrs != nil {
			errs[i] = waitErrs[j]
		}
	}
	if failed == len(cmds) {
		return nil, first
	}
	return errs, nil
}

// completeAndWait runs cmds grouped by primary, each group in one pipeline
// that ends with WAIT, and returns the WAIT's verdict for each command.
func (s *Store) completeAndWait(ctx context.Context, cmds []*evalCmd, idx []int, cs []idem.Completion) ([]error, error) {
	type group struct {
		node *redis.Client
		js   []int
	}
	var groups []*group
	byNode := map[*redis.Client]*group{}
	for j := range cmds {
		node, err := s.primary(ctx, cs[idx[j]].Key)
		if err != nil {
			return nil, unavailable("CompleteBatch", err)
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
		verdict := s.replicated("CompleteBatch", acked, err)
		for k, j := range g.js {
			cmds[j] = part[k] // an EVAL re-run replaces its EVALSHA
			verdicts[j] = verdict
		}
	}
	return verdicts, nil
}
