package dynamostore

import (
	"context"
	"encoding/base64"
	"errors"
	"strings"

	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"

	"github.com/idemgo/idem/storage"
)

// Scanner is the call of DynamoDB's API that [Store.Scan] needs beside
// [API]'s: *dynamodb.Client has it.
type Scanner interface {
	Scan(ctx context.Context, in *dynamodb.ScanInput, optFns ...func(*dynamodb.Options)) (*dynamodb.ScanOutput, error)
}

var _ storage.Scanner = (*Store)(nil)

// Scan implements [storage.Scanner] with DynamoDB Scans of the whole table,
// page by page (strongly consistent reads), keeping the live records
// whose store key starts with prefix: a table's keys are hashed, so a
// Scan of one namespace reads every item, and costs the table's read
// capacity accordingly. It fails when the Store's API has no Scan
// ([Scanner]).
func (s *Store) Scan(ctx context.Context, prefix string, fn func(storage.Record) bool) error {
	sc, ok := s.api.(Scanner)
	if !ok {
		return errors.New("dynamostore: Scan: the Store's API has no Scan method (a *dynamodb.Client has)")
	}
	var start map[string]types.AttributeValue
	consistent := true
	for {
		if err := ctx.Err(); err != nil {
			return err
		}
		out, err := sc.Scan(ctx, &dynamodb.ScanInput{TableName: &s.cfg.Table, ExclusiveStartKey: start, ConsistentRead: &consistent})
		if err != nil {
			return s.translate("Scan", err)
		}
		c := s.clock()
		for _, item := range out.Items {
			id, ok := item[AttrKey].(*types.AttributeValueMemberS)
			if !ok {
				continue
			}
			raw, err := base64.RawURLEncoding.DecodeString(id.Value)
			if err != nil || !strings.HasPrefix(string(raw), prefix) {
				continue
			}
			rec, err := decodeItem(string(raw), item)
			if err != nil || millis(rec.ExpiresAt) < c.dead {
				continue // not a record of this package's, or expired
			}
			if !fn(rec) {
				return nil
			}
		}
		if len(out.LastEvaluatedKey) == 0 {
			return nil
		}
		start = out.LastEvaluatedKey
	}
}
