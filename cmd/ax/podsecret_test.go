package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// secretVolume lays out dir as Kubernetes mounts a Secret: each key a
// symbolic link through ..data to a folder of the values.
func secretVolume(t *testing.T, dir string, data map[string]string) {
	t.Helper()
	values := filepath.Join(dir, "..2026_12_02_10_00_00.1")
	if err := os.MkdirAll(values, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(filepath.Base(values), filepath.Join(dir, "..data")); err != nil {
		t.Fatal(err)
	}
	for k, v := range data {
		if err := os.WriteFile(filepath.Join(values, k), []byte(v), 0o644); err != nil {
			t.Fatal(err)
		}
		if err := os.Symlink(filepath.Join("..data", k), filepath.Join(dir, k)); err != nil {
			t.Fatal(err)
		}
	}
}

// TestPodSecret: ax pod-secret copies the pod's key, and only it, to a
// file of mode 0400, replaces one there, and refuses a key the Secret
// lacks, an empty value or a key that is a path.
func TestPodSecret(t *testing.T) {
	t.Parallel()
	secrets, out := t.TempDir(), t.TempDir()
	secretVolume(t, secrets, map[string]string{"ax-executor-gpu-0": "pw-0", "ax-executor-gpu-1": "pw-1", "ax-executor-gpu-2": ""})
	file := filepath.Join(out, "password")
	for _, key := range []string{"ax-executor-gpu-1", "ax-executor-gpu-0"} {
		if code, stdout, stderr := axRun(t, "pod-secret", "--dir", secrets, "--key", key, "--out", file); code != 0 {
			t.Fatalf("ax pod-secret --key %s: exit %d: %s%s", key, code, stdout, stderr)
		}
	}
	got, err := os.ReadFile(file)
	if err != nil || string(got) != "pw-0" {
		t.Errorf("the password file holds %q (%v), want pw-0", got, err)
	}
	if fi, err := os.Stat(file); err != nil || fi.Mode().Perm() != 0o400 {
		t.Errorf("the password file: %v, %v; want mode 0400", fi, err)
	}
	if entries, _ := os.ReadDir(out); len(entries) != 1 {
		t.Errorf("the output folder holds %v, want the password file alone", entries)
	}
	for _, tt := range []struct{ key, want string }{
		{"ax-executor-gpu-3", "holds no password for ax-executor-gpu-3: the chart makes one per replica"},
		{"ax-executor-gpu-2", "holds an empty password for ax-executor-gpu-2"},
		{"../" + filepath.Base(secrets) + "/ax-executor-gpu-1", "is not a key of a Secret"},
		{"..", "is not a key of a Secret"},
	} {
		code, _, stderr := axRun(t, "pod-secret", "--dir", secrets, "--key", tt.key, "--out", file)
		if code == 0 || !strings.Contains(stderr, tt.want) {
			t.Errorf("ax pod-secret --key %s: exit %d, %q; want an error saying %q", tt.key, code, stderr, tt.want)
		}
	}
	if got, _ := os.ReadFile(file); string(got) != "pw-0" {
		t.Errorf("a refused copy changed the password file: %q", got)
	}
}
