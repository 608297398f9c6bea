package executor_test

import (
	"context"
	"slices"
	"strings"
	"testing"

	"github.com/ax-scheduler/ax/executor"
)

func nop(context.Context, *executor.Task) (any, error) { return nil, nil }

func TestMuxRegistrationPanics(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name  string
		do    func(m *executor.Mux)
		panic string
	}{
		{"empty name", func(m *executor.Mux) { m.HandleFunc("", nop) }, "empty handler name"},
		{"nil handler", func(m *executor.Mux) { m.Handle("a", nil) }, "nil handler"},
		{"nil function", func(m *executor.Mux) { m.HandleFunc("a", nil) }, "nil function"},
		{"duplicate", func(m *executor.Mux) { m.HandleFunc("a", nop); m.HandleFunc("a", nop) }, "registered twice"},
		{"builtins twice", func(m *executor.Mux) { executor.RegisterBuiltins(m); executor.RegisterBuiltins(m) }, "builtin.echo"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			defer func() {
				r := recover()
				if s, _ := r.(string); !strings.Contains(s, tt.panic) {
					t.Errorf("panic %v, want one containing %q", r, tt.panic)
				}
			}()
			tt.do(executor.NewMux())
		})
	}
}

func TestMuxLookup(t *testing.T) {
	t.Parallel()
	m := executor.NewMux()
	m.HandleFunc("zeta", nop)
	m.Handle("alpha", executor.HandlerFunc(func(context.Context, *executor.Task) (any, error) { return "alpha", nil }))
	executor.RegisterBuiltins(m)
	if got, want := m.Names(), []string{"alpha", "builtin.echo", "builtin.fail", "builtin.sleep", "zeta"}; !slices.Equal(got, want) {
		t.Errorf("Names() = %v, want %v", got, want)
	}
	h, ok := m.Handler("alpha")
	if !ok {
		t.Fatal("alpha is not found")
	}
	if out, _ := h.HandleTask(context.Background(), &executor.Task{}); out != "alpha" {
		t.Errorf("alpha returned %v", out)
	}
	if _, ok := m.Handler("beta"); ok {
		t.Error("beta is found")
	}
}
