package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/rs/zerolog"
)

// TestConsoleLogToAFileHasNoColour: the console log written to a file (or
// a pipe) carries no ANSI colour codes; colour is for a terminal only.
func TestConsoleLogToAFileHasNoColour(t *testing.T) {
	f, err := os.Create(filepath.Join(t.TempDir(), "ax.log"))
	if err != nil {
		t.Fatal(err)
	}
	log := zerolog.New(consoleWriter(f)).With().Timestamp().Logger()
	log.Info().Str("task", "hello").Msg("task fired")
	log.Warn().Err(os.ErrNotExist).Msg("something")
	if err := f.Close(); err != nil {
		t.Fatal(err)
	}
	data, err := os.ReadFile(f.Name())
	if err != nil {
		t.Fatal(err)
	}
	if strings.Contains(string(data), "\x1b[") {
		t.Errorf("the log written to a file has ANSI codes:\n%q", data)
	}
	if !strings.Contains(string(data), "INF task fired task=hello") {
		t.Errorf("the log lacks its line:\n%s", data)
	}
}
