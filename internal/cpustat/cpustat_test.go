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
		if after-before >= 50*time.Millisecond {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("Self rose by %v in a minute of spinning, want 50ms", after-before)
		}
	}
	// /proc counts in ticks of 10 ms.
	tree, err := Tree(os.Getpid())
	if err != nil {
		t.Fatal(err)
	}
	if tree < 30*time.Millisecond {
		t.Errorf("Tree(self) = %v, want at least most of the 50ms spun", tree)
	}
	if ppid, _, err := Parent(os.Getpid()); err != nil || ppid != os.Getppid() {
		t.Errorf("Parent(self) = %d, %v; want %d", ppid, err, os.Getppid())
	}
}
