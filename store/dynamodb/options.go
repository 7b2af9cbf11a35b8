package dynamodb

import (
	"errors"
	"fmt"
	"math/rand/v2"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/aws/retry"

	"github.com/idemguard/idemguard/internal/compress"
)

// Attributes names the attributes of a record's item. A field left empty
// keeps its default name, given with each field: AWS Powertools'
// attribute names, plus the three Powertools does not write (token,
// result_kind and data_encoding).
type Attributes struct {
	// Key is the partition key (type S; default "id"): the idempotency
	// key, or the static partition value in sort-key mode ([WithSortKey]).
	Key string
	// Expiry holds the record's expiry (type N, epoch seconds; default
	// "expiration"); it is the table's TTL attribute.
	Expiry string
	// Lease holds an in-progress record's lease end (type N, epoch
	// milliseconds; default "in_progress_expiration").
	Lease string
	// Status holds "INPROGRESS" or "COMPLETED" (type S; default
	// "status").
	Status string
	// Data holds the stored result (type S or B; default "data").
	Data string
	// Validation holds the payload hash (type S; default "validation").
	Validation string
	// Token holds the claim's fencing token (type S; default "token").
	Token string
	// ResultKind holds "error" or "unavailable" for a result that is not a
	// value (type S, absent for a value; default "result_kind").
	ResultKind string
	// Encoding holds "gzip" for a compressed result (type S, absent when
	// the result is stored as is; default "data_encoding").
	Encoding string
	// Format holds the record's format, [store.FormatVersion] of the
	// release that wrote it (type N; an item without it, as Powertools
	// and releases before formats were recorded write them, is format 1).
	Format string
}

// defaultAttributes are AWS Powertools' attribute names, plus the four
// Powertools does not write (and ignores): token, result_kind,
// data_encoding and format.
var defaultAttributes = Attributes{
	Key:        "id",
	Expiry:     "expiration",
	Lease:      "in_progress_expiration",
	Status:     "status",
	Data:       "data",
	Validation: "validation",
	Token:      "token",
	ResultKind: "result_kind",
	Encoding:   "data_encoding",
	Format:     "format",
}

const (
	// defaultCompressAbove is the result size above which results are
	// compressed, unless [WithCompressAbove] says otherwise.
	defaultCompressAbove = compress.DefaultAbove
	// defaultMaxAttempts is how many times the default retryer tries each
	// request.
	defaultMaxAttempts = 8
)

const (
	defaultBackoffBase     = 25 * time.Millisecond
	defaultBackoffMax      = time.Second
	maxDecompressedSize    = 64 << 20 // refuse decompression bombs in foreign items
	maxAttributeNameLength = 255
)

// Option configures a [Store] (in [New]) and the table [CreateTable] makes.
// Give both the same options: the attribute names and the sort-key mode must
// match the table.
type Option func(*config)

// config is what the options set. New validates it once.
type config struct {
	keyAttr        string
	sortKeyAttr    string // "" unless sort-key mode
	partitionValue string // the static partition value in sort-key mode
	expiryAttr     string
	leaseAttr      string
	statusAttr     string
	dataAttr       string
	validationAttr string
	tokenAttr      string
	kindAttr       string
	encodingAttr   string
	formatAttr     string
	compressAbove  int
	maxAttempts    int // 0 = default
	retryer        aws.Retryer
	retryerSet     bool
	errs           []error // from options given bad values
}

func newConfig(opts []Option) (*config, error) {
	c := &config{
		compressAbove: defaultCompressAbove,
	}
	c.setAttributes(defaultAttributes)
	for _, o := range opts {
		if o != nil {
			o(c)
		}
	}
	if err := c.validate(); err != nil {
		return nil, err
	}
	return c, nil
}

func (c *config) validate() error {
	errs := append([]error(nil), c.errs...)
	names := []struct{ opt, name string }{
		{"Attributes.Key", c.keyAttr},
		{"Attributes.Expiry", c.expiryAttr},
		{"Attributes.Lease", c.leaseAttr},
		{"Attributes.Status", c.statusAttr},
		{"Attributes.Data", c.dataAttr},
		{"Attributes.Validation", c.validationAttr},
		{"Attributes.Token", c.tokenAttr},
		{"Attributes.ResultKind", c.kindAttr},
		{"Attributes.Encoding", c.encodingAttr},
		{"Attributes.Format", c.formatAttr},
	}
	if c.sortKeyAttr != "" || c.partitionValue != "" {
		names = append(names, struct{ opt, name string }{"WithSortKey", c.sortKeyAttr})
		switch {
		case c.partitionValue == "":
			errs = append(errs, errors.New("WithSortKey: the static partition value is empty"))
		case len(c.partitionValue) > maxPartitionKeyBytes:
			errs = append(errs, fmt.Errorf("WithSortKey: the static partition value is %d bytes; DynamoDB holds a partition key of at most %d", len(c.partitionValue), maxPartitionKeyBytes))
		}
	}
	seen := make(map[string]string)
	for _, n := range names {
		if err := checkAttrName(n.name); err != nil {
			errs = append(errs, fmt.Errorf("%s: %w", n.opt, err))
			continue
		}
		if prev, ok := seen[n.name]; ok {
			errs = append(errs, fmt.Errorf("%s and %s both name attribute %q", prev, n.opt, n.name))
		}
		seen[n.name] = n.opt
	}
	if c.maxAttempts != 0 && c.retryerSet {
		errs = append(errs, errors.New("WithMaxAttempts and WithRetryer cannot be combined: set the attempts on the retryer"))
	}
	if err := errors.Join(errs...); err != nil {
		return fmt.Errorf("dynamodb: invalid options: %w", err)
	}
	return nil
}

// checkAttrName rejects names DynamoDB would refuse or that the expression
// builder would read as a document path.
func checkAttrName(name string) error {
	switch {
	case name == "":
		return errors.New("attribute name is empty")
	case len(name) > maxAttributeNameLength:
		return fmt.Errorf("attribute name %.20q… is longer than %d bytes", name, maxAttributeNameLength)
	case !utf8.ValidString(name):
		return fmt.Errorf("attribute name %q is not valid UTF-8", name)
	case strings.ContainsAny(name, "[]"):
		return fmt.Errorf("attribute name %q contains a bracket", name)
	}
	return nil
}

// WithAttributes renames the attributes of a record's item; fields left
// empty keep their default names (see [Attributes]). Give the same
// names to [CreateTable].
func WithAttributes(a Attributes) Option {
	return func(c *config) { c.setAttributes(a) }
}

// setAttributes sets the names a gives.
func (c *config) setAttributes(a Attributes) {
	for _, f := range []struct {
		dst *string
		v   string
	}{
		{&c.keyAttr, a.Key}, {&c.expiryAttr, a.Expiry}, {&c.leaseAttr, a.Lease}, {&c.statusAttr, a.Status},
		{&c.dataAttr, a.Data}, {&c.validationAttr, a.Validation}, {&c.tokenAttr, a.Token},
		{&c.kindAttr, a.ResultKind}, {&c.encodingAttr, a.Encoding}, {&c.formatAttr, a.Format},
	} {
		if f.v != "" {
			*f.dst = f.v
		}
	}
}

// WithSortKey turns on sort-key mode, for a table whose primary key is a
// partition key plus a sort key: every item gets partitionValue in the
// partition key attribute ([Attributes].Key) and the idempotency key in the
// sort key attribute sortKeyAttr (type S). This is the layout of AWS
// Powertools' sortKeyAttr / staticPkValue options, whose default partition
// value is "idempotency#" followed by the Lambda function name. Both
// arguments must be non-empty.
func WithSortKey(sortKeyAttr, partitionValue string) Option {
	return func(c *config) {
		c.sortKeyAttr = sortKeyAttr
		c.partitionValue = partitionValue
		if sortKeyAttr == "" {
			c.errs = append(c.errs, errors.New("WithSortKey: the sort key attribute name is empty"))
		}
	}
}

// WithCompressAbove sets the size above which results are gzip-compressed
// before they are stored. A compressed result is stored only if it is
// smaller than the original. n < 0 turns compression off. Default
// 16 KiB.
func WithCompressAbove(n int) Option { return func(c *config) { c.compressAbove = n } }

// WithMaxAttempts sets how many times the store's retryer tries each request
// (1 = no retries). The default retryer is the SDK's standard retryer with
// 8 attempts and exponential backoff with full jitter
// from 25 ms, capped at 1 s, so that throttling and transient failures
// (5xx, connection resets) are retried a few times within about three
// seconds. n must be at least 1; it cannot be combined with [WithRetryer].
func WithMaxAttempts(n int) Option {
	return func(c *config) {
		if n < 1 {
			c.errs = append(c.errs, fmt.Errorf("WithMaxAttempts(%d): need at least 1 attempt", n))
			return
		}
		c.maxAttempts = n
	}
}

// WithRetryer makes the store send every request with r as its retryer. A
// nil r keeps the retryer the client was built with.
func WithRetryer(r aws.Retryer) Option {
	return func(c *config) { c.retryer, c.retryerSet = r, true }
}

// newRetryer returns the retryer the store's requests use, or nil to keep
// the client's.
func (c *config) newRetryer() aws.Retryer {
	if c.retryerSet {
		return c.retryer
	}
	return NewRetryer(c.maxAttempts)
}

// NewRetryer returns the retryer a store uses by default: the SDK's standard
// retryer with maxAttempts attempts (0: 8) and
// exponential backoff with full jitter from 25 ms, capped at 1 s, which
// also retries TransactionConflictException (a request that met a
// transaction on its item). Code that sends its own requests next to the
// store's can share it.
func NewRetryer(maxAttempts int) aws.Retryer {
	if maxAttempts == 0 {
		maxAttempts = defaultMaxAttempts
	}
	return retry.NewStandard(func(o *retry.StandardOptions) {
		o.MaxAttempts = maxAttempts
		o.Backoff = jitterBackoff{base: defaultBackoffBase, max: defaultBackoffMax}
		// A single-item request that meets a transaction in flight on its
		// item (guard.DoTx completing a record) is refused with
		// TransactionConflictException: it would succeed a moment later.
		o.Retryables = append(o.Retryables, retry.RetryableErrorCode{Codes: map[string]struct{}{"TransactionConflictException": {}}})
	})
}

// jitterBackoff is exponential backoff with full jitter: a random delay in
// [0, min(max, base·2^attempt)). The SDK's own starts at one second, which
// is long for a store that sits in the path of every guarded call.
type jitterBackoff struct{ base, max time.Duration }

func (b jitterBackoff) BackoffDelay(attempt int, _ error) (time.Duration, error) {
	d := b.max
	if attempt < 30 {
		if e := b.base << attempt; e < d {
			d = e
		}
	}
	if d <= 0 {
		return 0, nil
	}
	return rand.N(d), nil
}
