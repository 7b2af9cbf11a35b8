package memory_test

import (
	"testing"

	"github.com/idemguard/idemguard/store"
	"github.com/idemguard/idemguard/store/memory"
	"github.com/idemguard/idemguard/store/storetest"
)

// The memory store has no connection to fault: the recorder faults one
// operation in ten itself (lost before the store, answer lost after it
// ran, delayed).
var linzConfig = storetest.HistoryConfig{Faults: 0.1}

// Histories of concurrent claims on a few hot keys are linearizable. The
// memory store keeps times exactly.
func TestLinearizable(t *testing.T) {
	cfg := linzConfig
	cfg.Ops = 5000
	storetest.RunLinearizable(t, memory.New(), storetest.Precision{}, cfg)
}

// Each broken store is caught.
func TestLinearizableMutants(t *testing.T) {
	cfg := linzConfig
	cfg.Ops = 1000
	storetest.RunMutants(t, func(*testing.T) store.Store { return memory.New() }, storetest.Precision{}, cfg)
}
