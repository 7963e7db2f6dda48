package redisstore_test

import (
	"regexp"
	"slices"
	"testing"
	"time"

	"github.com/idemgo/idem/redisstore"
	"github.com/idemgo/idem/storage"
)

// TestScriptsReadDeclaredNames holds the scripts to the names protocol.go
// declares: a script that reads a name the prelude does not declare would
// fail on the server only when that line runs, and a declared name no
// script reads is a field or code the protocol no longer has.
func TestScriptsReadDeclaredNames(t *testing.T) {
	declared := redisstore.LuaConstantNames()
	word := regexp.MustCompile(`\b[A-Z][A-Z0-9_]*\b`)
	literal := regexp.MustCompile(`'[^']*'`) // command names, struct formats
	read := map[string]bool{}
	for name, body := range redisstore.ScriptBodies() {
		if body == "" {
			t.Fatalf("script %s does not start with the prelude", name)
		}
		for _, w := range word.FindAllString(literal.ReplaceAllString(body, ""), -1) {
			if w == "KEYS" || w == "ARGV" {
				continue
			}
			if !slices.Contains(declared, w) {
				t.Errorf("script %s reads %s, which protocol.go does not declare", name, w)
			}
			read[w] = true
		}
	}
	for _, name := range declared {
		if !read[name] {
			t.Errorf("protocol.go declares %s, which no script reads", name)
		}
	}
}

// TestLuaReadsTheFieldsGoWrites reads every field of a value packed in Go
// with the Lua names the scripts use, on the server.
func TestLuaReadsTheFieldsGoWrites(t *testing.T) {
	c := sharedClient(t)
	ctx := ctxT(t)
	rec := storage.Record{Status: storage.StatusFailed, Token: 0x0102030405060708, Attempt: 0x0a0b0c0d,
		Fingerprint: []byte("finger\x00print"), Result: []byte("the result"), ExpiresAt: time.UnixMilli(1234)}
	v := redisstore.EncodeRecord(rec, time.Hour) // a finished record holds its expiry where the retention was
	got, err := c.Eval(ctx, redisstore.LuaPrelude()+`
local v = ARGV[1]
local fl = struct.unpack('>I2', v, FP_LEN)
return {string.byte(v, VERSION) == FORMAT and 1 or 0, string.byte(v, STATUS), string.sub(v, TOKEN, TOKEN_END),
  struct.unpack('>I4', v, ATTEMPT), struct.unpack('>i8', v, RETENTION), string.sub(v, RETENTION, FP_LEN - 1),
  string.sub(v, FINGERPRINT, HEADER_LEN + fl), string.sub(v, HEADER_LEN + fl + 1)}
`, nil, v).Slice()
	if err != nil {
		t.Fatal(err)
	}
	want := []any{int64(1), int64(storage.StatusFailed), "\x01\x02\x03\x04\x05\x06\x07\x08",
		int64(0x0a0b0c0d), int64(1234), "\x00\x00\x00\x00\x00\x00\x04\xd2", "finger\x00print", "the result"}
	if !slices.Equal(got, want) {
		t.Fatalf("Lua read the fields as\n%q\nwant\n%q", got, want)
	}
}

// TestScriptsCarryTheirConstants: a script's source holds the value of
// every name of the protocol it reads, and none of the names.
func TestScriptsCarryTheirConstants(t *testing.T) {
	declared := redisstore.LuaConstantNames()
	word := regexp.MustCompile(`\b[A-Z][A-Z0-9_]*\b`)
	literal := regexp.MustCompile(`'[^']*'`)
	for name, src := range redisstore.ScriptSources() {
		for _, w := range word.FindAllString(literal.ReplaceAllString(src, ""), -1) {
			if slices.Contains(declared, w) {
				t.Errorf("script %s still reads the name %s", name, w)
			}
		}
	}
}
