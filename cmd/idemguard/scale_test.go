package main

import (
	"bufio"
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"

	"github.com/idemguard/idemguard/internal/testing/dynamodbtest"
)

var listRecords = flag.Int("list-records", 0, "run TestListScale over this many records in DynamoDB Local (make cli-scale: 100000)")

// batchWriteSize is DynamoDB's limit on the items of one BatchWriteItem.
const batchWriteSize = 25

// TestListScale loads -list-records records into DynamoDB Local
// (BatchWriteItem, 25 items a request, 8 requests in flight), one in a
// hundred a stuck claim, then lists them with the CLI as a subprocess and
// reports its time and peak RSS, for the whole table and for --stuck. It
// checks that memory is bounded: listing all the records must not take
// much more memory than listing a tenth of them. It is not part of make
// test (loading takes a minute or more); run it with make cli-scale.
func TestListScale(t *testing.T) {
	n := *listRecords
	if n == 0 {
		t.Skip("run with -list-records N (make cli-scale)")
	}
	client := dynamodbtest.NewClient(t)
	endpoint := dynamodbtest.Endpoint(t)
	// The figures are the shipped binary's, not the test binary's (which
	// carries the tests' dependencies too).
	bin := filepath.Join(t.TempDir(), "idemguard")
	if out, err := exec.Command("go", "build", "-o", bin, ".").CombinedOutput(); err != nil {
		t.Fatalf("go build: %v\n%s", err, out)
	}
	small := dynamodbtest.NewTable(t, client)
	large := dynamodbtest.NewTable(t, client)
	start := time.Now()
	load(t, client, small, n/10)
	load(t, client, large, n)
	t.Logf("loaded %d + %d records in %v", n/10, n, time.Since(start).Round(time.Millisecond))

	type run struct {
		name  string
		table string
		args  []string
		want  int
	}
	var figures []map[string]any
	rss := map[string]int64{}
	for _, r := range []run{
		{"all-tenth", small, []string{"list"}, n / 10},
		{"all", large, []string{"list"}, n},
		{"all-json", large, []string{"list", "--json"}, n},
		{"all-page-1000", large, []string{"list", "--page-size", "1000"}, n},
		{"stuck", large, []string{"list", "--stuck"}, n / 100},
	} {
		lines, elapsed, peak := listProcess(t, bin, append(r.args, "--store", "dynamodb://"+r.table+"?endpoint="+endpoint))
		header := 1
		if r.args[len(r.args)-1] == "--json" {
			header = 0
		}
		if lines-header != r.want {
			t.Errorf("%s: listed %d records, want %d", r.name, lines-header, r.want)
		}
		rss[r.name] = peak
		t.Logf("%-14s %7d records in %8v, peak RSS %6.1f MiB", r.name, lines-header, elapsed.Round(time.Millisecond), float64(peak)/1024)
		figures = append(figures, map[string]any{"run": r.name, "records": lines - header,
			"seconds": elapsed.Seconds(), "peak_rss_kib": peak})
	}
	out, _ := json.Marshal(figures)
	fmt.Printf("list-scale: %s\n", out)
	// Bounded memory: ten times the records, at most 25% more memory (the
	// runtime and the SDK dominate; a listing held in memory would take
	// several times more).
	if rss["all"] > rss["all-tenth"]*5/4 {
		t.Errorf("peak RSS listing %d records: %d KiB; listing %d: %d KiB; memory grows with the table", n, rss["all"], n/10, rss["all-tenth"])
	}
}

// load writes n records into table: completed ones, and every hundredth a
// claim whose lease lapsed, laid out as the store writes them with its
// default attribute names.
func load(t *testing.T, client *dynamodb.Client, table string, n int) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Minute)
	defer cancel()
	now := time.Now()
	expiry := strconv.FormatInt(now.Add(24*time.Hour).Unix(), 10)
	lapsed := strconv.FormatInt(now.Add(-time.Minute).UnixMilli(), 10)
	s := func(v string) types.AttributeValue { return &types.AttributeValueMemberS{Value: v} }
	num := func(v string) types.AttributeValue { return &types.AttributeValueMemberN{Value: v} }
	item := func(i int) map[string]types.AttributeValue {
		m := map[string]types.AttributeValue{
			"id":         s(fmt.Sprintf("charge#%064x", i)),
			"expiration": num(expiry),
			"token":      s(fmt.Sprintf("%032x", i)),
			"validation": s(fmt.Sprintf("%064x", i*7)),
		}
		if i%100 == 0 {
			m["status"] = s("INPROGRESS")
			m["in_progress_expiration"] = num(lapsed)
		} else {
			m["status"] = s("COMPLETED")
			m["data"] = s(fmt.Sprintf(`{"receipt":"r-%d","amount":%d,"currency":"EUR"}`, i, i%10000))
		}
		return m
	}
	batches := make(chan int)
	var wg sync.WaitGroup
	var once sync.Once
	var failed error
	for range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for first := range batches {
				reqs := make([]types.WriteRequest, 0, batchWriteSize)
				for i := first; i < min(first+batchWriteSize, n); i++ {
					reqs = append(reqs, types.WriteRequest{PutRequest: &types.PutRequest{Item: item(i)}})
				}
				for len(reqs) > 0 {
					out, err := client.BatchWriteItem(ctx, &dynamodb.BatchWriteItemInput{RequestItems: map[string][]types.WriteRequest{table: reqs}})
					if err != nil {
						once.Do(func() { failed = err; cancel() })
						return
					}
					reqs = out.UnprocessedItems[table]
				}
			}
		}()
	}
	for first := 0; first < n && ctx.Err() == nil; first += batchWriteSize {
		batches <- first
	}
	close(batches)
	wg.Wait()
	if failed != nil {
		t.Fatalf("BatchWriteItem: %v", failed)
	}
	d, err := client.DescribeTable(ctx, &dynamodb.DescribeTableInput{TableName: aws.String(table)})
	if err == nil && d.Table.ItemCount != nil && *d.Table.ItemCount != int64(n) {
		t.Logf("DescribeTable counts %d items (it may lag)", *d.Table.ItemCount)
	}
}

// listProcess runs the CLI binary bin with args as a subprocess, counts
// the lines it prints as they stream in, and returns them with its wall
// time and peak resident set size in KiB: the kernel's high-water mark
// VmHWM, read from /proc every 10 ms until the process exits. (getrusage's
// ru_maxrss would not do: os/exec starts processes with vfork semantics,
// and Linux carries the parent's high-water mark, the test process's,
// into the child at exec.)
func listProcess(t *testing.T, bin string, args []string) (lines int, elapsed time.Duration, peakKiB int64) {
	t.Helper()
	cmd := exec.Command(bin, args...)
	cmd.Env = []string{"PATH=" + os.Getenv("PATH"), "HOME=" + t.TempDir()}
	cmd.Stderr = os.Stderr
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	hwm := make(chan int64, 1)
	go func() {
		var max int64
		for {
			b, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", cmd.Process.Pid))
			if err != nil {
				hwm <- max
				return
			}
			for _, line := range strings.Split(string(b), "\n") {
				if v, ok := strings.CutPrefix(line, "VmHWM:"); ok {
					if kib, err := strconv.ParseInt(strings.TrimSpace(strings.TrimSuffix(strings.TrimSpace(v), "kB")), 10, 64); err == nil && kib > max {
						max = kib
					}
				}
			}
			time.Sleep(10 * time.Millisecond)
		}
	}()
	sc := bufio.NewScanner(stdout)
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	for sc.Scan() {
		lines++
	}
	if err := cmd.Wait(); err != nil {
		t.Fatalf("idemguard %q: %v", args, err)
	}
	elapsed = time.Since(start)
	return lines, elapsed, <-hwm
}
