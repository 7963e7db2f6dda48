package storeurl_test

import (
	"slices"
	"testing"

	"github.com/idemgo/idem/storeurl"
)

func TestRedact(t *testing.T) {
	for _, tc := range []struct{ in, want string }{
		{"postgres://app:S3cret@db:5432/test", "postgres://app:xxxxx@db:5432/test"},
		{"postgres://app@db/test?password=S3cret&sslmode=disable", "postgres://app@db/test?password=xxxxx&sslmode=disable"},
		{"postgres://db/test?sslmode=require&sslpassword=S3cret", "postgres://db/test?sslmode=require&sslpassword=xxxxx"},
		{"redis://:S3cret@127.0.0.1:6379/0", "redis://:xxxxx@127.0.0.1:6379/0"},
		{"postgres://app:S3cret@db/te%zzst", "postgres://app:xxxxx@db/te%zzst"},
		{"postgres://app:S3%cret@db/test?password=S3cret", "postgres://app:xxxxx@db/test?password=xxxxx"},
		{"postgres://app:p@ss@db/test", "postgres://app:xxxxx@db/test"},
		{"dynamodb://h:8000/t?secret_access_key=S3cret&access_key_id=AK", "dynamodb://h:8000/t?secret_access_key=xxxxx&access_key_id=AK"},
		{"redis://h/0?prefix=a&Token=S3cret;api_key=S3cret", "redis://h/0?prefix=a&Token=xxxxx;api_key=xxxxx"},
		{"mem://", "mem://"},
		{"redis://app@h:6379/0", "redis://app@h:6379/0"},
		{"sqlite:///var/lib/idem.db", "sqlite:///var/lib/idem.db"},
		{"not a URL: %zz", "not a URL: %zz"},
	} {
		if got := storeurl.Redact(tc.in); got != tc.want {
			t.Errorf("Redact(%q) = %q, want %q", tc.in, got, tc.want)
		}
	}
}

func TestSecrets(t *testing.T) {
	for _, tc := range []struct {
		in   string
		want []string
	}{
		{"postgres://app:S3cret@db/test", []string{"S3cret"}},
		{"postgres://app:S3%21cret@db/test?password=a%2Bb+c&sslmode=disable", []string{"S3%21cret", "S3!cret", "a%2Bb+c", "a+b+c", "a+b c"}},
		{"postgres://app:S3cret@db/te%zzst", []string{"S3cret"}},
		{"dynamodb://h/t?secret_access_key=Key1&region=x", []string{"Key1"}},
		{"redis://:ab@h/0", nil}, // too short to replace in text
		{"redis://app@h/0?prefix=idem", nil},
		{"mem://", nil},
	} {
		if got := storeurl.Secrets(tc.in); !slices.Equal(got, tc.want) {
			t.Errorf("Secrets(%q) = %q, want %q", tc.in, got, tc.want)
		}
	}
}
