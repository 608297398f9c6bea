package main

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"regexp"

	"github.com/spf13/cobra"
)

// secretKeyRE is what a key of a Kubernetes Secret may be.
var secretKeyRE = regexp.MustCompile(`^[-._a-zA-Z0-9]+$`)

// copyPodSecret copies the value of key of the Secret mounted at dir to the
// file out (mode 0400), which it replaces, so that a container that mounts
// only out's folder sees that one value. A key the Secret lacks, or an
// empty value, is an error that says how to fix it.
func copyPodSecret(dir, key, out string) error {
	if !secretKeyRE.MatchString(key) || key == "." || key == ".." {
		return fmt.Errorf("--key %q is not a key of a Secret (letters, digits, '-', '_', '.')", key)
	}
	value, err := os.ReadFile(filepath.Join(dir, key))
	if errors.Is(err, fs.ErrNotExist) {
		return fmt.Errorf("the Secret in %s holds no password for %s: the chart makes one per replica of the pool, up to its replicas "+
			"(autoscaling.maxReplicas when autoscaled); raise them with helm upgrade rather than scaling the StatefulSet past them", dir, key)
	}
	if err != nil {
		return fmt.Errorf("read the password of %s: %w", key, err)
	}
	if len(value) == 0 {
		return fmt.Errorf("the Secret in %s holds an empty password for %s; delete the key and run helm upgrade to make a new one", dir, key)
	}
	tmp, err := os.CreateTemp(filepath.Dir(out), "."+filepath.Base(out)+".*")
	if err != nil {
		return fmt.Errorf("write the password of %s: %w", key, err)
	}
	defer os.Remove(tmp.Name())
	_, err = tmp.Write(value)
	if err = errors.Join(err, tmp.Chmod(0o400), tmp.Close()); err != nil {
		return fmt.Errorf("write the password of %s: %w", key, err)
	}
	if err := os.Rename(tmp.Name(), out); err != nil {
		return fmt.Errorf("write the password of %s: %w", key, err)
	}
	return nil
}

// newPodSecretCmd is the Helm chart's init container: it hands an executor
// pod its own NATS password, out of the Secret that holds every replica's.
func newPodSecretCmd(*cli) *cobra.Command {
	var dir, key, out string
	cmd := &cobra.Command{
		Use:    "pod-secret",
		Short:  "Copy one key of a mounted Secret to a file of mode 0400 (the Helm chart's init container)",
		Hidden: true,
		Long: `Copy the value of one key of the Secret mounted at --dir to the file --out
(mode 0400). The Helm chart runs it before each executor pod starts, with the
pod's name as the key: the executor container mounts only --out's folder, so
its handlers never see another replica's password.`,
		Example: `  ax pod-secret --dir /secrets/pool --key "$POD_NAME" --out /run/ax/nats/password`,
		Args:    cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if dir == "" || key == "" || out == "" {
				return errors.New("give --dir (the mounted Secret), --key (the pod's name) and --out (the file to write)")
			}
			return copyPodSecret(dir, key, out)
		},
	}
	f := cmd.Flags()
	f.StringVar(&dir, "dir", "", "the folder a Secret is mounted at")
	f.StringVar(&key, "key", os.Getenv("POD_NAME"), "the key to copy (env POD_NAME)")
	f.StringVar(&out, "out", "", "the file to write, mode 0400")
	return cmd
}
