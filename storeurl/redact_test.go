package storeurl_test

import (
	"slices"
	"strings"
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
		// A password with an unescaped "/", "?", "#" or "@": hidden to
		// the last "@", whatever a URL parser makes of it.
		{"postgres://app:Sup3r/H1dden@db/test", "postgres://app:xxxxx@db/test"},
		{"postgres://app:5432/H1dden@db/test", "postgres://app:xxxxx@db/test"},
		{"postgres://app:Sup3r?H1dden@db/test?sslmode=disable", "postgres://app:xxxxx@db/test?sslmode=disable"},
		{"redis://:Sup3r#H1dden@h:6379/0", "redis://:xxxxx@h:6379/0"},
		{"redis://:12#H1dden@h:6379/0", "redis://:xxxxx@h:6379/0"},
		{"postgres://app:pw@db/test?application_name=a@b", "postgres://app:xxxxx@b"}, // ambiguous: hides more
		// A token alone in the user info of a NATS URL.
		{"nats://S3cretToken@127.0.0.1:4222", "nats://xxxxx@127.0.0.1:4222"},
		{"tls://S3cret:Tok@h:4222", "tls://xxxxx@h:4222"},
		{"nats://app:S3cret@h:4222", "nats://xxxxx@h:4222"},
		{"nats://h:4222", "nats://h:4222"},
		// libpq connection strings.
		{"host=db user=app password=S3cret dbname=test", "host=db user=app password=xxxxx dbname=test"},
		{"host=db password = 'S3 cr\\'et' sslmode=disable", "host=db password = xxxxx sslmode=disable"},
		{"password=S3cret", "password=xxxxx"},
		{"host=db\tPassword=S3://cret@x sslpassword='unterminated", "host=db\tPassword=xxxxx sslpassword=xxxxx"},
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
		{"postgres://app:Sup3r/H1dden@db/test", []string{"Sup3r/H1dden", "Sup3r", "H1dden"}},
		{"nats://S3cretToken@h:4222", []string{"S3cretToken"}},
		{"host=db password='S3 cr\\'et' dbname=test", []string{`'S3 cr\'et'`, "S3 cr'et"}},
	} {
		if got := storeurl.Secrets(tc.in); !slices.Equal(got, tc.want) {
			t.Errorf("Secrets(%q) = %q, want %q", tc.in, got, tc.want)
		}
	}
}

// FuzzRedactHidesTheSecret puts a secret in every place a URL or a
// connection string holds one: neither Redact's text nor a message
// scrubbed of Secrets holds it.
func FuzzRedactHidesTheSecret(f *testing.F) {
	for _, s := range []string{"S3cretPw", "pa/ss", "p@ss#w?rd", "a%2Fb", "x:y@z", "'quoted'", "tok=en", "a://b@c"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, secret string) {
		if len(secret) < 3 {
			t.Skip("too short to tell from the URL's own text")
		}
		forms := []string{
			"postgres://app:" + secret + "@db:5432/test?sslmode=disable",
			"redis://:" + secret + "@127.0.0.1:6379/0",
			"nats://" + secret + "@127.0.0.1:4222",
		}
		if !strings.ContainsAny(secret, "&;#") { // they end a query's value
			forms = append(forms,
				"postgres://app@db/test?sslmode=disable&password="+secret+"&x=1",
				"dynamodb://h:8000/t?secret_access_key="+secret)
		}
		if !strings.ContainsAny(secret, " \t\n\f\r") && !strings.HasPrefix(secret, "'") { // a libpq word
			forms = append(forms, "host=db user=app password="+secret+" dbname=test")
		}
		for _, raw := range forms {
			if strings.Count(raw, secret) != 1 {
				continue // the secret is a piece of the form's own text
			}
			if got := storeurl.Redact(raw); strings.Contains(got, secret) {
				t.Errorf("Redact(%q) = %q: the secret is printed", raw, got)
			}
			msg := "cannot connect to " + raw
			for _, s := range storeurl.Secrets(raw) {
				msg = strings.ReplaceAll(msg, s, "xxxxx")
			}
			if strings.Contains(msg, secret) {
				t.Errorf("a message scrubbed of Secrets(%q) = %q still holds the secret", raw, msg)
			}
		}
	})
}
