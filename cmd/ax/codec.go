package main

import (
	"fmt"
	"os"

	"github.com/spf13/cobra"

	"github.com/ax-scheduler/ax/schemas"
)

// codecFlag adds --codec-key-file to cmd (and, when persistent, to its
// subcommands) into path.
func codecFlag(cmd *cobra.Command, path *string, persistent bool, what string) {
	f := cmd.Flags()
	if persistent {
		f = cmd.PersistentFlags()
	}
	f.StringVar(path, "codec-key-file", os.Getenv("AX_CODEC_KEY_FILE"),
		"file of payload codec keys, one \"<key id> <base64 AES key>\" a line, the first encoding (env AX_CODEC_KEY_FILE): "+what+
			"; the scheduler never holds it (see docs/security.md)")
}

// loadCodec reads the codec key file at path; "" is no codec.
func loadCodec(path string) (schemas.PayloadCodec, error) {
	if path == "" {
		return nil, nil
	}
	f, err := os.Open(path)
	if err != nil {
		return nil, fmt.Errorf("--codec-key-file: %w", err)
	}
	defer f.Close()
	keys, err := schemas.ParseCodecKeys(f)
	if err != nil {
		return nil, fmt.Errorf("--codec-key-file %s: %w", path, err)
	}
	c, err := schemas.NewAESGCM(keys...)
	if err != nil {
		return nil, fmt.Errorf("--codec-key-file %s: %w", path, err)
	}
	return c, nil
}

// useCodec is a PreRunE that loads g's codec key file into the client's codec.
func (g *cli) useCodec(*cobra.Command, []string) error {
	var err error
	g.codec, err = loadCodec(g.codecKeyFile)
	return err
}
