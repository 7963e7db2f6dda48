package dynamostore

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"
	"github.com/aws/smithy-go"

	"github.com/idemgo/idem/storage"
)

// maxTableWait bounds how long CreateTable waits for a new table to become
// ACTIVE (DynamoDB takes seconds; the caller's context may end it sooner).
const maxTableWait = 5 * time.Minute

// CreateTable creates the records table a Store needs, if it does not
// exist, and waits until it is ACTIVE: partition key "id" of type S and no
// sort key, on-demand billing (PAY_PER_REQUEST), and Time to Live on the
// attribute "expiration". It is idempotent: an existing table is checked
// with [CheckTable] (any billing mode will do) and gets its TTL enabled
// when it is not. Errors name the table; when DynamoDB cannot be reached
// they wrap storage.ErrStoreUnavailable.
//
// A server without the TTL API (dynalite answers UpdateTimeToLive with
// UnknownOperationException) gets the table without TTL: the store treats
// expired records as absent all the same, but nothing deletes them.
// DynamoDB allows one TTL attribute per table: a table whose TTL is on
// another attribute is an error.
func CreateTable(ctx context.Context, client *dynamodb.Client, table string) error {
	_, err := client.CreateTable(ctx, &dynamodb.CreateTableInput{
		TableName:            &table,
		BillingMode:          types.BillingModePayPerRequest,
		AttributeDefinitions: []types.AttributeDefinition{{AttributeName: aws.String(AttrKey), AttributeType: types.ScalarAttributeTypeS}},
		KeySchema:            []types.KeySchemaElement{{AttributeName: aws.String(AttrKey), KeyType: types.KeyTypeHash}},
	})
	var inUse *types.ResourceInUseException
	if err != nil && !errors.As(err, &inUse) {
		return tableErr("CreateTable", table, err)
	}
	w := dynamodb.NewTableExistsWaiter(client, func(o *dynamodb.TableExistsWaiterOptions) {
		o.MinDelay, o.MaxDelay = 100*time.Millisecond, 2*time.Second
	})
	if err := w.Wait(ctx, &dynamodb.DescribeTableInput{TableName: &table}, maxTableWait); err != nil {
		return tableErr("CreateTable", table, fmt.Errorf("waiting for the table to become ACTIVE: %w", err))
	}
	if err := CheckTable(ctx, client, table); err != nil {
		return err
	}
	return enableTTL(ctx, client, table)
}

func enableTTL(ctx context.Context, client *dynamodb.Client, table string) error {
	d, err := client.DescribeTimeToLive(ctx, &dynamodb.DescribeTimeToLiveInput{TableName: &table})
	if err != nil {
		return tableErr("CreateTable", table, err)
	}
	if ttl := d.TimeToLiveDescription; ttl != nil && ttl.TimeToLiveStatus != types.TimeToLiveStatusDisabled {
		if name := aws.ToString(ttl.AttributeName); name != AttrExpiration {
			return fmt.Errorf("dynamostore: CreateTable %q: Time to Live is %s on attribute %q; the store needs it on %q",
				table, ttl.TimeToLiveStatus, name, AttrExpiration)
		}
		return nil
	}
	_, err = client.UpdateTimeToLive(ctx, &dynamodb.UpdateTimeToLiveInput{
		TableName:               &table,
		TimeToLiveSpecification: &types.TimeToLiveSpecification{AttributeName: aws.String(AttrExpiration), Enabled: aws.Bool(true)},
	})
	var api smithy.APIError
	if errors.As(err, &api) && api.ErrorCode() == "UnknownOperationException" {
		return nil // a server without TTL (see CreateTable)
	}
	if err != nil {
		return tableErr("CreateTable", table, fmt.Errorf("enabling Time to Live: %w", err))
	}
	return nil
}

// tableErr returns the error of op on table: wrapping storage.ErrStoreUnavailable
// when DynamoDB gave no answer (the network, a timeout), as the store's
// own calls do.
func tableErr(op, table string, err error) error {
	var api smithy.APIError
	if errors.As(err, &api) || errors.Is(err, context.Canceled) {
		return fmt.Errorf("dynamostore: %s %q: %w", op, table, err)
	}
	return fmt.Errorf("dynamostore: %s %q: %w: %w", op, table, storage.ErrStoreUnavailable, err)
}

// CheckTable returns nil when table exists and has the key schema a Store
// needs (partition key "id" of type S, no sort key), and an error saying
// what differs otherwise (wrapping storage.ErrStoreUnavailable when DynamoDB
// cannot be reached). It reads the table's description only; use it to
// check a table managed elsewhere (Terraform, CloudFormation) at start-up.
func CheckTable(ctx context.Context, client *dynamodb.Client, table string) error {
	d, err := client.DescribeTable(ctx, &dynamodb.DescribeTableInput{TableName: &table})
	if err != nil {
		return tableErr("CheckTable", table, err)
	}
	t := d.Table
	ks := t.KeySchema
	if len(ks) != 1 || aws.ToString(ks[0].AttributeName) != AttrKey || ks[0].KeyType != types.KeyTypeHash {
		return fmt.Errorf("dynamostore: table %q: key schema %s; the store needs the partition key %q alone", table, describeKeys(ks), AttrKey)
	}
	for _, a := range t.AttributeDefinitions {
		if aws.ToString(a.AttributeName) == AttrKey && a.AttributeType != types.ScalarAttributeTypeS {
			return fmt.Errorf("dynamostore: table %q: partition key %q is of type %s; the store needs S", table, AttrKey, a.AttributeType)
		}
	}
	return nil
}

func describeKeys(ks []types.KeySchemaElement) string {
	s := "["
	for i, k := range ks {
		if i > 0 {
			s += " "
		}
		s += aws.ToString(k.AttributeName) + " " + string(k.KeyType)
	}
	return s + "]"
}
