package main

import (
	"fmt"
	"io"
	"strings"

	"github.com/ax-scheduler/ax/api/wire"
)

// printFit says which live workers may take an applied task's instances
// today, each with the pool it takes them in (the API's answer; none is
// said by a warning).
func printFit(out io.Writer, res wire.ApplyResult) {
	if len(res.Workers) == 0 {
		return
	}
	names := make([]string, len(res.Workers))
	for i, w := range res.Workers {
		names[i] = w.ID + " (pool " + w.Pool + ")"
	}
	fmt.Fprintf(out, "workers that can take it now: %s\n", strings.Join(names, ", "))
}
