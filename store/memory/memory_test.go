package memory_test

import (
	"testing"

	"github.com/idemguard/idemguard/store"
	"github.com/idemguard/idemguard/store/memory"
	"github.com/idemguard/idemguard/store/storetest"
)

func TestConformance(t *testing.T) {
	storetest.Run(t, func(*testing.T) store.Store { return memory.New() })
}

func TestZeroValue(t *testing.T) {
	var s memory.Store
	storetest.Run(t, func(*testing.T) store.Store { return &s })
}
