package cpustat

import (
	"os"
	"testing"
	"time"
)

func TestReadMachine(t *testing.T) {
	m, err := ReadMachine()
	if err != nil {
		t.Fatal(err)
	}
	if m.Busy <= 0 || m.Total < m.Busy {
		t.Errorf("ReadMachine = %+v, want 0 < Busy <= Total", m)
	}
	if Cores() < 1 {
		t.Errorf("Cores() = %d, want at least 1", Cores())
	}
}

func TestSelfAndTree(t *testing.T) {
	before, err := Self()
	if err != nil {
		t.Fatal(err)
	}
	// Burn 50 ms of CPU, however long a busy machine takes to give it.
	deadline := time.Now().Add(time.Minute)
	for {
		after, err := Self()
		if err != nil {
			t.Fatal(err)
		}
		if after.CPU-before.CPU >= 50*time.Millisecond {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("Self rose by %v in a minute of spinning, want 50ms", after.CPU-before.CPU)
		}
	}
	// /proc counts in ticks of 10 ms.
	tree, err := Tree(os.Getpid())
	if err != nil {
		t.Fatal(err)
	}
	if tree.CPU < 30*time.Millisecond {
		t.Errorf("Tree(self) = %v, want at least most of the 50ms spun", tree.CPU)
	}
	if ppid, _, err := Parent(os.Getpid()); err != nil || ppid != os.Getppid() {
		t.Errorf("Parent(self) = %d, %v; want %d", ppid, err, os.Getppid())
	}
}

func TestFaultsCountTouchedMemory(t *testing.T) {
	before, err := Self()
	if err != nil {
		t.Fatal(err)
	}
	// FaultCost touches 3 × 256 fresh pages.
	cost, err := FaultCost(256)
	if err != nil {
		t.Fatal(err)
	}
	if cost <= 0 {
		t.Errorf("FaultCost = %v, want a positive time a page", cost)
	}
	after, err := Self()
	if err != nil {
		t.Fatal(err)
	}
	if d := after.Sub(before).Faults; d < 3*256 {
		t.Errorf("Self counted %d faults over 768 fresh pages touched, want at least 768", d)
	}
	tree, err := Tree(os.Getpid())
	if err != nil {
		t.Fatal(err)
	}
	if tree.Faults < after.Faults {
		t.Errorf("Tree(self) counts %d faults, want at least Self's %d", tree.Faults, after.Faults)
	}
}
