package guard_test

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/idemguard/idemguard/guard"
	"github.com/idemguard/idemguard/internal/adapt"
	"github.com/idemguard/idemguard/store/memory"
)

// A worker pool consumes an at-least-once stream: messages arrive twice, and
// a worker may see a message that another worker is handling. Each email is
// sent once.
func Example_workerPool() {
	g, err := guard.New(memory.New(), guard.WithKeyPath("message_id"), guard.WithWait(time.Minute))
	if err != nil {
		panic(err)
	}
	type message struct {
		MessageID string `json:"message_id"`
		To        string `json:"to"`
	}
	stream := []message{
		{"m-1", "ada@example.com"}, {"m-2", "bob@example.com"},
		{"m-1", "ada@example.com"}, // redelivered
		{"m-3", "cyd@example.com"},
		{"m-2", "bob@example.com"}, // redelivered
	}

	var mu sync.Mutex
	sent := map[string]int{}
	send := func(ctx context.Context, m message) (string, error) {
		mu.Lock()
		defer mu.Unlock()
		sent[m.To]++
		return "queued:" + m.MessageID, nil
	}
	handle, err := guard.Wrap(g, "send-email", send)
	if err != nil {
		panic(err)
	}

	jobs := make(chan message)
	var wg sync.WaitGroup
	for range 3 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for m := range jobs {
				if _, err := handle(context.Background(), m); err != nil {
					fmt.Println("error:", err)
				}
			}
		}()
	}
	for _, m := range stream {
		jobs <- m
	}
	close(jobs)
	wg.Wait()
	fmt.Println(sent["ada@example.com"], sent["bob@example.com"], sent["cyd@example.com"])
	// Output: 1 1 1
}

// Execute reports whether the result was produced now or replayed.
func ExampleExecute() {
	g, _ := guard.New(memory.New())
	charge := func(ctx context.Context) (string, error) { return "ch_1", nil }
	for range 2 {
		id, outcome, err := adapt.Execute(context.Background(), g, "charge", map[string]any{"order": 7}, charge)
		fmt.Println(id, outcome, err)
	}
	// Output:
	// ch_1 executed <nil>
	// ch_1 replayed <nil>
}

// KeyFromContext hands the idempotency key to the system that performs the
// side effect, which closes the window between the side effect and the
// completion write.
func ExampleKeyFromContext() {
	g, _ := guard.New(memory.New())
	guard.Do(context.Background(), g, "charge", map[string]any{"order": 7}, func(ctx context.Context) (bool, error) {
		key, _ := guard.KeyFromContext(ctx)
		fmt.Println(key[:7], len(key))
		// req.Header.Set("Idempotency-Key", key)
		return true, nil
	})
	// Output: charge# 71
}

// Definite errors are stored and replayed; others release the key so a
// retry runs again.
func ExampleDefinite() {
	g, _ := guard.New(memory.New())
	declined := errors.New("card declined")
	for range 2 {
		_, outcome, err := adapt.Execute(context.Background(), g, "charge", "order-9", func(ctx context.Context) (string, error) {
			return "", guard.Definite(declined)
		})
		fmt.Println(outcome, err)
	}
	// Output:
	// executed card declined
	// replayed card declined
}

// Reusing a key for a different request is caught when payload validation is
// on.
func ExampleWithPayloadValidation() {
	g, _ := guard.New(memory.New(), guard.WithKeyPath("id"), guard.WithPayloadValidation("amount"))
	pay := func(ctx context.Context) (string, error) { return "paid", nil }
	_, err := guard.Do(context.Background(), g, "pay", map[string]any{"id": "p-1", "amount": 100}, pay)
	fmt.Println(err)
	_, err = guard.Do(context.Background(), g, "pay", map[string]any{"id": "p-1", "amount": 999}, pay)
	fmt.Println(errors.Is(err, guard.ErrPayloadMismatch))
	// Output:
	// <nil>
	// true
}
