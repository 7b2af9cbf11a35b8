package chaos

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/idemguard/idemguard/store"
)

// The calls log: each worker wraps its idempotency store (loggedStore) so
// that every call its guard makes — claims, lease extensions, completions
// (alone or inside a transaction, and the transaction's commit), releases
// and reads — is written to a file of the worker's own, calls-<pid>.log
// next to its done file, with its start and end on the machine clock
// (which the workers and the driver share), the lease end it wrote, the
// time the store compared leases with, and the store's answer. The checks
// rebuild each claim from it: when its lease ran out and why (a kill, a
// pause, an extension or completion that failed or came back late), who
// took a key over and whether the lease it took was live, and which fenced
// writes landed after a takeover. Like the done file, it is appended to
// with one write per line (O_APPEND), so a SIGKILL loses no line whose
// write returned; a call the process did not live to finish has no line.
//
// A line is
//
//	<call> <key> <token> <start> <end> <now> <lease> <result>
//
// with times in Unix nanoseconds (0 when the call has none), "-" for an
// empty token, and the result one of ok, own (a claim that found the
// caller's own token: its earlier attempt landed), conflict, mismatch
// (store.ErrTokenMismatch), error; for get, the status read (COMPLETED,
// INPROGRESS, none) with the record's token. Fenced writes (extend,
// complete, txcomplete, commit) also get a line with the result sent, and
// no end, before they are sent.

// Store calls, as the calls log names them.
const (
	callAcquire    = "acquire"
	callExtend     = "extend"
	callComplete   = "complete"
	callRelease    = "release"
	callGet        = "get"
	callTxComplete = "txcomplete" // a completion inside a transaction
	callCommit     = "commit"     // the commit of a transaction that completed key under token
)

// Results of store calls in the calls log.
const (
	// resSent: a line written before a fenced write (an extension, a
	// completion, a commit) is sent, so that one the process did not live
	// to see answered (killed, or paused, while it was slow) still shows;
	// the line of its answer follows.
	resSent     = "sent"
	resOK       = "ok"
	resOwn      = "own"
	resConflict = "conflict"
	resMismatch = "mismatch"
	resError    = "error"
)

// storeCall is one line of a calls log.
type storeCall struct {
	pid        int
	call       string
	key, token string
	start, end time.Time
	now        time.Time // acquire: the time the store compared leases with (the guard's clock less its skew tolerance)
	lease      time.Time // acquire, extend: the lease end written (acquire with result own: the one stored)
	result     string
}

func nanos(t time.Time) int64 {
	if t.IsZero() {
		return 0
	}
	return t.UnixNano()
}

func fromNanos(n int64) time.Time {
	if n == 0 {
		return time.Time{}
	}
	return time.Unix(0, n)
}

func (c *storeCall) line() string {
	tok := c.token
	if tok == "" {
		tok = "-"
	}
	return fmt.Sprintf("%s %s %s %d %d %d %d %s\n", c.call, c.key, tok, nanos(c.start), nanos(c.end), nanos(c.now), nanos(c.lease), c.result)
}

func parseCall(pid int, s string) (storeCall, bool) {
	f := strings.Fields(s)
	if len(f) != 8 {
		return storeCall{}, false
	}
	var n [4]int64
	for i := range n {
		v, err := strconv.ParseInt(f[3+i], 10, 64)
		if err != nil {
			return storeCall{}, false
		}
		n[i] = v
	}
	tok := f[2]
	if tok == "-" {
		tok = ""
	}
	return storeCall{pid: pid, call: f[0], key: f[1], token: tok, start: fromNanos(n[0]), end: fromNanos(n[1]),
		now: fromNanos(n[2]), lease: fromNanos(n[3]), result: f[7]}, true
}

// callsFile is the calls log of the worker pid.
func callsFile(dir string, pid int) string {
	return filepath.Join(dir, fmt.Sprintf("calls-%d.log", pid))
}

// readCalls reads every calls log in dir, each sorted by start.
func readCalls(dir string) ([]storeCall, error) {
	files, err := filepath.Glob(filepath.Join(dir, "calls-*.log"))
	if err != nil {
		return nil, err
	}
	var out []storeCall
	for _, f := range files {
		pid, _ := strconv.Atoi(strings.TrimSuffix(strings.TrimPrefix(filepath.Base(f), "calls-"), ".log"))
		b, err := os.ReadFile(f)
		if err != nil {
			return nil, err
		}
		sc := bufio.NewScanner(strings.NewReader(string(b)))
		sc.Buffer(make([]byte, 64<<10), 1<<20)
		for sc.Scan() {
			if c, ok := parseCall(pid, sc.Text()); ok { // a line cut by SIGKILL mid-write is skipped
				out = append(out, c)
			}
		}
	}
	return foldSent(out), nil
}

// foldSent drops the sent line of every call whose answer has its own
// line, and keeps the others as calls never answered (result sent, no
// end); it sorts the calls by start.
func foldSent(calls []storeCall) []storeCall {
	type id struct {
		pid         int
		call, token string
		start       int64
	}
	answered := map[id]bool{}
	for _, c := range calls {
		if c.result != resSent {
			answered[id{c.pid, c.call, c.token, c.start.UnixNano()}] = true
		}
	}
	out := calls[:0]
	for _, c := range calls {
		if c.result != resSent || !answered[id{c.pid, c.call, c.token, c.start.UnixNano()}] {
			out = append(out, c)
		}
	}
	sort.SliceStable(out, func(i, j int) bool { return out[i].start.Before(out[j].start) })
	return out
}

// callLog appends the lines of one worker process.
type callLog struct {
	mu sync.Mutex
	f  *os.File // protected by mu
}

func (l *callLog) write(c *storeCall) {
	s := c.line()
	l.mu.Lock()
	defer l.mu.Unlock()
	l.f.WriteString(s) // one write per line
}

// result names the answer err of a fenced call.
func result(err error) string {
	switch {
	case err == nil:
		return resOK
	case errors.Is(err, store.ErrTokenMismatch):
		return resMismatch
	}
	return resError
}

// loggedStore is the worker's idempotency store: the real one, every call
// written to the calls log.
type loggedStore struct {
	store.Store
	log *callLog
}

// Name is the wrapped store's name, for the guard's telemetry.
func (s *loggedStore) Name() string {
	if n, ok := s.Store.(interface{ Name() string }); ok {
		return n.Name()
	}
	return fmt.Sprintf("%T", s.Store)
}

func (s *loggedStore) Acquire(ctx context.Context, rec *store.Record, now time.Time) (*store.Record, error) {
	c := storeCall{call: callAcquire, key: rec.Key, token: rec.Token, start: time.Now(), now: now, lease: rec.LeaseExpiresAt}
	old, err := s.Store.Acquire(ctx, rec, now)
	c.end = time.Now()
	switch {
	case err == nil:
		c.result = resOK
	case errors.Is(err, store.ErrConflict) && old != nil && old.Token == rec.Token:
		c.result, c.lease = resOwn, old.LeaseExpiresAt
	case errors.Is(err, store.ErrConflict):
		c.result = resConflict
	default:
		c.result = resError
	}
	s.log.write(&c)
	return old, err
}

// sent writes the line of a fenced write about to be sent.
func (l *callLog) sent(c storeCall) {
	c.result = resSent
	l.write(&c)
}

func (s *loggedStore) Extend(ctx context.Context, key, token string, leaseExpiresAt, expiresAt time.Time) error {
	c := storeCall{call: callExtend, key: key, token: token, start: time.Now(), lease: leaseExpiresAt}
	s.log.sent(c)
	err := s.Store.Extend(ctx, key, token, leaseExpiresAt, expiresAt)
	c.end, c.result = time.Now(), result(err)
	s.log.write(&c)
	return err
}

func (s *loggedStore) Complete(ctx context.Context, rec *store.Record) error {
	c := storeCall{call: callComplete, key: rec.Key, token: rec.Token, start: time.Now()}
	s.log.sent(c)
	err := s.Store.Complete(ctx, rec)
	c.end, c.result = time.Now(), result(err)
	s.log.write(&c)
	return err
}

func (s *loggedStore) Release(ctx context.Context, key, token string) error {
	c := storeCall{call: callRelease, key: key, token: token, start: time.Now()}
	err := s.Store.Release(ctx, key, token)
	c.end, c.result = time.Now(), result(err)
	s.log.write(&c)
	return err
}

func (s *loggedStore) Get(ctx context.Context, key string) (*store.Record, error) {
	c := storeCall{call: callGet, key: key, start: time.Now()}
	rec, err := s.Store.Get(ctx, key)
	c.end = time.Now()
	switch {
	case err == nil:
		c.result, c.token = string(rec.Status), rec.Token
	case errors.Is(err, store.ErrNotFound):
		c.result = "none"
	default:
		c.result = resError
	}
	s.log.write(&c)
	return rec, err
}

// loggedTxStore is a loggedStore over a store whose transactions have
// handle H (guard.DoTx): its transactions log their completions, and their
// commit once for each completion they carry.
type loggedTxStore[H any] struct {
	*loggedStore
	tr store.Transactor[H]
}

func (s *loggedTxStore[H]) Begin(ctx context.Context) (store.Tx[H], error) {
	tx, err := s.tr.Begin(ctx)
	if err != nil {
		return nil, err
	}
	return &loggedTx[H]{Tx: tx, log: s.log}, nil
}

type loggedTx[H any] struct {
	store.Tx[H]
	log       *callLog
	completes []storeCall // the completions written into the transaction
}

func (t *loggedTx[H]) Complete(ctx context.Context, rec *store.Record) error {
	c := storeCall{call: callTxComplete, key: rec.Key, token: rec.Token, start: time.Now()}
	t.log.sent(c)
	err := t.Tx.Complete(ctx, rec)
	c.end, c.result = time.Now(), result(err)
	t.log.write(&c)
	if err == nil {
		t.completes = append(t.completes, c)
	}
	return err
}

func (t *loggedTx[H]) Commit(ctx context.Context) error {
	start := time.Now()
	for _, c := range t.completes {
		t.log.sent(storeCall{call: callCommit, key: c.key, token: c.token, start: start})
	}
	err := t.Tx.Commit(ctx)
	end, res := time.Now(), result(err)
	for _, c := range t.completes {
		t.log.write(&storeCall{call: callCommit, key: c.key, token: c.token, start: start, end: end, result: res})
	}
	return err
}

// logStore wraps s for a worker whose calls log is l, keeping the
// transactions of the transactional scenarios (handle H).
func logStore[H any](s store.Store, l *callLog) store.Store {
	ls := &loggedStore{Store: s, log: l}
	if tr, ok := s.(store.Transactor[H]); ok {
		return &loggedTxStore[H]{loggedStore: ls, tr: tr}
	}
	return ls
}
