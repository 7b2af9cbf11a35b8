package main

import (
	"bufio"
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"os"
	"os/exec"
	"slices"
	"sort"
	"strings"
	"sync"
	"time"

	"github.com/idemguard/idemguard/guard"
)

type config struct {
	postgresURL, redisAddr, endpoint string

	stores    []string
	durations []time.Duration
	waiters   []int
	procs     int
	runs      int
	budget    time.Duration
	jsonOut   bool
}

// result is one run of one configuration.
type result struct {
	Tree           string  `json:"tree,omitempty"`
	Store          string  `json:"store"`
	Duration       string  `json:"duration"`
	Waiters        int     `json:"waiters"`
	Procs          int     `json:"procs"`
	Run            int     `json:"run"`
	P50ms          float64 `json:"p50_ms"`
	P99ms          float64 `json:"p99_ms"`
	MaxMs          float64 `json:"max_ms"`
	CallsPerWaiter float64 `json:"calls_per_waiter"`
	FunctionRuns   int     `json:"runs"`
	Errors         int     `json:"errors"`
	FirstError     string  `json:"first_error,omitempty"`
}

const scope = "bench-wait"

// value is what the guarded function returns: who ran it.
type value struct {
	By string `json:"by"`
}

// waitReply is what a group of waiters reports.
type waitReply struct {
	Err     string   `json:"err,omitempty"`
	Returns []int64  `json:"returns,omitempty"` // when each waiter returned, Unix ns
	Calls   int      `json:"calls"`             // store round trips while they waited
	Runs    int      `json:"runs"`              // times a waiter ran the function
	Errors  []string `json:"errors,omitempty"`
}

// waitCmd is what the parent sends a child, one JSON object a line.
type waitCmd struct {
	Op       string        `json:"op"` // "connect" or "wait"
	Resource resource      `json:"resource"`
	Input    string        `json:"input,omitempty"`
	Waiters  int           `json:"waiters,omitempty"`
	Budget   time.Duration `json:"budget,omitempty"`
}

// serveWait runs n waiters on c, each a guard of its own, calling input's
// key with a wait budget, and reports when each returned.
func serveWait(ctx context.Context, c *conn, input string, n int, budget time.Duration) waitReply {
	guards := make([]*guard.Guard, n)
	for i := range guards {
		g, err := guard.New(c.store)
		if err != nil {
			return waitReply{Err: err.Error()}
		}
		guards[i] = g
	}
	before := c.calls()
	var (
		mu    sync.Mutex
		wg    sync.WaitGroup
		reply = waitReply{Returns: make([]int64, n)}
	)
	for i, g := range guards {
		wg.Add(1)
		go func() {
			defer wg.Done()
			v, err := guard.Do(ctx, g, scope, input, func(context.Context) (value, error) {
				mu.Lock()
				reply.Runs++
				mu.Unlock()
				return value{By: "waiter"}, nil
			}, guard.WithWait(budget))
			reply.Returns[i] = time.Now().UnixNano()
			if err == nil && v.By != "holder" {
				err = fmt.Errorf("got %q's result; want the holder's", v.By)
			}
			if err != nil {
				mu.Lock()
				reply.Errors = append(reply.Errors, err.Error())
				mu.Unlock()
			}
		}()
	}
	wg.Wait()
	reply.Calls = c.calls() - before
	return reply
}

// serveChild is a child process: it connects when told, then serves
// waits, until its input ends.
func serveChild(ctx context.Context, in io.Reader, out io.Writer) error {
	dec, enc := json.NewDecoder(in), json.NewEncoder(out)
	var c *conn
	defer func() {
		if c != nil {
			c.close()
		}
	}()
	for {
		var cmd waitCmd
		if err := dec.Decode(&cmd); err != nil {
			if errors.Is(err, io.EOF) {
				return nil
			}
			return err
		}
		var reply waitReply
		switch cmd.Op {
		case "connect":
			var err error
			if c, err = connect(ctx, cmd.Resource); err != nil {
				reply.Err = err.Error()
			}
		case "wait":
			if c == nil {
				reply.Err = "wait before connect"
			} else {
				reply = serveWait(ctx, c, cmd.Input, cmd.Waiters, cmd.Budget)
			}
		default:
			reply.Err = "unknown op " + cmd.Op
		}
		if err := enc.Encode(reply); err != nil {
			return err
		}
	}
}

// group serves waiters: a child process, or this process (memory).
type group interface {
	wait(ctx context.Context, input string, n int, budget time.Duration) (waitReply, error)
	close()
}

// child is a child process of this binary.
type child struct {
	cmd *exec.Cmd
	in  io.WriteCloser
	out *json.Decoder
	enc *json.Encoder
}

func startChild(ctx context.Context, r resource) (*child, error) {
	exe, err := os.Executable()
	if err != nil {
		return nil, err
	}
	cmd := exec.CommandContext(ctx, exe, "-child")
	cmd.Stderr = os.Stderr
	in, err := cmd.StdinPipe()
	if err != nil {
		return nil, err
	}
	out, err := cmd.StdoutPipe()
	if err != nil {
		return nil, err
	}
	if err := cmd.Start(); err != nil {
		return nil, err
	}
	c := &child{cmd: cmd, in: in, out: json.NewDecoder(bufio.NewReader(out)), enc: json.NewEncoder(in)}
	reply, err := c.call(waitCmd{Op: "connect", Resource: r})
	if err == nil && reply.Err != "" {
		err = errors.New(reply.Err)
	}
	if err != nil {
		c.close()
		return nil, fmt.Errorf("child: %w", err)
	}
	return c, nil
}

func (c *child) call(cmd waitCmd) (waitReply, error) {
	var reply waitReply
	if err := c.enc.Encode(cmd); err != nil {
		return reply, err
	}
	err := c.out.Decode(&reply)
	return reply, err
}

func (c *child) wait(_ context.Context, input string, n int, budget time.Duration) (waitReply, error) {
	return c.call(waitCmd{Op: "wait", Input: input, Waiters: n, Budget: budget})
}

func (c *child) close() {
	c.in.Close()
	c.cmd.Wait()
}

// local serves waiters in this process.
type local struct{ c *conn }

func (l local) wait(ctx context.Context, input string, n int, budget time.Duration) (waitReply, error) {
	return serveWait(ctx, l.c, input, n, budget), nil
}

func (l local) close() { l.c.close() }

// bench is one store's run: its resource, the holder, the waiters'
// processes.
type bench struct {
	cfg    config
	r      resource
	clean  func()
	holder *conn
	groups []group
}

func newBench(ctx context.Context, cfg config, kind string) (*bench, error) {
	r, clean, err := newResource(ctx, cfg, kind, randomHex(4))
	if err != nil {
		return nil, err
	}
	b := &bench{cfg: cfg, r: r, clean: clean}
	if b.holder, err = connect(ctx, r); err != nil {
		b.close()
		return nil, err
	}
	procs := max(1, cfg.procs)
	for range procs {
		var g group
		if kind == "memory" {
			c, err := connect(ctx, r)
			if err != nil {
				b.close()
				return nil, err
			}
			g = local{c}
		} else if g, err = startChild(ctx, r); err != nil {
			b.close()
			return nil, err
		}
		b.groups = append(b.groups, g)
	}
	return b, nil
}

func (b *bench) close() {
	for _, g := range b.groups {
		g.close()
	}
	if b.holder != nil {
		b.holder.close()
	}
	b.clean()
}

// measure runs one configuration once: a holder's call of d, n waiters.
func (b *bench) measure(ctx context.Context, d time.Duration, n int) (result, error) {
	res := result{Store: b.r.Kind, Duration: d.String(), Waiters: n}
	g, err := guard.New(b.holder.store)
	if err != nil {
		return res, err
	}
	input := "wait-" + randomHex(8)
	claimed := make(chan struct{})
	var doneAt time.Time
	holderErr := make(chan error, 1)
	go func() {
		v, err := guard.Do(ctx, g, scope, input, func(context.Context) (value, error) {
			close(claimed)
			time.Sleep(d)
			doneAt = time.Now()
			return value{By: "holder"}, nil
		})
		if err == nil && v.By != "holder" {
			err = fmt.Errorf("the holder got %q's result", v.By)
		}
		holderErr <- err
	}()
	select {
	case <-claimed:
	case err := <-holderErr:
		return res, fmt.Errorf("the holder did not run: %v", err)
	}
	// The waiters, spread over the groups.
	groups := b.groups[:min(len(b.groups), n)]
	res.Procs = len(groups)
	replies := make([]waitReply, len(groups))
	errs := make([]error, len(groups))
	var wg sync.WaitGroup
	for i, gr := range groups {
		k := n / len(groups)
		if i < n%len(groups) {
			k++
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			replies[i], errs[i] = gr.wait(ctx, input, k, b.cfg.budget)
		}()
	}
	wg.Wait()
	if err := <-holderErr; err != nil {
		return res, fmt.Errorf("the holder: %w", err)
	}
	if err := errors.Join(errs...); err != nil {
		return res, err
	}
	res.FunctionRuns = 1
	var lat []time.Duration
	calls := 0
	for _, r := range replies {
		if r.Err != "" {
			return res, errors.New(r.Err)
		}
		res.FunctionRuns += r.Runs
		calls += r.Calls
		res.Errors += len(r.Errors)
		if res.FirstError == "" && len(r.Errors) > 0 {
			res.FirstError = r.Errors[0]
		}
		for _, ns := range r.Returns {
			lat = append(lat, time.Unix(0, ns).Sub(doneAt))
		}
	}
	slices.Sort(lat)
	res.P50ms = ms(percentile(lat, 0.50))
	res.P99ms = ms(percentile(lat, 0.99))
	res.MaxMs = ms(lat[len(lat)-1])
	res.CallsPerWaiter = math.Round(float64(calls)/float64(n)*10) / 10
	return res, nil
}

func ms(d time.Duration) float64 { return math.Round(float64(d)/float64(time.Millisecond)*10) / 10 }

// percentile returns the p-th of sorted, nearest rank.
func percentile(sorted []time.Duration, p float64) time.Duration {
	i := int(math.Ceil(p*float64(len(sorted)))) - 1
	return sorted[max(0, min(i, len(sorted)-1))]
}

func randomHex(n int) string {
	b := make([]byte, n)
	rand.Read(b)
	return hex.EncodeToString(b)
}

// runAll runs every configuration -runs times and writes the summary.
func runAll(ctx context.Context, cfg config, out, log io.Writer) error {
	var all []result
	for run := 1; run <= cfg.runs; run++ {
		rs, err := runOnce(ctx, cfg, run, log)
		if err != nil {
			return err
		}
		for _, r := range rs {
			if cfg.jsonOut {
				json.NewEncoder(out).Encode(r)
			}
		}
		all = append(all, rs...)
	}
	summarize(out, all, nil)
	return check(all)
}

// runOnce runs every configuration once, store by store.
func runOnce(ctx context.Context, cfg config, run int, log io.Writer) ([]result, error) {
	var rs []result
	for _, kind := range cfg.stores {
		b, err := newBench(ctx, cfg, kind)
		if err != nil {
			return nil, fmt.Errorf("%s: %w", kind, err)
		}
		for _, d := range cfg.durations {
			for _, n := range cfg.waiters {
				r, err := b.measure(ctx, d, n)
				if err != nil {
					b.close()
					return nil, fmt.Errorf("%s, %v, %d waiters: %w", kind, d, n, err)
				}
				r.Run = run
				fmt.Fprintf(log, "run %d %-8s %6s %3d waiters in %d: p50 %7.1f ms  p99 %7.1f ms  %5.1f calls/waiter  runs %d  errors %d\n",
					run, kind, d, n, r.Procs, r.P50ms, r.P99ms, r.CallsPerWaiter, r.FunctionRuns, r.Errors)
				rs = append(rs, r)
			}
		}
		b.close()
	}
	return rs, nil
}

// runSingle runs one configuration once and writes its figures as JSON.
func runSingle(ctx context.Context, cfg config, out io.Writer) error {
	cfg.runs = 1
	rs, err := runOnce(ctx, cfg, 1, os.Stderr)
	if err != nil {
		return err
	}
	enc := json.NewEncoder(out)
	for _, r := range rs {
		enc.Encode(r)
	}
	return nil
}

// runCompare runs every configuration with each binary of spec
// ("name=path,name=path"), alternating which goes first, and writes both
// side by side.
func runCompare(ctx context.Context, cfg config, spec string, out, log io.Writer) error {
	type tree struct{ name, bin string }
	var trees []tree
	for _, f := range splitList(spec) {
		name, bin, ok := strings.Cut(f, "=")
		if !ok {
			return fmt.Errorf("-compare: %q is not name=binary", f)
		}
		trees = append(trees, tree{name, bin})
	}
	var all []result
	for run := 1; run <= cfg.runs; run++ {
		for _, kind := range cfg.stores {
			for _, d := range cfg.durations {
				for _, n := range cfg.waiters {
					order := slices.Clone(trees)
					if run%2 == 0 {
						slices.Reverse(order)
					}
					for _, t := range order {
						args := []string{"-single", "-stores", kind, "-durations", d.String(), "-waiters", fmt.Sprint(n),
							"-procs", fmt.Sprint(cfg.procs), "-budget", cfg.budget.String(),
							"-postgres", cfg.postgresURL, "-redis", cfg.redisAddr, "-endpoint", cfg.endpoint}
						cmd := exec.CommandContext(ctx, t.bin, args...)
						cmd.Stderr = log
						b, err := cmd.Output()
						if err != nil {
							return fmt.Errorf("%s: %s, %v, %d waiters: %w", t.name, kind, d, n, err)
						}
						dec := json.NewDecoder(strings.NewReader(string(b)))
						for {
							var r result
							if err := dec.Decode(&r); errors.Is(err, io.EOF) {
								break
							} else if err != nil {
								return err
							}
							r.Tree, r.Run = t.name, run
							if cfg.jsonOut {
								json.NewEncoder(out).Encode(r)
							}
							all = append(all, r)
						}
					}
				}
			}
		}
	}
	names := make([]string, len(trees))
	for i, t := range trees {
		names[i] = t.name
	}
	summarize(out, all, names)
	return check(all)
}

// check fails a run in which the function ran more than once or a waiter
// failed.
func check(all []result) error {
	var errs []error
	for _, r := range all {
		if r.FunctionRuns != 1 || r.Errors > 0 {
			errs = append(errs, fmt.Errorf("%s %s %s, %d waiters, run %d: the function ran %d times; %d waiters failed (%s)",
				r.Tree, r.Store, r.Duration, r.Waiters, r.Run, r.FunctionRuns, r.Errors, r.FirstError))
		}
	}
	return errors.Join(errs...)
}

// summarize writes a Markdown table of the medians over runs of each
// configuration, one column group per tree.
func summarize(out io.Writer, all []result, trees []string) {
	if len(trees) == 0 {
		trees = []string{""}
	}
	type cfgKey struct {
		store, dur string
		n          int
	}
	groups := map[cfgKey]map[string][]result{}
	var keys []cfgKey
	for _, r := range all {
		k := cfgKey{r.Store, r.Duration, r.Waiters}
		if groups[k] == nil {
			groups[k] = map[string][]result{}
			keys = append(keys, k)
		}
		groups[k][r.Tree] = append(groups[k][r.Tree], r)
	}
	head := "| store | first call | waiters |"
	sep := "|---|---|---|"
	for _, t := range trees {
		label := ""
		if t != "" {
			label = t + ": "
		}
		head += fmt.Sprintf(" %sp50 ms | %sp99 ms | %scalls/waiter |", label, label, label)
		sep += "---|---|---|"
	}
	fmt.Fprintln(out, head)
	fmt.Fprintln(out, sep)
	for _, k := range keys {
		line := fmt.Sprintf("| %s | %s | %d |", k.store, k.dur, k.n)
		for _, t := range trees {
			rs := groups[k][t]
			line += fmt.Sprintf(" %s | %s | %s |",
				median(rs, func(r result) float64 { return r.P50ms }),
				median(rs, func(r result) float64 { return r.P99ms }),
				median(rs, func(r result) float64 { return r.CallsPerWaiter }))
		}
		fmt.Fprintln(out, line)
	}
}

// median formats the median of f over rs, with the range when there are
// several.
func median(rs []result, f func(result) float64) string {
	if len(rs) == 0 {
		return "–"
	}
	xs := make([]float64, len(rs))
	for i, r := range rs {
		xs[i] = f(r)
	}
	sort.Float64s(xs)
	m := xs[len(xs)/2]
	if len(xs)%2 == 0 {
		m = (xs[len(xs)/2-1] + xs[len(xs)/2]) / 2
	}
	if len(xs) == 1 {
		return fmt.Sprintf("%.1f", m)
	}
	return fmt.Sprintf("%.1f (%.1f–%.1f)", m, xs[0], xs[len(xs)-1])
}
