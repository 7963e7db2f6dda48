package dynamostore

import (
	"context"
	"errors"
	"fmt"

	"github.com/aws/smithy-go"

	"github.com/idemgo/idem/storage"
)

var (
	// ErrUnknownFormat: a record's item is not one this package wrote (an
	// attribute missing or of another type, an unknown status). The item is
	// left as it is.
	ErrUnknownFormat = storage.Refusal("dynamostore: item has an unknown format")

	// ErrInvalidArgs: a store method was called with arguments out of range
	// (a lease or retention that is not positive or longer than 100 years, a
	// key that is empty or longer than MaxKeyLen, which also wraps
	// storage.ErrInvalidKey, a fingerprint longer than MaxFingerprintLen).
	// Nothing was sent to DynamoDB.
	ErrInvalidArgs = storage.Refusal("dynamostore: invalid arguments")

	// ErrContention: a claim met a record that kept changing under it and
	// gave up after a few rounds. It wraps storage.ErrStoreUnavailable: the
	// Guard fails the call and a retry claims again.
	ErrContention = fmt.Errorf("dynamostore: the record kept changing during the claim: %w", storage.ErrStoreUnavailable)
)

// translate turns an error of the SDK into the error an operation returns,
// prefixed "dynamostore: op: ":
//
//   - the caller's context cancelled: its error, wrapped;
//   - the table missing (ResourceNotFoundException) or a request DynamoDB
//     refuses as malformed (ValidationException: a table whose key schema
//     is not this package's): wrapped as is, naming the table;
//   - anything else (the network, a timeout, throttling once the client's
//     retries are spent, a server error, credentials): wrapped with
//     storage.ErrStoreUnavailable.
//
// The SDK's error stays in the chain, so errors.As finds its smithy.APIError.
func (s *Store) translate(op string, err error) error {
	if errors.Is(err, context.Canceled) {
		return fmt.Errorf("dynamostore: %s: %w", op, err)
	}
	var api smithy.APIError
	if errors.As(err, &api) {
		switch api.ErrorCode() {
		case "ResourceNotFoundException":
			return fmt.Errorf("dynamostore: %s: table %q does not exist (create it with CreateTable): %w", op, s.cfg.Table, err)
		case "ValidationException":
			return fmt.Errorf("dynamostore: %s: table %q refused the request (is its partition key %q, of type S?): %w", op, s.cfg.Table, AttrKey, err)
		}
	}
	return fmt.Errorf("dynamostore: %s: %w: %w", op, storage.ErrStoreUnavailable, err)
}
