package memory_test

import (
	"testing"

	"github.com/idemguard/idemguard/internal/testing/linz"
	"github.com/idemguard/idemguard/store"
	"github.com/idemguard/idemguard/store/memory"
	"github.com/idemguard/idemguard/store/storetest"
)

// The memory store has no connection to fault: the recorder faults one
// operation in ten itself (lost before the store, answer lost after it
// ran, delayed).
const faults = 0.1

// Histories of concurrent claims on a few hot keys are linearizable. The
// memory store keeps times exactly.
func TestLinearizable(t *testing.T) {
	storetest.RunLinearizable(t, memory.New(), storetest.WithFaults(faults), storetest.WithOps(5000))
}

// Each broken store is caught.
func TestLinearizableMutants(t *testing.T) {
	linz.RunMutants(t, func(*testing.T) store.Store { return memory.New() }, linz.Precision{}, linz.HistoryConfig{Faults: faults, Ops: 1000})
}
