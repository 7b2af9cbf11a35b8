package canonjson

import (
	"crypto/sha256"
	"encoding/json"
	"testing"

	"github.com/gowebpki/jcs"
)

// Keying a realistic order of about 1 KB, against the reference in the same
// run: json.Marshal, then jcs.Transform. Key derivation adds SHA-256 of the
// canonical text, measured with it: all of it must stay within 3 µs.

type benchLine struct {
	SKU         string  `json:"sku"`
	Description string  `json:"description"`
	Quantity    int     `json:"quantity"`
	UnitPrice   int     `json:"unit_price"`
	Currency    string  `json:"currency"`
	TaxRate     float64 `json:"tax_rate"`
}

type benchAddress struct {
	Name       string `json:"name"`
	Line1      string `json:"line1"`
	Line2      string `json:"line2,omitempty"`
	City       string `json:"city"`
	PostalCode string `json:"postal_code"`
	Country    string `json:"country"`
}

// benchOrder is a realistic order that marshals to about 1 KB.
type benchOrder struct {
	OrderID    string         `json:"order_id"`
	CustomerID string         `json:"customer_id"`
	Email      string         `json:"email"`
	CreatedAt  string         `json:"created_at"`
	Shipping   benchAddress   `json:"shipping"`
	Lines      []benchLine    `json:"lines"`
	Total      int            `json:"total"`
	Currency   string         `json:"currency"`
	Metadata   map[string]any `json:"metadata"`
}

func newBenchOrder() benchOrder {
	o := benchOrder{
		OrderID:    "ord_01HZX3K9Q4W8V7B6N5M2C1D0EF",
		CustomerID: "cus_9f8e7d6c5b4a3210",
		Email:      "jane.doe@example.com",
		CreatedAt:  "2026-11-21T12:00:00Z",
		Shipping: benchAddress{
			Name: "Jane Doe", Line1: "Hauptstraße 12", Line2: "3. OG", City: "Berlin",
			PostalCode: "10115", Country: "DE",
		},
		Total:    13246,
		Currency: "EUR",
		Metadata: map[string]any{"channel": "web", "campaign": "black-friday-2026", "ab_bucket": 7, "gift": false},
	}
	for i, sku := range []string{"SKU-10001-RED-M", "SKU-20417-BLUE-L", "SKU-31120-BLACK-S", "SKU-44012-WHITE-XL"} {
		o.Lines = append(o.Lines, benchLine{
			SKU: sku, Description: "Organic cotton t-shirt, regular fit", Quantity: i + 1,
			UnitPrice: 1999 + i*250, Currency: "EUR", TaxRate: 0.19,
		})
	}
	return o
}

// benchInputs returns the order, its JSON text, and the tree encoding/json
// decodes that to (what a JMESPath selection is made of).
func benchInputs(b *testing.B) (benchOrder, []byte, any) {
	order := newBenchOrder()
	text, err := json.Marshal(order)
	if err != nil || len(text) < 900 || len(text) > 1200 {
		b.Fatalf("the order marshals to %d bytes (%v), want about 1 KB", len(text), err)
	}
	var tree any
	if err := json.Unmarshal(text, &tree); err != nil {
		b.Fatal(err)
	}
	want, err := jcs.Transform(text)
	for _, v := range []any{order, json.RawMessage(text), tree} {
		if got, valid, err2 := Append(nil, v); err != nil || err2 != nil || !valid || string(got) != string(want) {
			b.Fatalf("Append(%T) = %s, %v, %v; want %s, %v", v, got, valid, err2, want, err)
		}
	}
	b.SetBytes(int64(len(text)))
	b.ReportAllocs()
	return order, text, tree
}

func BenchmarkAppend1KB(b *testing.B) {
	order, _, tree := benchInputs(b)
	var v any = order // boxed once, as a caller holds it
	b.Run("canonjson", func(b *testing.B) {
		b.ReportAllocs()
		var buf []byte
		for b.Loop() {
			buf, _, _ = Append(buf[:0], v)
		}
	})
	b.Run("canonjson+sha256", func(b *testing.B) {
		b.ReportAllocs()
		var buf []byte
		for b.Loop() {
			buf, _, _ = Append(buf[:0], v)
			_ = sha256.Sum256(buf)
		}
	})
	b.Run("tree", func(b *testing.B) {
		b.ReportAllocs()
		var buf []byte
		for b.Loop() {
			buf, _, _ = Append(buf[:0], tree)
		}
	})
	b.Run("jcs-baseline", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			text, _ := json.Marshal(v)
			_, _ = jcs.Transform(text)
		}
	})
}

func BenchmarkAppendText1KB(b *testing.B) {
	_, text, _ := benchInputs(b)
	b.Run("canonjson", func(b *testing.B) {
		b.ReportAllocs()
		var buf []byte
		for b.Loop() {
			buf, _, _ = AppendText(buf[:0], text)
		}
	})
	b.Run("jcs-baseline", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			_, _ = jcs.Transform(text)
		}
	})
}
