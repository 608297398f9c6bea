package executor_test

import (
	"context"
	"slices"
	"strings"
	"testing"

	"github.com/ax-scheduler/ax/executor"
)

func nop(context.Context, *executor.Job) (any, error) { return nil, nil }

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
	m.Handle("alpha", executor.HandlerFunc(func(context.Context, *executor.Job) (any, error) { return "alpha", nil }))
	executor.RegisterBuiltins(m)
	if got, want := m.Names(), []string{"alpha", "builtin.echo", "builtin.fail", "builtin.sleep", "zeta"}; !slices.Equal(got, want) {
		t.Errorf("Names() = %v, want %v", got, want)
	}
	h, ok := m.Handler("alpha")
	if !ok {
		t.Fatal("alpha is not found")
	}
	if out, _ := h.HandleTask(context.Background(), &executor.Job{}); out != "alpha" {
		t.Errorf("alpha returned %v", out)
	}
	if _, ok := m.Handler("beta"); ok {
		t.Error("beta is found")
	}
}

// Middleware wraps every handler, those registered before Use and after,
// first added outermost, and the mux runs as a Handler by t.Handler.
func TestMuxMiddleware(t *testing.T) {
	t.Parallel()
	var calls []string
	tag := func(name string) executor.Middleware {
		return func(next executor.Handler) executor.Handler {
			return executor.HandlerFunc(func(ctx context.Context, t *executor.Job) (any, error) {
				calls = append(calls, name+">"+t.Handler)
				return next.HandleTask(ctx, t)
			})
		}
	}
	m := executor.NewMux()
	m.HandleFunc("before", func(context.Context, *executor.Job) (any, error) { return "b", nil })
	m.Use(tag("outer"), tag("inner"))
	m.HandleFunc("after", func(context.Context, *executor.Job) (any, error) { return "a", nil })

	var h executor.Handler = m
	for _, name := range []string{"before", "after"} {
		if _, err := h.HandleTask(context.Background(), &executor.Job{Handler: name}); err != nil {
			t.Fatalf("%s: %v", name, err)
		}
	}
	want := []string{"outer>before", "inner>before", "outer>after", "inner>after"}
	if !slices.Equal(calls, want) {
		t.Errorf("calls %v, want %v", calls, want)
	}
	calls = nil
	byName, _ := m.Handler("after")
	if out, _ := byName.HandleTask(context.Background(), &executor.Job{Handler: "after"}); out != "a" || len(calls) != 2 {
		t.Errorf("Mux.Handler(after) returned %v with calls %v, want a through both middlewares", out, calls)
	}

	_, err := m.HandleTask(context.Background(), &executor.Job{Name: "t", Handler: "missing"})
	if !executor.IsPermanent(err) || !strings.Contains(err.Error(), `no handler "missing" here (handlers: after, before)`) {
		t.Errorf("unknown handler: %v, want a permanent error listing the handlers", err)
	}

	outer := executor.NewMux()
	outer.Handle("nested", m)
	if out, err := outer.HandleTask(context.Background(), &executor.Job{Handler: "nested"}); err == nil || out != nil {
		t.Errorf("a mux inside a mux looks up the same t.Handler: got %v, %v, want an unknown-handler error", out, err)
	}
}

func TestMuxUsePanics(t *testing.T) {
	t.Parallel()
	for name, do := range map[string]func(m *executor.Mux){
		"nil middleware": func(m *executor.Mux) { m.Use(nil) },
		"nil handler":    func(m *executor.Mux) { m.Use(func(executor.Handler) executor.Handler { return nil }) },
	} {
		t.Run(name, func(t *testing.T) {
			defer func() {
				if recover() == nil {
					t.Error("no panic")
				}
			}()
			m := executor.NewMux()
			m.HandleFunc("a", nop)
			do(m)
		})
	}
}
