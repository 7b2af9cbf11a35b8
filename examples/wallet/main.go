// Command wallet charges wallets on DynamoDB exactly once with the
// transactional guard: each charge writes a charge item and debits its
// account's balance, conditional on the balance covering it, and the guard
// sends both in one TransactWriteItems with the completion of the charge's
// idempotency record. They are applied together, once, or not at all.
//
// Charges arrive at least once. Every charge is delivered by three
// instances of the service at the same moment (three guards, as three
// processes would have), and every third one again later; the first
// attempt of one charge crashes (panics) after adding its writes and before
// they are sent; one charge exceeds its account's balance and is refused,
// with the failed condition and the balance named, until the account is
// topped up. At the end the program checks each account's balance against
// its opening balance, top-ups and charges, and each charge's count.
//
//	IDEMGUARD_SERVICES=dynamodb scripts/harness.sh run go run ./examples/wallet   # a throwaway DynamoDB Local
//	IDEMGUARD_DYNAMODB_ENDPOINT=http://127.0.0.1:8000 go run ./examples/wallet    # yours (docker compose up -d dynamodb)
//
// Without IDEMGUARD_DYNAMODB_ENDPOINT it says how to run it and exits with
// status 2, starting nothing. It creates two tables under a fresh name and
// deletes them at the end.
package main

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"flag"
	"fmt"
	"io"
	mathrand "math/rand/v2"
	"os"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/feature/dynamodb/expression"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"

	"github.com/idemguard/idemguard/guard"
	idemddb "github.com/idemguard/idemguard/store/dynamodb"
)

// EndpointEnv names DynamoDB's endpoint; scripts/harness.sh sets it.
const EndpointEnv = "IDEMGUARD_DYNAMODB_ENDPOINT"

// Config is one run.
type Config struct {
	Endpoint  string
	Accounts  int   // accounts, each opening with Opening cents
	Opening   int64 //
	Charges   int   // distinct charges
	Instances int   // guards delivering each charge at once
}

// DefaultConfig is what `go run ./examples/wallet` runs.
func DefaultConfig() Config {
	return Config{Endpoint: os.Getenv(EndpointEnv), Accounts: 5, Opening: 100_000, Charges: 60, Instances: 3}
}

func main() {
	cfg := DefaultConfig()
	flag.IntVar(&cfg.Charges, "charges", cfg.Charges, "distinct charges (at least 2)")
	flag.IntVar(&cfg.Accounts, "accounts", cfg.Accounts, "accounts")
	flag.IntVar(&cfg.Instances, "instances", cfg.Instances, "instances delivering each charge at once")
	flag.Parse()
	if cfg.Endpoint == "" {
		fmt.Fprintf(os.Stderr, `wallet: no DynamoDB: set %s to the endpoint of a DynamoDB Local where this example may create tables, e.g.
	%s=http://127.0.0.1:8000 go run ./examples/wallet
or let the repository's harness start a throwaway one:
	IDEMGUARD_SERVICES=dynamodb scripts/harness.sh run go run ./examples/wallet
`, EndpointEnv, EndpointEnv)
		os.Exit(2)
	}
	if cfg.Charges < 2 || cfg.Accounts < 1 || cfg.Instances < 1 {
		fmt.Fprintln(os.Stderr, "wallet: need at least 2 charges, 1 account and 1 instance")
		os.Exit(2)
	}
	ok, err := Run(context.Background(), os.Stdout, cfg)
	if err != nil {
		fmt.Fprintln(os.Stderr, "wallet:", err)
		os.Exit(1)
	}
	if !ok {
		os.Exit(1)
	}
}

// Charge debits Cents from an account. Its ID is the idempotency key.
type Charge struct {
	ID      string `json:"id"`
	Account string `json:"account"`
	Cents   int64  `json:"cents"`
}

// Receipt is a charge's result, stored with its record and replayed.
type Receipt struct {
	ChargeID string `json:"charge_id"`
	Account  string `json:"account"`
	Cents    int64  `json:"cents"`
}

// Wallet is the service: the business table (accounts and charges, one
// table, partition key "pk") and a guard over the idempotency table.
type Wallet struct {
	Table string
	Guard *guard.Guard

	// Fault injection and counting, shared by the instances of a run.
	Crash *atomic.Pointer[string] // the charge whose next run panics after adding its writes
	Runs  *atomic.Int64           // runs of the charge function
}

// Charge applies c once, however many times it is delivered: the charge
// item and the debit are sent with the completion of c's record, in one
// transaction, only if the balance covers the charge. The key is the whole
// charge; DoTx would refuse an empty one (guard.ErrKeyMissing) rather than
// run unguarded.
func (w *Wallet) Charge(ctx context.Context, c Charge) (Receipt, error) {
	return guard.DoTx(ctx, w.Guard, "charge", c, func(ctx context.Context, tx *idemddb.TxWrites) (Receipt, error) {
		w.Runs.Add(1)
		err := tx.Put(w.Table, map[string]types.AttributeValue{
			"pk":      str("charge#" + c.ID),
			"account": str(c.Account),
			"cents":   num(c.Cents),
		})
		if err != nil {
			return Receipt{}, err
		}
		err = tx.Update(w.Table, accountKey(c.Account),
			expression.Add(expression.Name("balance"), expression.Value(-c.Cents)).
				Add(expression.Name("charges"), expression.Value(1)),
			idemddb.If(expression.Name("balance").GreaterThanEqual(expression.Value(c.Cents))),
			idemddb.ReturnOldOnFailure())
		if err != nil {
			return Receipt{}, err
		}
		if id := w.Crash.Load(); id != nil && *id == c.ID && w.Crash.CompareAndSwap(id, nil) {
			panic("crash after adding the writes, before the commit")
		}
		return Receipt{ChargeID: "rcpt-" + c.ID, Account: c.Account, Cents: c.Cents}, nil
	}, guard.WithKeyPath("id"), guard.WithWait(30*time.Second))
}

func accountKey(account string) map[string]types.AttributeValue {
	return map[string]types.AttributeValue{"pk": str("acct#" + account)}
}

func str(s string) types.AttributeValue { return &types.AttributeValueMemberS{Value: s} }
func num(n int64) types.AttributeValue {
	return &types.AttributeValueMemberN{Value: strconv.FormatInt(n, 10)}
}

// Run runs the example and writes its report to out; ok is false when a
// balance or a charge count is wrong.
func Run(ctx context.Context, out io.Writer, cfg Config) (ok bool, err error) {
	ctx, cancel := context.WithTimeout(ctx, 3*time.Minute)
	defer cancel()
	client := newClient(cfg.Endpoint)
	var b [4]byte
	rand.Read(b[:])
	prefix := "wallet-" + hex.EncodeToString(b[:])
	idemTable, table := prefix+"-idempotency", prefix+"-accounts"
	if err := createTables(ctx, client, idemTable, table); err != nil {
		return false, err
	}
	defer func() {
		dctx, dcancel := context.WithTimeout(context.WithoutCancel(ctx), 30*time.Second)
		defer dcancel()
		for _, t := range []string{idemTable, table} {
			_, _ = client.DeleteTable(dctx, &dynamodb.DeleteTableInput{TableName: aws.String(t)})
		}
	}()

	// The instances: a guard each, over one store (one process each in
	// production, each with its own client).
	s, err := idemddb.New(client, idemTable)
	if err != nil {
		return false, err
	}
	instances := make([]*Wallet, cfg.Instances)
	crash, runs := new(atomic.Pointer[string]), new(atomic.Int64)
	for i := range instances {
		g, err := guard.New(s)
		if err != nil {
			return false, err
		}
		instances[i] = &Wallet{Table: table, Guard: g, Crash: crash, Runs: runs}
	}

	// Accounts and charges: every charge fits its account's balance but
	// the overdraft, which asks for more than the account holds.
	accounts := make([]string, cfg.Accounts)
	for i := range accounts {
		accounts[i] = fmt.Sprintf("A%02d", i+1)
		if _, err := client.PutItem(ctx, &dynamodb.PutItemInput{TableName: aws.String(table),
			Item: map[string]types.AttributeValue{"pk": str("acct#" + accounts[i]), "balance": num(cfg.Opening), "charges": num(0)}}); err != nil {
			return false, fmt.Errorf("opening account %s: %w", accounts[i], err)
		}
	}
	rng := mathrand.New(mathrand.NewPCG(uint64(time.Now().UnixNano()), 7))
	charges := make([]Charge, cfg.Charges)
	for i := range charges {
		charges[i] = Charge{ID: fmt.Sprintf("ch-%04d", i+1), Account: accounts[i%len(accounts)],
			Cents: 1 + rng.Int64N(cfg.Opening/int64(cfg.Charges)/2)}
	}
	overdraft := &charges[len(charges)-1]
	overdraft.Cents = 2 * cfg.Opening
	crashed := charges[0].ID
	crash.Store(&crashed) // whichever instance runs it first crashes
	fmt.Fprintf(out, "wallet: %d accounts of %s, %d charges, each delivered by %d instances at once (every third again later)\n",
		cfg.Accounts, cents(cfg.Opening), cfg.Charges, cfg.Instances)

	// Every charge, delivered by every instance at once.
	var mu sync.Mutex
	receipts := map[string][]Receipt{}
	var refusals, crashes atomic.Int64
	var firstRefusal atomic.Pointer[string]
	var wg sync.WaitGroup
	deliver := func(w *Wallet, c Charge) {
		defer func() {
			if r := recover(); r != nil {
				crashes.Add(1)
				fmt.Fprintf(out, "  %s: an instance crashed after adding its writes (%v): nothing was sent\n", c.ID, r)
			}
		}()
		r, err := w.Charge(ctx, c)
		var ce *idemddb.TxCanceledError
		switch {
		case errors.As(err, &ce):
			refusals.Add(1)
			msg := err.Error()
			for _, f := range ce.ConditionFailed() {
				if bal, ok := f.Old["balance"].(*types.AttributeValueMemberN); ok {
					msg = fmt.Sprintf("the balance of %s is %s, the charge %s: the transaction was cancelled, nothing written, the key released",
						c.Account, centsOf(bal.Value), cents(c.Cents))
				}
			}
			firstRefusal.CompareAndSwap(nil, &msg)
			return
		case err != nil:
			fmt.Fprintf(out, "  %s: %v\n", c.ID, err)
			return
		}
		mu.Lock()
		receipts[c.ID] = append(receipts[c.ID], r)
		mu.Unlock()
	}
	for _, c := range charges {
		for _, w := range instances {
			wg.Go(func() { deliver(w, c) })
		}
	}
	wg.Wait()
	for i, c := range charges {
		if i%3 == 2 {
			wg.Go(func() { deliver(instances[i%len(instances)], c) }) // a late redelivery: a replay
		}
	}
	wg.Wait()
	if m := firstRefusal.Load(); m != nil {
		fmt.Fprintf(out, "  %s refused %d times: %s\n", overdraft.ID, refusals.Load(), *m)
	}
	// A top-up, and the overdraft goes through.
	topUp := overdraft.Cents
	if _, err := client.UpdateItem(ctx, &dynamodb.UpdateItemInput{TableName: aws.String(table), Key: accountKey(overdraft.Account),
		UpdateExpression: aws.String("ADD balance :t"), ExpressionAttributeValues: map[string]types.AttributeValue{":t": num(topUp)}}); err != nil {
		return false, err
	}
	deliver(instances[0], *overdraft)
	fmt.Fprintf(out, "  %s after a top-up of %s: %d receipt(s)\n", overdraft.ID, cents(topUp), len(receipts[overdraft.ID]))

	return verify(ctx, client, out, table, cfg, accounts, charges, overdraft.Account, topUp, receipts, runs.Load(), crashes.Load())
}

// verify reads the accounts and charges back and checks them.
func verify(ctx context.Context, client *dynamodb.Client, out io.Writer, table string, cfg Config, accounts []string,
	charges []Charge, toppedUp string, topUp int64, receipts map[string][]Receipt, runs, crashes int64) (bool, error) {
	ok := true
	want := map[string]int64{}
	count := map[string]int64{}
	for _, a := range accounts {
		want[a] = cfg.Opening
	}
	want[toppedUp] += topUp
	applied := 0
	for _, c := range charges {
		it, err := getItem(ctx, client, table, "charge#"+c.ID)
		if err != nil {
			return false, err
		}
		rs := receipts[c.ID]
		switch {
		case it == nil:
			fmt.Fprintf(out, "  MISSING: charge %s was not applied\n", c.ID)
			ok = false
			continue
		case len(rs) == 0:
			fmt.Fprintf(out, "  NO RECEIPT: charge %s was applied, but no delivery got its receipt\n", c.ID)
			ok = false
		}
		for _, r := range rs {
			if r != rs[0] {
				fmt.Fprintf(out, "  MISMATCH: charge %s got receipts %v and %v\n", c.ID, rs[0], r)
				ok = false
			}
		}
		applied++
		want[c.Account] -= c.Cents
		count[c.Account]++
	}
	var debited int64
	for _, a := range accounts {
		it, err := getItem(ctx, client, table, "acct#"+a)
		if err != nil {
			return false, err
		}
		bal, n := attrInt(it, "balance"), attrInt(it, "charges")
		debited += cfg.Opening - bal
		if bal != want[a] || n != count[a] {
			fmt.Fprintf(out, "  WRONG: account %s has %s after %d charges; want %s after %d\n", a, cents(bal), n, cents(want[a]), count[a])
			ok = false
		}
	}
	deliveries := len(charges)*cfg.Instances + len(charges)/3 + 1
	fmt.Fprintf(out, "wallet: %d deliveries, %d runs of the charge function (%d crashed), %d charges applied\n",
		deliveries, runs, crashes, applied)
	if ok {
		fmt.Fprintf(out, "invariant holds: every balance is its opening balance and top-ups less its charges, each charge applied exactly once\n")
	}
	return ok, nil
}

func getItem(ctx context.Context, client *dynamodb.Client, table, pk string) (map[string]types.AttributeValue, error) {
	out, err := client.GetItem(ctx, &dynamodb.GetItemInput{TableName: aws.String(table),
		Key: map[string]types.AttributeValue{"pk": str(pk)}, ConsistentRead: aws.Bool(true)})
	if err != nil {
		return nil, fmt.Errorf("reading %s: %w", pk, err)
	}
	return out.Item, nil
}

func attrInt(item map[string]types.AttributeValue, name string) int64 {
	v, _ := item[name].(*types.AttributeValueMemberN)
	if v == nil {
		return 0
	}
	n, _ := strconv.ParseInt(v.Value, 10, 64)
	return n
}

func cents(c int64) string {
	sign := ""
	if c < 0 {
		sign, c = "-", -c
	}
	return fmt.Sprintf("%s%d.%02d", sign, c/100, c%100)
}

func centsOf(n string) string {
	c, _ := strconv.ParseInt(n, 10, 64)
	return cents(c)
}

// newClient returns a client for DynamoDB Local at endpoint, which
// accepts any credentials.
func newClient(endpoint string) *dynamodb.Client {
	return dynamodb.New(dynamodb.Options{
		Region:       "us-east-1",
		BaseEndpoint: aws.String(endpoint),
		Credentials: aws.CredentialsProviderFunc(func(context.Context) (aws.Credentials, error) {
			return aws.Credentials{AccessKeyID: "local", SecretAccessKey: "local", Source: "wallet"}, nil
		}),
		// DynamoDB Local's error responses (every replay) lack the CRC32
		// header the SDK checks: see docs/dynamodb.md.
		DisableValidateResponseChecksum: true,
	})
}

// createTables creates the idempotency table and the business table
// (partition key "pk").
func createTables(ctx context.Context, client *dynamodb.Client, idemTable, table string) error {
	if err := idemddb.CreateTable(ctx, client, idemTable); err != nil && !errors.Is(err, idemddb.ErrTTLNotEnabled) {
		return fmt.Errorf("creating table %s: %w", idemTable, err)
	}
	_, err := client.CreateTable(ctx, &dynamodb.CreateTableInput{
		TableName:            aws.String(table),
		AttributeDefinitions: []types.AttributeDefinition{{AttributeName: aws.String("pk"), AttributeType: types.ScalarAttributeTypeS}},
		KeySchema:            []types.KeySchemaElement{{AttributeName: aws.String("pk"), KeyType: types.KeyTypeHash}},
		BillingMode:          types.BillingModePayPerRequest,
	})
	if err != nil {
		return fmt.Errorf("creating table %s: %w", table, err)
	}
	return nil
}
