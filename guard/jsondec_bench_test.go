package guard

import (
	"encoding/json"
	"testing"
	"time"
)

// decBenchOrderJSON is a replayed result of about 1 KB: nested structs,
// slices, maps, pointers, an interface and times.
func decBenchOrderJSON(tb testing.TB) []byte {
	tb.Helper()
	email := "ann@example.com"
	shipped := time.Date(2024, 5, 7, 10, 0, 0, 0, time.UTC)
	n := int64(42)
	pn := &n
	o := decOrder{
		ID: "ord_8f3a2c1e9b7d4f60",
		Customer: &decCustomer{
			ID: "cus_51c0ffee", Name: "Ann Example", Email: &email, VIP: true,
			Address: map[string]string{"line1": "1 Harbour Street", "city": "Oslo", "zip": "0150", "country": "NO"},
		},
		Items: []decItem{
			{SKU: "sku-espresso-250g", Qty: 2, Price: 12.5, Tags: []string{"coffee", "beans"}},
			{SKU: "sku-grinder-hand", Qty: 1, Price: 89.99, Tags: []string{"equipment"}},
			{SKU: "sku-filter-papers", Qty: 3, Price: 4.25},
		},
		Meta:    map[string]any{"channel": "web", "campaign": "spring", "attempt": 1.0, "gift": false},
		Extra:   []any{"note", 3.0, map[string]any{"wrap": true}},
		Created: time.Date(2024, 5, 6, 7, 8, 9, 123456789, time.UTC),
		Shipped: &shipped,
		Total:   126.24,
		Flags:   [3]bool{true, false, true},
		Blob:    []byte("receipt-0001"),
		Small:   -3,
		Tiny:    7,
		Ptr:     &pn,
		Named:   "standard",
		Counts:  map[decName]int{"web": 3, "app": 1},
		Grid:    [][2]int{{1, 2}, {3, 4}},
		Big:     1 << 60,
		Neg:     -1 << 40,
		Ptrs:    []*decItem{{SKU: "sku-gift-card", Qty: 1, Price: 25}},
		Unicode: "Ærøskøbing",
		Next: &decOrder{
			ID:    "ord_8f3a2c1e9b7d4f5f",
			Items: []decItem{{SKU: "sku-espresso-250g", Qty: 1, Price: 12.5}},
			Total: 12.5,
		},
	}
	data, err := json.Marshal(o)
	if err != nil {
		tb.Fatal(err)
	}
	return data
}

// BenchmarkDecodeJSON compares encoding/json ("std") with decodeJSON
// ("fast") on the replayed result of the package's benchmarks and on a
// 1 KB nested one. The target is reset, not reallocated, so that only the
// decoding allocates.
func BenchmarkDecodeJSON(b *testing.B) {
	small := []byte(`{"amount":100,"charge_id":"ch_123"}`)
	nested := decBenchOrderJSON(b)
	b.Run("small", func(b *testing.B) { benchDecode[decCharge](b, small) })
	b.Run("nested", func(b *testing.B) { benchDecode[decOrder](b, nested) })
}

func benchDecode[T any](b *testing.B, data []byte) {
	for _, bc := range []struct {
		name   string
		decode func([]byte, any) error
	}{
		{"std", json.Unmarshal},
		{"fast", decodeJSON},
	} {
		b.Run(bc.name, func(b *testing.B) {
			v := new(T)
			if bc.name == "fast" && fastDecodeOn && !decodeFast(data, v) {
				b.Fatal("the fast path gave up")
			}
			b.SetBytes(int64(len(data)))
			b.ReportAllocs()
			for b.Loop() {
				var zero T
				*v = zero
				if err := bc.decode(data, v); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}
