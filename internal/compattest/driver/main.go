// Command driver is the program of the rolling-deploy test
// (internal/compattest): it makes guarded calls on one store's key space,
// as one process of one release of an application, and reports each.
// The test builds it twice, against the previous release's tree and the
// current one, and runs the two builds alternately and side by side on
// the same keys.
//
// It uses only the public API (guard.New, guard.Do and DoTx, guard.Step,
// guard.Definite, httpguard.MustMiddleware,
// grpcguard.MustUnaryServerInterceptor, the stores' New). A release from
// before the driver existed is built with the copy written for its API,
// testdata/driver-pre-format.go.txt. Its flags, its effects file and its report are a
// protocol between builds of different releases: keep them as they are,
// and keep the values each kind of call returns, since each build replays
// what the other's calls stored.
//
// For each id in [-from, -to), -passes times in a shuffled order on
// -workers goroutines, it calls the id's kind of guarded call (by id
// modulo 6: a value, a definite error, a call with a step, an HTTP
// request through httpguard, a gRPC call through grpcguard, a
// transactional call where the store has transactions), retrying while
// another process holds the key. Every run of a guarded function (a side
// effect) appends "<effect> <id> <build>" to -effects, then takes -hold. Every call is one
// JSON line on standard output: its id, kind, outcome (executed or
// replayed), the build whose run it returned (by), and its error, if any.
package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"log"
	"log/slog"
	"math/rand/v2"
	"net/http"
	"net/http/httptest"
	"os"
	"strings"
	"sync"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	goredis "github.com/redis/go-redis/v9"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/wrapperspb"

	"github.com/idemguard/idemguard/grpcguard"
	"github.com/idemguard/idemguard/guard"
	"github.com/idemguard/idemguard/httpguard"
	"github.com/idemguard/idemguard/store"
	idemddb "github.com/idemguard/idemguard/store/dynamodb"
	"github.com/idemguard/idemguard/store/postgres"
	idemredis "github.com/idemguard/idemguard/store/redis"
)

var (
	storeName = flag.String("store", "", "dynamodb, redis or postgres")
	endpoint  = flag.String("endpoint", "", "DynamoDB's endpoint URL")
	table     = flag.String("table", "", "the DynamoDB or PostgreSQL table")
	addr      = flag.String("addr", "", "the Redis server's address")
	prefix    = flag.String("prefix", "", "the Redis key prefix")
	pgURL     = flag.String("url", "", "the PostgreSQL URL")
	build     = flag.String("build", "", "this build's name, recorded in what it runs")
	from      = flag.Int("from", 0, "the first id")
	to        = flag.Int("to", 0, "the id after the last")
	passes    = flag.Int("passes", 1, "how many times each id is called")
	workers   = flag.Int("workers", 1, "concurrent calls")
	seed      = flag.Uint64("seed", 1, "the shuffle's seed")
	effects   = flag.String("effects", "", "the file each side effect is appended to")
	hold      = flag.Duration("hold", 0, "how long each guarded function takes after its effect")
	startAt   = flag.Int64("start", 0, "when to start, in Unix milliseconds, so that processes start together")
)

// The kinds of call, by id modulo their number.
var kinds = []string{"value", "error", "step", "http", "grpc", "tx"}

type order struct {
	ID     string `json:"id"`
	Amount int    `json:"amount"`
}

type receipt struct {
	Charge string `json:"charge"`
	Amount int    `json:"amount"`
	By     string `json:"by"`
	Step   string `json:"step,omitempty"`
}

// line is one call's report.
type line struct {
	ID      string `json:"id"`
	Kind    string `json:"kind"`
	Outcome string `json:"outcome"`
	By      string `json:"by,omitempty"`
	Err     string `json:"err,omitempty"`
	// Waits counts the times the call met another call's claim in
	// progress and was made again.
	Waits int `json:"waits,omitempty"`
}

type driver struct {
	g      *guard.Guard
	execTx func(ctx context.Context, scope string, in order, fn func(context.Context) (receipt, error)) (receipt, error)

	mu  sync.Mutex
	eff *os.File // protected by mu
	out *json.Encoder
}

// effect records one run of a guarded function.
func (d *driver) effect(what, id string) {
	d.mu.Lock()
	defer d.mu.Unlock()
	if _, err := fmt.Fprintf(d.eff, "%s %s %s\n", what, id, *build); err != nil {
		log.Fatalf("driver: recording an effect: %v", err)
	}
	d.mu.Unlock()
	time.Sleep(*hold)
	d.mu.Lock()
}

func (d *driver) report(l line) {
	d.mu.Lock()
	defer d.mu.Unlock()
	if err := d.out.Encode(l); err != nil {
		log.Fatal(err)
	}
}

func main() {
	flag.Parse()
	if *build == "" || *effects == "" || *to <= *from {
		log.Fatal("driver: -build, -effects and -from < -to are required")
	}
	ctx := context.Background()
	d := &driver{out: json.NewEncoder(os.Stdout)}
	s := d.open(ctx)
	g, err := guard.New(s, guard.WithLease(20*time.Second), guard.WithLogger(slog.New(slog.NewTextHandler(io.Discard, nil))))
	if err != nil {
		log.Fatal(err)
	}
	d.g = g
	if d.eff, err = os.OpenFile(*effects, os.O_WRONLY|os.O_CREATE|os.O_APPEND, 0o644); err != nil {
		log.Fatal(err)
	}
	defer d.eff.Close()

	var ids []int
	r := rand.New(rand.NewPCG(*seed, 7))
	for range *passes {
		pass := make([]int, 0, *to-*from)
		for i := *from; i < *to; i++ {
			pass = append(pass, i)
		}
		r.Shuffle(len(pass), func(i, j int) { pass[i], pass[j] = pass[j], pass[i] })
		ids = append(ids, pass...)
	}
	time.Sleep(time.Until(time.UnixMilli(*startAt)))
	work := make(chan int)
	var wg sync.WaitGroup
	for range *workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range work {
				d.call(ctx, i)
			}
		}()
	}
	for _, i := range ids {
		work <- i
	}
	close(work)
	wg.Wait()
}

// open returns the store the flags name.
func (d *driver) open(ctx context.Context) store.Store {
	switch *storeName {
	case "dynamodb":
		client := dynamodb.New(dynamodb.Options{
			Region:       "us-east-1",
			BaseEndpoint: aws.String(*endpoint),
			Credentials: aws.CredentialsProviderFunc(func(context.Context) (aws.Credentials, error) {
				return aws.Credentials{AccessKeyID: "local", SecretAccessKey: "local", Source: "driver"}, nil
			}),
		})
		s, err := idemddb.New(client, *table)
		if err != nil {
			log.Fatal(err)
		}
		d.execTx = func(ctx context.Context, scope string, in order, fn func(context.Context) (receipt, error)) (receipt, error) {
			v, err := guard.DoTx(ctx, d.g, scope, in, func(ctx context.Context, _ *idemddb.TxWrites) (receipt, error) { return fn(ctx) }, keyed...)
			return v, err
		}
		return s
	case "redis":
		s, err := idemredis.New(goredis.NewClient(&goredis.Options{Addr: *addr}), idemredis.WithPrefix(*prefix))
		if err != nil {
			log.Fatal(err)
		}
		return s
	case "postgres":
		pool, err := pgxpool.New(ctx, *pgURL)
		if err != nil {
			log.Fatal(err)
		}
		s, err := postgres.New(pool, postgres.WithTable(*table))
		if err != nil {
			log.Fatal(err)
		}
		d.execTx = func(ctx context.Context, scope string, in order, fn func(context.Context) (receipt, error)) (receipt, error) {
			v, err := guard.DoTx(ctx, d.g, scope, in, func(ctx context.Context, tx pgx.Tx) (receipt, error) {
				if _, err := tx.Exec(ctx, "SELECT 1"); err != nil {
					return receipt{}, err
				}
				return fn(ctx)
			}, keyed...)
			return v, err
		}
		return s
	}
	log.Fatalf("driver: unknown -store %q", *storeName)
	return nil
}

var keyed = []guard.CallOption{guard.WithKeyPath("id"), guard.WithPayloadValidation("amount")}

// errBusy is a call that met another process's claim; it is retried.
var errBusy = errors.New("busy")

// call makes id's call until no other process holds its key, and reports it.
func (d *driver) call(ctx context.Context, i int) {
	id := fmt.Sprintf("k-%d", i)
	kind := kinds[i%len(kinds)]
	if kind == "tx" && d.execTx == nil {
		kind = "value"
	}
	in := order{ID: id, Amount: 100 + i}
	deadline := time.Now().Add(time.Minute)
	for waits := 0; ; waits++ {
		ran := false
		by, err := d.once(ctx, kind, id, in, &ran)
		if errors.Is(err, errBusy) && time.Now().Before(deadline) {
			time.Sleep(time.Duration(10+rand.IntN(20)) * time.Millisecond)
			continue
		}
		l := line{ID: id, Kind: kind, Outcome: "replayed", By: by, Waits: waits}
		if ran {
			l.Outcome = "executed"
		}
		if err != nil {
			l.Err = err.Error()
		}
		d.report(l)
		return
	}
}

// once makes id's call of kind once; ran says whether this process ran
// its function. It returns the build whose run the call returned.
func (d *driver) once(ctx context.Context, kind, id string, in order, ran *bool) (by string, err error) {
	mine := receipt{Charge: "ch_" + id, Amount: in.Amount, By: *build}
	switch kind {
	case "value", "tx":
		fn := func(context.Context) (receipt, error) {
			*ran = true
			d.effect(kind, id)
			return mine, nil
		}
		var v receipt
		if kind == "tx" {
			v, err = d.execTx(ctx, "roll-tx", in, fn)
		} else {
			v, err = guard.Do(ctx, d.g, "roll-value", in, fn, keyed...)
		}
		if err != nil {
			return "", busy(err)
		}
		return v.By, check(v, mine)
	case "error":
		_, err = guard.Do(ctx, d.g, "roll-error", in, func(context.Context) (receipt, error) {
			*ran = true
			d.effect(kind, id)
			return receipt{}, guard.Definite(fmt.Errorf("declined %s by %s", id, *build))
		}, keyed...)
		if err == nil {
			return "", errors.New("the call returned no error; want its definite error")
		}
		if errors.Is(err, guard.ErrInProgress) {
			return "", busy(err)
		}
		by, ok := strings.CutPrefix(err.Error(), "declined "+id+" by ")
		if !ok || !guard.IsDefinite(err) {
			return "", fmt.Errorf("the definite error came back as %q (definite: %v)", err, guard.IsDefinite(err))
		}
		return by, nil
	case "step":
		v, err := guard.Do(ctx, d.g, "roll-step", in, func(ctx context.Context) (receipt, error) {
			*ran = true
			r, err := guard.Step(ctx, "reserve", func(context.Context) (receipt, error) {
				d.effect("reserve", id)
				return receipt{Charge: "res_" + id, By: *build}, nil
			})
			if err != nil {
				return receipt{}, err
			}
			d.effect(kind, id)
			out := mine
			out.Step = r.Charge + " by " + r.By
			return out, nil
		}, keyed...)
		if err != nil {
			return "", busy(err)
		}
		if want := "res_" + id + " by " + v.By; v.Step != want {
			return v.By, fmt.Errorf("the step's result came back as %q, want %q", v.Step, want)
		}
		v.Step = ""
		return v.By, check(v, mine)
	case "http":
		h := httpguard.MustMiddleware(d.g, httpguard.WithScope("roll-http"))(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			*ran = true
			d.effect(kind, id)
			w.Header().Set("Content-Type", "application/json")
			w.WriteHeader(http.StatusCreated)
			json.NewEncoder(w).Encode(mine)
		}))
		body, _ := json.Marshal(in)
		req := httptest.NewRequestWithContext(ctx, http.MethodPost, "/charges", strings.NewReader(string(body)))
		req.Header.Set("Idempotency-Key", `"`+id+`"`)
		rec := httptest.NewRecorder()
		h.ServeHTTP(rec, req)
		switch rec.Code {
		case http.StatusConflict:
			return "", errBusy
		case http.StatusCreated:
		default:
			return "", fmt.Errorf("HTTP %d %s", rec.Code, rec.Body)
		}
		var v receipt
		if err := json.Unmarshal(rec.Body.Bytes(), &v); err != nil {
			return "", fmt.Errorf("the response body %q: %v", rec.Body, err)
		}
		return v.By, check(v, mine)
	case "grpc":
		in2 := grpcguard.MustUnaryServerInterceptor(d.g, grpcguard.WithScope("roll-grpc"))
		gctx := metadata.NewIncomingContext(ctx, metadata.Pairs("idempotency-key", id))
		resp, err := in2(gctx, wrapperspb.String(id), &grpc.UnaryServerInfo{FullMethod: "/roll.v1.Charges/Charge"},
			func(context.Context, any) (any, error) {
				*ran = true
				d.effect(kind, id)
				return wrapperspb.String("ch_" + id + " by " + *build), nil
			})
		switch status.Code(err) {
		case codes.OK:
		case codes.Aborted:
			return "", errBusy
		default:
			return "", err
		}
		by, ok := strings.CutPrefix(resp.(*wrapperspb.StringValue).GetValue(), "ch_"+id+" by ")
		if !ok {
			return "", fmt.Errorf("the response came back as %v", resp)
		}
		return by, nil
	}
	return "", fmt.Errorf("unknown kind %q", kind)
}

// busy returns errBusy for an error that means another process holds the
// key, so that the call is made again; any other error as it is.
func busy(err error) error {
	if errors.Is(err, guard.ErrInProgress) {
		return fmt.Errorf("%w: %v", errBusy, err)
	}
	return err
}

// check compares a replayed or returned receipt with this build's, but for
// the build that ran it.
func check(got, mine receipt) error {
	got.By = mine.By
	if got != mine {
		return fmt.Errorf("the call returned %+v, want %+v", got, mine)
	}
	return nil
}
