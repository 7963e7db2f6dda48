// Package dynamourl links the dynamodb:// scheme into [storeurl.Open];
// import it for that side effect:
//
//	import _ "github.com/idemgo/idem/storeurl/dynamourl"
//
// The URL is dynamostore's (dynamostore.ParseURL):
// dynamodb://host:port/table for a DynamoDB-compatible server at
// http://host:port (dynalite, DynamoDB Local), dynamodb:///table for
// DynamoDB on AWS with the SDK's default region and credentials; region=
// sets the region. Open checks the table (dynamostore.CheckTable), which
// also shows that DynamoDB answers, or with [storeurl.Migrate] creates or
// completes it (dynamostore.CreateTable). The client has an HTTP transport
// of its own, whose connections closing the store closes.
package dynamourl

import (
	"context"
	"net/http"
	"net/url"

	"github.com/aws/aws-sdk-go-v2/service/dynamodb"

	"github.com/idemgo/idem/dynamostore"
	"github.com/idemgo/idem/storage"
	"github.com/idemgo/idem/storeurl"
	"github.com/idemgo/idem/storeurl/internal/param"
)

func init() { storeurl.Register("dynamodb", open) }

func open(ctx context.Context, u *url.URL, o storeurl.Options) (storage.Store, func() error, error) {
	d, err := dynamostore.ParseURL(u.String())
	if err != nil {
		return nil, nil, &storeurl.URLError{Err: err}
	}
	tr := http.DefaultTransport.(*http.Transport).Clone()
	closeStore := func() error { tr.CloseIdleConnections(); return nil }
	client, err := d.NewClient(ctx, func(o *dynamodb.Options) { o.HTTPClient = &http.Client{Transport: tr} })
	if err != nil {
		return nil, nil, err
	}
	s, err := dynamostore.New(client, dynamostore.Config{Table: d.Table})
	if err != nil {
		return nil, nil, &storeurl.URLError{Err: err}
	}
	tctx, cancel := context.WithTimeout(ctx, param.Migrate)
	defer cancel()
	if o.Migrate {
		err = dynamostore.CreateTable(tctx, client, d.Table)
	} else {
		err = dynamostore.CheckTable(tctx, client, d.Table)
	}
	if err != nil {
		closeStore()
		return nil, nil, err
	}
	return s, closeStore, nil
}
