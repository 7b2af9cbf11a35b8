package reqcount

import "testing"

func TestTripAllocs(t *testing.T) {
	var c Counter
	c.Trip("evalsha")
	if n := testing.AllocsPerRun(1000, func() { c.Trip("evalsha") }); n != 0 {
		t.Errorf("Trip allocates %v per call", n)
	}
	if n := testing.AllocsPerRun(1000, func() { c.Trip("a", "b") }); n != 0 {
		t.Errorf("Trip allocates %v per call", n)
	}
}
