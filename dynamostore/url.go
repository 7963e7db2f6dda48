package dynamostore

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"net/url"
	"strings"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/config"
	"github.com/aws/aws-sdk-go-v2/credentials"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
)

// URL is a store URL of scheme dynamodb, as command lines and configuration
// files name a store:
//
//	dynamodb:///idem_records             DynamoDB on AWS, with the SDK's default region and credentials
//	                                     (environment, shared configuration, instance or task role)
//	dynamodb://127.0.0.1:8000/idem_records  a DynamoDB-compatible server at http://127.0.0.1:8000
//	                                     (dynalite, DynamoDB Local, LocalStack), with placeholder credentials
//
// The path names the table (default idem_records). The query parameter
// region sets the region (default: the SDK's on AWS, us-east-1 for a
// server of one's own, which does not care).
type URL struct {
	// Endpoint is "http://host:port" for a server of one's own, "" for AWS.
	Endpoint string
	// Region is the region, "" for the SDK's default.
	Region string
	// Table is the records table's name.
	Table string
}

// ParseURL parses a dynamodb:// store URL (see [URL]). Credentials in the
// URL, other query parameters and a table name DynamoDB would refuse are
// errors.
func ParseURL(raw string) (URL, error) {
	u, err := url.Parse(raw)
	if err != nil {
		if ue, ok := errors.AsType[*url.Error](err); ok {
			err = ue.Err // without the URL, which may hold a secret
		}
		return URL{}, fmt.Errorf("dynamostore: store URL: %w", err)
	}
	shown := redacted(u)
	if u.Scheme != "dynamodb" {
		return URL{}, fmt.Errorf("dynamostore: store URL %s: scheme %q, want dynamodb", shown, u.Scheme)
	}
	if u.User != nil {
		return URL{}, fmt.Errorf("dynamostore: store URL %s: credentials do not go in the URL (the SDK reads them from the environment)", shown)
	}
	p := URL{Table: cmp.Or(strings.TrimPrefix(u.Path, "/"), DefaultTable)}
	if u.Host != "" {
		p.Endpoint = "http://" + u.Host
	}
	query, err := url.ParseQuery(u.RawQuery)
	if err != nil {
		return URL{}, fmt.Errorf("dynamostore: store URL %s: malformed query", shown)
	}
	for name, v := range query {
		switch {
		case name != "region":
			return URL{}, fmt.Errorf("dynamostore: store URL %s: unknown parameter %q (the only one is region=)", shown, name)
		case len(v) != 1 || v[0] == "":
			return URL{}, fmt.Errorf("dynamostore: store URL %s: region= must be given once, not empty", shown)
		}
		p.Region = v[0]
	}
	if !validTable.MatchString(p.Table) {
		return URL{}, fmt.Errorf("dynamostore: store URL %s: table %q: must be 3 to 255 letters, digits, '_', '-' or '.'", shown, p.Table)
	}
	return p, nil
}

// redacted returns u as an error may print it: without a password, and
// with the value of every query parameter but region replaced, since such
// a parameter (a secret key, a token) is refused, not understood.
func redacted(u *url.URL) string {
	c := *u
	q, err := url.ParseQuery(c.RawQuery)
	switch {
	case err != nil:
		c.RawQuery = "xxxxx"
	case len(q) > 0:
		for name := range q {
			if name != "region" {
				q[name] = []string{"xxxxx"}
			}
		}
		c.RawQuery = q.Encode()
	}
	return c.Redacted()
}

// NewClient returns a DynamoDB client for the URL: on AWS one built from
// the SDK's default configuration (config.LoadDefaultConfig), for a server
// of one's own one that signs its requests with placeholder credentials.
// optFns change the client's options after that (an HTTP client, a
// retryer).
func (u URL) NewClient(ctx context.Context, optFns ...func(*dynamodb.Options)) (*dynamodb.Client, error) {
	if u.Endpoint != "" {
		return dynamodb.New(dynamodb.Options{
			Region:       cmp.Or(u.Region, "us-east-1"),
			BaseEndpoint: aws.String(u.Endpoint),
			Credentials:  credentials.NewStaticCredentialsProvider("local", "local", ""),
		}, optFns...), nil
	}
	var opts []func(*config.LoadOptions) error
	if u.Region != "" {
		opts = append(opts, config.WithRegion(u.Region))
	}
	cfg, err := config.LoadDefaultConfig(ctx, opts...)
	if err != nil {
		return nil, fmt.Errorf("dynamostore: loading the AWS configuration: %w", err)
	}
	if cfg.Region == "" {
		return nil, fmt.Errorf("dynamostore: no AWS region: set AWS_REGION or the URL's region= parameter")
	}
	return dynamodb.NewFromConfig(cfg, optFns...), nil
}
