package dynamodb

// The limits and errors the external tests check against, unexported in
// the package: users meet them as the numbers and messages the
// documentation gives.
const (
	MaxBatchGetKeys = maxBatchGetKeys
	MaxItemSize     = maxItemSize
	MaxTxActions    = maxTxActions
)

var (
	ErrTxEnded = errTxEnded
	ItemSize   = sizeOf
)

type UnprocessedError = unprocessedError
