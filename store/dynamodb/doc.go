// Package dynamodb is a [store.Store] that keeps idempotency records in an
// Amazon DynamoDB table, one item per key, laid out as AWS Powertools lays
// them out so that existing tables, TTL settings and infrastructure code
// carry over.
//
//	client := dynamodb.NewFromConfig(cfg) // the AWS SDK's client
//	s, err := idemddb.New(client, "idempotency")
//	g, err := guard.New(s)
//
// (This package is also named dynamodb; import it under another name, such
// as idemddb, next to the SDK's.)
//
// # Requests
//
// [Store.Acquire] is one conditional PutItem that asks DynamoDB to return
// the existing item when the condition fails
// (ReturnValuesOnConditionCheckFailure ALL_OLD), so a replay costs one
// request; only if no item comes back does it read it with a consistent
// GetItem. [Store.Complete] and [Store.Extend] are one UpdateItem and
// [Store.Release] one DeleteItem, each conditional on the record's fencing
// token. A guarded call therefore costs two writes the first time and one
// on a replay. [Store.GetMany] (the optional [store.BatchGetter], which
// guard.DoBatch uses) reads up to 100 records per consistent BatchGetItem,
// so a batch of completed items replays for one read per 100 items and no
// writes. Every expression is built with the SDK's expression builder, so
// attribute names are always aliased; each is built once per store, and a
// request fills in only its values.
//
// Requests are retried by the SDK's standard retryer with
// 8 attempts and short jittered backoff (see
// [WithMaxAttempts] and [WithRetryer]). Errors are [*store.OpError] values naming
// the operation, table and key; throttling that outlasts the retries
// matches [store.ErrThrottled], and [errors.As] still reaches the SDK's
// error type (for example *types.ProvisionedThroughputExceededException).
//
// # Transactions
//
// The store implements [store.Transactor] with handle [*TxWrites], for
// guard.DoTx: the guarded function adds its writes (Put, Update, Delete,
// ConditionCheck, on any table of the account and region) to the
// TxWrites instead of sending them, and the guard sends them with the
// completion of the call's record, fenced on its token and its being in
// progress, as one TransactWriteItems under a ClientRequestToken, so that
// a resend after a lost answer is applied at most once. The writes and the
// completion are applied together or not at all: a crash before the
// commit sends nothing, and a holder whose claim was taken over has its
// whole transaction cancelled. A first call costs the claim and the
// transaction, two requests; a replay one.
//
// DynamoDB's limits (100 actions with the completions, 4 MB, 400 KB per
// item, one action per item) are checked before anything is sent
// ([*TxLimitError]); a cancelled transaction is reported per action
// ([*TxCanceledError]). A transaction cancelled because a condition of the
// function's own did not hold (a debit the balance does not cover) matches
// [store.ErrRefused]: guard.DoTx releases the key and reports it as
// guard.ErrRefused, the function's outcome, not as a store failure. See
// [TxWrites] and [Store.Begin].
//
// # Layout
//
// With the default options an item has these attributes:
//
//	id                      S  the idempotency key, "<scope>#<hash>" (partition key)
//	expiration              N  end of the record's life, epoch seconds, rounded up (the TTL attribute)
//	in_progress_expiration  N  end of an in-progress claim's lease, epoch milliseconds, rounded up; absent if none
//	status                  S  INPROGRESS or COMPLETED
//	data                    S  the result, when it is UTF-8 JSON text
//	                        B  the result otherwise, or gzip-compressed; absent if there is none
//	validation              S  payload hash; absent when payload validation is off
//	token                   S  fencing token of the claim (idemguard only)
//	result_kind             S  "error" or "unavailable"; absent for a value (idemguard only)
//	data_encoding           S  "gzip" when data is compressed; absent otherwise (idemguard only)
//	format                  N  the record's format, store.FormatVersion of the release that wrote it;
//	                           an item without it reads as format 1 (idemguard only)
//
// Every name can be changed with [WithAttributes]. In sort-key mode
// ([WithSortKey]) the partition key holds a fixed value and the
// idempotency key goes in the sort key, so that one table with a composite
// primary key can hold several applications' records.
//
// DynamoDB holds a partition key of up to 2,048 bytes and a sort key of up
// to 1,024 ([Store.MaxKeyBytes]): a key is the call's scope, "#" and 64
// hex digits, so a scope may be at most 1,983 bytes (959 in sort-key
// mode). The guard refuses a longer key before it sends a request.
//
// Results larger than 16 KiB (see [WithCompressAbove])
// are gzip-compressed when that makes them smaller. An item that would
// still exceed DynamoDB's 400 KB limit (counted as DynamoDB counts it: the
// UTF-8 lengths of the attributes' names and values) is refused before it is sent, with an error
// matching [store.ErrTooLarge]; the guard then records the call as
// completed without a result.
//
// Expiry is checked by the store against the time the guard passes in, not
// left to TTL, which deletes expired items up to days late; TTL only keeps
// the table from growing.
//
// # AWS Powertools compatibility
//
// The store reads the items Powertools writes: a COMPLETED item from
// Powertools for Python, Java or .NET, whose data is the JSON text of the
// result as an S, reads back with that JSON as its result; one from
// Powertools for TypeScript, whose data is a native map, list or number,
// reads back as the equivalent JSON text. Items without a token can be
// replayed and, once expired or past their lease, replaced, but not
// completed or released by this store. Powertools can read the items this
// store writes as long as their result is JSON stored as an S (not
// compressed, not an error). Keys are derived differently by each
// Powertools runtime and by idemguard, so the same request gets different
// keys: sharing a table is safe, sharing records is not a goal.
//
// An item that is not a record ([Store.DecodeItem] fails: a missing or mistyped
// attribute, an unknown status) gives an error matching [store.ErrCorrupt];
// such an item blocks its key until it expires or is deleted. An item in a
// newer format than the build reads (written by a newer release, during a
// rolling deploy) gives one matching [store.ErrNewerFormat] instead, and
// nothing else of it is read.
//
// # Creating the table
//
// [CreateTable] creates a table for development and tests (on-demand
// capacity, TTL on the expiry attribute). In production declare it with
// your infrastructure code. CloudFormation:
//
//	IdempotencyTable:
//	  Type: AWS::DynamoDB::Table
//	  Properties:
//	    TableName: idempotency
//	    BillingMode: PAY_PER_REQUEST
//	    AttributeDefinitions:
//	      - AttributeName: id
//	        AttributeType: S
//	    KeySchema:
//	      - AttributeName: id
//	        KeyType: HASH
//	    TimeToLiveSpecification:
//	      AttributeName: expiration
//	      Enabled: true
//
// Terraform:
//
//	resource "aws_dynamodb_table" "idempotency" {
//	  name         = "idempotency"
//	  billing_mode = "PAY_PER_REQUEST"
//	  hash_key     = "id"
//
//	  attribute {
//	    name = "id"
//	    type = "S"
//	  }
//
//	  ttl {
//	    attribute_name = "expiration"
//	    enabled        = true
//	  }
//	}
//
// For sort-key mode add a second key attribute of type S with KeyType
// RANGE (CloudFormation) or range_key (Terraform), and pass its name to
// [WithSortKey].
//
// # IAM
//
// The store needs four actions on the table, and a fifth for batches:
//
//	{
//	  "Version": "2012-10-17",
//	  "Statement": [{
//	    "Effect": "Allow",
//	    "Action": ["dynamodb:GetItem", "dynamodb:PutItem", "dynamodb:UpdateItem", "dynamodb:DeleteItem",
//	               "dynamodb:BatchGetItem"],
//	    "Resource": "arn:aws:dynamodb:REGION:ACCOUNT_ID:table/idempotency"
//	  }]
//	}
//
// dynamodb:BatchGetItem is needed only by [Store.GetMany], that is by
// guard.DoBatch and the Temporal batch helper; without it, leave it out and
// a batch fails with AccessDeniedException on its lookup.
//
// [CreateTable] additionally needs dynamodb:CreateTable, DescribeTable,
// DescribeTimeToLive and UpdateTimeToLive; give those to your deployment
// role, not to the application.
//
// # Operators
//
// The store implements [store.Admin], which the idemguard command-line
// tool (cmd/idemguard) uses: [Store.List] reads the table page by page
// with a consistent Scan (a Query of the store's partition in sort-key
// mode), and [Store.Delete] deletes one item unconditionally. The
// application never calls them. An operator's role needs dynamodb:Scan
// (or dynamodb:Query in sort-key mode) and dynamodb:GetItem to inspect,
// and dynamodb:PutItem and dynamodb:DeleteItem to release stuck claims.
package dynamodb
