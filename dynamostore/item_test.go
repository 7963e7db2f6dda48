package dynamostore_test

import (
	"bytes"
	"errors"
	"strconv"
	"testing"

	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"

	"github.com/idemgo/idem/dynamostore"
	"github.com/idemgo/idem/storage"
)

// The decoder takes whatever an item holds: it returns a record that says
// what the attributes say, or ErrUnknownFormat, and never panics.
func FuzzDecodeItem(f *testing.F) {
	f.Add("INPROGRESS", "18446744073709551615", "1", "1795440775406", "1795444375406", []byte("fp"), []byte(nil), uint16(0))
	f.Add("COMPLETED", "7", "3", "0", "1795444375406", []byte{}, []byte("value"), uint16(0))
	f.Add("FAILED", "0", "2147483647", "", "9223372036854775807", []byte("fp"), []byte("Aboom"), uint16(0))
	f.Add("INPROGRESS", "-1", "0", "1e3", "1.5", []byte("fp"), []byte("v"), uint16(0xffff))
	f.Fuzz(func(t *testing.T, status, token, attempt, lease, expires string, fp, result []byte, drop uint16) {
		item := map[string]types.AttributeValue{
			dynamostore.AttrStatus:      &types.AttributeValueMemberS{Value: status},
			dynamostore.AttrToken:       &types.AttributeValueMemberN{Value: token},
			dynamostore.AttrAttempt:     &types.AttributeValueMemberN{Value: attempt},
			dynamostore.AttrLeaseUntil:  &types.AttributeValueMemberN{Value: lease},
			dynamostore.AttrExpiresAt:   &types.AttributeValueMemberN{Value: expires},
			dynamostore.AttrFingerprint: &types.AttributeValueMemberB{Value: fp},
			dynamostore.AttrResult:      &types.AttributeValueMemberB{Value: result},
		}
		// Each bit of drop removes an attribute or gives it another type.
		names := []string{dynamostore.AttrStatus, dynamostore.AttrToken, dynamostore.AttrAttempt, dynamostore.AttrLeaseUntil,
			dynamostore.AttrExpiresAt, dynamostore.AttrFingerprint, dynamostore.AttrResult}
		for i, n := range names {
			switch {
			case drop&(1<<i) != 0:
				delete(item, n)
			case drop&(1<<(i+8)) != 0:
				item[n] = &types.AttributeValueMemberBOOL{Value: true}
			}
		}
		r, err := dynamostore.DecodeItem("k", item)
		if err != nil {
			if !errors.Is(err, dynamostore.ErrUnknownFormat) {
				t.Fatalf("error %v, want ErrUnknownFormat", err)
			}
			return
		}
		if r.Key != "k" || r.Status.String() != map[string]string{"INPROGRESS": "InProgress", "COMPLETED": "Completed", "FAILED": "Failed"}[status] {
			t.Fatalf("status %q decoded as %v", status, r.Status)
		}
		if n, err := strconv.ParseUint(token, 10, 64); err != nil || storage.Token(n) != r.Token {
			t.Fatalf("token %q decoded as %d", token, r.Token)
		}
		if n, err := strconv.Atoi(attempt); err != nil || n != r.Attempt || n < 1 {
			t.Fatalf("attempt %q decoded as %d", attempt, r.Attempt)
		}
		if n, err := strconv.ParseInt(expires, 10, 64); err != nil || n != r.ExpiresAt.UnixMilli() || !bytes.Equal(r.Fingerprint, fp) {
			t.Fatalf("expires %q decoded as %v", expires, r.ExpiresAt)
		}
		if r.Status == storage.StatusInProgress {
			n, err := strconv.ParseInt(lease, 10, 64)
			if err != nil || (n == 0) != r.LeaseUntil.IsZero() || (n != 0 && n != r.LeaseUntil.UnixMilli()) || r.Result != nil {
				t.Fatalf("InProgress with lease %q: %+v", lease, r)
			}
		} else if !bytes.Equal(r.Result, result) {
			t.Fatalf("result %q decoded as %q", result, r.Result)
		}
	})
}
