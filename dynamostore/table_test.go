package dynamostore_test

import (
	"errors"
	"strings"
	"testing"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"

	"github.com/idemgo/idem"
	"github.com/idemgo/idem/dynamostore"
	"github.com/idemgo/idem/dynamostore/dynamostoretest"
)

// CreateTable is idempotent, and refuses to adopt a table of another shape.
func TestCreateTable(t *testing.T) {
	c := dynamostoretest.Client(t)
	table := dynamostoretest.Table(t, c)
	if err := dynamostore.CreateTable(ctxT(t), c, table); err != nil {
		t.Fatalf("CreateTable of an existing table: %v", err)
	}
	if err := dynamostore.CheckTable(ctxT(t), c, table); err != nil {
		t.Fatalf("CheckTable: %v", err)
	}
	d, err := c.DescribeTable(ctxT(t), &dynamodb.DescribeTableInput{TableName: &table})
	if err != nil {
		t.Fatal(err)
	}
	if bm := d.Table.BillingModeSummary; bm == nil || bm.BillingMode != types.BillingModePayPerRequest {
		t.Fatalf("billing mode %+v, want PAY_PER_REQUEST", d.Table.BillingModeSummary)
	}

	for _, shape := range []struct {
		name string
		keys []types.KeySchemaElement
		defs []types.AttributeDefinition
		want string
	}{
		{"binary key",
			[]types.KeySchemaElement{{AttributeName: aws.String("id"), KeyType: types.KeyTypeHash}},
			[]types.AttributeDefinition{{AttributeName: aws.String("id"), AttributeType: types.ScalarAttributeTypeB}},
			`partition key "id" is of type B`},
		{"other key",
			[]types.KeySchemaElement{{AttributeName: aws.String("pk"), KeyType: types.KeyTypeHash}},
			[]types.AttributeDefinition{{AttributeName: aws.String("pk"), AttributeType: types.ScalarAttributeTypeS}},
			"key schema [pk HASH]"},
		{"sort key",
			[]types.KeySchemaElement{{AttributeName: aws.String("id"), KeyType: types.KeyTypeHash}, {AttributeName: aws.String("sk"), KeyType: types.KeyTypeRange}},
			[]types.AttributeDefinition{{AttributeName: aws.String("id"), AttributeType: types.ScalarAttributeTypeS}, {AttributeName: aws.String("sk"), AttributeType: types.ScalarAttributeTypeS}},
			"key schema [id HASH sk RANGE]"},
	} {
		name := table + "_" + strings.ReplaceAll(shape.name, " ", "_")
		_, err := c.CreateTable(ctxT(t), &dynamodb.CreateTableInput{TableName: &name, BillingMode: types.BillingModePayPerRequest,
			KeySchema: shape.keys, AttributeDefinitions: shape.defs})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { c.DeleteTable(ctxT(t), &dynamodb.DeleteTableInput{TableName: &name}) })
		err = dynamostore.CreateTable(ctxT(t), c, name)
		if err == nil || !strings.Contains(err.Error(), shape.want) {
			t.Errorf("CreateTable over a table with a %s: %v, want an error saying %q", shape.name, err, shape.want)
		}
	}
	if err := dynamostore.CheckTable(ctxT(t), c, table+"_missing"); err == nil || errors.Is(err, idem.ErrStoreUnavailable) {
		t.Errorf("CheckTable of a missing table: %v, want an error that is not ErrStoreUnavailable", err)
	}
	down := dynamodb.New(dynamodb.Options{Region: "us-east-1", BaseEndpoint: aws.String("http://127.0.0.1:1"),
		Credentials: c.Options().Credentials, RetryMaxAttempts: 1})
	if err := dynamostore.CreateTable(ctxT(t), down, table); !errors.Is(err, idem.ErrStoreUnavailable) {
		t.Errorf("CreateTable with no server: %v, want ErrStoreUnavailable", err)
	}
	if err := dynamostore.CheckTable(ctxT(t), down, table); !errors.Is(err, idem.ErrStoreUnavailable) {
		t.Errorf("CheckTable with no server: %v, want ErrStoreUnavailable", err)
	}
}
