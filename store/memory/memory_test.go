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

// The zero Store is ready to use; each case gets a fresh one.
func TestZeroValue(t *testing.T) {
	storetest.Run(t, func(*testing.T) store.Store { return new(memory.Store) })
}
