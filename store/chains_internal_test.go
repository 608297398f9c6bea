package store

import (
	"slices"
	"testing"
)

func TestFindCycle(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name  string
		graph map[string][]string // task → the tasks it runs after
		start string
		want  []string
	}{
		{"no parents", map[string][]string{"a": nil}, "a", nil},
		{"chain", map[string][]string{"c": {"b"}, "b": {"a"}}, "c", nil},
		{"unknown parent", map[string][]string{"a": {"ghost"}}, "a", nil},
		{"two tasks", map[string][]string{"a": {"b"}, "b": {"a"}}, "a", []string{"a", "b", "a"}},
		{"three tasks", map[string][]string{"c": {"b"}, "b": {"a"}, "a": {"c"}}, "c", []string{"c", "a", "b", "c"}},
		{"diamond without cycle", map[string][]string{"d": {"b", "c"}, "b": {"a"}, "c": {"a"}}, "d", nil},
		{"cycle behind a dead end", map[string][]string{"x": {"dead", "y"}, "y": {"x"}, "dead": {"deeper"}}, "x", []string{"x", "y", "x"}},
		{"a cycle elsewhere is not start's", map[string][]string{"s": {"p"}, "p": {"q"}, "q": {"p"}}, "s", nil},
		{"shared ancestors visited once", map[string][]string{
			"s": {"a", "b"}, "a": {"c"}, "b": {"c"}, "c": {"s"},
		}, "s", []string{"s", "c", "a", "s"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			if got := findCycle(tc.graph, tc.start); !slices.Equal(got, tc.want) {
				t.Errorf("findCycle(%v, %q) = %q, want %q", tc.graph, tc.start, got, tc.want)
			}
		})
	}
}

func TestChainCycleErrorNamesTheCycle(t *testing.T) {
	t.Parallel()
	err := &ChainCycleError{Cycle: []string{"a", "b", "c", "a"}}
	if got, want := err.Error(), "chain cycle: a → b → c → a"; got != want {
		t.Errorf("Error() = %q, want %q", got, want)
	}
}
