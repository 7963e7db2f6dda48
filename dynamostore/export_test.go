package dynamostore

// DecodeItem exposes the item decoder to the fuzz test.
var DecodeItem = decodeItem
