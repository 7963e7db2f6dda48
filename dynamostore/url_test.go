package dynamostore_test

import (
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/service/dynamodb"

	"github.com/idemgo/idem/dynamostore"
	"github.com/idemgo/idem/dynamostore/dynamostoretest"
	"github.com/idemgo/idem/storage"
)

func TestParseURL(t *testing.T) {
	for _, tc := range []struct {
		raw  string
		want dynamostore.URL
	}{
		{"dynamodb://127.0.0.1:8000/idem_records", dynamostore.URL{Endpoint: "http://127.0.0.1:8000", Table: "idem_records"}},
		{"dynamodb://localhost:8000", dynamostore.URL{Endpoint: "http://localhost:8000", Table: "idem_records"}},
		{"dynamodb:///orders.idem?region=eu-west-1", dynamostore.URL{Region: "eu-west-1", Table: "orders.idem"}},
		{"dynamodb:///", dynamostore.URL{Table: "idem_records"}},
	} {
		got, err := dynamostore.ParseURL(tc.raw)
		if err != nil || got != tc.want {
			t.Errorf("ParseURL(%q) = %+v, %v; want %+v", tc.raw, got, err, tc.want)
		}
	}
	for _, tc := range []struct{ raw, want string }{
		{"redis://127.0.0.1:6379", "scheme"},
		{"dynamodb://key:secret@127.0.0.1:8000/t_1", "credentials"},
		{"dynamodb://127.0.0.1:8000/t_1?endpoint=x", `unknown parameter "endpoint"`},
		{"dynamodb://127.0.0.1:8000/t_1?region=", "region="},
		{"dynamodb://127.0.0.1:8000/a/b", `table "a/b"`},
		{"dynamodb://127.0.0.1:8000/ab", `table "ab"`},
		{"dynamodb://[::1", "store URL"},
	} {
		_, err := dynamostore.ParseURL(tc.raw)
		if err == nil || !strings.HasPrefix(err.Error(), "dynamostore: ") || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("ParseURL(%q): %v, want an error about %s", tc.raw, err, tc.want)
		}
		if err != nil && strings.Contains(err.Error(), "secret") {
			t.Errorf("ParseURL(%q): the error shows the secret: %v", tc.raw, err)
		}
	}
}

// The client of a URL naming a server of one's own reaches it.
func TestURLClient(t *testing.T) {
	table := dynamostoretest.Table(t, dynamostoretest.Client(t))
	u, err := dynamostore.ParseURL(strings.Replace(dynamostoretest.Endpoint(), "http://", "dynamodb://", 1) + "/" + table)
	if err != nil {
		t.Fatal(err)
	}
	tr := http.DefaultTransport.(*http.Transport).Clone()
	t.Cleanup(tr.CloseIdleConnections)
	c, err := u.NewClient(ctxT(t), func(o *dynamodb.Options) { o.HTTPClient = &http.Client{Transport: tr} })
	if err != nil {
		t.Fatal(err)
	}
	s, err := dynamostore.New(c, dynamostore.Config{Table: u.Table})
	if err != nil {
		t.Fatal(err)
	}
	mustClaim(t, s, args("k", time.Minute), storage.Acquired)
}

// No error of ParseURL prints a secret of the URL it refuses: a password,
// a query parameter's value (a secret key, a token), or the whole URL of
// one that does not parse.
func TestParseURLPrintsNoSecret(t *testing.T) {
	const secret = "S3cretPw"
	for _, raw := range []string{
		"dynamodb://user:" + secret + "@127.0.0.1:8000/t",
		"dynamodb://127.0.0.1:8000/t?secret_access_key=" + secret,
		"dynamodb:///t?region=eu-west-1&aws_session_token=" + secret,
		"dynamodb://127.0.0.1:8000/t?token=" + secret + "%zz",
		"http://127.0.0.1:8000/t?secret=" + secret,
	} {
		_, err := dynamostore.ParseURL(raw)
		if err == nil {
			t.Fatalf("ParseURL(%q): no error", raw)
		}
		if strings.Contains(err.Error(), secret) {
			t.Errorf("ParseURL(%q): %v: prints the secret", raw, err)
		}
	}
}
