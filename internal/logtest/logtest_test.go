package logtest_test

import (
	"strings"
	"sync"
	"testing"

	"github.com/ax-scheduler/ax/internal/logtest"
)

func TestBuffer(t *testing.T) {
	var echo strings.Builder
	b := &logtest.Buffer{Echo: &echo}
	var wg sync.WaitGroup
	for range 4 {
		wg.Go(func() { _, _ = b.Write([]byte(`{"level":"warn","message":"tick missed","n":1}` + "\n")) })
	}
	wg.Wait()
	_, _ = b.Write([]byte("not json\n{\"message\":\"other\"}\n"))
	if got := b.Lines("tick missed"); len(got) != 4 || got[0]["n"] != float64(1) {
		t.Errorf("Lines = %v, want the 4 lines of that message", got)
	}
	if b.String() != echo.String() || strings.Count(b.String(), "\n") != 6 {
		t.Errorf("String = %q, echo %q, want the same 6 lines", b.String(), echo.String())
	}
}
