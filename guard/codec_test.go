package guard_test

import (
	"context"
	"encoding/json"
	"math"
	"reflect"
	"testing"
	"time"

	"github.com/idemguard/idemguard/guard"
	"github.com/idemguard/idemguard/internal/adapt"
)

// receipt is a result of the shapes services return: nested structs,
// pointers, maps, byte slices, times, extreme numbers, and an interface.
type receipt struct {
	ID       string            `json:"id"`
	At       time.Time         `json:"at"`
	Settled  *time.Time        `json:"settled,omitempty"`
	Lines    []receiptLine     `json:"lines"`
	Totals   map[string]int64  `json:"totals"`
	Meta     map[string]any    `json:"meta"`
	Sig      []byte            `json:"sig"`
	Rate     float32           `json:"rate"`
	Big      uint64            `json:"big"`
	Neg      int64             `json:"neg"`
	Note     *string           `json:"note"`
	Extra    any               `json:"extra"`
	Labels   map[string]string `json:"labels,omitempty"`
	Embedded struct {
		Deep [2]float64 `json:"deep"`
	} `json:"embedded"`
}

type receiptLine struct {
	SKU   string  `json:"sku"`
	Qty   int     `json:"qty"`
	Price float64 `json:"price"`
}

// A replayed result is what a JSON round trip of the first call's result
// gives (encoding/json's semantics), with the default codec's one-pass
// encoder and decoder on the way.
func TestReplayRoundTripsResult(t *testing.T) {
	m, _ := newMemory()
	g := mustGuard(t, m)
	note := "gift wrap <&> \u2028 é 😀"
	settled := time.Date(2026, 11, 22, 3, 4, 5, 6, time.FixedZone("CET", 3600))
	want := receipt{
		ID: "r_1", At: time.Date(2026, 11, 22, 1, 2, 3, 123456789, time.UTC), Settled: &settled,
		Lines:  []receiptLine{{SKU: "a", Qty: 2, Price: 19.99}, {SKU: "b\"c", Qty: -1, Price: 1e-7}},
		Totals: map[string]int64{"net": 3998, "tax": math.MinInt64, "gross": math.MaxInt64},
		Meta:   map[string]any{"n": 1.5, "s": "x", "l": []any{true, nil, "y"}, "o": map[string]any{"k": 2.0}},
		Sig:    []byte{0, 1, 0xfe, 0xff}, Rate: 0.1, Big: math.MaxUint64, Neg: -9007199254740993, Note: &note,
		Extra: []int{1, 2, 3},
	}
	want.Embedded.Deep = [2]float64{math.MaxFloat64, math.SmallestNonzeroFloat64}

	first, out, err := adapt.Execute(ctx, g, "receipt", "r_1", func(context.Context) (receipt, error) { return want, nil })
	if err != nil || out != guard.OutcomeExecuted || !reflect.DeepEqual(first, want) {
		t.Fatalf("first call = %v, %v", out, err)
	}
	got, out, err := adapt.Execute(ctx, g, "receipt", "r_1", func(context.Context) (receipt, error) {
		t.Error("ran again")
		return receipt{}, nil
	})
	if err != nil || out != guard.OutcomeReplayed {
		t.Fatalf("replay = %v, %v", out, err)
	}
	b, err := json.Marshal(want)
	if err != nil {
		t.Fatal(err)
	}
	var roundTrip receipt
	if err := json.Unmarshal(b, &roundTrip); err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(got, roundTrip) {
		t.Errorf("replayed\n%+v\nwant what encoding/json round-trips\n%+v", got, roundTrip)
	}
	if !got.At.Equal(want.At) || got.Big != want.Big || got.Neg != want.Neg || *got.Note != note {
		t.Errorf("replay lost precision: %v %d %d %q", got.At, got.Big, got.Neg, *got.Note)
	}
}
