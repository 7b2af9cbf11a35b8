package guard

import (
	"encoding/json"
	"testing"
)

// Key derivation alone (select, canonicalise, hash, name), which the public
// API cannot time apart from the store.

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

func BenchmarkKeyDerivation1KB(b *testing.B) {
	order := newBenchOrder()
	raw, err := json.Marshal(order)
	if err != nil {
		b.Fatal(err)
	}
	if len(raw) < 900 || len(raw) > 1200 {
		b.Fatalf("benchmark order marshals to %d bytes, want about 1 KB", len(raw))
	}
	for _, bc := range []struct {
		name  string
		input any
		opts  []CallOption
	}{
		{"whole", order, nil},                    // the default: the whole input
		{"whole-raw", json.RawMessage(raw), nil}, // the input is JSON text already
		{"path", order, []CallOption{WithKeyPath("order_id")}},
		{"path-validation", order, []CallOption{WithKeyPath("order_id"), WithPayloadValidation("@")}},
		{"path-jmespath", order, []CallOption{WithKeyPath("lines[0].sku")}}, // evaluated by JMESPath
		{"explicit", order, []CallOption{WithKey("ord_01HZX3K9Q4W8V7B6N5M2C1D0EF")}},
	} {
		b.Run(bc.name, func(b *testing.B) {
			c := defaultSettings().calls
			for _, o := range bc.opts {
				o.applyCall(&c)
			}
			if c.err != nil {
				b.Fatal(c.err)
			}
			b.SetBytes(int64(len(raw)))
			b.ReportAllocs()
			b.ResetTimer()
			for i := 0; i < b.N; i++ {
				d, err := (&Guard{}).derive(&c, "orders", bc.input)
				if err != nil || d.key == "" {
					b.Fatal(d, err)
				}
			}
		})
	}
}
