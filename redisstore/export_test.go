package redisstore

import (
	"context"
	"encoding/binary"
	"time"

	"github.com/idemgo/idem/storage"
)

// DecodeRecord exposes the decoder to the black-box tests; expiresMs is
// the key's PEXPIRETIME, 0 for none.
func DecodeRecord(key string, v []byte, expiresMs int64) (storage.Record, error) {
	return decodeRecord(key, string(v), expiresMs)
}

// EncodeRecord is the Go mirror of the values the client packs and the
// scripts rewrite, so the tests can hold the Lua code and the Go decoder
// to one format. retention is the claim's, which only an InProgress
// record keeps; a finished one holds r.ExpiresAt.
func EncodeRecord(r storage.Record, retention time.Duration) []byte {
	b := []byte{formatVersion, byte(r.Status)}
	b = appendToken(b, r.Token)
	b = binary.BigEndian.AppendUint32(b, uint32(r.Attempt))
	if r.Status.Done() { // holds its expiry where the retention was
		b = binary.BigEndian.AppendUint64(b, uint64(r.ExpiresAt.UnixMilli()))
	} else {
		b = binary.BigEndian.AppendUint64(b, uint64(millis(retention)))
	}
	b = binary.BigEndian.AppendUint16(b, uint16(len(r.Fingerprint)))
	return append(append(b, r.Fingerprint...), r.Result...)
}

// ClaimWithToken claims with the token t, as the client does when it
// resends a claim whose reply it lost.
func (s *Store) ClaimWithToken(ctx context.Context, a storage.ClaimArgs, t storage.Token) (storage.Claim, error) {
	return s.claim(ctx, a, t)
}

// SetPolicyCheckTimeout sets the bound of New's check of the eviction
// policy until the test ends. Not for parallel tests.
func SetPolicyCheckTimeout(t interface{ Cleanup(func()) }, d time.Duration) {
	old := policyCheckTimeout
	policyCheckTimeout = d
	t.Cleanup(func() { policyCheckTimeout = old })
}

// Peek runs the read-only peek script that answers a claim on a full
// Redis, with the arguments of the claim of a with the token t.
func (s *Store) Peek(ctx context.Context, a storage.ClaimArgs, t storage.Token) (storage.Claim, error) {
	reply, err := s.run(ctx, s.eval(ctx, peekScript, resendable, a.Key, s.claimArgs(a, t)...))
	if err != nil {
		return storage.Claim{}, unavailable(ctx, "Peek", err)
	}
	return s.claimReply("Peek", a, t, time.Now(), reply)
}

// PlainClaim sends the plain command of the claim of a with the token t,
// and the read of a key it finds taken (see plainClaim), and returns what
// they answer, or needsScript when they leave the key to the claim
// script. For a key with no record, SET claims it.
func (s *Store) PlainClaim(ctx context.Context, a storage.ClaimArgs, t storage.Token) (c storage.Claim, needsScript bool, err error) {
	args := s.claimArgs(a, t)
	nv := args[0].([]byte)
	plain := newPlainClaim(ctx, make([]any, 0, plainClaimArgs), s.RedisKey(a.Key), nv, args[1])
	_ = s.client.Process(ctx, plain.set)
	var reply any = int64(replyCreated)
	created, err := plain.created()
	if err == nil && !created {
		plain = plain.read(ctx, nv, s.cfg.MaxValueSize)
		_ = s.client.Process(ctx, plain.get)
		reply, needsScript, err = plain.reply(nv, s.cfg.MaxValueSize)
	}
	if needsScript {
		return storage.Claim{}, true, nil
	}
	if err != nil {
		return storage.Claim{}, false, unavailable(ctx, "PlainClaim", err)
	}
	c, err = s.claimReply("PlainClaim", a, t, time.Now(), reply)
	return c, false, err
}

// ScriptClaim runs the claim script alone, with the arguments of the
// claim of a with the token t.
func (s *Store) ScriptClaim(ctx context.Context, a storage.ClaimArgs, t storage.Token) (storage.Claim, error) {
	reply, err := s.run(ctx, s.eval(ctx, claimScript, resendable, a.Key, s.claimArgs(a, t)...))
	if err != nil {
		return storage.Claim{}, unavailable(ctx, "ScriptClaim", err)
	}
	return s.claimReply("ScriptClaim", a, t, time.Now(), reply)
}

// Held returns how many records ClaimBatch created that CompleteBatch has
// not taken yet.
func (s *Store) Held() int {
	s.held.mu.Lock()
	defer s.held.mu.Unlock()
	return len(s.held.cur) + len(s.held.old)
}

// ForgetHeld forgets the record of the claim with token t, as held does
// once it is two generations old.
func (s *Store) ForgetHeld(t storage.Token) {
	s.held.take([]storage.Completion{{Token: t}})
}

// RecordHeaderLen is the length of a record's header: the fingerprint
// follows it.
const RecordHeaderLen = headerLen

// SetPolicyCheckInterval makes s read the eviction policy again every d
// (see policyWatch), from now on.
func (s *Store) SetPolicyCheckInterval(d time.Duration) {
	s.policy.every = d
	s.policy.next.Store(time.Now().Add(d).UnixNano())
}
